"""Heterogeneous graphs: a PyG ``HeteroData`` as its homogeneous view (design §10, "types are
offsets, not new exchanges").

A graph of node types ``T`` and relations ``R`` (PyG edge types ``(src, rel, dst)``) is
partitioned as one homogeneous graph with a node-type and an edge-type vector, in PyG's
``HeteroData.to_homogeneous`` convention: the vertices of node type ``t`` are the homogeneous
ids ``[offset_t, offset_t + N_t)`` in ``node_types`` order, and every relation's edges are
shifted by their types' offsets. Partitioners, metrics and the store see that graph; what
belongs to one type stays apart:

* ``node_type [N]`` and ``edge_type [E]`` (``int64``) are ordinary node and edge attributes of
  the homogeneous view (they travel like any other);
* ``y`` and the masks are the **target type**'s (the one type with ``y``, or the one named by
  ``target_type=``), padded over the other types with unlabelled targets (``-1`` / ``NaN``)
  and ``False``, so losses, label counts and mask balance work unchanged;
* every other attribute keeps its type: node attributes of type ``t`` (``x`` included, of any
  width, on some types only) and edge attributes of relation ``r`` stay per type in
  :class:`TypedAttributes`, and a part stores them under ``"<type>/<name>"`` and
  ``"<src>__<rel>__<dst>/<name>"`` (docs/development.md, "The store format of wave 4").

:func:`typed_graph` makes the view (:func:`~lightning_gnn_dist.data.load_dataset` calls it for
a ``HeteroData`` or a typed dataset kind); :func:`check_hetero_data` refuses, at a datamodule's
construction, what cannot train, each with one line.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from .attributes import RESERVED_NAMES
from .csr import tensor_cache, tensor_version
from .errors import DatasetError
from .targets import canonical_targets

__all__ = [
    "HeteroSchema",
    "TypedAttributes",
    "attribute_key",
    "check_hetero_data",
    "describe_hetero",
    "homogeneous_view",
    "is_typed",
    "relation_key",
    "typed_graph",
]

NODE_TYPE, EDGE_TYPE = "node_type", "edge_type"
"""The homogeneous view's type vectors (PyG's ``to_homogeneous`` names)."""

_MASKS = ("train_mask", "val_mask", "test_mask")
_TARGET_KEYS = ("y", *_MASKS)


def relation_key(edge_type: Sequence[str]) -> str:
    """``"src__rel__dst"``: how the store and the counters name a relation (``to_hetero``'s
    module key)."""
    return "__".join(edge_type)


def attribute_key(owner: str, name: str) -> str:
    """``"<type>/<name>"`` or ``"<src>__<rel>__<dst>/<name>"``: a per-type attribute's key in a
    part's ``node_attrs`` / ``edge_attrs`` and in the store's ``meta.json``."""
    return f"{owner}/{name}"


def describe_hetero(data: HeteroData) -> str:
    """``in-memory HeteroData (name)``: how messages name an in-memory typed graph."""
    name = data["name"] if "name" in data else None
    return f"in-memory HeteroData ({name if isinstance(name, str) else 'unnamed'})"


@dataclass(frozen=True)
class HeteroSchema:
    """The types of a heterogeneous graph and their sizes.

    Attributes:
        node_types: node types, in the homogeneous view's order.
        edge_types: relations ``(src, rel, dst)``, in the order of the ``edge_type`` ids.
        num_nodes: vertices of each node type.
        num_edges: edges of each relation.
        target_type: the node type whose ``y`` and masks the task reads.
    """

    node_types: tuple[str, ...]
    edge_types: tuple[tuple[str, str, str], ...]
    num_nodes: tuple[int, ...]
    num_edges: tuple[int, ...]
    target_type: str

    @property
    def relation_keys(self) -> tuple[str, ...]:
        return tuple(relation_key(edge_type) for edge_type in self.edge_types)

    def node_offsets(self) -> np.ndarray:
        """``[T + 1] int64``: homogeneous id range of each node type."""
        return np.concatenate([[0], np.cumsum(self.num_nodes)]).astype(np.int64)

    def type_index(self, node_type: str) -> int:
        return self.node_types.index(node_type)

    def relation_index(self, key: str) -> int:
        return self.relation_keys.index(key)

    def edge_type_of(self, key: str) -> tuple[str, str, str]:
        return self.edge_types[self.relation_index(key)]

    def metadata(self) -> tuple[list[str], list[tuple[str, str, str]]]:
        """PyG's ``HeteroData.metadata()``: what ``to_hetero(model, metadata)`` takes."""
        return list(self.node_types), list(self.edge_types)

    def to_meta(self) -> dict[str, Any]:
        """The store's ``types`` key (without the per-part counts)."""
        return {
            "node_types": list(self.node_types),
            "edge_types": [list(edge_type) for edge_type in self.edge_types],
            "num_nodes": dict(zip(self.node_types, self.num_nodes, strict=True)),
            "num_edges": dict(zip(self.relation_keys, self.num_edges, strict=True)),
            "target_type": self.target_type,
        }

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> HeteroSchema:
        """Inverse of :meth:`to_meta` (extra keys are ignored)."""
        node_types = tuple(meta["node_types"])
        edge_types = tuple(tuple(edge_type) for edge_type in meta["edge_types"])
        return cls(
            node_types,
            edge_types,  # type: ignore[arg-type]
            tuple(int(meta["num_nodes"][t]) for t in node_types),
            tuple(int(meta["num_edges"][relation_key(e)]) for e in edge_types),
            str(meta["target_type"]),
        )


@dataclass
class TypedAttributes:
    """What belongs to one type of a typed graph's homogeneous view, kept beside it.

    Attributes:
        schema: the types.
        node_attrs: ``{node type: {name: [N_t, ...]}}`` in per-type id order (``x`` of any
            width included; a type without ``x`` is featureless).
        edge_attrs: ``{relation key: {name: [E_r, ...]}}`` in the relation's given edge order.
        edge_position: ``[E] int64`` each homogeneous (canonical) edge's position in its
            relation's given ``edge_index`` (PyG's per-relation ``e_id``).
    """

    schema: HeteroSchema
    node_attrs: dict[str, dict[str, Tensor]] = field(default_factory=dict)
    edge_attrs: dict[str, dict[str, Tensor]] = field(default_factory=dict)
    edge_position: Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))

    def __repr__(self) -> str:
        return (
            f"TypedAttributes(node_types={list(self.schema.node_types)}, "
            f"relations={len(self.schema.edge_types)}, target_type={self.schema.target_type!r})"
        )

    def node_attribute_items(self):
        """``(key, tensor)`` of every typed node attribute, sorted by key (``"paper/x"``)."""
        items = [
            (attribute_key(t, name), value)
            for t, values in self.node_attrs.items()
            for name, value in values.items()
        ]
        return sorted(items, key=lambda item: item[0])

    def edge_attribute_items(self):
        """``(key, tensor)`` of every typed edge attribute, sorted by key."""
        items = [
            (attribute_key(r, name), value)
            for r, values in self.edge_attrs.items()
            for name, value in values.items()
        ]
        return sorted(items, key=lambda item: item[0])

    def update_digest(self, digest) -> None:
        """Hash the types and every typed attribute into ``digest`` (a ``hashlib`` object):
        what :func:`~lightning_gnn_dist.data.graph.graph_fingerprint` adds for a typed graph."""
        meta = self.schema.to_meta()
        digest.update(repr(sorted(meta.items())).encode())
        for key, value in (*self.node_attribute_items(), *self.edge_attribute_items()):
            tensor = value.detach().contiguous().cpu()
            digest.update(f"{key}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
            digest.update(tensor.numpy().tobytes())


def is_typed(data: Any) -> bool:
    """Whether ``data`` is a typed graph's homogeneous view (made by :func:`typed_graph`)."""
    return isinstance(getattr(data, "hetero", None), TypedAttributes)


# -- checks -------------------------------------------------------------------------------------
def _num_nodes(data: HeteroData, node_type: str, source: str) -> int:
    store = data[node_type]
    count = store.num_nodes
    if count is None or count < 1:
        raise DatasetError(
            f"{source}: node type {node_type!r} has no vertices (set data[{node_type!r}]"
            ".num_nodes or give it features x)"
        )
    return int(count)


def _target_type(data: HeteroData, target_type: str | None, source: str) -> str:
    node_types = list(data.node_types)
    if target_type is not None:
        if not isinstance(target_type, str) or target_type not in node_types:
            raise DatasetError(
                f"{source}: unknown target_type {target_type!r}; the node types are "
                f"{', '.join(map(repr, node_types))}"
            )
        if "y" not in data[target_type]:
            raise DatasetError(
                f"{source}: the target type {target_type!r} has no labels y; set "
                f"data[{target_type!r}].y (class ids, -1 = unlabelled) or name the type that "
                "has them with target_type="
            )
        return target_type
    labelled = [t for t in node_types if "y" in data[t]]
    if not labelled:
        raise DatasetError(
            f"{source}: no node type has labels y; set data[TYPE].y on the type to predict "
            "(and pass target_type=TYPE if several types have y)"
        )
    if len(labelled) > 1:
        raise DatasetError(
            f"{source}: node types {', '.join(map(repr, labelled))} all have y; name the one "
            "to predict with target_type="
        )
    return labelled[0]


def check_hetero_data(
    data: HeteroData, target_type: str | None = None, task: str | None = None
) -> str:
    """Refuse a ``HeteroData`` no datamodule can train on; return its target type.

    Cheap: one pass over each relation's ``edge_index``, the target's ``y`` and the features.

    Raises:
        DatasetError: (one line each) a relation whose node types are missing (no node store,
            no ``num_nodes``), a vertex id out of its type's range, an unknown
            ``target_type``, no (or an ambiguous) type with ``y``, a target ``y`` that does not
            fit ``task``, ``NaN`` features, a per-type tensor with neither the type's vertex nor
            its relation's edge count as first dimension, or a reserved attribute name.
    """
    source = describe_hetero(data)
    node_types = set(data.node_types)
    if not data.edge_types and not node_types:
        raise DatasetError(f"{source}: the graph is empty (no node and no edge types)")
    for edge_type in data.edge_types:
        missing = [t for t in (edge_type[0], edge_type[2]) if t not in node_types]
        if missing:
            raise DatasetError(
                f"{source}: relation {edge_type!r} connects node type {missing[0]!r}, which the "
                f"graph does not have; add data[{missing[0]!r}].num_nodes (or its x), or drop "
                "the relation"
            )
    sizes = {t: _num_nodes(data, t, source) for t in data.node_types}
    for edge_type in data.edge_types:
        _check_edges(data[edge_type], edge_type, sizes, source)
    target = _target_type(data, target_type, source)
    canonical_targets(data[target].y, sizes[target], f"{source} [{target!r}]", task)
    for t in data.node_types:
        _node_attributes(data[t], t, sizes[t], t == target, source)
    for edge_type in data.edge_types:
        _edge_attributes(data[edge_type], edge_type, source)
    return target


def _check_edges(store, edge_type, sizes: dict[str, int], source: str) -> Tensor:
    edge_index = store.get("edge_index")
    if edge_index is None:
        raise DatasetError(f"{source}: relation {edge_type!r} has no edge_index")
    if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2:
        shape = tuple(edge_index.shape) if isinstance(edge_index, Tensor) else type(edge_index)
        raise DatasetError(
            f"{source}: relation {edge_type!r}: edge_index must have shape [2, num_edges] "
            f"(got {shape})"
        )
    for row, node_type in ((0, edge_type[0]), (1, edge_type[2])):
        ids = edge_index[row]
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= sizes[node_type]):
            bad = int(ids.max()) if int(ids.max()) >= sizes[node_type] else int(ids.min())
            raise DatasetError(
                f"{source}: relation {edge_type!r}: {node_type!r} id {bad} is out of range "
                f"[0, {sizes[node_type]})"
            )
    return edge_index


def _node_attributes(store, node_type: str, num_nodes: int, target: bool, source: str):
    """``{name: tensor}`` of a node type's partitioned attributes (targets and masks of the
    target type excluded); refuses a tensor of another row count or a reserved name."""
    attrs = {}
    for key, value in store.items():
        if key == "num_nodes" or (target and key in _TARGET_KEYS):
            continue
        if not isinstance(value, Tensor) or value.dim() == 0:
            _warn_dropped(source, f"data[{node_type!r}].{key}")
            continue
        if value.size(0) != num_nodes:
            raise DatasetError(
                f"{source}: data[{node_type!r}].{key} has shape {tuple(value.shape)}: its first "
                f"dimension is not the type's {num_nodes} vertices; node attributes have one row "
                "per vertex of their type"
            )
        if key in RESERVED_NAMES:
            raise DatasetError(
                f"{source}: data[{node_type!r}].{key} has a name the loaders set themselves; "
                f"rename it (e.g. data[{node_type!r}].my_{key})"
            )
        if key == "x":
            value = _features(value, f"{source} [{node_type!r}]")
        attrs[key] = value
    return attrs


def _features(x: Tensor, source: str) -> Tensor:
    """A type's ``x`` as ``[N_t, d] float32`` (as :func:`~lightning_gnn_dist.data.contract.
    canonical_features` makes a homogeneous graph's; this module cannot import it: the contract
    checks a ``HeteroData`` through :func:`check_hetero_data`).

    Raises:
        DatasetError: ``NaN`` or infinite features, naming the vertex and column.
    """
    x = (x.unsqueeze(1) if x.dim() == 1 else x).to(torch.float32).contiguous()
    if x.dim() != 2:
        raise DatasetError(f"{source}: x must have shape [num_nodes, d] (got {tuple(x.shape)})")
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        row, column = bad.nonzero()[0].tolist()[:2]
        raise DatasetError(
            f"{source}: x holds {float(x[row, column])} at vertex {row}, column {column}; "
            "features must be finite: fill missing values first (e.g. torch.nan_to_num(x))"
        )
    return x


def _edge_attributes(store, edge_type, source: str) -> dict[str, Tensor]:
    num_edges = int(store["edge_index"].size(1))
    attrs = {}
    for key, value in store.items():
        if key == "edge_index":
            continue
        if not isinstance(value, Tensor) or value.dim() == 0:
            _warn_dropped(source, f"data[{edge_type!r}].{key}")
            continue
        if value.size(0) != num_edges:
            raise DatasetError(
                f"{source}: data[{edge_type!r}].{key} has shape {tuple(value.shape)}: its first "
                f"dimension is not the relation's {num_edges} edges; edge attributes have one "
                "row per edge"
            )
        if key in RESERVED_NAMES:
            raise DatasetError(
                f"{source}: data[{edge_type!r}].{key} has a name the loaders set themselves; "
                "rename it"
            )
        attrs[key] = value
    return attrs


def _warn_dropped(source: str, name: str) -> None:
    warnings.warn(
        f"{source}: {name} is not a tensor with one row per vertex or edge of its type, so it "
        "cannot be partitioned: it is dropped",
        UserWarning,
        stacklevel=4,
    )


# -- the homogeneous view -----------------------------------------------------------------------
def typed_graph(
    data: HeteroData,
    target_type: str | None = None,
    task: str | None = None,
    *,
    name: str | None = None,
    seed: int = 0,
) -> Data:
    """The homogeneous view of ``data`` that partitioners, metrics and the store work on.

    Args:
        data: any node and edge types; features on some types only; labels ``y`` on the target
            type (class ids ``[N_t]`` with ``-1`` unlabelled, or multi-label / regression
            targets); optional masks on the target type (without them: a seeded random
            60/20/20 split of its vertices); node and edge attributes of any type.
        target_type: the node type to predict (default: the one type with ``y``).
        task: the targets' task (default: inferred from ``y``).
        name: the graph's name (default: ``data.name``, else ``"hetero"``).
        seed: seed of the split made when the target type has no masks.

    Returns:
        A ``Data`` with ``num_nodes`` (all types), ``edge_index [2, E]`` (homogeneous ids,
        sorted by ``(source, target)``, parallel edges kept), ``node_type [N]``,
        ``edge_type [E]``, ``y`` and the masks over all vertices (the target type's; others
        unlabelled and ``False``), ``task``, ``name`` and ``hetero``, the
        :class:`TypedAttributes` (per-type features and attributes, per-relation edge
        attributes).

    Raises:
        DatasetError: see :func:`check_hetero_data`.
    """
    from .synthetic import random_split_masks

    target = check_hetero_data(data, target_type, task)
    source = describe_hetero(data)
    node_types = tuple(data.node_types)
    edge_types = tuple(tuple(edge_type) for edge_type in data.edge_types)
    sizes = tuple(_num_nodes(data, t, source) for t in node_types)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    position = {t: offsets[k] for k, t in enumerate(node_types)}
    num_nodes = int(offsets[-1])
    edges = [data[edge_type].edge_index.long().numpy() for edge_type in edge_types]
    num_edges = tuple(int(e.shape[1]) for e in edges)
    src = np.concatenate([e[0] + position[et[0]] for e, et in zip(edges, edge_types, strict=True)])
    dst = np.concatenate([e[1] + position[et[2]] for e, et in zip(edges, edge_types, strict=True)])
    relation = np.repeat(np.arange(len(edge_types), dtype=np.int64), num_edges)
    within = np.arange(src.size, dtype=np.int64) - np.repeat(
        np.concatenate([[0], np.cumsum(num_edges)[:-1]]).astype(np.int64), num_edges
    )
    # Canonical order, as canonicalize sorts a homogeneous graph: by (source, target), stably.
    order = np.argsort(src * num_nodes + dst, kind="stable")
    schema = HeteroSchema(node_types, edge_types, sizes, num_edges, target)

    store = data[target]
    y_target, task = canonical_targets(store.y, sizes[target_index(schema)], source, task)
    start, end = int(position[target]), int(position[target]) + int(store.num_nodes)
    if task == "multiclass":
        y = torch.full((num_nodes,), -1, dtype=torch.long)
    else:
        y = torch.full((num_nodes, *y_target.shape[1:]), float("nan"))
    y[start:end] = y_target
    given = [store.get(key) for key in _MASKS]
    if all(mask is None for mask in given):
        given = list(random_split_masks(end - start, seed))
    masks = {}
    for key, mask in zip(_MASKS, given, strict=True):
        full = torch.zeros(num_nodes, dtype=torch.bool)
        if mask is not None:
            mask = _target_mask(mask, end - start, key, source)
            full[start:end] = mask
        masks[key] = full

    node_type = torch.from_numpy(np.repeat(np.arange(len(node_types), dtype=np.int64), sizes))
    view = Data(
        edge_index=torch.from_numpy(np.stack([src[order], dst[order]])),
        num_nodes=num_nodes,
        y=y,
        **masks,
    )
    view[NODE_TYPE] = node_type
    view[EDGE_TYPE] = torch.from_numpy(relation[order])
    view.hetero = TypedAttributes(
        schema,
        node_attrs={
            t: _node_attributes(data[t], t, sizes[k], t == target, source)
            for k, t in enumerate(node_types)
        },
        edge_attrs={relation_key(et): _edge_attributes(data[et], et, source) for et in edge_types},
        edge_position=torch.from_numpy(within[order]),
    )
    view.task = task
    graph_name = name if name is not None else (data["name"] if "name" in data else None)
    view.name = graph_name if isinstance(graph_name, str) else "hetero"
    return view


def target_index(schema: HeteroSchema) -> int:
    """Position of the target type in ``schema.node_types``."""
    return schema.type_index(schema.target_type)


def _target_mask(mask: Tensor, num_nodes: int, key: str, source: str) -> Tensor:
    if not isinstance(mask, Tensor) or tuple(mask.shape) != (num_nodes,):
        shape = tuple(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__
        raise DatasetError(
            f"{source}: the target type's {key} must be a boolean mask of shape [{num_nodes}] "
            f"(got {shape})"
        )
    if mask.dtype != torch.bool:
        if not bool(((mask == 0) | (mask == 1)).all()):
            raise DatasetError(f"{source}: {key} must hold only 0/1 or True/False values")
        mask = mask.bool()
    return mask


def homogeneous_view(batch: HeteroData, node_types, edge_types) -> tuple[Tensor, Tensor]:
    """``(edge_index [2, E], edge_type [E])`` of ``batch`` over its vertices concatenated by
    type in ``node_types`` order (PyG's ``to_homogeneous`` convention), with ``edge_type`` the
    position in ``edge_types``: what a layer on the homogeneous view (``RGCNConv``) reads. A
    typed part's full batch carries them (``homogeneous_edge_index``, ``edge_type``: sources
    over the part's ``[owned | halo]``); for any other ``HeteroData`` (a whole graph, a sampled
    batch) they are built from its relations."""
    if "homogeneous_edge_index" in batch:
        return batch.homogeneous_edge_index, batch[EDGE_TYPE]
    present = [tuple(e) for e in edge_types if tuple(e) in set(batch.edge_types)]
    counts = [batch[t].num_nodes for t in node_types]
    # Kept with the first relation's edges (a whole graph's view is reused every epoch; its CSR
    # products are cached on the view's tensors), as long as no relation's edges change.
    identity = tuple(
        (
            batch[e].edge_index.data_ptr(),
            batch[e].edge_index.numel(),
            tensor_version(batch[e].edge_index),
        )
        for e in present
    ) + (tuple(counts), tuple(map(tuple, edge_types)))
    holder = tensor_cache(batch[present[0]].edge_index) if present else {}
    cached = holder.get("homogeneous_view")
    if cached is not None and cached[0] == identity:
        return cached[1]
    view = _homogeneous_view(batch, node_types, edge_types, counts)
    holder["homogeneous_view"] = (identity, view)
    return view


def _homogeneous_view(batch, node_types, edge_types, counts) -> tuple[Tensor, Tensor]:
    offset = dict(zip(node_types, np.concatenate([[0], np.cumsum(counts)]).tolist(), strict=False))
    pieces, types = [], []
    present = set(batch.edge_types)
    for r, edge_type in enumerate(edge_types):
        edge_type = tuple(edge_type)
        if edge_type not in present:
            continue
        index = batch[edge_type].edge_index
        shift = index.new_tensor([[offset[edge_type[0]]], [offset[edge_type[2]]]])
        pieces.append(index + shift)
        types.append(torch.full((index.size(1),), r, dtype=torch.long, device=index.device))
    if not pieces:
        return torch.empty(2, 0, dtype=torch.long), torch.empty(0, dtype=torch.long)
    return torch.cat(pieces, dim=1), torch.cat(types)


def hetero_fingerprint(data: HeteroData) -> str:
    """12 hex digits naming an unnamed in-memory ``HeteroData`` (its store folder): a hash of
    its types and every tensor, without building its homogeneous view."""
    digest = hashlib.sha256()
    for owner in (*data.node_types, *data.edge_types):
        for key, value in sorted(data[owner].items()):
            digest.update(f"{owner}:{key}".encode())
            if isinstance(value, Tensor):
                tensor = value.detach().contiguous().cpu()
                digest.update(f"{tuple(tensor.shape)}:{tensor.dtype}".encode())
                digest.update(tensor.numpy().tobytes())
            else:
                digest.update(repr(value).encode())
    return digest.hexdigest()[:12]

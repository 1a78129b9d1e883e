"""Edge splits for link prediction, made once before partitioning and stored with the parts.

A :class:`LinkSplit` holds what PyG's ``RandomLinkSplit`` returns, without copying the graph:

* the **message-passing graph** of training (:attr:`LinkSplit.edge_ids`: the input edges it
  keeps, in the canonical order). Validation and test edges are never in it, so no layer ever
  aggregates over them; with ``disjoint_train_ratio > 0`` the training supervision edges are
  left out of it as well (PyG's option);
* per split the **supervision pairs** ``edge_label_index [2, n]`` (dataset ids) and their labels
  ``edge_label [n]`` (``1.0`` for an edge unless the user gives labels; ``0`` marks a stored
  negative, e.g. OGB's evaluation negatives).

:func:`random_link_split` follows ``RandomLinkSplit``: one seeded permutation of the edges,
``num_val = int(val · m)``, ``num_test = int(test · m)``, the rest training, in that order; for an
undirected graph ``m`` counts each edge once (its copy with ``source <= target``, the supervision
pair PyG keeps) and both directions always land on the same side. A multigraph's parallel copies
are edges of their own; the ``k``-th copy of ``(u, v)`` pairs with the ``k``-th copy of
``(v, u)``. :func:`user_link_split` takes the user's own pairs and removes every validation and
test edge (both directions when undirected) from the message-passing graph.

Every part stores the pairs whose **source** (``edge_label_index[0]``) it owns
(:meth:`LinkSplit.part_fields`: ``link_label_index``, ``link_label`` and ``link_label_id``, each
pair's position in its split, which keys its negatives' random stream), and ``meta.json``
records the split's settings, per-part counts and the rows each part's pairs need from each
other part (:meth:`LinkSplit.meta`), see docs/development.md ("The store format of wave 4").
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from lightning_gnn_dist.data.attributes import graph_attributes

SPLITS = ("train", "val", "test")
MASKS = ("train_mask", "val_mask", "test_mask")


@dataclass
class LinkSplit:
    """Supervision pairs per split and the training message-passing graph.

    Attributes:
        num_nodes: vertices of the graph.
        edge_ids: ``[E_mp] int64`` ascending positions of the message-passing graph's edges
            in the input graph's ``edge_index``.
        label_index: split → ``[2, n] int64`` supervision pairs (dataset ids).
        label: split → ``[n]`` labels (``float32`` ones unless the user gave labels).
        undirected: whether the graph was split as undirected.
        settings: what determines the split (``link_source``, ``link_ratios``, ``link_seed``,
            ``link_undirected``, ``link_disjoint``, ``link_sha256``), recorded in the store's
            settings so that a store split another way is refused by name.
        negatives_per_positive: split → ``K`` when the split's label-``0`` pairs are ``K``
            stored negatives per positive, in positive-major order after the positives
            (ogbl-citation2's evaluation negatives); ``{}`` otherwise.
    """

    num_nodes: int
    edge_ids: Tensor
    label_index: dict[str, Tensor]
    label: dict[str, Tensor]
    undirected: bool
    settings: dict
    negatives_per_positive: dict[str, int] | None = None

    def message_passing_graph(self, data: Data) -> Data:
        """``data`` restricted to the message-passing edges: ``edge_index`` and every edge
        attribute sliced by :attr:`edge_ids`, node attributes kept, node masks dropped (a link
        store has no vertex split)."""
        attributes = graph_attributes(data)
        out = Data(edge_index=data.edge_index[:, self.edge_ids], num_nodes=data.num_nodes)
        for key in ("x", "y", *attributes.node):
            if getattr(data, key, None) is not None:
                out[key] = data[key]
        for key in attributes.edge:
            out[key] = data[key][self.edge_ids]
        for key in ("name", "task"):
            if getattr(data, key, None) is not None:
                out[key] = data[key]
        return out

    def counts(self, owner: np.ndarray, num_parts: int) -> dict[str, list[int]]:
        """Per split, the pairs each part stores (its sources' owner)."""
        return {
            split: np.bincount(owner[index[0].numpy()], minlength=num_parts).tolist()
            for split, index in self.label_index.items()
        }

    def far_rows(self, owner: np.ndarray, num_parts: int) -> dict[str, list[list[int]]]:
        """Per split, ``[P, P]``: ``[p][q]`` distinct targets owned by part ``q != p`` of the
        pairs part ``p`` stores — the embedding rows ``p`` receives from ``q`` to score them
        (the positives' share of the score exchange, predicted from the split like a halo)."""
        out = {}
        for split, index in self.label_index.items():
            src_part = owner[index[0].numpy()]
            dst = index[1].numpy()
            key = np.unique(src_part * self.num_nodes + dst)
            p, v = key // self.num_nodes, key % self.num_nodes
            q = owner[v]
            far = p != q
            matrix = np.zeros((num_parts, num_parts), dtype=np.int64)
            np.add.at(matrix, (p[far], q[far]), 1)
            out[split] = matrix.tolist()
        return out

    def meta(self, owner: np.ndarray, num_parts: int) -> dict:
        """The store's ``link`` key (docs/development.md)."""
        settings = self.settings
        meta = {
            "source": settings["link_source"],
            "ratios": settings["link_ratios"],
            "seed": settings["link_seed"],
            "undirected": self.undirected,
            "disjoint_train_ratio": settings["link_disjoint"],
            "counts": self.counts(owner, num_parts),
            "num_positives": {
                split: int((label != 0).sum()) for split, label in self.label.items()
            },
            "far_rows": self.far_rows(owner, num_parts),
            "sha256": settings["link_sha256"],
        }
        if self.negatives_per_positive:
            meta["negatives_per_positive"] = dict(self.negatives_per_positive)
        return meta

    def part_fields(self, owner: np.ndarray, num_parts: int) -> list[dict[str, dict]]:
        """Per part ``{"link_label_index": {split: [2, n]}, "link_label": {...},
        "link_label_id": {split: [n] int64}}``: the pairs whose source the part owns, in split
        order (``link_label_id`` their positions in the split)."""
        fields: list[dict[str, dict]] = [
            {"link_label_index": {}, "link_label": {}, "link_label_id": {}}
            for _ in range(num_parts)
        ]
        for split, index in self.label_index.items():
            part = owner[index[0].numpy()]
            order = np.argsort(part, kind="stable")
            bounds = np.searchsorted(part[order], np.arange(num_parts + 1))
            for p in range(num_parts):
                ids = torch.from_numpy(order[bounds[p] : bounds[p + 1]].copy())
                fields[p]["link_label_index"][split] = index[:, ids].clone()
                fields[p]["link_label"][split] = self.label[split][ids].clone()
                fields[p]["link_label_id"][split] = ids
        return fields

    def attach(self, parts: Iterator, owner: np.ndarray, num_parts: int) -> Iterator:
        """``parts`` (in part order) with each part's supervision pairs set."""
        fields = self.part_fields(owner, num_parts)
        for part in parts:
            for name, value in fields[part.part_id].items():
                setattr(part, name, value)
            yield part
            del part  # the next part is built while this frame waits: hold one part only


def is_undirected_multigraph(edge_index: Tensor) -> bool:
    """Whether every edge ``(u, v)`` has as many copies as ``(v, u)`` (self loops count once)."""
    src, dst = edge_index.numpy()
    _, matched = _pair_directions(src, dst)
    return matched is not None


def _pair_directions(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``(upper, group)``: ``upper [E] bool`` the edges with ``source <= target``, and
    ``group [E] int64`` the position of each edge's undirected edge among the upper edges (the
    ``k``-th ``(v, u)`` copy pairs with the ``k``-th ``(u, v)`` copy), or ``None`` when the
    edges are not symmetric."""
    upper = src <= dst
    lower = ~upper
    upper_ids = np.flatnonzero(upper & (src != dst))
    lower_ids = np.flatnonzero(lower)
    if upper_ids.size != lower_ids.size:
        return upper, None
    span = int(max(src.max(initial=0), dst.max(initial=0))) + 1
    key_upper = src[upper_ids] * span + dst[upper_ids]
    key_lower = dst[lower_ids] * span + src[lower_ids]
    order_upper = np.argsort(key_upper, kind="stable")
    order_lower = np.argsort(key_lower, kind="stable")
    if not np.array_equal(key_upper[order_upper], key_lower[order_lower]):
        return upper, None
    group = np.empty(src.size, dtype=np.int64)
    group[upper] = np.arange(int(upper.sum()))
    group[lower_ids[order_lower]] = group[upper_ids[order_upper]]
    return upper, group


def _check_ratio(name: str, value: float) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value < 1:
        raise ValueError(f"{name} must be a fraction in [0, 1) (got {value!r})")
    return float(value)


def random_link_split(
    data: Data,
    val_ratio: float = 0.1,
    test_ratio: float = 0.2,
    seed: int = 0,
    undirected: bool | None = None,
    disjoint_train_ratio: float = 0.0,
) -> LinkSplit:
    """Split the edges of ``data`` into training, validation and test supervision pairs as
    PyG's ``RandomLinkSplit`` does (module docstring).

    Args:
        data: a canonical graph (:func:`~lightning_gnn_dist.data.load_dataset`).
        val_ratio: fraction of the (undirected) edges held out for validation.
        test_ratio: fraction held out for testing.
        seed: seed of the permutation (``torch.Generator``).
        undirected: split ``(u, v)`` and ``(v, u)`` together; ``None`` decides from the graph
            (every edge has as many reverse copies). ``True`` on a graph that is not symmetric
            is refused.
        disjoint_train_ratio: fraction of the training edges used for supervision only (left
            out of the message-passing graph), PyG's ``disjoint_train_ratio``.

    Raises:
        ValueError: ratios outside ``[0, 1)``, no training edge left, or ``undirected=True`` on
            an asymmetric graph.
    """
    val_ratio, test_ratio = (
        _check_ratio("val_ratio", val_ratio),
        _check_ratio("test_ratio", test_ratio),
    )
    disjoint = _check_ratio("disjoint_train_ratio", disjoint_train_ratio)
    src, dst = data.edge_index.numpy()
    upper, group = _undirected_groups(src, dst, undirected)
    undirected = group is not None
    if group is None:  # directed: every edge is a supervision edge of its own
        group, upper = np.arange(src.size), np.ones(src.size, dtype=bool)
    candidates = np.flatnonzero(upper)  # one per (undirected) edge, canonical order
    m = candidates.size
    num_val, num_test = int(val_ratio * m), int(test_ratio * m)
    num_train = m - num_val - num_test
    if num_train <= 0:
        raise ValueError(
            f"val_ratio={val_ratio} and test_ratio={test_ratio} leave no training edge of {m}; "
            "lower them"
        )
    perm = torch.randperm(m, generator=torch.Generator().manual_seed(int(seed))).numpy()
    num_disjoint = int(disjoint * num_train)
    pieces = {
        "train": perm[:num_train],
        "val": perm[num_train : num_train + num_val],
        "test": perm[num_train + num_val :],
    }
    message = perm[num_disjoint:num_train]  # PyG: the first num_disjoint supervise only
    supervision = {"train": pieces["train"][:num_disjoint] if num_disjoint else pieces["train"]}
    supervision |= {"val": pieces["val"], "test": pieces["test"]}
    in_message = np.zeros(m, dtype=bool)
    in_message[message] = True
    edge_ids = np.flatnonzero(in_message[group])
    label_index, label = {}, {}
    for split, groups in supervision.items():
        ids = torch.from_numpy(candidates[groups])
        label_index[split] = data.edge_index[:, ids].clone()
        label[split] = torch.ones(ids.numel(), dtype=torch.float32)
    settings = {
        "link_source": "random",
        "link_ratios": [val_ratio, test_ratio],
        "link_seed": int(seed),
        "link_undirected": undirected,
        "link_disjoint": disjoint,
    }
    split = LinkSplit(
        data.num_nodes, torch.from_numpy(edge_ids), label_index, label, undirected, settings
    )
    split.settings["link_sha256"] = split_digest(split)
    return split


def _undirected_groups(
    src: np.ndarray, dst: np.ndarray, undirected: bool | None
) -> tuple[np.ndarray, np.ndarray | None]:
    if undirected is False:
        return np.ones(src.size, dtype=bool), None
    upper, group = _pair_directions(src, dst)
    if undirected and group is None:
        raise ValueError(
            "undirected=True, but the graph is not symmetric (some edge (u, v) has fewer "
            "copies of (v, u)); pass undirected=False, or add the reverse edges"
        )
    return upper, group


def _pair_keys(index: Tensor, num_nodes: int, undirected: bool) -> np.ndarray:
    src, dst = index.numpy()
    if undirected:
        src, dst = np.minimum(src, dst), np.maximum(src, dst)
    return src * num_nodes + dst


def check_label_index(
    edge_label_index: Mapping[str, Tensor],
    edge_label: Mapping[str, Tensor] | None,
    num_nodes: int | None,
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """The user's supervision pairs and labels as ``int64 [2, n]`` and ``[n]`` tensors
    (``num_nodes=None``: ids not checked against the graph's range, which is unknown yet).

    Raises:
        ValueError: an unknown split name, a pair tensor not ``[2, n]`` integers, a vertex id
            outside ``[0, num_nodes)``, labels of another length, or a split in ``edge_label``
            without pairs (one line each, naming the split and the value).
    """
    if not isinstance(edge_label_index, Mapping) or "train" not in edge_label_index:
        raise ValueError(
            "edge_label_index must map 'train' (and optionally 'val', 'test') to [2, n] vertex "
            f"pairs (got {type(edge_label_index).__name__})"
        )
    labels = dict(edge_label or {})
    unknown = sorted(set(edge_label_index) - set(SPLITS)) + sorted(
        set(labels) - set(edge_label_index)
    )
    if unknown:
        raise ValueError(
            f"edge_label_index/edge_label split {unknown[0]!r} is not one of the pairs' splits "
            f"{', '.join(repr(s) for s in SPLITS if s in edge_label_index) or SPLITS}"
        )
    out_index, out_label = {}, {}
    for split, index in edge_label_index.items():
        index = torch.as_tensor(index)
        if index.dim() != 2 or index.size(0) != 2 or index.is_floating_point():
            raise ValueError(
                f"edge_label_index[{split!r}] must be [2, n] integer vertex ids (got shape "
                f"{tuple(index.shape)}, dtype {index.dtype})"
            )
        index = index.long()
        if index.numel() and int(index.min()) < 0:
            raise ValueError(
                f"edge_label_index[{split!r}] holds vertex id {int(index.min())}, below 0; pairs "
                "must use the dataset's vertex ids"
            )
        if num_nodes is not None and index.numel() and int(index.max()) >= num_nodes:
            bad = int(index.max()) if int(index.max()) >= num_nodes else int(index.min())
            raise ValueError(
                f"edge_label_index[{split!r}] holds vertex id {bad}, outside [0, {num_nodes}) "
                "of the graph; pairs must use the dataset's vertex ids"
            )
        label = labels.get(split)
        if label is None:
            label = torch.ones(index.size(1), dtype=torch.float32)
        label = torch.as_tensor(label)
        if label.dim() != 1 or label.numel() != index.size(1):
            raise ValueError(
                f"edge_label[{split!r}] must hold one label per pair ({index.size(1)}), got shape "
                f"{tuple(label.shape)}"
            )
        out_index[split], out_label[split] = index.contiguous(), label.contiguous()
    return out_index, out_label


def user_link_split(
    data: Data,
    edge_label_index: Mapping[str, Tensor],
    edge_label: Mapping[str, Tensor] | None = None,
    undirected: bool | None = None,
    negatives_per_positive: Mapping[str, int] | None = None,
) -> LinkSplit:
    """The user's own supervision pairs (``{"train": [2, n], "val": ..., "test": ...}``, dataset
    ids; labels default to ``1``, ``0`` marks a negative pair). The message-passing graph is
    ``data``'s edges without any validation or test positive pair (label ``!= 0``), in both
    directions when undirected (default: when the graph is symmetric).

    Raises:
        ValueError: see :func:`check_label_index`; a positive pair in two splits (overlapping
            splits, naming the pair and the splits).
    """
    num_nodes = data.num_nodes
    label_index, label = check_label_index(edge_label_index, edge_label, num_nodes)
    src, dst = data.edge_index.numpy()
    if undirected is None:
        undirected = _pair_directions(src, dst)[1] is not None
    seen = check_disjoint(label_index, label, num_nodes, undirected)
    held_out = np.concatenate([seen.get(s, np.empty(0, np.int64)) for s in ("val", "test")])
    graph_keys = _pair_keys(data.edge_index, num_nodes, undirected)
    keep = ~np.isin(graph_keys, held_out)
    digest = hashlib.sha256()
    for split in sorted(label_index):
        digest.update(split.encode())
        digest.update(label_index[split].numpy().tobytes())
        digest.update(label[split].numpy().tobytes())
    settings = {
        "link_source": "user",
        "link_ratios": None,
        "link_seed": None,
        "link_undirected": bool(undirected),
        "link_disjoint": 0.0,
    }
    split = LinkSplit(
        num_nodes,
        torch.from_numpy(np.flatnonzero(keep)),
        label_index,
        label,
        bool(undirected),
        settings,
        dict(negatives_per_positive or {}),
    )
    split.settings["link_sha256"] = split_digest(split)
    return split


def check_disjoint(
    label_index: Mapping[str, Tensor],
    label: Mapping[str, Tensor],
    num_nodes: int | None,
    undirected: bool,
) -> dict[str, np.ndarray]:
    """Refuse a positive pair (label ``!= 0``) in two splits; returns each split's sorted pair
    keys (``min · N + max`` when ``undirected``).

    Raises:
        ValueError: naming one shared pair, both splits and how many pairs they share.
    """
    if num_nodes is None:  # before the graph is loaded: the ids' own range
        num_nodes = max((int(i.max()) + 1 for i in label_index.values() if i.numel()), default=1)
    span = num_nodes
    seen: dict[str, np.ndarray] = {}
    for split, index in label_index.items():
        keys = np.unique(_pair_keys(index[:, label[split] != 0], span, undirected))
        for other, other_keys in seen.items():
            common = np.intersect1d(keys, other_keys)
            if common.size:
                u, v = divmod(int(common[0]), span)
                raise ValueError(
                    f"the user splits overlap: edge ({u}, {v}) is a positive pair of both "
                    f"{other!r} and {split!r} ({common.size} shared); make the splits disjoint"
                )
        seen[split] = keys
    return seen


def split_digest(split: LinkSplit) -> str:
    """sha256 of the split's message-passing edges, pairs and labels."""
    digest = hashlib.sha256(split.edge_ids.numpy().tobytes())
    for name in sorted(split.label_index):
        digest.update(name.encode())
        digest.update(split.label_index[name].numpy().tobytes())
        digest.update(split.label[name].numpy().tobytes())
    for name, k in sorted((split.negatives_per_positive or {}).items()):
        digest.update(f"{name}:{k}".encode())
    return digest.hexdigest()


__all__ = [
    "SPLITS",
    "LinkSplit",
    "check_disjoint",
    "check_label_index",
    "is_undirected_multigraph",
    "random_link_split",
    "split_digest",
    "user_link_split",
]

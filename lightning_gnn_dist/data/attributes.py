"""Which tensors of a graph belong to its vertices and which to its edges (design §10).

A node attribute (first dimension = the number of vertices ``N``) is partitioned with its vertex
and travels wherever the vertex's rows travel; an edge attribute (first dimension = the number of
edges ``E``) stays with its edge and keeps the order of the part's ``edge_index``. ``x``, ``y``
and the three masks are node attributes with fields of their own; everything else a user's
``Data`` carries is classified here, once, by :func:`graph_attributes`.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor
from torch_geometric.data import Data

#: Node attributes with fields of their own in every part (read by name by the exchanges,
#: the loss normalisation and the metrics).
CORE_NODE_ATTRS: tuple[str, ...] = ("x", "y", "train_mask", "val_mask", "test_mask")

#: Names the loaders and the datamodule set on a batch themselves: refused as attribute names.
RESERVED_NAMES: frozenset[str] = frozenset(
    {
        "edge_index",
        "num_nodes",
        "global_ids",
        "n_id",
        "e_id",
        "input_id",
        "batch",
        "batch_size",
        "num_sampled_nodes",
        "num_sampled_edges",
        "num_train_global",
        "num_val_global",
        "num_test_global",
        "num_train_labels_global",
        "num_val_labels_global",
        "num_test_labels_global",
        "local_partition",
        "global_in_degree",
        "global_self_loops",
        "global_gcn_weight_terms",
        "task",
    }
)

#: Graph-level descriptions that are not partitioned (kept by the dataset, never by a part);
#: so is a string ``task``, the targets' task :func:`~lightning_gnn_dist.data.load_dataset`
#: records.
_GRAPH_LEVEL: frozenset[str] = frozenset({"name", "num_nodes", "edge_index"})


@dataclass(frozen=True)
class GraphAttributes:
    """The partitionable attributes of a graph, by name (sorted).

    Attributes:
        node: node attributes besides :data:`CORE_NODE_ATTRS` (first dimension ``N``).
        edge: edge attributes (first dimension ``E``), e.g. ``edge_weight``, ``edge_attr``.
        other: attributes that cannot be partitioned (not tensors, or 0-dimensional): the
            datamodule names them in a warning and drops them.
    """

    node: tuple[str, ...] = ()
    edge: tuple[str, ...] = ()
    other: tuple[str, ...] = ()


def graph_attributes(data: Data) -> GraphAttributes:
    """Classify every attribute of ``data`` besides ``edge_index``, ``x``, ``y`` and the masks.

    A tensor whose first dimension is ``N`` is a node attribute, ``E`` an edge attribute. When
    ``N == E`` the name decides, as PyG's ``Data.is_edge_attr`` does: a name containing
    ``"edge"`` is an edge attribute, any other a node attribute.

    Raises:
        ValueError: a tensor whose first dimension is neither ``N`` nor ``E`` (the message names
            it and both counts), or a partitionable attribute with a name the loaders reserve.
    """
    num_nodes = int(data.num_nodes)
    edge_index = getattr(data, "edge_index", None)
    num_edges = 0 if edge_index is None else int(edge_index.size(-1))
    node, edge, other = [], [], []
    for key in sorted(data.keys()):
        if key in _GRAPH_LEVEL or key in CORE_NODE_ATTRS:
            continue
        value = data[key]
        if key == "task" and isinstance(value, str):
            continue
        if not isinstance(value, Tensor) or value.dim() == 0:
            other.append(key)
            continue
        rows = int(value.size(0))
        if rows == num_nodes and (rows != num_edges or "edge" not in key):
            target = node
        elif rows == num_edges:
            target = edge
        else:
            raise ValueError(
                f"attribute {key!r} has shape {tuple(value.shape)}: its first dimension {rows} is "
                f"neither the number of vertices ({num_nodes}) nor of edges ({num_edges}); "
                "partitioned attributes have one row per vertex or per edge (delete it from "
                "the Data, or reshape it)"
            )
        if key in RESERVED_NAMES:
            raise ValueError(
                f"attribute {key!r} has a name the loaders set on every batch themselves; "
                "rename it (e.g. data.my_" + key + " = data." + key + ")"
            )
        target.append(key)
    return GraphAttributes(tuple(node), tuple(edge), tuple(other))


def batch_attributes(part) -> dict[str, Tensor]:
    """What a batch of the whole ``part`` carries besides its core fields: every node attribute
    (the part's rows), every edge attribute (in the part's ``edge_index`` order) and ``e_id``
    (each local edge's position in the dataset's canonical ``edge_index``; absent in parts
    stored before it existed). ``part`` is a ``LocalPartition`` or a ``VertexCutPart``."""
    tensors = {**part.node_attrs, **part.edge_attrs}
    if part.edge_ids is not None:
        tensors["e_id"] = part.edge_ids
    return tensors

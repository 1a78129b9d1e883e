"""The graph context of a sampled neighbour batch (``loader="neighbor"``, design §7).

A neighbour batch is complete on its rank: its rows and edges were sampled and fetched by the
loader, so nothing moves inside the model. The context still matters for two things:

* ``GCNConv`` normalises by degrees. With fan-out ``-1`` on every hop the batch carries the
  **global** in-degrees and self loops of its vertices (``global_in_degree``,
  ``global_self_loops``), so the seeds' outputs equal full-graph outputs; without them (sampled
  fan-outs) the degrees are the batch's own, as PyG's ``NeighborLoader`` gives them.
* Batch norms synchronise their statistics over every rank's batch (SyncBatchNorm semantics),
  so the running statistics are identical on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.distributed as dist
from torch import Tensor

from lightning_gnn_dist.comm.counters import CommCounter
from lightning_gnn_dist.data.csr import CSRAdjacency, tensor_cache, unlinked
from lightning_gnn_dist.data.graph import gcn_norm_weights
from lightning_gnn_dist.nn.context import GraphContext
from lightning_gnn_dist.nn.spmm import SparseMatrix


@dataclass
class SampledBatch:
    """What the layers see of a neighbour batch.

    Attributes:
        edge_index: ``[2, E] int64`` the batch's edges over its ``num_nodes`` rows.
        num_nodes: rows of the batch.
        in_degree: ``[num_nodes] int64`` global in-degree without self loops, or ``None`` (the
            batch's own degrees are used).
        num_self_loops: ``[num_nodes] int64`` global self loops, or ``None``.
        num_sampled_nodes: vertices first reached at each hop (seeds first), or ``None``.
        num_sampled_edges: edges sampled at each hop, or ``None`` (with ``num_sampled_nodes``,
            what :mod:`~lightning_gnn_dist.nn.trim` trims a PyG model with).
    """

    edge_index: Tensor
    num_nodes: int
    in_degree: Tensor | None = None
    num_self_loops: Tensor | None = None
    num_sampled_nodes: list[int] | None = None
    num_sampled_edges: list[int] | None = None

    kind = "sampled"
    num_halo = 0

    @property
    def num_owned(self) -> int:
        return self.num_nodes

    def gcn_edge_weight(
        self,
        add_self_loops: bool = True,
        improved: bool = False,
        normalize: bool = True,
        edge_index: Tensor | None = None,
        num_rows: int | None = None,
    ) -> tuple[Tensor, Tensor]:
        """PyG 2.8 ``gcn_norm`` of ``edge_index`` (default: the batch's) over the first
        ``num_rows`` batch rows, with the global degrees when the batch has them."""
        del improved  # PyG 2.8 ignores it when no edge weights are given
        edge_index = self.edge_index if edge_index is None else edge_index
        num_rows = self.num_nodes if num_rows is None else num_rows
        if self.in_degree is not None:
            degree, loops = self.in_degree[:num_rows], self.num_self_loops[:num_rows]
        else:
            src, dst = edge_index
            loop = src == dst
            degree = torch.bincount(dst[~loop], minlength=num_rows)
            loops = torch.bincount(dst[loop], minlength=num_rows)
        rows = torch.arange(num_rows, device=edge_index.device)
        return gcn_norm_weights(edge_index, degree, loops, rows, add_self_loops, normalize)


class NoHalo:
    """The exchange of a complete batch: every row is local, no halo row moves.

    Attributes:
        group: the process group batch norms synchronise over. (default: the world group)
        world_size: ranks in ``group`` (1 without a process group).
    """

    mode = "local"
    exact = True

    def __init__(self, group=None) -> None:
        self.group = group
        initialised = dist.is_available() and dist.is_initialized()
        self.world_size = dist.get_world_size(group) if initialised else 1
        self.counter = CommCounter()

    def start(self, h_owned: Tensor, layer: str) -> _Ready:
        return _Ready(h_owned.new_empty((0, *h_owned.shape[1:])))

    def __call__(self, h_owned: Tensor, layer: str) -> Tensor:
        return h_owned.new_empty((0, *h_owned.shape[1:]))

    def begin_round(self, epoch: int | None) -> None:
        return None

    def close(self) -> None:
        return None

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        del state


@dataclass
class _Ready:
    rows: Tensor

    def wait(self) -> Tensor:
        return self.rows


@dataclass
class SampledBatchContext(GraphContext):
    """:class:`GraphContext` of a neighbour batch (``partition`` is a :class:`SampledBatch`,
    ``exchange`` a :class:`NoHalo`): complete, so layers exchange nothing and a model may trim
    the batch per hop."""

    complete: ClassVar[bool] = True

    @classmethod
    def from_batch(cls, batch, group=None) -> SampledBatchContext:
        """The context of a neighbour loader's batch (a PyG ``Data``)."""
        view = SampledBatch(
            batch.edge_index,
            int(batch.num_nodes),
            getattr(batch, "global_in_degree", None),
            getattr(batch, "global_self_loops", None),
            _counts(getattr(batch, "num_sampled_nodes", None)),
            _counts(getattr(batch, "num_sampled_edges", None)),
        )
        return cls(view, NoHalo(group))

    def _layer_graph(
        self, edge_index: Tensor | None, num_rows: int | None
    ) -> tuple[Tensor, int, dict]:
        """The edges a layer runs on (the whole batch unless the model trimmed it), their row
        count, and the cache that lives as long as those edges."""
        if edge_index is None or edge_index is self.partition.edge_index:
            edge_index, num_rows = self.partition.edge_index, self.partition.num_nodes
        return edge_index, num_rows, tensor_cache(edge_index)

    def gcn_graph(
        self,
        add_self_loops: bool,
        improved: bool,
        normalize: bool = True,
        edge_index: Tensor | None = None,
        num_rows: int | None = None,
    ) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor]]:
        """Every edge is an owned edge: ``(edges, empty halo edges, (weights, empty))`` for the
        layer's ``edge_index`` (a model may trim the batch per layer)."""
        edge_index, num_rows, cache = self._layer_graph(edge_index, num_rows)
        key = ("gcn", add_self_loops, improved, normalize, num_rows)
        if key not in cache:
            edges, weight = self.partition.gcn_edge_weight(
                add_self_loops, improved, normalize, edge_index, num_rows
            )
            cache[key] = (  # no view of edge_index in its own cache (data.csr.tensor_cache)
                unlinked(edges),
                edges.new_empty(2, 0),
                (unlinked(weight), weight.new_empty(0)),
            )
        return cache[key]

    def gcn_matrices(
        self,
        add_self_loops: bool,
        improved: bool,
        normalize: bool = True,
        edge_index: Tensor | None = None,
        num_rows: int | None = None,
    ) -> tuple[SparseMatrix, SparseMatrix]:
        """:meth:`gcn_graph` as CSR matrices: the batch's ``[num_rows × num_rows]`` and an
        empty halo matrix (no halo row exists)."""
        edge_index, num_rows, cache = self._layer_graph(edge_index, num_rows)
        key = ("gcn-csr", add_self_loops, improved, normalize, num_rows)
        if key not in cache:
            edges, _, (weight, _) = self.gcn_graph(
                add_self_loops, improved, normalize, edge_index, num_rows
            )
            adj = CSRAdjacency.from_edge_index(edges, num_rows, num_rows)
            none = CSRAdjacency.from_edge_index(edges[:, :0], num_rows, 0)
            cache[key] = (
                SparseMatrix(adj, adj.entry_values(weight)),
                SparseMatrix(none, none.entry_values(weight[:0])),
            )
        return cache[key]

    def gcn_rows(
        self,
        add_self_loops: bool,
        improved: bool,
        normalize: bool,
        edge_index: Tensor,
        num_nodes: int,
        num_rows: int,
        num_cols: int,
    ) -> SparseMatrix:
        """Rows ``[:num_rows]`` and columns ``[:num_cols]`` of :meth:`gcn_matrices`'
        ``num_nodes × num_nodes`` matrix of ``edge_index`` (cached): a GCN layer computed for its
        first ``num_rows`` targets only, normalised as over all ``num_nodes`` rows. Valid when
        those targets' sources all lie below ``num_cols`` (a hop-ordered batch)."""
        owned, _ = self.gcn_matrices(add_self_loops, improved, normalize, edge_index, num_nodes)
        if (num_rows, num_cols) == owned.shape:
            return owned
        _, _, cache = self._layer_graph(edge_index, num_nodes)
        key = ("gcn-rows", add_self_loops, improved, normalize, num_nodes, num_rows, num_cols)
        if key not in cache:
            cache[key] = owned.row_prefix(num_rows, num_cols)
        return cache[key]


def _counts(counts) -> list[int] | None:
    """Per-hop counts as a list of ints (a batch may hold a list or a tensor), or ``None``."""
    return None if counts is None else [int(c) for c in counts]

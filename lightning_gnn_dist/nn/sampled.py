"""The graph context of a sampled neighbour batch (``loader="neighbor"``, design §7).

A neighbour batch is complete on its rank: its rows and edges were sampled and fetched by the
loader, so nothing moves inside the model. The context still matters for two things:

* ``GCNConv`` normalises by degrees. With fan-out ``-1`` on every hop the batch carries the
  **global** in-degrees and self loops of its vertices (``global_in_degree``,
  ``global_self_loops``), so the seeds' outputs equal full-graph outputs; without them (sampled
  fan-outs) the degrees are the batch's own, as PyG's ``NeighborLoader`` gives them. With an
  ``edge_weight`` the degrees are weighted: the global ones come from
  ``global_gcn_weight_terms`` (``{edge attribute name: [num_nodes, 3]}``, the
  :func:`~lightning_gnn_dist.data.graph.gcn_weight_terms` of every batch vertex, computed by its
  owner); a fan-out −1 batch without them refuses a weighted ``GCNConv`` by name.
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
from lightning_gnn_dist.data.graph import (
    gcn_norm_weights,
    gcn_normalise,
    gcn_weight_terms,
    gcn_weighted_edges,
)
from lightning_gnn_dist.nn.context import GraphContext, check_edge_weight, weight_identity
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
        edge_attrs: the batch's edge attributes by name (``[E, ...]``, ``edge_index`` order).
        weight_terms: ``{edge attribute name: [num_nodes, 3]}`` global
            :func:`~lightning_gnn_dist.data.graph.gcn_weight_terms` of the batch's vertices for
            the 1-D edge attributes a ``GCNConv`` may take as ``edge_weight``, or ``None``.
        num_sampled_nodes: vertices first reached at each hop (seeds first), or ``None``.
        num_sampled_edges: edges sampled at each hop, or ``None`` (with ``num_sampled_nodes``,
            what :mod:`~lightning_gnn_dist.nn.trim` trims a PyG model with).
    """

    edge_index: Tensor
    num_nodes: int
    in_degree: Tensor | None = None
    num_self_loops: Tensor | None = None
    edge_attrs: dict | None = None
    weight_terms: dict | None = None
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
        edge_weight: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """PyG 2.8 ``gcn_norm`` of ``edge_index`` (default: the batch's) over the first
        ``num_rows`` batch rows, with the global degrees when the batch has them (weighted
        ones with ``edge_weight``, ``[E]`` in ``edge_index`` order).

        Raises:
            NotImplementedError: ``edge_weight`` in a batch with global degrees (fan-out −1)
                but without the global weighted ones of that edge attribute.
        """
        edge_index = self.edge_index if edge_index is None else edge_index
        num_rows = self.num_nodes if num_rows is None else num_rows
        if edge_weight is not None:
            return self._weighted(
                add_self_loops, improved, normalize, edge_index, num_rows, edge_weight
            )
        del improved  # PyG 2.8 ignores it when no edge weights are given
        if self.in_degree is not None:
            degree, loops = self.in_degree[:num_rows], self.num_self_loops[:num_rows]
        else:
            src, dst = edge_index
            loop = src == dst
            degree = torch.bincount(dst[~loop], minlength=num_rows)
            loops = torch.bincount(dst[loop], minlength=num_rows)
        rows = torch.arange(num_rows, device=edge_index.device)
        return gcn_norm_weights(edge_index, degree, loops, rows, add_self_loops, normalize)

    def _weighted(
        self,
        add_self_loops: bool,
        improved: bool,
        normalize: bool,
        edge_index: Tensor,
        num_rows: int,
        edge_weight: Tensor,
    ) -> tuple[Tensor, Tensor]:
        check_edge_weight(edge_weight, edge_index.size(1))
        weight = edge_weight.detach()
        if not normalize:
            return edge_index, weight
        if self.in_degree is None:  # sampled fan-outs: the batch's own degrees (PyG's loader)
            terms = gcn_weight_terms(edge_index, weight, num_rows)
        else:
            terms = self._global_terms(edge_weight)[:num_rows].to(weight)
        fill = torch.full_like(terms[:, 1], 2.0 if improved else 1.0)
        if add_self_loops:
            loop_weight = torch.where(torch.isnan(terms[:, 1]), fill, terms[:, 1])
            rows = torch.arange(num_rows, device=edge_index.device)
            edges, weight = gcn_weighted_edges(edge_index, weight, rows, loop_weight)
            degree = terms[:, 0] + loop_weight
        else:
            edges, degree = edge_index, terms[:, 0] + terms[:, 2]
        return edges, gcn_normalise(edges, weight, degree)

    def _global_terms(self, edge_weight: Tensor) -> Tensor:
        """The global weight terms of the edge attribute ``edge_weight`` is (or is a trimmed
        prefix of)."""
        for name, value in (self.edge_attrs or {}).items():
            same = value is edge_weight or (
                value.data_ptr() == edge_weight.data_ptr() and value.dim() == 1
            )
            if same and name in (self.weight_terms or {}):
                return self.weight_terms[name]
        raise NotImplementedError(
            "GCNConv: a weighted GCN on a neighbour batch with fan-out -1 needs the global "
            "weighted in-degrees of the batch's vertices (the batch's "
            "global_gcn_weight_terms for this edge attribute), which this batch does not carry; "
            "pass one of the batch's own 1-D edge attributes as edge_weight, use a weighted "
            "layer that needs no degrees (GraphConv), or train full-batch (exchange='p2p')"
        )


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
        num_edges = batch.edge_index.size(1)
        edge_attrs = {
            key: value
            for key, value in batch.items()
            if isinstance(value, Tensor)
            and key != "edge_index"
            and value.dim() >= 1
            and value.size(0) == num_edges
        }
        view = SampledBatch(
            batch.edge_index,
            int(batch.num_nodes),
            getattr(batch, "global_in_degree", None),
            getattr(batch, "global_self_loops", None),
            edge_attrs,
            getattr(batch, "global_gcn_weight_terms", None),
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
        edge_weight: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor]]:
        """Every edge is an owned edge: ``(edges, empty halo edges, (weights, empty))`` for the
        layer's ``edge_index`` (a model may trim the batch per layer) and ``edge_weight``."""
        edge_index, num_rows, cache = self._layer_graph(edge_index, num_rows)
        if edge_weight is not None:  # cached as matrices (gcn_matrices), once per weight tensor
            edges, weight = self.partition.gcn_edge_weight(
                add_self_loops, improved, normalize, edge_index, num_rows, edge_weight
            )
            return edges, edges.new_empty(2, 0), (weight, weight.new_empty(0))
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
        edge_weight: Tensor | None = None,
    ) -> tuple[SparseMatrix, SparseMatrix]:
        """:meth:`gcn_graph` as CSR matrices: the batch's ``[num_rows × num_rows]`` and an
        empty halo matrix (no halo row exists)."""
        edge_index, num_rows, cache = self._layer_graph(edge_index, num_rows)
        key = ("gcn-csr", add_self_loops, improved, normalize, num_rows)
        if edge_weight is not None:
            key = (*key, weight_identity(edge_weight))
            for stale in [k for k in cache if k[:5] == key[:5] and len(k) > 5 and k != key]:
                del cache[stale]  # one weight tensor per configuration and edge_index is kept
        if key not in cache:
            edges, _, (weight, _) = self.gcn_graph(
                add_self_loops, improved, normalize, edge_index, num_rows, edge_weight
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

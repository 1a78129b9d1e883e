"""The graph context a distributed layer runs in: this rank's partition and its exchange.

A context is active inside :func:`use_graph_context` (the strategy enters it around every step).
With no active context the distributed layers behave exactly like their PyG base classes, so one
model runs single-process and distributed unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ClassVar

from torch import Tensor

from lightning_gnn_dist.comm.base import HaloExchange
from lightning_gnn_dist.data.csr import CSRAdjacency
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.nn.spmm import SparseMatrix

_ACTIVE: list[GraphContext] = []


@dataclass
class GraphContext:
    """One rank's view of the graph for the layers.

    Attributes:
        partition: the rank's :class:`LocalPartition` (tensors on the compute device).
        exchange: the halo exchange mode in use.
    """

    partition: LocalPartition
    exchange: HaloExchange
    _cache: dict = field(default_factory=dict, repr=False)

    complete: ClassVar[bool] = False
    """Whether every row a layer reads is already local (a sampled neighbour batch): layers
    then exchange nothing and take what their PyG base class takes, bipartite ``(x_src, x_dst)``
    inputs of a model trimmed per hop included; the context still supplies global degrees and
    synchronised batch norms. ``False`` here: layers read halo rows through :attr:`exchange`."""

    @property
    def num_owned(self) -> int:
        return self.partition.num_owned

    def gcn_graph(
        self,
        add_self_loops: bool,
        improved: bool,
        normalize: bool = True,
        edge_index: Tensor | None = None,
        num_rows: int | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Globally normalised GCN edges split for overlap (cached); see
        :meth:`LocalPartition.gcn_edge_weight`. ``edge_index``/``num_rows`` (what the layer was
        called with) matter to contexts whose layers may see a trimmed graph; a partition's
        layers always run on its own edges.

        Returns:
            ``(owned_edges, halo_edges, weights)`` where ``owned_edges`` and ``halo_edges`` are
            ``[2, E] int64`` (halo sources re-based to ``[0, num_halo)``) and ``weights`` the
            matching ``(owned_weight, halo_weight)`` float tensors concatenated.
        """
        key = ("gcn", add_self_loops, improved, normalize)
        if key not in self._cache:
            edge_index, weight = self.partition.gcn_edge_weight(add_self_loops, improved, normalize)
            device = self.partition.edge_index.device
            edge_index, weight = edge_index.to(device), weight.to(device)
            owned = edge_index[0] < self.num_owned
            halo_edges = edge_index[:, ~owned].clone()
            halo_edges[0] -= self.num_owned
            self._cache[key] = (edge_index[:, owned], halo_edges, (weight[owned], weight[~owned]))
        return self._cache[key]

    def gcn_matrices(
        self,
        add_self_loops: bool,
        improved: bool,
        normalize: bool = True,
        edge_index: Tensor | None = None,
        num_rows: int | None = None,
    ) -> tuple[SparseMatrix, SparseMatrix]:
        """The globally normalised ``Â`` of :meth:`gcn_graph` as two CSR matrices (cached):
        ``owned [num_owned × num_owned]`` and ``halo [num_owned × num_halo]``, so the owned
        product runs while the halo rows are in flight. ``edge_index``/``num_rows`` as in
        :meth:`gcn_graph`."""
        key = ("gcn-csr", add_self_loops, improved, normalize)
        if key not in self._cache:
            owned_edges, halo_edges, (owned_w, halo_w) = self.gcn_graph(
                add_self_loops, improved, normalize
            )
            num_owned, num_halo = self.num_owned, self.partition.num_halo
            matrices = []
            for edges, weight, num_cols in (
                (owned_edges, owned_w, num_owned),
                (halo_edges, halo_w, num_halo),
            ):
                adj = CSRAdjacency.from_edge_index(edges, num_owned, num_cols)
                matrices.append(SparseMatrix(adj, adj.entry_values(weight)))
            self._cache[key] = tuple(matrices)
            del self._cache[("gcn", add_self_loops, improved, normalize)]  # edges no longer needed
        return self._cache[key]

    def synchronise(self, aggregated: Tensor, layer: str) -> Tensor:
        """Aggregates ``[num_owned, d]`` of a layer that summed over the local edges itself
        (``DistGCNConv``) → the complete aggregates. Identity here: a vertex partition holds
        every in-edge of its owned rows."""
        return aggregated

    def counted_rows(self, device) -> Tensor | None:
        """``[num_owned] bool``: the rows that stand for their vertex in whole-graph statistics
        (batch norms), or ``None`` when every row does (a vertex partition owns each vertex
        once)."""
        return None

    def after_message(self, module, messages: Tensor) -> None:
        """Message hook of every distributed ``MessagePassing`` layer (PyG's message forward
        hook): ``messages`` is ``[E, ...]``, one row per local edge. Nothing to do here."""
        return None

    def after_aggregate(self, module, aggr_kwargs: dict, aggregated: Tensor) -> Tensor | None:
        """Post-aggregation hook of every distributed ``MessagePassing`` layer (PyG's
        ``aggregate`` forward hook): return replacement aggregates, or ``None`` to keep them."""
        return None

    def layer_output(self, module, x: Tensor) -> Tensor | None:
        """A context that computes whole layers itself (``rdm``) returns ``module``'s output
        for input ``x`` here; ``None`` (this context) lets the layer run with the halo rows of
        :attr:`exchange`."""
        return None

    def prepare(self, model) -> None:
        """Called once with the model (after :func:`~lightning_gnn_dist.nn.distribute`) before
        the first step, on every rank; contexts that must know the model's layers in advance
        (``rdm``) bind them here. Nothing to do for a halo exchange."""
        return None


CONTEXTS: dict[str, type[GraphContext]] = {"vertex": GraphContext}
"""Graph context class per partition kind (``partition.kind``, ``"vertex"`` if absent), or per
exchange for modes with a context of their own (``exchange.graph_context``, e.g. ``"rdm"``)."""


def make_graph_context(partition, exchange: HaloExchange) -> GraphContext:
    """The graph context of ``exchange`` if it names one (``rdm``), else of ``partition``'s
    kind (vertex partition or vertex cut)."""
    kind = getattr(exchange, "graph_context", None) or getattr(partition, "kind", "vertex")
    return CONTEXTS[kind](partition, exchange)


@contextmanager
def use_graph_context(context: GraphContext) -> Iterator[GraphContext]:
    """Make ``context`` the active graph context within the ``with`` block."""
    _ACTIVE.append(context)
    try:
        yield context
    finally:
        _ACTIVE.pop()


def current_graph_context() -> GraphContext | None:
    """The innermost active :class:`GraphContext`, or ``None`` outside any."""
    return _ACTIVE[-1] if _ACTIVE else None

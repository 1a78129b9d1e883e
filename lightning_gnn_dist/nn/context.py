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

import torch
from torch import Tensor

from lightning_gnn_dist.comm.base import HaloExchange
from lightning_gnn_dist.comm.counters import CommCounter
from lightning_gnn_dist.comm.p2p import P2PExchange
from lightning_gnn_dist.data.csr import CSRAdjacency, tensor_version
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.nn.spmm import SparseMatrix

_ACTIVE: list[GraphContext] = []


@dataclass
class GraphContext:
    """One rank's view of the graph for the layers.

    Attributes:
        partition: the rank's :class:`LocalPartition` (tensors on the compute device).
        exchange: the halo exchange mode in use.
        setup_counter: the one-off exchanges the context itself makes (the halo vertices'
            weighted degrees of a ``GCNConv`` called with ``edge_weight``: one width-1 exchange
            of the partition's halo plan per weight tensor and layer configuration, under
            ``("gcn weighted degree", "forward")``), kept apart from the layers' traffic.
    """

    partition: LocalPartition
    exchange: HaloExchange
    _cache: dict = field(default_factory=dict, repr=False)
    setup_counter: CommCounter = field(default_factory=CommCounter, repr=False)

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
        edge_weight: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Globally normalised GCN edges split for overlap (cached); see
        :meth:`LocalPartition.gcn_edge_weight`. ``edge_index``/``num_rows`` (what the layer was
        called with) matter to contexts whose layers may see a trimmed graph; a partition's
        layers always run on its own edges. ``edge_weight`` (``[E_local]`` in the partition's
        edge order) normalises with global *weighted* degrees (PyG's ``gcn_norm`` with weights).

        Returns:
            ``(owned_edges, halo_edges, weights)`` where ``owned_edges`` and ``halo_edges`` are
            ``[2, E] int64`` (halo sources re-based to ``[0, num_halo)``) and ``weights`` the
            matching ``(owned_weight, halo_weight)`` float tensors concatenated.
        """
        if edge_weight is not None:
            edges, weight = self.weighted_gcn_edges(
                edge_weight, add_self_loops, improved, normalize
            )
            return self._split_halo(edges, weight)
        key = ("gcn", add_self_loops, improved, normalize)
        if key not in self._cache:
            edge_index, weight = self.partition.gcn_edge_weight(add_self_loops, improved, normalize)
            self._cache[key] = self._split_halo(edge_index, weight)
        return self._cache[key]

    def _split_halo(self, edge_index: Tensor, weight: Tensor) -> tuple[Tensor, Tensor, tuple]:
        device = self.partition.edge_index.device
        edge_index, weight = edge_index.to(device), weight.to(device)
        owned = edge_index[0] < self.num_owned
        halo_edges = edge_index[:, ~owned].clone()
        halo_edges[0] -= self.num_owned
        return edge_index[:, owned], halo_edges, (weight[owned], weight[~owned])

    def gcn_matrices(
        self,
        add_self_loops: bool,
        improved: bool,
        normalize: bool = True,
        edge_index: Tensor | None = None,
        num_rows: int | None = None,
        edge_weight: Tensor | None = None,
    ) -> tuple[SparseMatrix, SparseMatrix]:
        """The globally normalised ``Â`` of :meth:`gcn_graph` as two CSR matrices (cached):
        ``owned [num_owned × num_owned]`` and ``halo [num_owned × num_halo]``, so the owned
        product runs while the halo rows are in flight. ``edge_index``/``num_rows``/
        ``edge_weight`` as in :meth:`gcn_graph`; the weighted matrices are kept for the last
        weight tensor seen per configuration (a full batch passes the same one every step)."""
        config = (add_self_loops, improved, normalize)
        if edge_weight is not None:
            key, weight_key = ("gcn-csr-weighted", *config), weight_identity(edge_weight)
            cached = self._cache.get(key)
            if cached is None or cached[0] != weight_key:
                graph = self.gcn_graph(*config, edge_weight=edge_weight)
                self._cache[key] = (weight_key, self._halo_matrices(*graph))
            return self._cache[key][1]
        key = ("gcn-csr", *config)
        if key not in self._cache:
            self._cache[key] = self._halo_matrices(*self.gcn_graph(*config))
            del self._cache[("gcn", *config)]  # edges no longer needed
        return self._cache[key]

    def _halo_matrices(
        self, owned_edges: Tensor, halo_edges: Tensor, weights: tuple[Tensor, Tensor]
    ) -> tuple[SparseMatrix, SparseMatrix]:
        num_owned, num_halo = self.num_owned, self.partition.num_halo
        matrices = []
        for edges, weight, num_cols in (
            (owned_edges, weights[0], num_owned),
            (halo_edges, weights[1], num_halo),
        ):
            adj = CSRAdjacency.from_edge_index(edges, num_owned, num_cols)
            matrices.append(SparseMatrix(adj, adj.entry_values(weight)))
        return tuple(matrices)

    def weighted_gcn_edges(
        self, edge_weight: Tensor, add_self_loops: bool, improved: bool, normalize: bool
    ) -> tuple[Tensor, Tensor]:
        """PyG's ``gcn_norm`` with ``edge_weight`` on the partition's edges, from global
        weighted degrees: a rank sums its owned vertices' in-edges itself; the halo vertices'
        degrees come from their owners in one width-1 exchange (:attr:`setup_counter`)."""
        check_edge_weight(edge_weight, self.partition.edge_index.size(1))
        return self.partition.gcn_edge_weight(
            add_self_loops, improved, normalize, edge_weight.detach(), self._halo_degree
        )

    def _halo_degree(self, degree: Tensor) -> Tensor:
        """``[num_owned]`` owned weighted degrees → ``[num_halo]`` the halo vertices' (exact,
        ``fp32``, whatever the layers' exchange mode and codec)."""
        if "setup-exchange" not in self._cache:
            self._cache["setup-exchange"] = P2PExchange(
                self.partition, counter=self.setup_counter, group=self.exchange.group
            )
        with torch.no_grad():
            halo = self._cache["setup-exchange"](degree.unsqueeze(1), "gcn weighted degree")
        return halo.squeeze(1)

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

    def layer_output(self, module, x: Tensor, edge_weight: Tensor | None = None) -> Tensor | None:
        """A context that computes whole layers itself (``rdm``) returns ``module``'s output
        for input ``x`` (and the layer's ``edge_weight``, if any) here; ``None`` (this context)
        lets the layer run with the halo rows of :attr:`exchange`."""
        return None

    def prepare(self, model) -> None:
        """Called once with the model (after :func:`~lightning_gnn_dist.nn.distribute`) before
        the first step, on every rank; contexts that must know the model's layers in advance
        (``rdm``) bind them here. Nothing to do for a halo exchange."""
        return None


def weight_identity(edge_weight: Tensor) -> tuple:
    """What identifies an edge-weight tensor's values for caching: storage, size, version."""
    return (edge_weight.data_ptr(), edge_weight.numel(), tensor_version(edge_weight))


def check_edge_weight(edge_weight: Tensor, num_edges: int, layer: str = "GCNConv") -> None:
    """Refuse an ``edge_weight`` a distributed ``layer`` builds a fixed weighted matrix from
    (``GCNConv``; ``GraphConv`` under ``rdm``): not ``[num_edges]`` floating point in the
    partition's edge order, or one that needs a gradient."""
    if (
        not isinstance(edge_weight, Tensor)
        or edge_weight.dim() != 1
        or edge_weight.numel() != num_edges
        or not edge_weight.is_floating_point()
    ):
        got = tuple(edge_weight.shape) if isinstance(edge_weight, Tensor) else type(edge_weight)
        raise ValueError(
            f"{layer}: edge_weight must be a float tensor of shape [{num_edges}] (one weight "
            f"per local edge, in edge_index order, as the batch's edge attributes are), got {got}"
        )
    if edge_weight.requires_grad:
        raise NotImplementedError(
            f"{layer}: an edge_weight that requires grad (learned edge weights) is not supported "
            "in distributed mode here: its weighted matrix (GCN: with global degrees) is built "
            "once; pass edge_weight.detach(), or learn weights with a layer that takes them in "
            "its messages (GraphConv, GINEConv) under exchange='p2p'"
        )


CONTEXTS: dict[str, type[GraphContext]] = {"vertex": GraphContext}
"""Graph context class per partition kind (``partition.kind``, ``"vertex"`` if absent), or per
exchange for modes with a context of their own (``exchange.graph_context``, e.g. ``"rdm"``)."""


def make_graph_context(partition, exchange: HaloExchange) -> GraphContext:
    """The graph context of ``exchange`` if it names one (``rdm``), else of ``partition``'s
    kind (vertex partition or vertex cut; a typed graph's part: ``"typed"``, one context per
    relation, :mod:`~lightning_gnn_dist.nn.hetero`)."""
    kind = getattr(exchange, "graph_context", None) or getattr(partition, "kind", "vertex")
    if kind == "vertex" and getattr(partition, "node_type_offsets", None) is not None:
        kind = "typed"
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

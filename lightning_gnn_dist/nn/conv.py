"""Distributed GCN, GraphSAGE, GraphConv and GAT convolutions.

Each is a subclass of the PyG layer with the same parameters and state dict. Outside a graph
context it *is* the PyG layer; inside one (see :mod:`lightning_gnn_dist.nn.context`) ``x`` holds
the owned rows ``[num_owned, d]``, ``edge_index`` the local graph (sources ``[owned | halo]``),
and the layer fetches the halo rows through the context's exchange. The output has the owned
rows only. A bipartite input ``(x_src, x_dst)`` holds the owned rows of the sources and of the
targets (a typed graph's relation, :mod:`~lightning_gnn_dist.nn.hetero`): the halo rows complete
``x_src`` and the output has ``x_dst``'s rows. A context that computes whole layers
(``exchange="rdm"``) answers :meth:`~lightning_gnn_dist.nn.context.GraphContext.layer_output`
instead. A complete context (a sampled neighbour batch,
:attr:`~lightning_gnn_dist.nn.context.GraphContext.complete`) has no halo: the layers are their
PyG base classes there (``GCNConv`` with the batch's global degrees), so a model trimmed per hop
may pass bipartite ``(x_src, x_dst)`` inputs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import GATConv, GCNConv, GraphConv, SAGEConv
from torch_geometric.utils import is_sparse

from lightning_gnn_dist.data.csr import CSRAdjacency, tensor_cache
from lightning_gnn_dist.data.graph import gcn_norm_weights
from lightning_gnn_dist.nn.context import GraphContext, current_graph_context
from lightning_gnn_dist.nn.functional import gat_fusable, gat_rows, sage_transform_first_cheaper
from lightning_gnn_dist.nn.fused import sparse_matrix
from lightning_gnn_dist.nn.spmm import SparseMatrix, spmm


class _Distributed:
    """Mixin: the layer's name in exchange counters and its exchanged width."""

    layer_name: str = ""

    def _name(self) -> str:
        return self.layer_name or f"{type(self).__name__}@{id(self):x}"

    def _halo_context(self, x) -> GraphContext | None:
        """The active graph context if this layer reads halo rows through it; ``None`` outside
        one and inside a complete one (a sampled neighbour batch: every row is local, the layer
        is its PyG base class and may take the bipartite inputs of a model trimmed per hop).

        A bipartite ``(x_src, x_dst)`` pair holds owned source and target rows (a typed
        graph's relation): the halo rows complete ``x_src``.

        Raises:
            NotImplementedError: ``x`` is neither a tensor nor a pair whose sources are one.
        """
        ctx = current_graph_context()
        if ctx is None or ctx.complete:
            return None
        if not isinstance(_sources(x), Tensor):
            raise NotImplementedError(
                f"{type(self).__name__} ({self._name()}): distributed mode takes one feature "
                "tensor or a bipartite (x_src, x_dst) pair of owned rows; got no source rows"
            )
        return ctx

    @property
    def exchange_width(self) -> int:
        """Columns of the rows this layer exchanges per halo row."""
        return self.in_channels if isinstance(self.in_channels, int) else self.in_channels[0]


def _sources(x):
    """The source rows of a layer input: ``x``, or ``x[0]`` of a bipartite pair."""
    return x[0] if isinstance(x, (tuple, list)) else x


def _with_halo(ctx: GraphContext, x, name: str) -> tuple[Tensor, Tensor | None]:
    """``(x_all, x_dst)``: the sources' ``[owned | halo]`` rows and the targets' owned rows
    (``None`` for one feature tensor, whose targets are ``x_all``'s first rows)."""
    x_src, x_dst = x if isinstance(x, (tuple, list)) else (x, None)
    return torch.cat([x_src, ctx.exchange(x_src, name)]), x_dst


class DistGCNConv(_Distributed, GCNConv):
    """:class:`torch_geometric.nn.GCNConv` with the point-to-point halo exchange of paper 000.

    Normalisation uses **global** degrees (carried by the partition), never local ones, with PyG
    2.8's semantics (parallel edges count, ``improved`` has no effect without edge weights).
    With ``edge_weight`` (``[E_local]``, the batch's edge attribute in ``edge_index`` order) the
    degrees are global weighted in-degree sums (the halo vertices' from their owners, once per
    weight tensor; see :meth:`~lightning_gnn_dist.nn.context.GraphContext.gcn_matrices`). The
    exchange moves ``min(in_channels, out_channels)`` columns: when the layer narrows, ``X·W`` is
    computed first and exchanged instead of ``X`` (the product is the same, the bytes fewer).
    The local product is computed while the halo rows are in flight (Alg. 1).
    """

    @property
    def exchange_width(self) -> int:
        return min(self.in_channels, self.out_channels)

    def forward(self, x: Tensor, edge_index, edge_weight: Tensor | None = None) -> Tensor:
        ctx = current_graph_context()
        if ctx is None:
            return self._local_forward(x, edge_index, edge_weight)
        out = ctx.layer_output(self, x, edge_weight)
        if out is not None:
            return out
        owned, halo_matrix = ctx.gcn_matrices(
            self.add_self_loops, self.improved, self.normalize, edge_index, x.size(0), edge_weight
        )
        transform_first = self.out_channels <= self.in_channels
        h = self.lin(x) if transform_first else x
        pending = ctx.exchange.start(h, self._name())
        out = spmm(owned, h)
        halo = pending.wait()
        # Always through the halo product, even with no halo rows: its backward is what
        # returns this rank's gradient rows to their owners. spmm's result is ours: add in place.
        out = out.add_(spmm(halo_matrix, halo))
        return self._finish(ctx.synchronise(out, self._name()), transform_first)

    def _finish(self, out: Tensor, transformed: bool) -> Tensor:
        if not transformed:
            out = self.lin(out)
        # ``out`` is this layer's own tensor (a product's result): add the bias in place.
        return out if self.bias is None else out.add_(self.bias)

    def _local_forward(self, x: Tensor, edge_index, edge_weight: Tensor | None) -> Tensor:
        """No graph context: PyG's ``GCNConv`` on ``edge_index``, with ``gcn_norm`` and its CSR
        matrix computed once per ``edge_index`` tensor (PyG recomputes them every call unless
        ``cached=True``) and the narrower of ``X·W`` and ``X`` multiplied by ``Â``."""
        if (
            edge_weight is not None
            or not isinstance(x, Tensor)
            or not isinstance(edge_index, Tensor)
            or is_sparse(edge_index)
            or (self.cached and self._cached_edge_index is not None)
        ):
            return super().forward(x, edge_index, edge_weight)
        matrix = _gcn_matrix(edge_index, x.size(0), self.add_self_loops, self.normalize)
        transform_first = self.out_channels <= self.in_channels
        out = spmm(matrix, self.lin(x) if transform_first else x)
        return self._finish(out, transform_first)


def _gcn_matrix(edge_index: Tensor, num_nodes: int, add_self_loops: bool, normalize: bool):
    """PyG 2.8 ``gcn_norm`` of an unweighted ``edge_index`` as a CSR :class:`SparseMatrix`,
    cached on the tensor (see :func:`~lightning_gnn_dist.data.csr.adjacency_of`)."""
    cache = tensor_cache(edge_index)
    key = ("gcn", num_nodes, add_self_loops, normalize)
    if key not in cache:
        src, dst = edge_index
        loop = src == dst
        in_degree = torch.bincount(dst[~loop], minlength=num_nodes)
        num_loops = torch.bincount(dst[loop], minlength=num_nodes)
        vertices = torch.arange(num_nodes, device=edge_index.device)
        edges, weight = gcn_norm_weights(
            edge_index, in_degree, num_loops, vertices, add_self_loops, normalize
        )
        normalised = CSRAdjacency.from_edge_index(edges, num_nodes, num_nodes)
        cache[key] = SparseMatrix(normalised, normalised.entry_values(weight.to(edges.device)))
    return cache[key]


class DistSAGEConv(_Distributed, SAGEConv):
    """:class:`torch_geometric.nn.SAGEConv` on the local graph; neighbours' rows come from the
    halo exchange (mean/max/sum over in-neighbours is exact: a rank holds every in-edge of its
    vertices).

    With ``mean``/``sum`` aggregation, no ``project`` and ``out_channels < in_channels``, a layer
    whose input needs a gradient multiplies by ``lin_l``'s weight *before* aggregating (as DGL
    does): the product, the halo rows exchanged and the backward product are ``out_channels``
    wide instead of ``in_channels`` (``lin_l(mean(x)) = mean(x·Wᵀ) + b``, empty neighbourhoods
    included). A first layer (input without gradient) aggregates first: it then needs no
    backward product and no backward exchange at all. Without a halo (one process, a sampled
    batch) the layer takes the order with fewer multiply-adds on its graph
    (:func:`~lightning_gnn_dist.nn.functional.sage_transform_first_cheaper`): on a sampled hop,
    whose sources outnumber its targets, that is usually PyG's.
    """

    def _transforms_first(self, x: Tensor, sizes: tuple[int, int, int] | None = None) -> bool:
        """Whether to multiply by ``lin_l``'s weight before aggregating. With a halo
        (``sizes=None``): when the layer narrows and ``x`` needs a gradient (narrower exchanged
        rows). Without one, ``sizes`` is the layer graph's ``(num_src, num_dst, num_edges)``:
        when that order costs fewer multiply-adds."""
        if not (
            self.aggr in ("mean", "sum", "add")
            and not self.project
            and isinstance(self.in_channels, int)
        ):
            return False
        if sizes is None:
            return x.requires_grad and self.out_channels < self.in_channels
        return sage_transform_first_cheaper(
            self.in_channels, self.out_channels, *sizes, input_grad=x.requires_grad
        )

    def forward(self, x: Tensor, edge_index, size=None) -> Tensor:
        ctx = self._halo_context(x)
        if ctx is not None:
            out = ctx.layer_output(self, x)  # a context that runs whole layers (rdm)
            if out is not None:
                return out
        x_src = x[0] if isinstance(x, (tuple, list)) else x
        if (
            isinstance(x_src, Tensor)
            and isinstance(edge_index, Tensor)
            and not is_sparse(edge_index)
            and self._transforms_first(x_src, None if ctx else _layer_sizes(x, edge_index, size))
        ):
            return self._transform_first(ctx, x, edge_index, size)
        if ctx is None:
            return super().forward(x, edge_index, size)
        x_all, x_dst = _with_halo(ctx, x, self._name())
        x_dst = x if x_dst is None else x_dst
        return super().forward((x_all, x_dst), edge_index, (x_all.size(0), x_dst.size(0)))

    def _transform_first(self, ctx, x, edge_index: Tensor, size) -> Tensor:
        x_src, x_dst = x if isinstance(x, (tuple, list)) else (x, x)
        h = F.linear(x_src, self.lin_l.weight)
        if ctx is not None:  # one feature tensor (_halo_context): its halo rows follow it
            h = torch.cat([h, ctx.exchange(h, self._name())])
        num_src = h.size(0) if size is None or size[0] is None else size[0]
        num_dst = x_dst.size(0) if size is None or size[1] is None else size[1]
        matrix = sparse_matrix(edge_index, num_dst, num_src, None, self.aggr)
        out = spmm(matrix, h)
        if ctx is not None:
            replaced = ctx.after_aggregate(
                self, {"index": matrix.adj.row, "dim_size": num_dst}, out
            )
            out = out if replaced is None else replaced
        if self.lin_l.bias is not None:
            out = out + self.lin_l.bias
        if self.root_weight and x_dst is not None:
            out = out + self.lin_r(x_dst)
        return F.normalize(out, p=2.0, dim=-1) if self.normalize else out


def _layer_sizes(x, edge_index: Tensor, size) -> tuple[int, int, int]:
    """``(num_src, num_dst, num_edges)`` of a layer called without a halo."""
    x_src, x_dst = x if isinstance(x, (tuple, list)) else (x, None)
    num_src = x_src.size(0) if size is None or size[0] is None else size[0]
    num_dst = num_src if x_dst is None else x_dst.size(0)
    num_dst = num_dst if size is None or size[1] is None else size[1]
    return num_src, num_dst, edge_index.size(1)


class DistGraphConv(_Distributed, GraphConv):
    """:class:`torch_geometric.nn.GraphConv` on the local graph; neighbours' rows come from the
    halo exchange (the sum or mean over in-neighbours is exact: a rank holds every in-edge of its
    vertices)."""

    def forward(self, x: Tensor, edge_index, edge_weight: Tensor | None = None, size=None):
        ctx = self._halo_context(x)
        if ctx is None:
            return super().forward(x, edge_index, edge_weight, size)
        out = ctx.layer_output(self, x, edge_weight)
        if out is not None:
            return out
        x_all, x_dst = _with_halo(ctx, x, self._name())
        x_dst = x if x_dst is None else x_dst
        sizes = (x_all.size(0), x_dst.size(0))
        return super().forward((x_all, x_dst), edge_index, edge_weight, sizes)


class DistGATConv(_Distributed, GATConv):
    """:class:`torch_geometric.nn.GATConv` on the local graph (halo rows from the exchange;
    attention softmax is over each owned vertex's full in-neighbourhood, hence exact).

    On a whole part, a layer :func:`~lightning_gnn_dist.nn.functional.gat_fusable` accepts
    (one input width, no edge features, no residual) computes the owned rows over the CSR of
    the part's edges (:func:`~lightning_gnn_dist.nn.functional.gat_rows`): ``[E, heads]``
    attention weights instead of PyG's ``[E, heads, C]`` messages, and only the owned rows'
    self loops. Attention dropout then draws other random numbers than PyG's (the same
    distribution); every rank draws its own anyway.
    """

    def forward(
        self,
        x: Tensor,
        edge_index,
        edge_attr: Tensor | None = None,
        size=None,
        return_attention_weights=None,
    ):
        ctx = self._halo_context(x)
        if ctx is None:
            return super().forward(x, edge_index, edge_attr, size, return_attention_weights)
        if return_attention_weights:
            raise NotImplementedError(
                "return_attention_weights is not supported in distributed mode"
            )
        out = ctx.layer_output(self, x)
        if out is not None:
            return out
        x_all, x_dst = _with_halo(ctx, x, self._name())
        if x_dst is None:
            if self._fuses(ctx, edge_index, edge_attr):
                return gat_rows(self, x_all, edge_index, x_all.size(0), x.size(0))
            return super().forward(x_all, edge_index, edge_attr)[: x.size(0)]
        sizes = (x_all.size(0), x_dst.size(0))
        return super().forward((x_all, x_dst), edge_index, edge_attr, sizes)

    def _fuses(self, ctx: GraphContext, edge_index, edge_attr) -> bool:
        # A context that replaces aggregates (a vertex cut) sees them in PyG's propagate only.
        return (
            edge_attr is None
            and isinstance(edge_index, Tensor)
            and not is_sparse(edge_index)
            and type(ctx).after_aggregate is GraphContext.after_aggregate
            and gat_fusable(self)
        )


DISTRIBUTED_LAYERS = {
    GCNConv: DistGCNConv,
    SAGEConv: DistSAGEConv,
    GATConv: DistGATConv,
    GraphConv: DistGraphConv,
}

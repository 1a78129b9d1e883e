"""Distributed GCN, GraphSAGE and GAT convolutions.

Each is a subclass of the PyG layer with the same parameters and state dict. Outside a graph
context it *is* the PyG layer; inside one (see :mod:`lightning_gnn_dist.nn.context`) ``x`` holds
the owned rows ``[num_owned, d]``, ``edge_index`` the local graph (sources ``[owned | halo]``),
and the layer fetches the halo rows through the context's exchange. The output has the owned
rows only.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from lightning_gnn_dist.nn.context import aggregate, current_graph_context


class _Distributed:
    """Mixin: the layer's name in exchange counters and its exchanged width."""

    layer_name: str = ""

    def _name(self) -> str:
        return self.layer_name or f"{type(self).__name__}@{id(self):x}"

    @property
    def exchange_width(self) -> int:
        """Columns of the rows this layer exchanges per halo row."""
        return self.in_channels if isinstance(self.in_channels, int) else self.in_channels[0]


class DistGCNConv(_Distributed, GCNConv):
    """:class:`torch_geometric.nn.GCNConv` with the point-to-point halo exchange of paper 000.

    Normalisation uses **global** degrees (carried by the partition), never local ones, with PyG
    2.8's semantics (parallel edges count, ``improved`` has no effect without edge weights). The
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
            return super().forward(x, edge_index, edge_weight)
        if edge_weight is not None:
            raise NotImplementedError(
                f"GCNConv ({self._name()}): edge_weight is not supported in distributed mode (the "
                "global normalisation comes from the partition's degrees); call it without one"
            )
        owned_edges, halo_edges, (owned_w, halo_w) = ctx.gcn_graph(
            self.add_self_loops, self.improved, self.normalize, edge_index, x.size(0)
        )
        transform_first = self.out_channels <= self.in_channels
        h = self.lin(x) if transform_first else x
        pending = ctx.exchange.start(h, self._name())
        out = aggregate(h, owned_edges, owned_w, h.size(0))
        halo = pending.wait()
        out = aggregate(halo, halo_edges, halo_w, h.size(0), out=out)
        out = ctx.synchronise(out, self._name())
        if not transform_first:
            out = self.lin(out)
        if self.bias is not None:
            out = out + self.bias
        return out


class DistSAGEConv(_Distributed, SAGEConv):
    """:class:`torch_geometric.nn.SAGEConv` on the local graph; neighbours' rows come from the
    halo exchange (mean/max/sum over in-neighbours is exact: a rank holds every in-edge of its
    vertices)."""

    def forward(self, x: Tensor, edge_index, size=None) -> Tensor:
        ctx = current_graph_context()
        if ctx is None or not isinstance(x, Tensor):
            return super().forward(x, edge_index, size)
        halo = ctx.exchange(x, self._name())
        x_all = torch.cat([x, halo])
        return super().forward((x_all, x), edge_index, (x_all.size(0), x.size(0)))


class DistGATConv(_Distributed, GATConv):
    """:class:`torch_geometric.nn.GATConv` on the local graph (halo rows from the exchange;
    attention softmax is over each owned vertex's full in-neighbourhood, hence exact)."""

    def forward(
        self,
        x: Tensor,
        edge_index,
        edge_attr: Tensor | None = None,
        size=None,
        return_attention_weights=None,
    ):
        ctx = current_graph_context()
        if ctx is None or not isinstance(x, Tensor):
            return super().forward(x, edge_index, edge_attr, size, return_attention_weights)
        if return_attention_weights:
            raise NotImplementedError(
                "return_attention_weights is not supported in distributed mode"
            )
        halo = ctx.exchange(x, self._name())
        return super().forward(torch.cat([x, halo]), edge_index, edge_attr)[: x.size(0)]


DISTRIBUTED_LAYERS = {GCNConv: DistGCNConv, SAGEConv: DistSAGEConv, GATConv: DistGATConv}

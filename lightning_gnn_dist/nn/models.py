"""Reference models built from the distributed convolutions (usable single-process too)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_gnn_dist.data.csr import hop_prefix
from lightning_gnn_dist.nn.conv import DistGATConv, DistGCNConv, DistSAGEConv
from lightning_gnn_dist.nn.fused import use_sparse_aggregation


class _Stack(nn.Module):
    """``num_layers`` convolutions of type :attr:`conv` with ReLU and dropout between them.

    On a sampled mini-batch (PyG ``NeighborLoader`` layout: seeds first, vertices and edges
    grouped by hop) pass ``num_sampled_nodes``/``num_sampled_edges`` and each layer runs only on
    the vertices the next one needs (DGL's blocks, PyG's ``trim_to_layer``): layer ``i`` of ``L``
    computes the vertices of hops ``0 .. L−i−1`` from those of hops ``0 .. L−i`` over the edges
    of hops ``1 .. L−i``. The output then has the seeds' rows only, equal to the untrimmed
    model's first ``batch_size`` rows. GCN does not trim (its normalisation reads the sources'
    degrees in the whole batch graph).
    """

    conv: type[nn.Module]
    trims = True

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int = 2,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        dims = _dims(in_channels, hidden_channels, out_channels, num_layers)
        self.convs = nn.ModuleList(self._make_convs(dims, dropout))
        self.dropout = dropout
        for i, conv in enumerate(self.convs):
            conv.layer_name = f"convs.{i}"
        use_sparse_aggregation(self)

    def _make_convs(self, dims: list[int], dropout: float) -> list[nn.Module]:
        return [self.conv(dims[i], dims[i + 1]) for i in range(len(dims) - 1)]

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        num_sampled_nodes: list[int] | None = None,
        num_sampled_edges: list[int] | None = None,
    ) -> Tensor:
        """``x [N, in]``, ``edge_index [2, E]`` → ``[N, out]`` logits, or ``[batch_size, out]``
        when the per-hop counts are given (and the model trims)."""
        trim = self.trims and num_sampled_nodes is not None and num_sampled_edges is not None
        if trim and len(num_sampled_edges) != len(self.convs):
            raise ValueError(
                f"a {len(self.convs)}-layer model needs a batch sampled with {len(self.convs)} "
                f"hops (got num_sampled_edges={num_sampled_edges})"
            )
        for i, conv in enumerate(self.convs):
            if trim:
                hops = len(self.convs) - i
                num_src, num_dst = sum(num_sampled_nodes[: hops + 1]), sum(num_sampled_nodes[:hops])
                edges = hop_prefix(edge_index, sum(num_sampled_edges[:hops]))
                x = conv((x[:num_src], x[:num_dst]), edges, size=(num_src, num_dst))
            else:
                x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = dropout(F.relu(x), p=self.dropout, training=self.training)
        return x


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout as :func:`torch.nn.functional.dropout`, with the keep mask drawn by
    ``torch.rand_like`` (one thread: ~4× faster than the Bernoulli sampler ``F.dropout`` uses
    on CPU; the same distribution, another stream of the same generator)."""
    if not training or p == 0.0:
        return x
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1] (got {p})")
    if p == 1.0:
        return x * 0.0
    keep = torch.rand_like(x).ge_(p).mul_(1.0 / (1.0 - p))  # in place: 0 or 1/(1-p)
    return x * keep


def _dims(in_channels: int, hidden_channels: int, out_channels: int, num_layers: int) -> list[int]:
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1 (got {num_layers})")
    return [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]


class GCN(_Stack):
    """GCN (Kipf & Welling) of :class:`DistGCNConv` layers: ``[N, in] → [N, out]`` logits.

    Args:
        in_channels, hidden_channels, out_channels (int): widths.
        num_layers (int): convolutions. (default: ``2``)
        dropout (float): dropout between layers. (default: ``0.5``)
    """

    conv = DistGCNConv
    trims = False


class GraphSAGE(_Stack):
    """GraphSAGE (mean aggregation) of :class:`DistSAGEConv` layers; arguments as :class:`GCN`."""

    conv = DistSAGEConv


class GAT(_Stack):
    """GAT of :class:`DistGATConv` layers; hidden layers have ``heads`` concatenated heads, the
    output layer one head. Arguments as :class:`GCN` plus ``heads`` (default: ``4``); attention
    dropout equals ``dropout``."""

    conv = DistGATConv

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int = 2,
        dropout: float = 0.5,
        heads: int = 4,
    ) -> None:
        self.heads = heads
        super().__init__(in_channels, hidden_channels, out_channels, num_layers, dropout)

    def _make_convs(self, dims: list[int], dropout: float) -> list[nn.Module]:
        convs, last = [], len(dims) - 2
        for i in range(len(dims) - 1):
            width_in = dims[i] if i == 0 else dims[i] * self.heads
            heads = 1 if i == last else self.heads
            convs.append(
                self.conv(width_in, dims[i + 1], heads=heads, concat=i != last, dropout=dropout)
            )
        return convs


MODELS = {"gcn": GCN, "sage": GraphSAGE, "graphsage": GraphSAGE, "gat": GAT}


def build_model(
    name: str, in_channels: int, hidden_channels: int, out_channels: int, **kwargs
) -> nn.Module:
    """Build a reference model by name (``gcn``, ``sage``/``graphsage``, ``gat``)."""
    try:
        cls = MODELS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose one of: gcn, sage, gat") from None
    return cls(in_channels, hidden_channels, out_channels, **kwargs)

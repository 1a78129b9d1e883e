"""Reference models built from the distributed convolutions (usable single-process too)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GENConv

from lightning_gnn_dist.data.csr import hop_prefix
from lightning_gnn_dist.nn.conv import DistGATConv, DistGCNConv, DistSAGEConv
from lightning_gnn_dist.nn.functional import dropout
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
        if trim:
            _check_complete(self.convs)
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


def _check_complete(convs) -> None:
    """Refuse per-hop trimming where layers exchange halo rows (a full part's edges index
    ``[owned | halo]`` rows, not a sampled batch's hops).

    Raises:
        NotImplementedError: naming the first layer.
    """
    from lightning_gnn_dist.nn.context import current_graph_context

    ctx = current_graph_context()
    if ctx is not None and not ctx.complete:
        name = type(convs[0]).__name__.removeprefix("Dist")
        raise NotImplementedError(
            f"{name} (convs.0): a model trimmed per hop passes bipartite inputs of sampled hops, "
            "which run only on complete batches (loader='neighbor')"
        )


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


DEEPERGCN_NORMS = ("batch", "layer", None)


class DeeperGCN(nn.Module):
    """DeeperGCN (Li et al., 2020) as in PyG's ogbn-proteins example: a linear node encoder and
    edge encoder to ``hidden_channels``, ``num_layers`` :class:`~torch_geometric.nn.GENConv`
    layers (softmax aggregation with a learnt temperature, messages ``relu(x_j + e_ij)``, a
    2-layer MLP with ``norm``), the layers after the first in "res+" blocks (``x + conv(dropout(
    relu(LayerNorm(x))))``), a last LayerNorm, ReLU and dropout, and a linear head:
    ``[N, in] → [N, out]``. Every LayerNorm is over each vertex's features (DeeperGCN's
    ogbn-proteins setting).

    GENConv's softmax is over each vertex's in-edges, all held by the vertex's owner, the
    LayerNorms are per vertex and a ``"batch"`` MLP norm is synchronised over ranks by
    :func:`~lightning_gnn_dist.nn.distribute`: exact under every vertex partition (``p2p``,
    ``broadcast``, neighbour batches). It does not trim sampled batches (the residual reads
    every row of the batch). A batch norm after the node encoder makes the loss (nearly)
    invariant to the encoder's bias: Adam then moves that bias by full steps along gradients
    of rounding size, so two exact runs (one process, several ranks) drift apart in it over
    epochs while their losses agree; ``norm="layer"`` has no such direction.

    Args:
        in_channels, hidden_channels, out_channels (int): widths.
        num_layers (int): GENConv layers. (default: ``3``)
        dropout (float): dropout in the blocks and before the head. (default: ``0.1``)
        edge_channels (int): width of the edge features ``edge_attr [E, edge_channels]``; ``0``:
            no edge encoder, messages ``relu(x_j)``. (default: ``0``)
        norm (str, optional): GENConv's MLP norm: ``"batch"`` (over all vertices; GENConv's
            default, which trains the unnormalised summed edge features of ogbn-proteins
            fastest), ``"layer"`` (per vertex) or ``None``. (default: ``"batch"``)
    """

    trims = False
    edge_inputs: tuple[str, ...] = ("edge_attr",)

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int = 3,
        dropout: float = 0.1,
        edge_channels: int = 0,
        norm: str | None = "batch",
    ) -> None:
        super().__init__()
        if norm not in DEEPERGCN_NORMS:
            raise ValueError(f"DeeperGCN: undefined norm {norm!r}; choose 'batch', 'layer' or None")
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1 (got {num_layers})")
        if not isinstance(edge_channels, int) or edge_channels < 0:
            raise ValueError(f"edge_channels must be an integer >= 0 (got {edge_channels!r})")
        self.dropout, self.edge_channels = dropout, edge_channels
        self.node_encoder = nn.Linear(in_channels, hidden_channels)
        self.edge_encoder = nn.Linear(edge_channels, hidden_channels) if edge_channels else None
        self.convs = nn.ModuleList(
            GENConv(
                hidden_channels, hidden_channels, aggr="softmax", t=1.0, learn_t=True, norm=norm
            )
            for _ in range(num_layers)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(hidden_channels) for _ in range(num_layers))
        self.head = nn.Linear(hidden_channels, out_channels)
        for i, conv in enumerate(self.convs):
            conv.layer_name = f"convs.{i}"

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        num_sampled_nodes: list[int] | None = None,
        num_sampled_edges: list[int] | None = None,
        edge_attr: Tensor | None = None,
    ) -> Tensor:
        """``x [N, in]``, ``edge_index [2, E]``, ``edge_attr [E, edge_channels]`` (ignored
        without an edge encoder) → ``[N, out]``; the per-hop counts are accepted and unused."""
        if self.edge_encoder is not None:
            if edge_attr is None:
                raise ValueError(
                    f"DeeperGCN(edge_channels={self.edge_channels}) needs edge_attr "
                    f"[E, {self.edge_channels}]; build it with edge_channels=0 for a graph "
                    "without edge features"
                )
            edge_attr = self.edge_encoder(edge_attr)
        else:
            edge_attr = None
        x = self.convs[0](self.node_encoder(x), edge_index, edge_attr)
        for conv, norm in zip(self.convs[1:], self.norms[1:], strict=True):
            h = dropout(F.relu(norm(x)), p=self.dropout, training=self.training)
            x = x + conv(h, edge_index, edge_attr)
        x = dropout(F.relu(self.norms[0](x)), p=self.dropout, training=self.training)
        return self.head(x)


MODELS = {
    "gcn": GCN,
    "sage": GraphSAGE,
    "graphsage": GraphSAGE,
    "gat": GAT,
    "deepergcn": DeeperGCN,
}


def build_model(
    name: str, in_channels: int, hidden_channels: int, out_channels: int, **kwargs
) -> nn.Module:
    """Build a reference model by name (``gcn``, ``sage``/``graphsage``, ``gat``,
    ``deepergcn``)."""
    try:
        cls = MODELS[name.lower()]
    except KeyError:
        raise ValueError(
            f"unknown model {name!r}; choose one of: gcn, sage, gat, deepergcn"
        ) from None
    return cls(in_channels, hidden_channels, out_channels, **kwargs)

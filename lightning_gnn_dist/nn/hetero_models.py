"""Reference models of typed graphs: relational GCN and ``to_hetero(GraphSAGE)`` (usable
single-process on a ``HeteroData`` and distributed on a typed part alike).

Both start with a per-type encoder: node types with features ``x`` are projected to the hidden
width by a ``Linear`` of their own; featureless types get learnable rows
(:class:`~lightning_gnn_dist.nn.hetero.ShardedEmbedding`, held by each row's owner in full
batch), as DGL's and GraphStorm's RGCN on ogbn-mag do.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import FastRGCNConv, SAGEConv, to_hetero

from lightning_gnn_dist.data.csr import tensor_cache
from lightning_gnn_dist.data.hetero import homogeneous_view
from lightning_gnn_dist.nn.functional import dropout
from lightning_gnn_dist.nn.hetero import ShardedEmbedding
from lightning_gnn_dist.nn.rgcn import FusedRGCNConv

__all__ = ["HETERO_MODELS", "HeteroRGCN", "HeteroSAGE", "TypeEncoder"]

HETERO_MODELS = ("rgcn", "sage")


class TypeEncoder(nn.Module):
    """Per node type: ``Linear(in_t, hidden)`` of its features, or learnable rows.

    Args:
        in_channels: feature width of each node type with features ``x``.
        hidden_channels: output width of every type.
        embedding_ids: per featureless node type, the dataset ids of the rows held here
            (``arange(N_t)`` single-process and for sampled batches; a rank's owned ids in full
            batch, where the rows are sharded by owner).
        sharded: whether the embeddings hold owned rows only (full batch on a partition: no
            all-reduce of their gradients). (default: ``False``)
        seed: seed of the embeddings' initial rows. (default: ``0``)
    """

    def __init__(
        self,
        in_channels: dict[str, int],
        hidden_channels: int,
        embedding_ids: dict[str, Tensor],
        sharded: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.lins = nn.ModuleDict(
            {t: nn.Linear(d, hidden_channels) for t, d in in_channels.items()}
        )
        self.embeddings = nn.ModuleDict(
            {
                t: ShardedEmbedding(ids, hidden_channels, seed=seed + k)
                for k, (t, ids) in enumerate(embedding_ids.items())
            }
        )
        for embedding in self.embeddings.values():
            embedding.weight._lgd_sharded = sharded

    def forward(self, x_dict: dict[str, Tensor], n_id_dict: dict[str, Tensor] | None = None):
        """``{type: [n_t, hidden]}``: projected features, and the embedding rows of the
        batch's vertices (``n_id_dict[t]``: their dataset ids; ``None``: every row held)."""
        out = {t: lin(x_dict[t]) for t, lin in self.lins.items()}
        for t, embedding in self.embeddings.items():
            rows = embedding()
            if n_id_dict is not None and t in n_id_dict:
                rows = F.embedding(n_id_dict[t], rows)  # its backward: a sorted segment sum
            out[t] = rows
        return out


class HeteroRGCN(nn.Module):
    """Relational GCN (Schlichtkrull et al.) on the typed graph's homogeneous view.

    ``num_layers`` ``RGCNConv`` (:class:`~lightning_gnn_dist.nn.rgcn.FusedRGCNConv`, its CSR
    aggregation; or ``FastRGCNConv``) layers with per-relation weights
    (``num_bases`` bases when given) and mean aggregation per relation, ReLU and dropout between
    them, after the :class:`TypeEncoder`. The output is the target type's rows.

    Args:
        metadata: ``(node_types, edge_types)`` (PyG's ``HeteroData.metadata()``).
        target_type: the node type predicted.
        encoder: the :class:`TypeEncoder` (its width is ``hidden_channels``).
        hidden_channels, out_channels, num_layers, dropout: the stack's shape.
        num_bases: basis decomposition of the relation weights (``None``: one per relation).
        fast: ``FastRGCNConv`` (gathers a weight per edge) instead of ``RGCNConv``.
    """

    def __init__(
        self,
        metadata,
        target_type: str,
        encoder: TypeEncoder,
        hidden_channels: int,
        out_channels: int,
        num_layers: int = 2,
        dropout: float = 0.5,
        num_bases: int | None = None,
        fast: bool = False,
    ) -> None:
        super().__init__()
        self.node_types, self.edge_types = list(metadata[0]), list(metadata[1])
        self.target_type, self.encoder, self.dropout = target_type, encoder, dropout
        conv = FastRGCNConv if fast else FusedRGCNConv
        dims = [hidden_channels] * num_layers + [out_channels]
        self.convs = nn.ModuleList(
            conv(dims[i], dims[i + 1], len(self.edge_types), num_bases=num_bases, aggr="mean")
            for i in range(num_layers)
        )

    def forward(self, x_dict: dict[str, Tensor], batch, n_id_dict=None) -> Tensor:
        """``[n_target, out]`` for the target type's rows of ``batch`` (a ``HeteroData``: a
        whole graph, a typed part's full batch or a sampled typed batch). A batch sampled with
        one hop per layer is trimmed per hop (DGL's blocks): layer ``i`` computes only the
        vertices of hops ``0 .. L−i−1``, so the output is the seeds' rows."""
        h = self.encoder(x_dict, n_id_dict)
        layers = sampled_layers(batch, self.node_types, self.edge_types, len(self.convs))
        if layers is not None:
            x = torch.cat([h[t] for t in self.node_types])
            for i, (conv, (edge_index, edge_type, targets)) in enumerate(
                zip(self.convs, layers, strict=True)
            ):
                x = conv((x, x[targets]), edge_index, edge_type)
                if i < len(self.convs) - 1:
                    x = dropout(F.relu(x), p=self.dropout, training=self.training)
            return x  # the seeds (only the target type has vertices at hop 0)
        counts = [h[t].size(0) if t in h else batch[t].num_nodes for t in self.node_types]
        x = torch.cat([h[t] for t in self.node_types])
        edge_index, edge_type = homogeneous_view(batch, self.node_types, self.edge_types)
        k = self.node_types.index(self.target_type)
        start = sum(counts[:k])
        for conv in self.convs[:-1]:
            x = conv(x, edge_index, edge_type)
            x = dropout(F.relu(x), p=self.dropout, training=self.training)
        # The last layer computes the target type's rows only (bipartite, over the relations
        # into that type), which are all the output keeps: the same rows, less work.
        target_edges, target_types = self._target_edges(edge_index, edge_type, start, counts[k])
        return self.convs[-1]((x, x[start : start + counts[k]]), target_edges, target_types)

    def _target_edges(
        self, edge_index: Tensor, edge_type: Tensor, start: int, count: int
    ) -> tuple[Tensor, Tensor]:
        """The edges of the relations into the target type (targets ``[start, start + count)``
        of the view), targets renumbered from 0: ``([2, E_t], [E_t])``. Cached with the view."""
        cache = tensor_cache(edge_index)
        key = ("target_edges", self.target_type, start, count, tuple(map(tuple, self.edge_types)))
        if key not in cache:
            into = torch.tensor(
                [tuple(e)[2] == self.target_type for e in self.edge_types], device=edge_type.device
            )
            keep = into[edge_type]
            edges = edge_index[:, keep]
            cache[key] = (torch.stack([edges[0], edges[1] - start]), edge_type[keep])
        return cache[key]


def sampled_layers(batch, node_types, edge_types, num_layers: int):
    """Per layer of a sampled typed batch (``num_sampled_nodes`` per type, ``num_sampled_edges``
    per relation, one hop per layer), ``(edge_index, edge_type, targets)`` of its trimmed
    homogeneous view: layer ``i`` reads the vertices of hops ``0 .. L−i`` (concatenated by
    type) and writes those of hops ``0 .. L−i−1``, over the edges of hops ``1 .. L−i``;
    ``targets`` are the written vertices' rows in the read ones. ``None`` for any other batch
    (a whole graph or part, or another number of hops). Cached with the batch's edges."""
    present = [tuple(e) for e in edge_types if tuple(e) in set(batch.edge_types)]
    if not present or not all("num_sampled_nodes" in batch[t] for t in node_types):
        return None
    hops = [len(batch[e].num_sampled_edges) for e in present if "num_sampled_edges" in batch[e]]
    if len(hops) != len(present) or set(hops) != {num_layers}:
        return None
    cache = tensor_cache(batch[present[0]].edge_index)
    key = ("sampled_layers", num_layers, tuple(map(tuple, edge_types)))
    if key in cache:
        return cache[key]
    nodes = {t: list(batch[t].num_sampled_nodes) for t in node_types}
    layers = []
    for i in range(num_layers):
        read = [sum(nodes[t][: num_layers - i + 1]) for t in node_types]
        written = [sum(nodes[t][: num_layers - i]) for t in node_types]
        read_at = dict(zip(node_types, _starts(read), strict=True))
        written_at = dict(zip(node_types, _starts(written), strict=True))
        pieces, types = [], []
        for r, edge_type in enumerate(map(tuple, edge_types)):
            if edge_type not in present:
                continue
            count = sum(batch[edge_type].num_sampled_edges[: num_layers - i])
            index = batch[edge_type].edge_index[:, :count]
            shift = index.new_tensor([[read_at[edge_type[0]]], [written_at[edge_type[2]]]])
            pieces.append(index + shift)
            types.append(torch.full((count,), r, dtype=torch.long, device=index.device))
        targets = torch.cat(
            [torch.arange(n) + read_at[t] for t, n in zip(node_types, written, strict=True)]
        )
        layers.append((torch.cat(pieces, dim=1), torch.cat(types), targets))
    cache[key] = layers
    return layers


def _starts(counts: list[int]) -> list[int]:
    starts, total = [], 0
    for count in counts:
        starts.append(total)
        total += count
    return starts


class _SAGEStack(nn.Module):
    def __init__(self, hidden_channels: int, out_channels: int, num_layers: int, dropout: float):
        super().__init__()
        dims = [hidden_channels] * num_layers + [out_channels]
        self.convs = nn.ModuleList(SAGEConv(dims[i], dims[i + 1]) for i in range(num_layers))
        # A module, not F.dropout: to_hetero's tracing would bake ``training`` in as a constant.
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = self.dropout(x.relu())
        return x


class HeteroSAGE(nn.Module):
    """``to_hetero(GraphSAGE, metadata, aggr="sum")`` after the :class:`TypeEncoder`: one
    ``SAGEConv`` per relation and layer, summed per target type (PyG's heterogeneous
    GraphSAGE). The output is the target type's rows. Arguments as :class:`HeteroRGCN`."""

    def __init__(
        self,
        metadata,
        target_type: str,
        encoder: TypeEncoder,
        hidden_channels: int,
        out_channels: int,
        num_layers: int = 2,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        self.target_type, self.encoder = target_type, encoder
        stack = _SAGEStack(hidden_channels, out_channels, num_layers, dropout)
        self.gnn = to_hetero(stack, (list(metadata[0]), list(metadata[1])), aggr="sum")

    def forward(self, x_dict: dict[str, Tensor], batch, n_id_dict=None) -> Tensor:
        h = self.encoder(x_dict, n_id_dict)
        return self.gnn(h, batch.edge_index_dict)[self.target_type]

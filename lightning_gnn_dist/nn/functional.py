"""Functions that the layers of :mod:`~lightning_gnn_dist.nn.conv` (whole parts) and
:mod:`~lightning_gnn_dist.nn.trim` (sampled hops) share: dropout and PyG's ``GATConv`` over the
CSR of its edges.

:func:`gat_rows` keeps the attention layer's memory at ``[E, heads]`` (the attention weights)
where PyG's ``GATConv`` gathers an ``[E, heads, C]`` message tensor and keeps it for the
backward pass: ~1.1 GB per layer of width 256 on a part with a million edges.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.parameter import UninitializedParameter
from torch_geometric.nn import GATConv
from torch_geometric.utils import softmax

from lightning_gnn_dist.data.csr import CSRAdjacency, tensor_cache

__all__ = ["dropout", "gat_fusable", "gat_rows", "sage_transform_first_cheaper"]


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


def sage_transform_first_cheaper(
    in_channels: int,
    out_channels: int,
    num_src: int,
    num_dst: int,
    num_edges: int,
    input_grad: bool,
) -> bool:
    """Whether a ``SAGEConv`` (mean or sum, a root weight) costs fewer multiply-adds, forward
    and backward, multiplying its ``num_src`` source rows by ``lin_l``'s weight before the
    aggregation (the products ``out_channels`` wide) than aggregating first (PyG's order: the
    product and ``lin_l`` on the ``num_dst`` target rows only).

    On a whole graph (``num_src ≈ num_dst``) a narrowing layer is cheaper transformed first;
    on a sampled hop, whose sources outnumber its targets (four to one on the benchmark's
    second layer), aggregating first is (issue 31). ``input_grad``: the input needs a gradient
    (the backward then multiplies and aggregates once more)."""
    passes = 2 + int(input_grad)  # forward, weight gradient, [input gradient]
    weights = in_channels * out_channels
    aggregate_first = 2 * num_dst * weights * passes + num_edges * in_channels * (passes - 1)
    transform_first = (num_src + num_dst) * weights * passes + 2 * num_edges * out_channels
    return transform_first < aggregate_first


def gat_fusable(conv: GATConv) -> bool:
    """PyG's ``GATConv`` with one input width, no edge features and no residual: its attention
    and weighted sum run on the CSR of the layer's edges (:func:`gat_rows`)."""
    return (
        conv.lin is not None
        and conv.lin_edge is None
        and conv.res is None
        and conv.aggr in ("add", "sum")
        and not isinstance(conv.lin.weight, UninitializedParameter)
    )


def gat_rows(conv: GATConv, x: Tensor, edges: Tensor, num_src: int, num_dst: int) -> Tensor:
    """``GATConv(x, edges)[:num_dst]`` as PyG 2.8 computes it (self loops replaced by one per
    target, leaky ReLU of ``α_src + α_dst``, softmax over each target's entries, attention
    dropout, weighted sum of the sources' rows), over the layer's CSR: the weighted sum is one
    ``embedding_bag`` per head, differentiable in the rows and the weights, instead of a
    gathered ``[E, heads, C]`` message tensor and a scatter (~8× faster, forward and backward)."""
    heads, width = conv.heads, conv.out_channels
    adj = _gat_adjacency(edges, num_src, num_dst, conv.add_self_loops)
    h = conv.lin(x).view(-1, heads, width)
    alpha_src = (h * conv.att_src).sum(-1)
    alpha_dst = (h[:num_dst] * conv.att_dst).sum(-1)
    col, ptr = adj.col.long(), adj.crow.long()
    alpha = alpha_src.index_select(0, col) + alpha_dst.repeat_interleave(
        adj.degree(), dim=0, output_size=adj.num_entries
    )
    alpha = softmax(F.leaky_relu(alpha, conv.negative_slope), ptr=ptr, dim=0)
    alpha = dropout(alpha, conv.dropout, conv.training)
    out = torch.stack(
        [
            F.embedding_bag(
                col,
                h[:, head].contiguous() if heads > 1 else h.view(-1, width),
                ptr,
                mode="sum",
                per_sample_weights=alpha[:, head],
                include_last_offset=True,
            )
            for head in range(heads)
        ],
        1,
    )
    out = out.reshape(num_dst, heads * width) if conv.concat else out.mean(dim=1)
    return out if conv.bias is None else out + conv.bias


def _gat_adjacency(edges: Tensor, num_src: int, num_dst: int, self_loops: bool) -> CSRAdjacency:
    """The CSR (``num_dst × num_src``) of a GAT layer's edges: with ``self_loops``, every self
    loop removed and one added per target row, as ``GATConv`` does; cached with ``edges``."""
    cache = tensor_cache(edges)
    key = ("gat", num_src, num_dst, self_loops)
    if key not in cache:
        src, dst = edges
        if self_loops:
            keep = src != dst
            loops = torch.arange(num_dst, device=edges.device)
            src, dst = torch.cat([src[keep], loops]), torch.cat([dst[keep], loops])
        cache[key] = CSRAdjacency.from_edge_index(torch.stack([src, dst]), num_dst, num_src)
    return cache[key]

"""Per-hop trimming of PyG's models on sampled batches, applied for the user (issue 31).

On a neighbour batch (seeds first, vertices and edges grouped by hop) the seeds' outputs of an
``L``-layer model need layer ``i`` only for the vertices of hops ``0 .. L−i−1``, computed from
those of hops ``0 .. L−i`` over the edges of hops ``1 .. L−i`` (DGL's blocks). A PyG model called
as the neighbour guide shows, ``model(batch.x, batch.edge_index)[:batch.batch_size]``, computes
every layer for every batch vertex; given ``num_sampled_nodes_per_hop`` /
``num_sampled_edges_per_hop`` PyG's ``trim_to_layer`` still computes the first layer for all of
them (and each next layer for one hop more than it needs). On the benchmark's batches (R-MAT,
fan-out ``[25, 10]``) that is ~2.8× the first layer's work.

:func:`trim_per_hop` (``GNNStrategy`` applies it with ``loader="neighbor"``) makes PyG's
:class:`~torch_geometric.nn.models.GraphSAGE`, :class:`~torch_geometric.nn.models.GCN`,
:class:`~torch_geometric.nn.models.GAT` and :class:`~torch_geometric.nn.models.GIN` compute only
what the seeds need when they run on a sampled batch:

* called **untrimmed** (``model(batch.x, batch.edge_index)``), the output holds the seeds' rows
  only (``[batch_size, out]``), each equal to the untrimmed model's row; ``out[:batch_size]``
  code runs unchanged. GCN normalises with the whole batch graph's degrees, as untrimmed;
* called **trimmed** (with the batch's ``num_sampled_nodes_per_hop`` and
  ``num_sampled_edges_per_hop``), the output is PyG's trimmed output, every row.

A sampled layer is one bipartite product: SAGE, GIN and GraphConv layers take
``(x_src, x_dst)``; GCN takes the first rows of its normalised matrix; attention layers (GAT,
GATv2) run on the sources and keep the targets' rows (their self loops are the targets').

The model runs as PyG runs it (no trimming) where a row it computes could change anything else:
norm layers (batch statistics over the rows), jumping knowledge, edge weights or attributes,
``batch`` vectors, a batch with other hops than layers, another ``edge_index`` than the batch's,
subclasses and other models. Dropout draws its masks for the rows computed only, from another
generator (:func:`relu_dropout`): the same distribution as untrimmed, not the same random numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.parameter import UninitializedParameter
from torch_geometric.nn import GATConv, GATv2Conv, GCNConv, GINConv, GraphConv, SAGEConv
from torch_geometric.nn.models import GAT, GCN, GIN, GraphSAGE
from torch_geometric.nn.models.basic_gnn import BasicGNN

from lightning_gnn_dist.data.csr import hop_prefix
from lightning_gnn_dist.data.sampler import use_compiled
from lightning_gnn_dist.nn.context import current_graph_context
from lightning_gnn_dist.nn.conv import DistGATConv
from lightning_gnn_dist.nn.functional import (
    dropout,
    gat_fusable,
    gat_rows,
    sage_transform_first_cheaper,
)
from lightning_gnn_dist.nn.fused import sparse_matrix
from lightning_gnn_dist.nn.spmm import spmm, spmm_with_prefix

_BIPARTITE = (SAGEConv, GINConv, GraphConv)
"""Layers called as ``layer((x_src, x_dst), edges, size=(num_src, num_dst))``."""
_ATTENTION = (GATConv, GATv2Conv)
"""Layers run on the sources whose targets' rows are kept (self loops per target row)."""


@dataclass
class _Plan:
    context: object
    edge_index: Tensor
    num_nodes: list[int]
    num_edges: list[int]
    pyg_trimmed: bool


class _TrimsSampledBatches:
    """Mixin of the trimmed model classes: :func:`trim_per_hop` swaps a model's class for its
    subclass here (same parameters, state dict and ``repr``)."""

    def forward(
        self,
        x,
        edge_index,
        edge_weight=None,
        edge_attr=None,
        batch=None,
        batch_size=None,
        num_sampled_nodes_per_hop=None,
        num_sampled_edges_per_hop=None,
    ):
        plan = _plan(
            self,
            x,
            edge_index,
            (edge_weight, edge_attr, batch),
            num_sampled_nodes_per_hop,
            num_sampled_edges_per_hop,
        )
        if plan is None:
            return super().forward(
                x,
                edge_index,
                edge_weight,
                edge_attr,
                batch,
                batch_size,
                num_sampled_nodes_per_hop,
                num_sampled_edges_per_hop,
            )
        return _trimmed_forward(self, x, plan)


def _trimmed_class(base: type[BasicGNN]) -> type:
    name = f"Trimmed{base.__name__}"  # importable under this name (pickle), shown as the base's
    cls = type(base.__name__, (_TrimsSampledBatches, base), {"__module__": __name__})
    cls.__qualname__ = name
    globals()[name] = cls
    return cls


TRIMMED_MODELS: dict[type[BasicGNN], type] = {
    base: _trimmed_class(base) for base in (GraphSAGE, GCN, GAT, GIN)
}
"""PyG's model classes that run trimmed on sampled batches, and their trimmed subclasses."""


def trim_per_hop(model: nn.Module) -> nn.Module:
    """Make every PyG ``GraphSAGE``, ``GCN``, ``GAT`` and ``GIN`` in ``model`` (exactly those
    classes, not subclasses) compute only what a sampled batch's seeds need (in place,
    idempotent; see the module docstring). Returns ``model``."""
    for module in model.modules():
        trimmed = TRIMMED_MODELS.get(type(module))
        if trimmed is not None:
            module.__class__ = trimmed
    return model


def _plan(model: BasicGNN, x, edge_index, extras: tuple, num_nodes, num_edges) -> _Plan | None:
    """How to trim this call, or ``None`` to run the model as PyG does."""
    context = current_graph_context()
    if context is None or not context.complete:
        return None
    batch = context.partition
    batch_nodes = getattr(batch, "num_sampled_nodes", None)
    batch_edges = getattr(batch, "num_sampled_edges", None)
    if (
        batch_nodes is None
        or batch_edges is None
        or edge_index is not batch.edge_index
        or any(extra is not None for extra in extras)
        or not isinstance(x, Tensor)
        or x.size(0) != batch.num_nodes
        or len(batch_edges) != model.num_layers
        or not _trimmable(model)
    ):
        return None
    pyg_trimmed = num_nodes is not None or num_edges is not None
    if pyg_trimmed and (
        num_nodes is None
        or num_edges is None
        or [int(n) for n in num_nodes] != batch_nodes
        or [int(e) for e in num_edges] != batch_edges
    ):
        return None
    return _Plan(context, edge_index, batch_nodes, batch_edges, pyg_trimmed)


def _trimmable(model: BasicGNN) -> bool:
    """Whether dropping rows the seeds do not need changes nothing else the model computes."""
    if model.jk_mode is not None or hasattr(model, "lin"):
        return False
    if not all(isinstance(norm, nn.Identity) for norm in model.norms):
        return False
    if not isinstance(model.dropout, nn.Dropout):
        return False
    return all(_layer_kind(conv) is not None for conv in model.convs)


def _layer_kind(conv: nn.Module) -> str | None:
    if getattr(conv, "flow", "source_to_target") != "source_to_target" or getattr(
        conv, "explain", False
    ):
        return None
    if isinstance(conv, GCNConv):
        return "gcn" if not conv.cached and conv.aggr in ("add", "sum") else None
    if isinstance(conv, _BIPARTITE):
        return "bipartite"
    if type(conv) in (GATConv, DistGATConv) and gat_fusable(conv):
        return "gat"
    if isinstance(conv, _ATTENTION):
        return "attention"
    return None


def _sage_fusable(conv) -> bool:
    """A ``SAGEConv`` whose layer is one product in either order (:func:`_layer`): mean or sum,
    no projection or normalisation, a root weight without bias (PyG's defaults otherwise)."""
    return (
        isinstance(conv, SAGEConv)
        and conv.aggr in ("mean", "sum", "add")
        and not conv.project
        and not conv.normalize
        and conv.root_weight
        and conv.lin_r.bias is None
        and not isinstance(conv.lin_l.weight, UninitializedParameter)
    )


class _PrefixLinears(torch.autograd.Function):
    """``(x · W_lᵀ, x[:num_rows] · W_rᵀ)`` as one autograd node: the backward adds the second
    product's input gradient into the first rows of the first's, where ``x[:num_rows]`` would
    cost a zero-padded ``[N, d]`` copy for autograd to sum (~1 ms a step on the benchmark's
    batches, a third of the layer's backward)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight_l: Tensor, weight_r: Tensor, num_rows: int):
        ctx.save_for_backward(x, weight_l, weight_r)
        ctx.num_rows = num_rows
        return F.linear(x, weight_l), F.linear(x[:num_rows], weight_r)

    @staticmethod
    def backward(ctx, grad_h: Tensor, grad_root: Tensor):
        x, weight_l, weight_r = ctx.saved_tensors
        rows = ctx.num_rows
        grad_x = grad_l = grad_r = None
        if ctx.needs_input_grad[0]:
            grad_x = grad_h.mm(weight_l)
            grad_x[:rows].addmm_(grad_root, weight_r)
        if ctx.needs_input_grad[1]:
            grad_l = grad_h.t().mm(x)
        if ctx.needs_input_grad[2]:
            grad_r = grad_root.t().mm(x[:rows])
        return grad_x, grad_l, grad_r, None


def _trimmed_forward(model: BasicGNN, x: Tensor, plan: _Plan) -> Tensor:
    """``BasicGNN.forward`` (no norms, no jumping knowledge) with layer ``i`` computed for the
    vertices of hops ``0 .. L−i−1`` only (all of PyG's trimmed rows at the last layer when the
    call was trimmed)."""
    num_layers = model.num_layers
    for i, conv in enumerate(model.convs):
        hops = num_layers - i
        num_src = sum(plan.num_nodes[: hops + 1])
        num_dst = num_src if plan.pyg_trimmed and hops == 1 else sum(plan.num_nodes[:hops])
        edges = hop_prefix(plan.edge_index, sum(plan.num_edges[:hops]))
        x = _layer(conv, x, edges, num_src, num_dst, plan)
        if i < num_layers - 1:  # no norms here: the activation, then dropout
            x = _activation_and_dropout(model, x)
    return x


def _activation_and_dropout(model: BasicGNN, x: Tensor) -> Tensor:
    """``model.dropout(model.act(x))``; PyG's ``ReLU`` and ``Dropout`` as one compiled pass
    (:func:`relu_dropout`), a ``Dropout`` after another activation as
    :func:`~lightning_gnn_dist.nn.functional.dropout` (both: the same distribution as
    ``torch.nn.Dropout``, other random numbers; ``torch``'s CPU Bernoulli sampler takes ~4× as
    long as its uniform one)."""
    act, drop = model.act, model.dropout
    if type(drop) is not nn.Dropout or not drop.training or not 0.0 < drop.p < 1.0:
        return drop(x if act is None else act(x))
    if type(act) is nn.ReLU:
        return relu_dropout(x, drop.p)
    return dropout(x if act is None else act(x), drop.p, training=True)


def relu_dropout(x: Tensor, p: float) -> Tensor:
    """``dropout(relu(x), p)`` (training, ``0 < p < 1``): one compiled pass forward and backward
    where ``numba`` is installed (CPU, float32/float64; see :mod:`lightning_gnn_dist.nn.
    _compiled`), else ``relu`` then :func:`~lightning_gnn_dist.nn.functional.dropout`."""
    if (
        x.device.type != "cpu"
        or x.dtype not in (torch.float32, torch.float64)
        or not use_compiled()
    ):
        return dropout(x.relu(), p, training=True)
    return _ReluDropout.apply(x, p)


class _ReluDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, p: float) -> Tensor:
        kernels = _compiled()
        x = x.contiguous()
        out = torch.empty_like(x)
        seed = int(torch.randint(0, 2**62, (1,)))  # from torch's generator: manual_seed holds
        threshold = np.uint64(math.ceil(p * 2**24))  # keep when a 24-bit draw is >= p·2^24
        scale = np.dtype(str(x.dtype).removeprefix("torch.")).type(1.0 / (1.0 - p))
        kernels.relu_dropout(x.view(-1).numpy(), out.view(-1).numpy(), seed, threshold, scale)
        ctx.save_for_backward(out)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        (out,) = ctx.saved_tensors
        grad = grad.contiguous()
        grad_in = torch.empty_like(grad)
        _compiled().relu_dropout_backward(
            grad.view(-1).numpy(), out.view(-1).numpy(), grad_in.view(-1).numpy(), ctx.scale
        )
        return grad_in, None


def _compiled():
    from lightning_gnn_dist.nn import _compiled as compiled  # imports numba: on first use

    return compiled


def _layer(conv, x: Tensor, edges: Tensor, num_src: int, num_dst: int, plan: _Plan) -> Tensor:
    """``conv``'s output rows ``[:num_dst]`` from the source rows ``x [num_src, d]`` over the
    hop-prefix ``edges``."""
    kind = _layer_kind(conv)
    if kind == "bipartite" and _sage_fusable(conv):
        matrix = sparse_matrix(edges, num_dst, num_src, None, conv.aggr)
        width_in, width_out = conv.lin_l.weight.size(1), conv.lin_l.weight.size(0)
        sizes = (num_src, num_dst, edges.size(1))
        if sage_transform_first_cheaper(width_in, width_out, *sizes, x.requires_grad):
            h, root = _PrefixLinears.apply(x, conv.lin_l.weight, conv.lin_r.weight, num_dst)
            out = spmm(matrix, h)
            return (out if conv.lin_l.bias is None else out + conv.lin_l.bias) + root
        # lin_l(mean(x_src)) + lin_r(x_dst) as one product with both weights side by side.
        weight = torch.cat([conv.lin_l.weight, conv.lin_r.weight], 1)
        return F.linear(spmm_with_prefix(matrix, x), weight, conv.lin_l.bias)
    if kind == "bipartite":
        return conv((x, x[:num_dst]), edges, size=(num_src, num_dst))
    if kind == "gat":
        return gat_rows(conv, x, edges, num_src, num_dst)
    if kind == "attention":
        out = conv(x, edges)
        return out if num_dst == num_src else out[:num_dst]
    # GCN: the untrimmed call normalises with the whole batch graph, PyG's trimmed call with
    # the edges and rows of the layer's hops.
    graph = edges if plan.pyg_trimmed else plan.edge_index
    num_nodes = num_src if plan.pyg_trimmed else plan.context.partition.num_nodes
    matrix = plan.context.gcn_rows(
        conv.add_self_loops, conv.improved, conv.normalize, graph, num_nodes, num_dst, num_src
    )
    transform_first = conv.out_channels <= conv.in_channels
    h = conv.lin(x) if transform_first else x
    out = spmm(matrix, h)
    if not transform_first:
        out = conv.lin(out)
    return out if conv.bias is None else out + conv.bias

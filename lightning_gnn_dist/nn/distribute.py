"""Run an existing PyG model on a partition: :func:`distribute`.

``distribute(model)`` changes ``model`` in place so that, inside a graph context, every
message-passing layer receives ``[owned | halo]`` rows:

* ``GCNConv``, ``SAGEConv`` and ``GATConv`` become :mod:`~lightning_gnn_dist.nn.conv`'s
  distributed subclasses (same parameters and state dict; GCN uses global degrees);
* every other message-passing layer the layer table accepts
  (:data:`~lightning_gnn_dist.nn.layers.LAYER_TABLE`: GINConv, GINEConv, GATv2Conv,
  TransformerConv, NNConv, GENConv, EdgeConv, ...), called as ``layer(x, edge_index, ...)``
  (edge weights and features as PyG takes them: the batch's, in ``edge_index`` order), gets a
  hook that exchanges ``x`` before it runs and keeps the owned rows of its output: exact, since
  its output row ``i`` depends only on row ``i``, its in-neighbours' rows and its in-edges
  (:data:`PAIR_INPUT_LAYERS` are called bipartite instead, so their inner MLP sees owned rows
  only). Every layer the table does not
  accept for the mode (layers that propagate several hops in one call, normalise with source
  degrees computed from the local edges, or were never audited) is refused with a ``ValueError``
  naming the layer, its option and the reason.
* ``BatchNorm1d``, ``SyncBatchNorm`` and PyG ``BatchNorm`` become
  :class:`~lightning_gnn_dist.nn.norm.DistBatchNorm` (statistics over all ranks' rows, exact);
  graph-level norms (``GraphNorm``, ``PairNorm``, ``LayerNorm(mode="graph")``, ...) are refused
  with a ``ValueError`` (see :mod:`lightning_gnn_dist.nn.norm`).

Supported layers aggregate with a CSR sparse-matrix product instead of PyG's gather/scatter
(:func:`~lightning_gnn_dist.nn.fused.use_sparse_aggregation`).

Every message-passing layer also gets a post-aggregation hook through which the graph context
may replace the aggregates (a vertex cut synchronises split vertices there; a vertex partition
leaves them as they are).

Outside a graph context the model behaves exactly as before, so the same module trains
single-process and distributed. Inside a complete one (a sampled neighbour batch,
:attr:`~lightning_gnn_dist.nn.context.GraphContext.complete`) nothing is exchanged either: the
layers take what PyG takes, bipartite inputs of a model trimmed per hop included.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch_geometric.nn import CGConv, GENConv, GINConv, GINEConv
from torch_geometric.nn.conv import MessagePassing

from lightning_gnn_dist.nn.context import current_graph_context
from lightning_gnn_dist.nn.conv import DISTRIBUTED_LAYERS, _Distributed
from lightning_gnn_dist.nn.fused import use_sparse_aggregation
from lightning_gnn_dist.nn.layers import check_layers
from lightning_gnn_dist.nn.norm import check_norm_is_exact, make_norm_distributed

PAIR_INPUT_LAYERS = (GINConv, GINEConv, GENConv, CGConv)
"""Layers that apply a module to their aggregates which may mix rows (an MLP with a batch norm):
the hook calls them bipartite, ``layer((x_all, x_owned), edge_index, ...)``, so the module sees
the owned rows only (a batch norm's statistics would otherwise include the halo rows)."""

_HOOKED = "_lgd_hooks"
_SYNC_HOOKED = "_lgd_aggregate_hook"


def distribute(model: nn.Module, kinds: Iterable[str] = ("vertex",)) -> nn.Module:
    """Make every message-passing layer of ``model`` exchange halo rows (in place, idempotent).

    Args:
        model: the user's model.
        kinds: the kinds of modes it will run in (``"vertex"``, ``"vertex-cut"``,
            ``"neighbor"``, see :mod:`~lightning_gnn_dist.nn.layers`); every layer must be
            accepted by each. (default: ``("vertex",)``)

    Returns:
        ``model`` itself. Each distributed layer gets ``layer_name`` = its qualified name, used as
        the layer key in communication counters.

    Raises:
        ValueError: the model holds a layer or norm that a kind does not accept (the message
            names it, its option and the reason; see :data:`~lightning_gnn_dist.nn.layers.
            LAYER_TABLE`).
    """
    for name, module in model.named_modules():
        check_norm_is_exact(module, name)
    check_layers(model, kinds)
    for name, module in model.named_modules():
        if make_norm_distributed(module) or not isinstance(module, MessagePassing):
            continue
        swap = DISTRIBUTED_LAYERS.get(type(module))
        if swap is not None:
            module.__class__ = swap
        if not hasattr(module, _SYNC_HOOKED):
            setattr(
                module,
                _SYNC_HOOKED,
                (
                    module.register_message_forward_hook(_after_message),
                    module.register_aggregate_forward_hook(_after_aggregate),
                ),
            )
        if isinstance(module, _Distributed):
            module.layer_name = name
        elif not hasattr(module, _HOOKED):
            module.layer_name = name
            setattr(
                module,
                _HOOKED,
                (
                    module.register_forward_pre_hook(_exchange_input, with_kwargs=True),
                    module.register_forward_hook(_keep_owned_rows),
                ),
            )
    return use_sparse_aggregation(model)


def _after_message(module: nn.Module, inputs: tuple, output):
    ctx = current_graph_context()
    if ctx is not None:
        ctx.after_message(module, output)


def _after_aggregate(module: nn.Module, inputs: tuple, output):
    ctx = current_graph_context()
    return None if ctx is None else ctx.after_aggregate(module, inputs[0], output)


def _exchange_input(module: nn.Module, args: tuple, kwargs: dict):
    ctx = current_graph_context()
    if ctx is None or ctx.complete:  # a complete (sampled) batch: every row is here already
        return None
    x = args[0] if args else kwargs.get("x")
    if isinstance(x, (tuple, list)) and len(x) == 2 and isinstance(x[0], torch.Tensor):
        # Owned source and target rows (a typed graph's relation): the halo completes the
        # sources; the output has the targets' rows.
        x_all = (torch.cat([x[0], ctx.exchange(x[0], module.layer_name)]), x[1])
        if args:
            return (x_all, *args[1:]), kwargs
        return args, {**kwargs, "x": x_all}
    if not isinstance(x, torch.Tensor):
        raise NotImplementedError(
            f"{type(module).__name__} ({module.layer_name}): distributed mode needs a feature "
            "tensor, or a bipartite (x_src, x_dst) pair of owned rows, as first argument"
        )
    x_all = torch.cat([x, ctx.exchange(x, module.layer_name)])
    if isinstance(module, PAIR_INPUT_LAYERS):
        x_all = (x_all, x)  # targets are the owned rows: the output has them only
    else:
        module._lgd_num_owned = x.size(0)
    if args:
        return (x_all, *args[1:]), kwargs
    return args, {**kwargs, "x": x_all}


def _keep_owned_rows(module: nn.Module, args: tuple, output):
    num_owned = getattr(module, "_lgd_num_owned", None)
    if num_owned is None:
        return None
    module._lgd_num_owned = None
    if isinstance(output, tuple):
        return (output[0][:num_owned], *output[1:])
    return output[:num_owned]

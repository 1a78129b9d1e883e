"""Run an existing PyG model on a partition: :func:`distribute`.

``distribute(model)`` changes ``model`` in place so that, inside a graph context, every
message-passing layer receives ``[owned | halo]`` rows:

* ``GCNConv``, ``SAGEConv`` and ``GATConv`` become :mod:`~lightning_gnn_dist.nn.conv`'s
  distributed subclasses (same parameters and state dict; GCN uses global degrees);
* any other :class:`~torch_geometric.nn.conv.MessagePassing` layer called as
  ``layer(x, edge_index, ...)`` gets a hook that exchanges ``x`` before it runs and keeps the owned
  rows of its output. This is exact for layers whose output row ``i`` depends only on row ``i``
  and its in-neighbours' rows (GraphConv, GINConv, GATv2Conv, TransformerConv, EdgeConv, ...).
  Layers that propagate several hops in one call or normalise with source degrees computed inside
  the layer from ``edge_index`` (:data:`NOT_EXACT_LAYERS`: ``ChebConv``, ``SGConv``, ``APPNP``,
  ...) would see one hop of halo and local degrees: ``distribute`` refuses them with a
  ``ValueError`` naming the layer and the option.
* ``BatchNorm1d``, ``SyncBatchNorm`` and PyG ``BatchNorm`` become
  :class:`~lightning_gnn_dist.nn.norm.DistBatchNorm` (statistics over all ranks' rows, exact);
  graph-level norms (``GraphNorm``, ``PairNorm``, ``LayerNorm(mode="graph")``, ...) are refused
  with a ``ValueError`` (see :mod:`lightning_gnn_dist.nn.norm`).

Every message-passing layer also gets a post-aggregation hook through which the graph context
may replace the aggregates (a vertex cut synchronises split vertices there; a vertex partition
leaves them as they are).

Outside a graph context the model behaves exactly as before, so the same module trains
single-process and distributed.
"""

from __future__ import annotations

import torch
import torch_geometric.nn as pyg_nn
from torch import nn
from torch_geometric.nn.conv import MessagePassing

from lightning_gnn_dist.nn.context import current_graph_context
from lightning_gnn_dist.nn.conv import DISTRIBUTED_LAYERS, _Distributed
from lightning_gnn_dist.nn.norm import check_norm_is_exact, make_norm_distributed

_HOOKED = "_lgd_hooks"
_SYNC_HOOKED = "_lgd_aggregate_hook"

_MULTI_HOP = "propagates several hops in one call (a rank holds one hop of halo)"
_LOCAL_DEGREES = "normalises with degrees of source vertices computed from the local edges"
NOT_EXACT_LAYERS: dict[type[nn.Module], tuple[str, str]] = {
    pyg_nn.ChebConv: ("normalization", _MULTI_HOP + " and " + _LOCAL_DEGREES),
    pyg_nn.SGConv: ("K", _MULTI_HOP + " and " + _LOCAL_DEGREES),
    pyg_nn.SSGConv: ("K", _MULTI_HOP + " and " + _LOCAL_DEGREES),
    pyg_nn.APPNP: ("K", _MULTI_HOP),
    pyg_nn.TAGConv: ("K", _MULTI_HOP),
    pyg_nn.MixHopConv: ("powers", _MULTI_HOP),
    pyg_nn.ARMAConv: ("num_layers", _MULTI_HOP),
    pyg_nn.GatedGraphConv: ("num_layers", _MULTI_HOP),
    pyg_nn.GCN2Conv: ("normalize", _LOCAL_DEGREES),
    pyg_nn.LGConv: ("normalize", _LOCAL_DEGREES),
    pyg_nn.FAConv: ("normalize", _LOCAL_DEGREES),
    pyg_nn.PDNConv: ("normalize", _LOCAL_DEGREES),
    pyg_nn.GPSConv: ("attn_type", "attends over all vertices of the graph"),
}
"""Layers that cannot be exact on a partition: ``type → (option, reason)``. A layer whose
option is ``normalize`` is refused only when it is ``True``."""


def check_layer_is_exact(module: nn.Module, name: str) -> None:
    """Raise ``ValueError`` naming ``module``, its option and the reason if it is in
    :data:`NOT_EXACT_LAYERS`."""
    entry = NOT_EXACT_LAYERS.get(type(module))
    if entry is None:
        return
    option, reason = entry
    value = getattr(module, option, None)
    if option == "normalize" and not value:
        return
    raise ValueError(
        f"{type(module).__name__} ({name or 'model'}, {option}={value!r}) {reason}, so it cannot "
        "be exact on a partition. Use a one-hop layer (GCNConv, SAGEConv, GATConv, GraphConv, "
        "GINConv, ...) per hop instead, or train it single-process."
    )


def distribute(model: nn.Module) -> nn.Module:
    """Make every message-passing layer of ``model`` exchange halo rows (in place, idempotent).

    Returns:
        ``model`` itself. Each distributed layer gets ``layer_name`` = its qualified name, used as
        the layer key in communication counters.

    Raises:
        ValueError: the model holds a layer or graph-level norm that cannot be exact on a partition.
    """
    for name, module in model.named_modules():
        check_norm_is_exact(module, name)
        check_layer_is_exact(module, name)
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
    return model


def _after_message(module: nn.Module, inputs: tuple, output):
    ctx = current_graph_context()
    if ctx is not None:
        ctx.after_message(module, output)


def _after_aggregate(module: nn.Module, inputs: tuple, output):
    ctx = current_graph_context()
    return None if ctx is None else ctx.after_aggregate(module, inputs[0], output)


def _exchange_input(module: nn.Module, args: tuple, kwargs: dict):
    ctx = current_graph_context()
    if ctx is None:
        return None
    x = args[0] if args else kwargs.get("x")
    if not isinstance(x, torch.Tensor):
        raise NotImplementedError(
            f"{type(module).__name__} ({module.layer_name}): distributed mode needs a single feature "
            "tensor as first argument; bipartite (x_src, x_dst) inputs are not supported"
        )
    module._lgd_num_owned = x.size(0)
    x_all = torch.cat([x, ctx.exchange(x, module.layer_name)])
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

"""Run an existing PyG model on a partition: :func:`distribute`.

``distribute(model)`` changes ``model`` in place so that, inside a graph context, every
message-passing layer receives ``[owned | halo]`` rows:

* ``GCNConv``, ``SAGEConv`` and ``GATConv`` become :mod:`~lightning_gnn_dist.nn.conv`'s
  distributed subclasses (same parameters and state dict; GCN uses global degrees);
* any other :class:`~torch_geometric.nn.conv.MessagePassing` layer called as
  ``layer(x, edge_index, ...)`` gets a hook that exchanges ``x`` before it runs and keeps the owned
  rows of its output. This is exact for layers whose output row ``i`` depends only on row ``i``
  and its in-neighbours' rows (GraphConv, GINConv, GATv2Conv, TransformerConv, EdgeConv, ...). It is
  **not** exact for layers that normalise with degrees computed inside the layer from
  ``edge_index`` over source vertices (e.g. ``ChebConv``, ``SGConv``, ``APPNP`` with
  normalisation): those see local degrees for halo vertices.

Every message-passing layer also gets a post-aggregation hook through which the graph context
may replace the aggregates (a vertex cut synchronises split vertices there; a vertex partition
leaves them as they are).

Outside a graph context the model behaves exactly as before, so the same module trains
single-process and distributed.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn.conv import MessagePassing

from lightning_gnn_dist.nn.context import current_graph_context
from lightning_gnn_dist.nn.conv import DISTRIBUTED_LAYERS, _Distributed

_HOOKED = "_lgd_hooks"
_SYNC_HOOKED = "_lgd_aggregate_hook"


def distribute(model: nn.Module) -> nn.Module:
    """Make every message-passing layer of ``model`` exchange halo rows (in place, idempotent).

    Returns:
        ``model`` itself. Each distributed layer gets ``layer_name`` = its qualified name, used as
        the layer key in communication counters.
    """
    for name, module in model.named_modules():
        if not isinstance(module, MessagePassing):
            continue
        swap = DISTRIBUTED_LAYERS.get(type(module))
        if swap is not None:
            module.__class__ = swap
        if not hasattr(module, _SYNC_HOOKED):
            setattr(module, _SYNC_HOOKED, module.register_aggregate_forward_hook(_after_aggregate))
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

"""Typed graphs in the layers: one graph context per relation (design §7 and §10).

A typed part (:mod:`~lightning_gnn_dist.data.hetero_local`) runs the user's heterogeneous
model unchanged, exactly:

* ``to_hetero(model, metadata)`` and ``HeteroConv`` call one message-passing layer per relation
  (modules keyed ``"src__rel__dst"`` or ``"<src___rel___dst>"``). Each such layer runs inside
  its relation's graph context: an ordinary :class:`~lightning_gnn_dist.nn.context.GraphContext`
  over the relation's view (:func:`~lightning_gnn_dist.data.hetero_local.relation_view`), with
  the same exchange mode as the strategy's on the relation's plan. The layer's hooks and
  distributed subclasses then exchange the relation's halo rows of the source type — bipartite
  ``(x_src, x_dst)`` inputs as single ones — and count them under the layer's own name
  (``"...conv1.paper__cites__paper"``): rows per relation, predicted by the relation's metrics.
* Layers on the homogeneous view (``RGCNConv``, ``FastRGCNConv``, ``RGATConv``: ``x [N, d]``
  over all types, ``edge_type``) exchange with the part's homogeneous plan, as any layer does.
* ``HGTConv`` (``x_dict``, ``edge_index_dict``) gets, per relation, the relation's halo rows of
  its source type appended to ``x_dict`` and its edges pointed at them; the outputs keep the
  owned rows.
* Featureless node types take a :class:`ShardedEmbedding`: each rank holds and trains the rows
  of its own vertices only; rows read as halo rows by other ranks return their gradients
  through the exchange, so no table is all-reduced (the strategy skips sharded parameters).

The relation contexts enter around each relation layer through forward hooks that
:meth:`HeteroGraphContext.prepare` registers once per module, ahead of
:func:`~lightning_gnn_dist.nn.distribute`'s own.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import ClassVar

import torch
from torch import Tensor, nn
from torch_geometric.nn import HGTConv
from torch_geometric.nn.conv import MessagePassing

from lightning_gnn_dist.comm.base import HaloExchange
from lightning_gnn_dist.data.hetero import HeteroSchema, relation_key
from lightning_gnn_dist.data.hetero_local import relation_view
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.data.sampler import hash_keys
from lightning_gnn_dist.nn.context import (
    _ACTIVE,
    CONTEXTS,
    GraphContext,
    current_graph_context,
)

__all__ = [
    "HeteroGraphContext",
    "ShardedEmbedding",
    "relation_of_module",
    "sharded_rows",
    "whole_tables",
]

RELATION_MODES = ("p2p", "broadcast", "hierarchical")
"""Exchange modes that run per relation on a typed partition (exact)."""

_HOOKED = "_lgd_relation_hooks"


def relation_of_module(name: str, relation_keys) -> str | None:
    """The relation key a module named ``name`` runs (``to_hetero``'s ``...conv1.a__r__b`` or
    ``HeteroConv``'s ``...convs.<a___r___b>``), or ``None``."""
    last = name.rsplit(".", 1)[-1]
    if last.startswith("<") and last.endswith(">"):
        last = relation_key(last[1:-1].replace("#", ".").split("___"))
    return last if last in relation_keys else None


@dataclass
class HeteroGraphContext(GraphContext):
    """The graph context of a typed part.

    Its own :attr:`exchange` is the part's homogeneous plan (layers on the homogeneous view);
    :meth:`relation_context` gives each relation's context, built once.

    Attributes:
        schema: the graph's types (from the part's ``type_schema``).
    """

    schema: HeteroSchema | None = None
    _relations: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.schema is None:
            self.schema = HeteroSchema.from_meta(self.partition.type_schema)
        mode = getattr(self.exchange, "mode", "")
        if mode not in RELATION_MODES:
            raise ValueError(
                f"exchange={mode!r} does not run on a typed graph; use one of "
                f"{', '.join(RELATION_MODES)}"
            )

    def relation_context(self, key: str) -> GraphContext:
        """The context of relation ``key`` (its view and an exchange of the same mode, sharing
        this context's counter and codec)."""
        context = self._relations.get(key)
        if context is None:
            device = self.partition.edge_index.device
            view = _to_device(relation_view(_to_cpu(self.partition), self.schema, key), device)
            context = _RelationContext(view, _exchange_like(self.exchange, view))
            self._relations[key] = context
        context.exchange.counter = self.exchange.counter  # the strategy swaps it per stage
        context.exchange._training = self.exchange._training
        return context

    def prepare(self, model) -> None:
        """Register, once per module, the hooks that enter a relation layer's context around
        its call (ahead of the exchange hooks of :func:`~lightning_gnn_dist.nn.distribute`)."""
        keys = self.schema.relation_keys
        for name, module in model.named_modules():
            if not isinstance(module, MessagePassing) or hasattr(module, _HOOKED):
                continue
            if isinstance(module, HGTConv):
                hooks = (
                    module.register_forward_pre_hook(_hgt_inputs, prepend=True),
                    module.register_forward_hook(_hgt_outputs, always_call=True),
                )
            else:
                key = relation_of_module(name, keys)
                if key is None:
                    continue
                module._lgd_relation = key
                hooks = (
                    module.register_forward_pre_hook(_enter_relation, prepend=True),
                    module.register_forward_hook(_leave_relation, always_call=True),
                )
            setattr(module, _HOOKED, hooks)


@dataclass
class _RelationContext(GraphContext):
    """A relation's context (an ordinary halo-exchange context over the relation's view)."""


@dataclass
class _Exchanged(GraphContext):
    """Marks a layer whose inputs were completed by a hook (``HGTConv``): nothing more is
    exchanged inside it."""

    complete: ClassVar[bool] = True


def _typed_context() -> HeteroGraphContext | None:
    ctx = current_graph_context()
    return ctx if isinstance(ctx, HeteroGraphContext) else None


def _enter_relation(module: nn.Module, args: tuple):
    ctx = _typed_context()
    module._lgd_entered = ctx is not None
    if ctx is not None:
        _ACTIVE.append(ctx.relation_context(module._lgd_relation))


def _leave_relation(module: nn.Module, args: tuple, output):
    if getattr(module, "_lgd_entered", False):
        module._lgd_entered = False
        _ACTIVE.pop()


def _hgt_inputs(module: HGTConv, args: tuple):
    """``x_dict`` of owned rows → per type ``[owned | halo of each relation from it]``, and each
    relation's halo sources pointed at its own block (exchanged under
    ``"<layer>.<relation>"``)."""
    ctx = _typed_context()
    module._lgd_owned = None
    if ctx is None:
        return None
    x_dict, edge_index_dict = args[0], args[1]
    owned = {t: x.size(0) for t, x in x_dict.items()}
    blocks = {t: [x] for t, x in x_dict.items()}
    sizes = dict(owned)
    new_edges = {}
    name = getattr(module, "layer_name", "") or "HGTConv"
    for edge_type, edge_index in edge_index_dict.items():
        key = relation_key(edge_type)
        source = edge_type[0]
        relation = ctx.relation_context(key)
        halo = relation.exchange(x_dict[source], f"{name}.{key}")
        src = edge_index[0]
        shift = sizes[source] - owned[source]  # where this relation's halo block starts
        src = torch.where(src >= owned[source], src + shift, src)
        new_edges[edge_type] = torch.stack([src, edge_index[1]])
        blocks[source].append(halo)
        sizes[source] += halo.size(0)
    module._lgd_owned = owned
    _ACTIVE.append(_Exchanged(ctx.partition, ctx.exchange))
    x_all = {t: torch.cat(parts) if len(parts) > 1 else parts[0] for t, parts in blocks.items()}
    return (x_all, new_edges, *args[2:])


def _hgt_outputs(module: HGTConv, args: tuple, output):
    owned = getattr(module, "_lgd_owned", None)
    if owned is None:
        return None
    module._lgd_owned = None
    _ACTIVE.pop()
    if not isinstance(output, dict):
        return None
    return {t: None if out is None else out[: owned[t]] for t, out in output.items()}


def _exchange_like(exchange: HaloExchange, view: LocalPartition) -> HaloExchange:
    """An exchange of ``exchange``'s mode, counter, group and codec on ``view``."""
    options = {}
    if hasattr(exchange, "ranks_per_node"):
        options["ranks_per_node"] = exchange.ranks_per_node
    return type(exchange)(
        view,
        counter=exchange.counter,
        group=exchange.group,
        codec=exchange.codec_policy,
        **options,
    )


def _to_cpu(part: LocalPartition) -> LocalPartition:
    if part.edge_index.device.type == "cpu":
        return part
    return _moved(part, torch.device("cpu"))


def _to_device(part: LocalPartition, device: torch.device) -> LocalPartition:
    return part if device.type == "cpu" else _moved(part, device)


def _moved(part: LocalPartition, device: torch.device) -> LocalPartition:
    def move(value):
        if isinstance(value, Tensor):
            return value.to(device)
        if isinstance(value, dict):
            return {k: move(v) for k, v in value.items()}
        return value

    return replace(part, **{f.name: move(getattr(part, f.name)) for f in fields(part)})


CONTEXTS["typed"] = HeteroGraphContext


# -- featureless types ---------------------------------------------------------------------------
class ShardedEmbedding(nn.Module):
    """Learnable rows of a featureless node type, held by their owners.

    Each rank holds ``weight [num_local, dim]``, the rows of the vertices it owns (dataset ids
    ``ids``), and trains only those; a rank that reads a row as a halo row returns its gradient
    to the owner through the exchange, so the owner's gradient is the whole graph's and no
    table is all-reduced (``weight._lgd_sharded`` tells the strategy to leave it out of the
    gradient all-reduce and of the start-up broadcast). Row ``i`` starts as
    ``N(0, init_std²)`` drawn from a hash of ``(seed, i)``, so the same vertex starts equal
    whatever the partition: single-process (``ids = arange(N)``) and distributed runs are
    equal.

    Args:
        ids: ``[num_local] int64`` dataset ids (within the type) of the rows held here.
        dim: embedding width.
        seed: seed of the initial rows. (default: ``0``)
        init_std: standard deviation of the initial rows. (default: ``1.0``)
    """

    def __init__(self, ids: Tensor, dim: int, seed: int = 0, init_std: float = 1.0) -> None:
        super().__init__()
        self.ids = ids.detach().long().cpu()  # not a buffer: ranks hold different counts
        self.weight = nn.Parameter(_hashed_normal(self.ids, dim, seed) * init_std)
        self.weight._lgd_sharded = True
        self.dim, self.seed = dim, seed

    def forward(self) -> Tensor:
        """``[num_local, dim]``: the rows of this rank's vertices (its owned rows)."""
        return self.weight

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # A checkpoint holds the whole table in dataset-id order (GNNStrategy gathers it):
        # each rank takes its own rows.
        key = prefix + "weight"
        table = state_dict.get(key)
        rows = self.weight.size(0)
        if isinstance(table, Tensor) and table.size(0) != rows and self.ids.numel() == rows:
            if self.ids.numel() and int(self.ids.max()) < table.size(0):
                state_dict = {**state_dict, key: table[self.ids.to(table.device)]}
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"rows={self.weight.size(0)}, dim={self.dim}"


def _hashed_normal(ids: Tensor, dim: int, seed: int, chunk: int = 1 << 16) -> Tensor:
    """``[len(ids), dim]`` standard normal values, each a function of ``(seed, id, column)``
    only (Box–Muller over two 32-bit hashes)."""
    out = torch.empty(ids.numel(), dim)
    columns = torch.arange(dim)
    for start in range(0, ids.numel(), chunk):
        rows = ids[start : start + chunk].unsqueeze(1)
        u1 = (hash_keys(seed, 1, rows, columns).double() + 0.5) / 2.0**32
        u2 = (hash_keys(seed, 2, rows, columns).double() + 0.5) / 2.0**32
        normal = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * torch.pi * u2)
        out[start : start + chunk] = normal.float()
    return out


def is_sharded(parameter: Tensor) -> bool:
    """Whether ``parameter`` is held by its owners only (:class:`ShardedEmbedding`)."""
    return bool(getattr(parameter, "_lgd_sharded", False))


def sharded_rows(model: nn.Module) -> dict[str, tuple[Tensor, Tensor]]:
    """``{state-dict key: (ids, rows)}`` of every sharded embedding of ``model`` held here."""
    return {
        f"{name}.weight" if name else "weight": (module.ids, module.weight.detach().cpu())
        for name, module in model.named_modules()
        if isinstance(module, ShardedEmbedding) and is_sharded(module.weight)
    }


def whole_tables(per_rank: list[dict[str, tuple[Tensor, Tensor]]]) -> dict[str, Tensor]:
    """Every rank's :func:`sharded_rows` → ``{key: [N, dim]}`` the whole tables in dataset-id
    order (what a single-process model's state dict holds)."""
    tables = {}
    for key in per_rank[0]:
        ids = torch.cat([rank[key][0] for rank in per_rank])
        rows = torch.cat([rank[key][1] for rank in per_rank])
        table = rows.new_zeros(int(ids.max()) + 1 if ids.numel() else 0, rows.size(1))
        table[ids] = rows
        tables[key] = table
    return tables

"""What a :class:`~lightning_gnn_dist.lightning.strategy.GNNStrategy` refuses before any
process starts: a datamodule its exchange cannot train exactly as asked, and options that do
not fit the model's message-passing layers. The launchers and the command line call these
through the strategy's ``check_datamodule``/``check_model``; ``setup`` calls them again on
every rank."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from lightning_gnn_dist.comm.base import EXCHANGE_MODES, resolve_exchange_mode
from lightning_gnn_dist.comm.codec_policy import check_fetch_codec, unmatched_codec_layers
from lightning_gnn_dist.comm.rdm import ORDER_CHOICES
from lightning_gnn_dist.comm.rdm_plan import parse_order
from lightning_gnn_dist.lightning.auto_plan import AUTO
from lightning_gnn_dist.lightning.compat import lightning_classes
from lightning_gnn_dist.lightning.hetero_data import dataset_is_typed
from lightning_gnn_dist.lightning.module import NodePredictor
from lightning_gnn_dist.nn.hetero import RELATION_MODES
from lightning_gnn_dist.partition.vertex_cut import MAX_VERTEX_CUT_PARTS
from lightning_gnn_dist.utils.checks import check_keywords

__all__ = [
    "DDP_STRATEGY_OPTIONS",
    "DDP_WRAPPER_OPTIONS",
    "NO_WRAPPER_REASON",
    "check_datamodule",
    "check_ddp_keywords",
    "check_model",
    "exchange_options",
    "same_value",
]


DDP_STRATEGY_OPTIONS = (
    "accelerator",
    "parallel_devices",
    "cluster_environment",
    "checkpoint_io",
    "precision_plugin",
    "process_group_backend",
)
"""``DDPStrategy`` arguments that configure the processes and therefore apply here."""

NO_WRAPPER_REASON = (
    "GNNStrategy wraps no DistributedDataParallel (the strategy sums or averages gradients "
    "itself), so DDP's wrapper options would be ignored"
)
_DDP_STRATEGY_PARAMETERS = inspect.signature(
    lightning_classes("strategies.DDPStrategy")[0].__init__
).parameters
DDP_WRAPPER_OPTIONS: dict[str, Any] = {
    name: parameter.default
    for name, parameter in [
        *_DDP_STRATEGY_PARAMETERS.items(),
        *inspect.signature(torch.nn.parallel.DistributedDataParallel).parameters.items(),
    ]
    if name.startswith(("ddp_comm", "model_averaging"))
    or name not in ("self", "module", "kwargs", *_DDP_STRATEGY_PARAMETERS)
}
"""Arguments ``DDPStrategy`` would give ``DistributedDataParallel`` (or its communication
hooks), with their defaults: refused unless they keep them (a parser passes every default)."""


def same_value(value: Any, default: Any) -> bool:
    try:
        return value is default or bool(value == default)
    except Exception:  # noqa: BLE001 (a tensor or another object without a plain ==)
        return False


def check_ddp_keywords(kwargs: dict[str, Any], own: list[str]) -> dict[str, Any]:
    """The ``DDPStrategy`` arguments among ``kwargs`` that apply (:data:`DDP_STRATEGY_OPTIONS`),
    after refusing the others: a parser (the LightningCLI) passes every DDP argument at its
    default, and those are dropped; a changed wrapper option would have no effect and is
    refused, as is any unknown name (``own``: the strategy's own parameters).

    Raises:
        ValueError: naming the argument.
    """
    wrapper = {k: v for k, v in kwargs.items() if k in DDP_WRAPPER_OPTIONS}
    kwargs = {k: v for k, v in kwargs.items() if k not in wrapper}
    changed = {
        k: NO_WRAPPER_REASON
        for k, v in wrapper.items()
        if not same_value(v, DDP_WRAPPER_OPTIONS[k])
    }
    check_keywords("GNNStrategy", [*changed, *kwargs], own + list(DDP_STRATEGY_OPTIONS), changed)
    return kwargs


def check_datamodule(strategy, datamodule, world_size: int | None = None) -> None:
    """Refuse a datamodule this strategy cannot train exactly as asked (before any process
    starts: the launchers and the command line call it; ``setup`` again on every rank).

    Checks that the exchange runs on the datamodule's partition kind, that the loader uses
    the exchange (``cached`` caches nothing across sampled batches; the neighbour loader
    runs the exchange only for ``eval_loader="full"``), and that the parts fit the world
    size and the vertex cut's limit.

    Raises:
        ValueError: naming the option and what to change.
    """
    loader = getattr(datamodule, "loader", None)
    kind = getattr(datamodule, "partition_kind", None)
    if loader is None or kind is None:
        return  # not a GraphPartitionDataModule: setup() checks what it can
    if strategy.exchange_mode == AUTO:  # before setup: the plan is not read yet
        if datamodule.method != AUTO:
            raise ValueError(
                "exchange='auto' runs the plan that GraphPartitionDataModule(method='auto', "
                f"plan_options={{'widths': [...]}}) stores; method={datamodule.method!r} "
                "stores none: use method='auto' (plan_options={'methods': [...]} keeps a "
                "method) or name the exchange"
            )
        exchange_class, _ = resolve_exchange_mode("p2p")  # every plan's kind and loader
    else:
        exchange_class, _ = resolve_exchange_mode(strategy.exchange_mode)
    if exchange_class.partition_kind != kind:
        raise ValueError(
            f"exchange={strategy.exchange_mode!r} runs on a {exchange_class.partition_kind} "
            f"partition, but method={datamodule.method!r} makes a {kind} partition; use exchange "
            f"{' or '.join(repr(m) for m in _modes_of_kind(kind))}, or another method"
        )
    if loader == "neighbor":
        check_fetch_codec(strategy.codec_policy)  # the fetch's codec must be fixed
    typed = dataset_is_typed(getattr(datamodule, "dataset", None))
    if typed and loader == "full" and strategy.exchange_mode not in RELATION_MODES:
        raise ValueError(
            f"exchange={strategy.exchange_mode!r} does not run on typed graphs (per-relation "
            f"halo exchange); use exchange {' or '.join(map(repr, RELATION_MODES))}"
        )
    if loader in ("neighbor", "subgraph") and strategy.exchange_mode not in ("p2p", "broadcast"):
        why = (
            "caches nothing across sampled batches (each has its own plan)"
            if strategy.exchange_mode == "cached"
            else "does not apply to sampled batches"
        )
        raise ValueError(
            f"exchange={strategy.exchange_mode!r} with loader={loader!r}: it {why}; use "
            "exchange='p2p' or 'broadcast', or loader='full'"
        )
    parts = datamodule.num_parts if datamodule.num_parts is not None else world_size
    if world_size is not None and parts != world_size:
        raise ValueError(
            f"num_parts={parts} but {world_size} processes run (devices x num_nodes); every "
            "process owns one part: set num_parts to the world size or leave it unset"
        )
    if kind == "vertex-cut" and parts is not None and parts > MAX_VERTEX_CUT_PARTS:
        raise ValueError(
            f"a vertex cut has at most {MAX_VERTEX_CUT_PARTS} parts, but {parts} processes "
            "run; use fewer processes or a vertex partition"
        )


def check_model(strategy, model) -> None:
    """Refuse options that do not fit ``model``'s message-passing layers (before any
    process starts: the launchers and the command line call it): an ``rdm_order`` string
    whose length is not twice the number of layers, and a ``codec`` layer name that
    matches none of them. A model whose layers are made later (``configure_model``) is
    checked when they are bound.

    Raises:
        ValueError: naming the option, the model's layers and what to change.
    """
    names = _message_passing_layers(model)
    if not names:
        return
    order = strategy.exchange_options.get("rdm_order")
    if strategy.exchange_mode == "rdm" and isinstance(order, str) and order not in ORDER_CHOICES:
        try:
            parse_order(order, len(names))
        except ValueError as error:
            raise ValueError(
                f"rdm_order={order!r} does not fit {type(model).__name__} ({len(names)} "
                f"message-passing layers): {error}"
            ) from None
    unmatched = unmatched_codec_layers(strategy.codec_policy, names)
    if unmatched:
        raise ValueError(
            f"codec names layer {unmatched[0]!r}, which {type(model).__name__} does not "
            f"have; its message-passing layers are {', '.join(names)} (a key matches a "
            "layer's name or its tail after a dot, e.g. 'convs.0'; 'features' is the "
            "neighbour fetch and '*' every other layer)"
        )


def _message_passing_layers(model: Any) -> list[str]:
    """Qualified names of ``model``'s message-passing layers, as :func:`distribute` names
    them; for a :class:`NodePredictor` that builds its network later (``configure_model``),
    those of the network its settings describe."""
    from torch_geometric.nn import MessagePassing

    if not isinstance(model, torch.nn.Module):
        return []
    names = [n for n, m in model.named_modules() if isinstance(m, MessagePassing)]
    if names or not isinstance(model, NodePredictor) or model.model is not None:
        return names
    try:
        network = model.network(1, 1, 1)
    except (TypeError, ValueError):
        return []  # the module itself reports its settings when it builds
    return [f"model.{n}" for n, m in network.named_modules() if isinstance(m, MessagePassing)]


def _modes_of_kind(kind: str) -> list[str]:
    names = sorted(m for m, c in EXCHANGE_MODES.items() if c.partition_kind == kind)
    return [("cd-<r>" if m == "cd-r" else m) for m in names]


def exchange_options(
    mode: str, exchange_class: type, given: dict[str, Any], defaults: dict[str, Any]
) -> dict[str, Any]:
    """The options of exchange ``mode`` among ``given`` (``name → value`` as passed to
    :class:`~lightning_gnn_dist.lightning.strategy.GNNStrategy`, whose parameters' defaults are
    ``defaults``), checked by the exchange class. An option the mode's class does not take is
    refused unless it keeps the strategy's default, so a new exchange option is one parameter
    of ``GNNStrategy`` and of the exchange classes that take it.

    Raises:
        ValueError: naming the option, the value and the modes that take it.
    """
    takes = inspect.signature(exchange_class.__init__).parameters
    for name, value in given.items():
        if name not in takes and value != defaults[name]:
            users = sorted(
                m
                for m, c in EXCHANGE_MODES.items()
                if name in inspect.signature(c.__init__).parameters
            )
            raise ValueError(
                f"{name}={value!r} applies to exchange={' or '.join(map(repr, users))} only "
                f"(got exchange={mode!r}); drop it or change the exchange"
            )
    options = {name: value for name, value in given.items() if name in takes}
    return exchange_class.check_options(**options)

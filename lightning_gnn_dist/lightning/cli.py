"""``python -m lightning_gnn_dist fit|validate|test|predict --config FILE.yaml`` (LightningCLI).

The model is any LightningModule, of either Lightning namespace, named by ``class_path``
(subclass mode)::

    model:
      class_path: mypkg.models.MyModule      # default: lightning_gnn_dist.NodePredictor
      init_args: {in_channels: 64, ...}

A ``model:`` block without ``class_path`` configures :class:`~lightning_gnn_dist.NodePredictor`
(its task is the datamodule's: class ids, multi-label or regression targets).
The data is :class:`~lightning_gnn_dist.GraphPartitionDataModule`, or the datamodule a ``data:``
block names by ``class_path`` (``lightning_gnn_dist.LinkDataModule``); every Trainer argument
(``strategy: gnn_ddp``, ``devices``, ``num_nodes``, callbacks, loggers) comes from the config or
the command line. The Trainer, callbacks and datamodule are built in the namespace of the model
class (``lightning.pytorch`` or ``pytorch_lightning``; the default one for ``NodePredictor``).
``--test_after_fit true`` runs the test loop after ``fit`` in the same processes.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

import yaml
from jsonargparse import ArgumentError

from lightning_gnn_dist.lightning.compat import (
    NAMESPACES,
    LightningNeutral,
    default_namespace,
    lightning_classes,
    lightning_namespace,
    namespace_of,
)
from lightning_gnn_dist.lightning.datamodule import GraphPartitionDataModule
from lightning_gnn_dist.lightning.hetero_module import HeteroNodeClassifier
from lightning_gnn_dist.lightning.module import NodePredictor
from lightning_gnn_dist.lightning.strategy import GNN_STRATEGIES, GNNStrategy

DEFAULT_MODEL = "lightning_gnn_dist.NodePredictor"
PROG = "python -m lightning_gnn_dist"


class CLIError(ValueError):
    """A command line that cannot work, with what to change."""


class _GNNLightningCLI:
    """LightningCLI additions, mixed into the ``LightningCLI`` of the model's namespace: the
    default model and a ``test_after_fit`` switch."""

    default_model: str | None = DEFAULT_MODEL

    def add_arguments_to_parser(self, parser) -> None:
        # Only when no model is named: jsonargparse carries the init_args of a default class
        # over to the class a config then names, replacing that class's own defaults.
        if self.default_model is not None:
            parser.set_defaults({"model": {"class_path": self.default_model}})
        parser.add_argument(
            "--test_after_fit", type=bool, default=False, help="run `test` after `fit`"
        )

    def after_fit(self) -> None:
        if self.config[self.subcommand].get("test_after_fit"):
            self.trainer.test(self.model, datamodule=self.datamodule)

    def _set_seed(self) -> None:
        # Quietly: a value refused right after must leave one line, not "Seed set to 0" first
        # (the seed is still recorded in the saved config).
        logger = logging.getLogger("lightning_fabric.utilities.seed")
        disabled, logger.disabled = logger.disabled, True
        try:
            super()._set_seed()
        finally:
            logger.disabled = disabled

    def instantiate_classes(self) -> None:
        # A value the classes refuse (batch_size=-3, exchange='cd-05', ...) is a usage error:
        # one line and exit code 2, as for the values the parser refuses.
        try:
            super().instantiate_classes()
        except ValueError as err:
            raise CLIError(one_line(err)) from None

    def before_instantiate_classes(self) -> None:
        subcommand = self.subcommand
        check_strategy_text(self.config[subcommand].get("trainer.strategy"))
        if subcommand in ("validate", "test", "predict") and not self.config[subcommand].get(
            "ckpt_path"
        ):
            raise CLIError(
                f"`{subcommand}` would evaluate an untrained model: pass --ckpt_path with a "
                "checkpoint of a `fit` run (the example configs save "
                "checkpoints/<config name>/last.ckpt), or use `fit --test_after_fit true`"
            )

    def instantiate_trainer(self, **kwargs: Any):
        self._check_run(self.subcommand)
        return super().instantiate_trainer(**kwargs)

    def _check_run(self, subcommand: str | None) -> None:
        """What the strategy and datamodule can only refuse together, and a prediction nobody
        would see: after the classes are built, before the Trainer (and any process) starts."""
        trainer = self._get(self.config_init, "trainer", default={})
        strategy = trainer.get("strategy")
        if isinstance(strategy, str) and strategy in GNN_STRATEGIES:
            strategy = GNNStrategy(start_method=GNN_STRATEGIES[strategy])
        check = getattr(strategy, "check_datamodule", None)
        devices, num_nodes = trainer.get("devices"), trainer.get("num_nodes", 1)
        if isinstance(devices, str) and devices.isdigit():  # the parser keeps "2" a string
            devices = int(devices)
        counted = isinstance(devices, int) and devices > 0 and isinstance(num_nodes, int)
        world_size = devices * num_nodes if counted else None  # else setup() checks
        if check is not None:
            try:
                check(self.datamodule, world_size)
                strategy.check_model(self.model)
            except ValueError as err:
                raise CLIError(one_line(err)) from None
        writer = lightning_classes("callbacks.BasePredictionWriter")
        callbacks = list(trainer.get("callbacks") or [])
        if subcommand == "predict" and not any(isinstance(c, writer) for c in callbacks):
            raise CLIError(
                "`predict` would write nothing: add a prediction writer, e.g. "
                "--trainer.callbacks+=lightning_gnn_dist.PredictionWriter "
                "--trainer.callbacks.output_dir=predictions (one predictions-rank<r>.pt per rank)"
            )


def check_strategy_text(value: Any) -> None:
    """Refuse a ``--trainer.strategy`` value the parser kept as text although it names a
    class: one of its ``init_args`` has a type the parser refused (``{class_path:
    lightning_gnn_dist.GNNStrategy, init_args: {codec: 8}}``), and Lightning would report "an
    invalid strategy name". :class:`GNNStrategy` is built from the text so that its own
    message shows; for other classes the line says which value to check.

    Raises:
        CLIError: naming the strategy's problem.
    """
    if not isinstance(value, str):
        return
    parsed = _load_yaml(value)
    if not isinstance(parsed, dict) or not isinstance(parsed.get("class_path"), str):
        return
    class_path, init_args = parsed["class_path"], parsed.get("init_args") or {}
    strategy_class = GNNStrategy if class_path.rpartition(".")[2] == "GNNStrategy" else None
    if strategy_class is not None and isinstance(init_args, dict):
        try:
            strategy_class(**init_args)
        except (TypeError, ValueError) as err:
            raise CLIError(f"trainer.strategy: {one_line(err)}") from None
    raise CLIError(
        f"trainer.strategy: {class_path!r} with init_args {init_args!r} could not be read; "
        f"check each value's type (see `{PROG} fit --help`, and --print_config for the "
        "strategy's options)"
    )


def one_line(error: BaseException) -> str:
    """An error message on one line. jsonargparse's union errors list one reason per type
    tried and the whole value; keep the reasons that are not a plain type mismatch."""
    text = " ".join(str(error).split())
    found = re.search(r"Errors: (.*?) Given value", text)
    if found:
        reasons = [r.strip() for r in re.split(r"(?:^| )- ", found.group(1)) if r.strip()]
        useful = [r for r in reasons if not r.startswith(("Expected a ", "Expected a dot"))]
        key = re.match(r'Parser key "([^"]+)":', text)
        text = (f"{key.group(1)}: " if key else "") + "; ".join(useful or reasons)
    return text


def run_lightning_cli(argv: Sequence[str] | None = None):
    """Run the LightningCLI on ``argv`` (e.g. ``["fit", "--config", "examples/gcn_digits.yaml"]``;
    default: ``sys.argv[1:]``); returns the CLI object.

    Raises:
        CLIError: the model ``class_path`` cannot be imported or is not a LightningModule.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    check_option_order(args)
    namespace = model_namespace(args)
    lightning = NAMESPACES[namespace]
    cli = importlib.import_module(f"{namespace}.cli")
    named = _model_class_path(args) is not None
    attributes = {"default_model": None if named else DEFAULT_MODEL}
    cli_class = type("GNNLightningCLI", (_GNNLightningCLI, cli.LightningCLI), attributes)
    # A `data:` block with a class_path names its datamodule (LinkDataModule, the user's own);
    # without one it configures GraphPartitionDataModule, as before.
    data_named = _class_path(args, "data") is not None
    with lightning_namespace(namespace):
        try:
            return cli_class(
                lightning.LightningModule,
                lightning.LightningDataModule
                if data_named
                else GraphPartitionDataModule.for_namespace(namespace),
                subclass_mode_model=True,
                subclass_mode_data=data_named,
                args=None if argv is None else args,
                save_config_kwargs={"overwrite": True},
                trainer_defaults={
                    "strategy": "gnn_ddp",
                    "accelerator": "cpu",
                    "log_every_n_steps": 1,
                },
                parser_kwargs={"exit_on_error": False, "prog": PROG},
            )
        except ArgumentError as err:  # the parser refused a value: one line, exit code 2
            raise CLIError(
                f"{one_line(err)} (see `{PROG} {args[0] if args else ''} --help`)"
            ) from None


def check_option_order(args: Sequence[str]) -> None:
    """Refuse an option that a later ``--config`` file sets again.

    jsonargparse applies the command line from left to right, so in ``fit --trainer.devices 4
    --config run.yaml`` a ``devices:`` of ``run.yaml`` silently replaces the 4. Such a command
    line ends here with one line naming the option and the file (put the option after
    ``--config``); options the file does not set may come anywhere.

    Raises:
        CLIError: an option before a ``--config`` whose file sets the same key.
    """
    given: list[tuple[str, str]] = []  # (dotted key, the option as written)
    i = 0
    while i < len(args):
        option, has_value, value = args[i].partition("=")
        if option in ("--config", "-c"):
            if not has_value:
                value = args[i + 1] if i + 1 < len(args) else ""
                i += 1
            keys = _config_keys(_load_yaml(value))
            for key, written in given:
                clash = sorted(k for k in keys if k == key or k.startswith(key + "."))
                if clash:
                    raise CLIError(
                        f"{written} comes before --config {value}, which sets {clash[0]} and "
                        f"would replace it (the command line is read from left to right); put "
                        f"{written} after --config"
                    )
        elif option.startswith("--") and len(option) > 2:
            given.append((option[2:].replace(".init_args.", "."), option))
        i += 1


def _config_keys(config: Any, prefix: str = "") -> set[str]:
    """The dotted keys a config sets (``{"trainer": {"devices": 2}}`` → ``trainer.devices``),
    also without ``init_args`` (``--model.lr`` sets ``model.init_args.lr``)."""
    if not isinstance(config, dict):
        return {prefix} if prefix else set()
    keys: set[str] = set()
    for name, value in config.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        keys |= _config_keys(value, key)
        if name == "init_args":
            keys |= _config_keys(value, prefix)
    return keys


def model_namespace(args: Sequence[str]) -> str:
    """The Lightning namespace of the model class the command line names (the last
    ``--model.class_path``, ``--model`` or ``model.class_path`` of a ``--config`` file wins, as in
    jsonargparse); the default namespace for ``NodePredictor`` or when none is named."""
    class_path = _model_class_path(args)
    if class_path is None or "." not in class_path:  # short names are resolved by jsonargparse
        return default_namespace()
    model_class = _import_class(class_path)
    if not isinstance(model_class, type) or not (
        issubclass(model_class, lightning_classes("LightningModule"))
        or issubclass(model_class, (NodePredictor, HeteroNodeClassifier))
        or _neutral_module(model_class)
    ):
        raise CLIError(
            f"model class_path {class_path!r} is {model_class!r}, not a LightningModule; "
            "name a subclass of lightning.pytorch.LightningModule or pytorch_lightning.LightningModule"
        )
    return namespace_of(model_class) or default_namespace()


def _neutral_module(model_class: type) -> bool:
    """A namespace-neutral LightningModule (``LinkPredictor``): concrete once a namespace is
    chosen."""
    return (
        issubclass(model_class, LightningNeutral)
        and getattr(model_class, "_lightning_base", None) == "LightningModule"
    )


def _import_class(class_path: str) -> Any:
    module_name, _, name = class_path.rpartition(".")
    attributes = [name]
    while module_name:
        try:
            obj: Any = importlib.import_module(module_name)
            break
        except ModuleNotFoundError as err:
            if err.name is not None and not module_name.startswith(err.name):
                raise CLIError(
                    f"model class_path {class_path!r}: importing it failed: {err}"
                ) from err
            module_name, _, parent = module_name.rpartition(".")
            attributes.insert(0, parent)
        except ImportError as err:
            raise CLIError(f"model class_path {class_path!r}: importing it failed: {err}") from err
    else:
        raise CLIError(
            f"model class_path {class_path!r}: no such module; is its package installed or on "
            f"PYTHONPATH (cwd: {os.getcwd()})?"
        )
    for attribute in attributes:
        if not hasattr(obj, attribute):
            raise CLIError(f"model class_path {class_path!r}: {obj.__name__} has no {attribute!r}")
        obj = getattr(obj, attribute)
    return obj


def _model_class_path(args: Sequence[str]) -> str | None:
    return _class_path(args, "model")


def _class_path(args: Sequence[str], section: str) -> str | None:
    """The ``class_path`` the command line names for ``section`` (``"model"`` or ``"data"``):
    the last ``--SECTION.class_path``, ``--SECTION`` or ``SECTION.class_path`` of a
    ``--config`` file wins."""
    found = None
    i = 0
    while i < len(args):
        key, has_value, value = args[i].partition("=")
        if not has_value and key in ("--config", "-c", f"--{section}", f"--{section}.class_path"):
            value = args[i + 1] if i + 1 < len(args) else ""
            i += 1
        i += 1
        if key in ("--config", "-c"):
            config = _load_yaml(value)
            model = config.get(section) if isinstance(config, dict) else None
        elif key == f"--{section}":
            model = _load_yaml(value)
        elif key == f"--{section}.class_path":
            model = value
        else:
            continue
        if isinstance(model, dict):
            model = model.get("class_path", found)
        if isinstance(model, str):
            found = model
    return found


def _load_yaml(value: str) -> Any:
    """A YAML file's content, or ``value`` parsed as YAML (jsonargparse accepts both)."""
    try:
        if os.path.isfile(value):
            with open(value) as handle:
                return yaml.safe_load(handle)
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return None  # jsonargparse reports it

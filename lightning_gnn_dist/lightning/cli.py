"""``python -m lightning_gnn_dist fit|validate|test|predict --config FILE.yaml`` (LightningCLI).

The model is any LightningModule, of either Lightning namespace, named by ``class_path``
(subclass mode)::

    model:
      class_path: mypkg.models.MyModule      # default: lightning_gnn_dist.NodeClassifier
      init_args: {in_channels: 64, ...}

A ``model:`` block without ``class_path`` configures :class:`~lightning_gnn_dist.NodeClassifier`.
The data is :class:`~lightning_gnn_dist.GraphPartitionDataModule`; every Trainer argument
(``strategy: gnn_ddp``, ``devices``, ``num_nodes``, callbacks, loggers) comes from the config or
the command line. The Trainer, callbacks and datamodule are built in the namespace of the model
class (``lightning.pytorch`` or ``pytorch_lightning``; the default one for ``NodeClassifier``).
``--test_after_fit true`` runs the test loop after ``fit`` in the same processes.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import yaml

import lightning_gnn_dist.lightning.strategy  # noqa: F401  (registers the gnn_ddp strategies)
from lightning_gnn_dist.lightning.compat import (
    NAMESPACES,
    default_namespace,
    lightning_classes,
    lightning_namespace,
    namespace_of,
)
from lightning_gnn_dist.lightning.datamodule import GraphPartitionDataModule

DEFAULT_MODEL = "lightning_gnn_dist.NodeClassifier"


class CLIError(ValueError):
    """A command line that cannot work, with what to change."""


class _GNNLightningCLI:
    """LightningCLI additions, mixed into the ``LightningCLI`` of the model's namespace: the
    default model and a ``test_after_fit`` switch."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.set_defaults({"model": {"class_path": DEFAULT_MODEL}})
        parser.add_argument(
            "--test_after_fit", type=bool, default=False, help="run `test` after `fit`"
        )

    def after_fit(self) -> None:
        if self.config[self.subcommand].get("test_after_fit"):
            self.trainer.test(self.model, datamodule=self.datamodule)


def run_lightning_cli(argv: Sequence[str] | None = None):
    """Run the LightningCLI on ``argv`` (e.g. ``["fit", "--config", "examples/gcn_digits.yaml"]``;
    default: ``sys.argv[1:]``); returns the CLI object.

    Raises:
        CLIError: the model ``class_path`` cannot be imported or is not a LightningModule.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    namespace = model_namespace(args)
    lightning = NAMESPACES[namespace]
    cli = importlib.import_module(f"{namespace}.cli")
    cli_class = type("GNNLightningCLI", (_GNNLightningCLI, cli.LightningCLI), {})
    with lightning_namespace(namespace):
        return cli_class(
            lightning.LightningModule,
            GraphPartitionDataModule.for_namespace(namespace),
            subclass_mode_model=True,
            args=None if argv is None else args,
            save_config_kwargs={"overwrite": True},
            trainer_defaults={"strategy": "gnn_ddp", "accelerator": "cpu", "log_every_n_steps": 1},
        )


def model_namespace(args: Sequence[str]) -> str:
    """The Lightning namespace of the model class the command line names (the last
    ``--model.class_path``, ``--model`` or ``model.class_path`` of a ``--config`` file wins, as in
    jsonargparse); the default namespace for ``NodeClassifier`` or when none is named."""
    class_path = _model_class_path(args)
    if class_path is None or "." not in class_path:  # short names are resolved by jsonargparse
        return default_namespace()
    model_class = _import_class(class_path)
    if not isinstance(model_class, type) or not (
        issubclass(model_class, lightning_classes("LightningModule"))
        or issubclass(model_class, lightning_gnn_dist.NodeClassifier)
    ):
        raise CLIError(
            f"model class_path {class_path!r} is {model_class!r}, not a LightningModule; "
            "name a subclass of lightning.pytorch.LightningModule or pytorch_lightning.LightningModule"
        )
    return namespace_of(model_class) or default_namespace()


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
    found = None
    i = 0
    while i < len(args):
        key, has_value, value = args[i].partition("=")
        if not has_value and key in ("--config", "-c", "--model", "--model.class_path"):
            value = args[i + 1] if i + 1 < len(args) else ""
            i += 1
        i += 1
        if key in ("--config", "-c"):
            config = _load_yaml(value)
            model = config.get("model") if isinstance(config, dict) else None
        elif key == "--model":
            model = _load_yaml(value)
        elif key == "--model.class_path":
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

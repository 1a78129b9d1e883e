"""``python -m lightning_gnn_dist fit|validate|test|predict --config FILE.yaml`` (LightningCLI).

The model is :class:`~lightning_gnn_dist.NodeClassifier`, the data
:class:`~lightning_gnn_dist.GraphPartitionDataModule`; every Trainer argument (``strategy:
gnn_ddp``, ``devices``, ``num_nodes``, callbacks, loggers) comes from the config or the command
line. ``--test_after_fit true`` runs the test loop after ``fit`` in the same processes.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytorch_lightning.cli import LightningCLI

import lightning_gnn_dist  # noqa: F401  (registers the gnn_ddp strategies)
from lightning_gnn_dist.data.datamodule import GraphPartitionDataModule
from lightning_gnn_dist.module import NodeClassifier


class GNNLightningCLI(LightningCLI):
    """LightningCLI with a ``test_after_fit`` switch."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument(
            "--test_after_fit", type=bool, default=False, help="run `test` after `fit`"
        )

    def after_fit(self) -> None:
        if self.config[self.subcommand].get("test_after_fit"):
            self.trainer.test(self.model, datamodule=self.datamodule)


def run_lightning_cli(argv: Sequence[str] | None = None) -> GNNLightningCLI:
    """Run the LightningCLI on ``argv`` (e.g. ``["fit", "--config", "examples/gcn_digits.yaml"]``;
    default: ``sys.argv[1:]``)."""
    return GNNLightningCLI(
        NodeClassifier,
        GraphPartitionDataModule,
        args=None if argv is None else list(argv),
        save_config_kwargs={"overwrite": True},
        trainer_defaults={"strategy": "gnn_ddp", "accelerator": "cpu", "log_every_n_steps": 1},
    )

"""lightning-gnn-dist: partitioned, communication-minimal distributed GNN training for
PyTorch Lightning.

Importing the package registers the ``gnn_ddp``, ``gnn_ddp_spawn`` and ``gnn_ddp_fork``
strategies. The package uses the ``pytorch_lightning`` namespace (package ``pytorch-lightning``)
throughout: pass its Trainer, not ``lightning.pytorch``'s.
"""

from lightning_gnn_dist.batch_monitor import BatchCommunicationMonitor
from lightning_gnn_dist.callbacks import (
    CommunicationMonitor,
    PartitionReport,
    PredictionWriter,
    load_predictions,
)
from lightning_gnn_dist.data.datamodule import GraphPartitionDataModule
from lightning_gnn_dist.module import NodeClassifier
from lightning_gnn_dist.nn import distribute
from lightning_gnn_dist.strategy import GNNStrategy

__version__ = "0.1.0.dev0"

__all__ = [
    "BatchCommunicationMonitor",
    "CommunicationMonitor",
    "GNNStrategy",
    "GraphPartitionDataModule",
    "NodeClassifier",
    "PartitionReport",
    "PredictionWriter",
    "distribute",
    "load_predictions",
]

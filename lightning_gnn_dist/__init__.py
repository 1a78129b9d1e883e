"""lightning-gnn-dist: partitioned, communication-minimal distributed GNN training for
PyTorch Lightning.

Importing the package registers the ``gnn_ddp``, ``gnn_ddp_spawn`` and ``gnn_ddp_fork``
strategies in every installed Lightning namespace (``lightning.pytorch`` and
``pytorch_lightning``). ``GNNStrategy``, ``GraphPartitionDataModule``, the callbacks and
``NodeClassifier`` are namespace-neutral: they build the class of the namespace your code imported
(see :mod:`lightning_gnn_dist._compat` for the rule; :func:`lightning_namespace` picks one
explicitly, ``X.for_namespace(name)`` gives the concrete class).
"""

from lightning_gnn_dist import _compat
from lightning_gnn_dist._compat import lightning_namespace
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

_NEUTRAL = {
    cls.__name__: cls
    for cls in (
        BatchCommunicationMonitor,
        CommunicationMonitor,
        GNNStrategy,
        GraphPartitionDataModule,
        NodeClassifier,
        PartitionReport,
        PredictionWriter,
    )
}
# The neutral classes are served by __getattr__ below, not bound as module attributes, so that a
# dotted path such as ``lightning_gnn_dist.GNNStrategy`` names the concrete class inside
# ``lightning_namespace(...)``: LightningCLI (jsonargparse) checks ``class_path`` values with
# ``issubclass`` against the namespace's base classes.
for _name in _NEUTRAL:
    del globals()[_name]


def __getattr__(name: str):
    neutral = _NEUTRAL.get(name)
    if neutral is None:
        raise AttributeError(f"module 'lightning_gnn_dist' has no attribute {name!r}")
    namespace = _compat._current.get()
    return neutral if namespace is None else neutral.for_namespace(namespace)


def __dir__() -> list[str]:
    return sorted([*globals(), *_NEUTRAL])


__all__ = [
    "BatchCommunicationMonitor",
    "CommunicationMonitor",
    "GNNStrategy",
    "GraphPartitionDataModule",
    "NodeClassifier",
    "PartitionReport",
    "PredictionWriter",
    "distribute",
    "lightning_namespace",
    "load_predictions",
]

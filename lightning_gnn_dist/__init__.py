"""lightning-gnn-dist: partitioned, communication-minimal distributed GNN training for
PyTorch Lightning.

Importing the package registers the ``gnn_ddp``, ``gnn_ddp_spawn`` and ``gnn_ddp_fork``
strategies in every installed Lightning namespace (``lightning.pytorch`` and
``pytorch_lightning``). ``GNNStrategy``, ``GraphPartitionDataModule``, the callbacks and
``NodeClassifier`` are namespace-neutral: they build the class of the namespace your code imported
(see :mod:`lightning_gnn_dist.lightning.compat` for the rule; :func:`lightning_namespace` picks one
explicitly, ``X.for_namespace(name)`` gives the concrete class).
"""

import atexit

from lightning_gnn_dist import _deprecated
from lightning_gnn_dist.lightning import compat as _compat
from lightning_gnn_dist.lightning.batch_monitor import BatchCommunicationMonitor
from lightning_gnn_dist.lightning.callbacks import (
    CommunicationMonitor,
    PartitionReport,
    PredictionWriter,
    load_predictions,
)
from lightning_gnn_dist.lightning.compat import lightning_namespace
from lightning_gnn_dist.lightning.datamodule import GraphPartitionDataModule
from lightning_gnn_dist.lightning.module import NodeClassifier
from lightning_gnn_dist.lightning.strategy import GNNStrategy
from lightning_gnn_dist.nn import distribute
from lightning_gnn_dist.utils.tempdirs import (
    remove_process_temp_files as _remove_process_temp_files,
)

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


_deprecated.install()
atexit.register(_remove_process_temp_files)  # PyG's generated modules, torch's empty cache dir


def __getattr__(name: str):
    neutral = _NEUTRAL.get(name)
    if neutral is None:
        return _deprecated.moved_attribute(__name__, name)  # 0.1 paths, or AttributeError
    namespace = _compat._current.get()
    return neutral if namespace is None else neutral.for_namespace(namespace)


def __dir__() -> list[str]:
    return sorted([*(k for k in globals() if not k.startswith("_")), *_NEUTRAL])


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

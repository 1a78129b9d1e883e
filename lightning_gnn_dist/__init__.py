"""lightning-gnn-dist: partitioned, communication-minimal distributed GNN training for
PyTorch Lightning.

Importing the package registers the ``gnn_ddp``, ``gnn_ddp_spawn`` and ``gnn_ddp_fork``
strategies in every installed Lightning namespace (``lightning.pytorch`` and
``pytorch_lightning``), whether the namespace is imported before or after the package.
``GNNStrategy``, ``GraphPartitionDataModule``, the callbacks, ``NodePredictor`` and ``NodeClassifier`` are
namespace-neutral: they build the class of the namespace your code imported (see
:mod:`lightning_gnn_dist.lightning.compat` for the rule; :func:`lightning_namespace` picks one
explicitly, ``X.for_namespace(name)`` gives the concrete class).

The import itself is light (no torch, no Lightning): the names below are loaded on first use,
so that ``python -m lightning_gnn_dist --help`` and its usage errors answer at once.
"""

import atexit
import importlib
import importlib.util

from lightning_gnn_dist import _deprecated
from lightning_gnn_dist._imports import when_imported as _when_imported
from lightning_gnn_dist.lightning.registration import (
    NAMESPACE_MODULES as _NAMESPACE_MODULES,
)
from lightning_gnn_dist.lightning.registration import (
    register_strategy_names as _register_strategy_names,
)
from lightning_gnn_dist.utils.tempdirs import (
    remove_process_temp_files as _remove_process_temp_files,
)
from lightning_gnn_dist.utils.tempdirs import (
    tag_generated_modules as _tag_generated_modules,
)

__version__ = "0.1.0.dev0"

#: Public name → the module that defines it, imported on first access (PEP 562).
_LAZY = {
    "BatchCommunicationMonitor": "lightning_gnn_dist.lightning.batch_monitor",
    "CommunicationMonitor": "lightning_gnn_dist.lightning.callbacks",
    "GNNStrategy": "lightning_gnn_dist.lightning.strategy",
    "GraphPartitionDataModule": "lightning_gnn_dist.lightning.datamodule",
    "LinkDataModule": "lightning_gnn_dist.lightning.link_datamodule",
    "LinkPredictor": "lightning_gnn_dist.lightning.link_module",
    "HeteroNodeClassifier": "lightning_gnn_dist.lightning.hetero_module",
    "NodeClassifier": "lightning_gnn_dist.lightning.module",
    "NodePredictor": "lightning_gnn_dist.lightning.module",
    "PartitionReport": "lightning_gnn_dist.lightning.callbacks",
    "PredictionWriter": "lightning_gnn_dist.lightning.callbacks",
    "distribute": "lightning_gnn_dist.nn",
    "lightning_namespace": "lightning_gnn_dist.lightning.compat",
    "load_predictions": "lightning_gnn_dist.lightning.callbacks",
}
# The namespace-neutral classes are never bound as module attributes, so that a dotted path such
# as ``lightning_gnn_dist.GNNStrategy`` names the concrete class inside
# ``lightning_namespace(...)``: LightningCLI (jsonargparse) checks ``class_path`` values with
# ``issubclass`` against the namespace's base classes.
_NEUTRAL = frozenset(
    {
        "BatchCommunicationMonitor",
        "CommunicationMonitor",
        "GNNStrategy",
        "GraphPartitionDataModule",
        "LinkDataModule",
        "LinkPredictor",
        "HeteroNodeClassifier",
        "NodeClassifier",
        "NodePredictor",
        "PartitionReport",
        "PredictionWriter",
    }
)

_deprecated.install()
atexit.register(_remove_process_temp_files)  # PyG's generated modules, torch's empty cache dir
_when_imported("torch_geometric.template", _tag_generated_modules)  # a killed run's: removable
for _namespace in _NAMESPACE_MODULES:  # now if imported, else as soon as it is
    _when_imported(_namespace, _register_strategy_names)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        if name not in _NEUTRAL:
            globals()[name] = value
            return value
        namespace = importlib.import_module("lightning_gnn_dist.lightning.compat")._current.get()
        return value if namespace is None else value.for_namespace(namespace)
    try:
        return _deprecated.moved_attribute(__name__, name)  # 0.1 paths, or AttributeError
    except AttributeError:
        # a subpackage not imported yet (``lightning_gnn_dist.costmodel``), as before the
        # import became light
        if name.startswith("_") or importlib.util.find_spec(f"{__name__}.{name}") is None:
            raise
        return importlib.import_module(f"{__name__}.{name}")


def __dir__() -> list[str]:
    return sorted({*(k for k in globals() if not k.startswith("_")), *_LAZY})


__all__ = [
    "BatchCommunicationMonitor",
    "CommunicationMonitor",
    "GNNStrategy",
    "GraphPartitionDataModule",
    "HeteroNodeClassifier",
    "LinkDataModule",
    "LinkPredictor",
    "NodeClassifier",
    "NodePredictor",
    "PartitionReport",
    "PredictionWriter",
    "distribute",
    "lightning_namespace",
    "load_predictions",
]

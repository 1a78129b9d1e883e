"""Old import paths of 0.1 that keep working, with a ``DeprecationWarning``, until 0.2.

The layout of wave 3 (design §8) moved the Lightning integration into :mod:`.lightning`, the
mini-batch loaders into :mod:`.loaders` and split ``comm.exchange``. A user's
``from lightning_gnn_dist.strategy import GNNStrategy`` still works: a meta-path finder answers
each old module path with a proxy module that forwards every attribute to the new module. All the
old paths live in this one table, so no package keeps a file (or an upward import) for them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

from lightning_gnn_dist._imports import when_imported

#: Old module path → the module that now holds its names (removed in 0.2).
MOVED_MODULES: dict[str, str] = {
    "lightning_gnn_dist._compat": "lightning_gnn_dist.lightning.compat",
    "lightning_gnn_dist._progress": "lightning_gnn_dist.utils.progress",
    "lightning_gnn_dist._tempdirs": "lightning_gnn_dist.utils.tempdirs",
    "lightning_gnn_dist.batch_monitor": "lightning_gnn_dist.lightning.batch_monitor",
    "lightning_gnn_dist.callbacks": "lightning_gnn_dist.lightning.callbacks",
    "lightning_gnn_dist.launcher": "lightning_gnn_dist.lightning.launcher",
    "lightning_gnn_dist.module": "lightning_gnn_dist.lightning.module",
    "lightning_gnn_dist.resume": "lightning_gnn_dist.lightning.resume",
    "lightning_gnn_dist.strategy": "lightning_gnn_dist.lightning.strategy",
    "lightning_gnn_dist.training_cli": "lightning_gnn_dist.lightning.cli",
    "lightning_gnn_dist.comm.exchange": "lightning_gnn_dist.comm",
    "lightning_gnn_dist.comm.cached_plots": "lightning_gnn_dist.plots.cached",
    "lightning_gnn_dist.data.datamodule": "lightning_gnn_dist.lightning.datamodule",
    "lightning_gnn_dist.data.graph_store": "lightning_gnn_dist.loaders.graph_store",
    "lightning_gnn_dist.data.neighbor_loader": "lightning_gnn_dist.loaders.neighbor",
    "lightning_gnn_dist.data.subgraph_loader": "lightning_gnn_dist.loaders.subgraph",
}

#: Names that a package exported in 0.1 and no longer holds: package → {name: new module}.
MOVED_NAMES: dict[str, dict[str, str]] = {
    "lightning_gnn_dist.data": {
        "LocalGraphStore": "lightning_gnn_dist.loaders",
        "NeighborLoader": "lightning_gnn_dist.loaders",
        "PartitionedGraphStore": "lightning_gnn_dist.loaders",
    },
}


def _warn(old: str, new: str) -> None:
    warnings.warn(
        f"{old} moved to {new}; import it from there (the old path is removed in 0.2)",
        DeprecationWarning,
        stacklevel=3,
    )


class _ForwardingModule(types.ModuleType):
    """A stand-in for a moved module: every attribute is read from the new module."""

    def __init__(self, old: str, new: str) -> None:
        super().__init__(old, f"Moved to :mod:`{new}`.")
        self.__lgd_target__ = new

    def __getattr__(self, name: str):
        return getattr(importlib.import_module(self.__lgd_target__), name)

    def __dir__(self) -> list[str]:
        return dir(importlib.import_module(self.__lgd_target__))


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname in MOVED_MODULES:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        new = MOVED_MODULES[spec.name]
        _warn(spec.name, new)
        return _ForwardingModule(spec.name, new)

    def exec_module(self, module) -> None:
        importlib.import_module(module.__lgd_target__)  # fail now, not at first attribute


def moved_attribute(package: str, name: str):
    """The object an old ``package.name`` path meant, or raise ``AttributeError``."""
    old = f"{package}.{name}"
    if old in MOVED_MODULES:
        return importlib.import_module(old)
    new = MOVED_NAMES.get(package, {}).get(name)
    if new is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    _warn(old, f"{new}.{name}")
    value = getattr(importlib.import_module(new), name)
    setattr(sys.modules[package], name, value)  # warn once per process
    return value


def install() -> None:
    """Register the finder (once) and the packages' ``__getattr__`` for moved names, each as
    its package is imported (importing them here would make ``import lightning_gnn_dist``
    load torch)."""
    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())
    for package in MOVED_NAMES:
        when_imported(package, _forward_moved_names)


def _forward_moved_names(module: types.ModuleType) -> None:
    if "__getattr__" not in vars(module):
        package = module.__name__
        module.__getattr__ = lambda name: moved_attribute(package, name)

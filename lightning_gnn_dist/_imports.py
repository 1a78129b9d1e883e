"""Run a function once a module has been imported, without importing it (a post-import hook).

``import lightning_gnn_dist`` must stay light (the command line answers ``--help`` and usage
errors before torch or Lightning load), yet keep its promise to users: ``strategy="gnn_ddp"``
works in a Trainer of whichever Lightning namespace they import, before or after the package.
:func:`when_imported` is how: it calls back at once for a module already imported, otherwise
right after the module's own code has run, from a finder at the front of ``sys.meta_path``.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
import types
import warnings
from collections.abc import Callable

_CALLBACKS: dict[str, list[Callable[[types.ModuleType], None]]] = {}
_LOCK = threading.Lock()


def when_imported(name: str, callback: Callable[[types.ModuleType], None]) -> None:
    """Call ``callback(module)`` once module ``name`` is imported: now if it already is, else
    right after its code has run (before the ``import`` statement that loads it returns).

    A module still initialising when this is called (it imports this package itself) is not
    hooked: its import is already under way.

    Args:
        name: the module's full name, e.g. ``"pytorch_lightning"`` or ``"lightning.pytorch"``.
        callback: takes the module; an exception it raises becomes a warning (the user's import
            of ``name`` must not fail because of it).
    """
    module = sys.modules.get(name)
    if module is not None:
        spec = getattr(module, "__spec__", None)
        if not getattr(spec, "_initializing", False):
            _call(callback, module)
        return
    with _LOCK:
        _CALLBACKS.setdefault(name, []).append(callback)
        if not any(isinstance(finder, _PostImportFinder) for finder in sys.meta_path):
            sys.meta_path.insert(0, _PostImportFinder())


def _call(callback: Callable[[types.ModuleType], None], module: types.ModuleType) -> None:
    try:
        callback(module)
    except Exception as error:  # noqa: BLE001 (reported, not raised: see when_imported)
        warnings.warn(
            f"lightning_gnn_dist: {getattr(callback, '__qualname__', callback)} after importing "
            f"{module.__name__} failed: {type(error).__name__}: {error}",
            RuntimeWarning,
            stacklevel=2,
        )


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a hooked name it asks the finders behind it and wraps the
    loader of the spec they return, so that the callbacks run after the module's code."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _CALLBACKS:
            return None
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if finder is self or find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _CallbackLoader(spec.loader)
        return spec


class _CallbackLoader(importlib.abc.Loader):
    """The module's own loader, then the callbacks; the module keeps its own loader."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__loader__ = module.__spec__.loader = self.loader  # as if never wrapped
        self.loader.exec_module(module)
        with _LOCK:
            callbacks = _CALLBACKS.pop(module.__name__, [])
            if not _CALLBACKS:
                sys.meta_path[:] = [
                    f for f in sys.meta_path if not isinstance(f, _PostImportFinder)
                ]
        for callback in callbacks:
            _call(callback, module)

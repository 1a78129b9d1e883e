"""The two Lightning namespaces: ``pytorch_lightning`` (package ``pytorch-lightning``) and
``lightning.pytorch`` (package ``lightning``).

They are separate class hierarchies with separate strategy registries: a strategy, datamodule or
callback built on one is rejected by the other's Trainer. This module is the one place that knows
which are installed and which one an object belongs to.

Every Lightning-facing class of the package (strategy, datamodule, callbacks, ``NodeClassifier``)
is written once as a *namespace-neutral* class deriving from :class:`LightningNeutral` and naming
its Lightning base (``lightning_base="callbacks.Callback"``). The concrete class of a namespace,
``class X(Neutral, <namespace>.<base>)``, is generated on first use; zero-argument ``super()``
in the neutral body resolves to that namespace's base through the MRO. ``isinstance(obj,
Neutral)`` holds for the classes of every namespace.

Which namespace ``Neutral(...)`` builds (:func:`namespace_in_use`):

1. inside ``with lightning_namespace(name):`` that one (the command line sets it from the model);
2. otherwise the namespace the calling code imported: the nearest calling module (outside this
   package and Lightning's own) whose globals reference exactly one of ``lightning`` /
   ``lightning.pytorch`` and ``pytorch_lightning`` (modules, classes or functions from them);
3. otherwise ``$LGD_LIGHTNING_NAMESPACE``, else ``pytorch_lightning`` when installed.

``Neutral.for_namespace(name)`` returns the concrete class explicitly (e.g. to subclass it).
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

PYTORCH_LIGHTNING = "pytorch_lightning"
LIGHTNING_PYTORCH = "lightning.pytorch"
_PREFERENCE = (PYTORCH_LIGHTNING, LIGHTNING_PYTORCH)
_ALIASES = {"pl": PYTORCH_LIGHTNING, "lightning": LIGHTNING_PYTORCH, "L": LIGHTNING_PYTORCH}
# Frames of these top-level packages are never "the caller" (they construct objects on the
# user's behalf: jsonargparse for the CLI, Lightning for registries, pickle for spawn).
_LIBRARY_PACKAGES = frozenset(
    {
        "lightning_gnn_dist",
        "lightning",
        "pytorch_lightning",
        "lightning_fabric",
        "lightning_utilities",
        "jsonargparse",
        "importlib",
        "copy",
        "copyreg",
        "pickle",
        "functools",
        "contextlib",
        "runpy",
    }
)


def _installed() -> dict[str, types.ModuleType]:
    found = {}
    for name in _PREFERENCE:
        try:
            found[name] = importlib.import_module(name)
        except ImportError:
            continue
    if not found:
        raise ImportError(
            "lightning_gnn_dist needs PyTorch Lightning: pip install pytorch-lightning (or lightning)"
        )
    return found


NAMESPACES: dict[str, types.ModuleType] = _installed()
"""Installed namespaces, ``{"pytorch_lightning": module, "lightning.pytorch": module}``."""

_current: ContextVar[str | None] = ContextVar("lightning_gnn_dist_namespace", default=None)


def resolve_namespace(name: str | types.ModuleType) -> str:
    """The canonical name (``"pytorch_lightning"`` or ``"lightning.pytorch"``) of ``name``, which
    may be a module (``lightning``, ``lightning.pytorch``, ``pytorch_lightning``) or one of the
    names ``"pytorch_lightning"``, ``"pl"``, ``"lightning"``, ``"lightning.pytorch"``."""
    if isinstance(name, types.ModuleType):
        name = name.__name__
    canonical = _ALIASES.get(name, name)
    if canonical not in _PREFERENCE:
        raise ValueError(
            f"unknown Lightning namespace {name!r}; use 'pytorch_lightning' or 'lightning.pytorch'"
        )
    if canonical not in NAMESPACES:
        package = "lightning" if canonical == LIGHTNING_PYTORCH else "pytorch-lightning"
        raise ValueError(
            f"Lightning namespace {canonical!r} is not installed: pip install {package}"
        )
    return canonical


def _namespace_of_name(dotted: str) -> str | None:
    if dotted == PYTORCH_LIGHTNING or dotted.startswith(PYTORCH_LIGHTNING + "."):
        return PYTORCH_LIGHTNING
    if dotted == "lightning" or dotted.startswith("lightning."):
        return LIGHTNING_PYTORCH
    return None


def namespace_of(obj: Any) -> str | None:
    """The namespace a Lightning object or class belongs to (``None`` for neutral or foreign
    objects): the first class in its MRO defined in a Lightning namespace."""
    cls = obj if isinstance(obj, type) else type(obj)
    for klass in cls.__mro__:
        found = _namespace_of_name(klass.__module__ or "")
        if found is not None:
            return found
    return None


def _namespaces_referenced(module_globals: dict[str, Any]) -> set[str]:
    found = set()
    for value in list(module_globals.values()):
        if isinstance(value, types.ModuleType):
            name = value.__name__
        elif isinstance(value, type | types.FunctionType):
            name = getattr(value, "__module__", None) or ""
        else:
            continue
        namespace = _namespace_of_name(name)
        if namespace is not None:
            found.add(namespace)
    return found


def _caller_namespace() -> str | None:
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__") or ""
        if module.split(".")[0] not in _LIBRARY_PACKAGES:
            found = _namespaces_referenced(frame.f_globals) & set(NAMESPACES)
            if len(found) == 1:
                return found.pop()
            if found:  # the caller uses both: no way to tell
                return None
        frame = frame.f_back
    return None


def default_namespace() -> str:
    """``$LGD_LIGHTNING_NAMESPACE`` if set, else ``pytorch_lightning`` when installed, else
    ``lightning.pytorch``."""
    forced = os.environ.get("LGD_LIGHTNING_NAMESPACE")
    return resolve_namespace(forced) if forced else next(iter(NAMESPACES))


def namespace_in_use() -> str:
    """The namespace a neutral class builds now (see the module docstring for the rule)."""
    return _current.get() or _caller_namespace() or default_namespace()


@contextmanager
def lightning_namespace(name: str | types.ModuleType) -> Iterator[str]:
    """Build neutral classes (``GNNStrategy()``, callbacks, ...) for ``name`` inside the block.

    Args:
        name: ``"lightning.pytorch"`` / ``"lightning"`` / ``"pytorch_lightning"`` or the module.
    """
    token = _current.set(resolve_namespace(name))
    try:
        yield _current.get()
    finally:
        _current.reset(token)


def lightning_module(namespace: str) -> types.ModuleType:
    """The top module of ``namespace`` (``pytorch_lightning`` or ``lightning.pytorch``)."""
    return NAMESPACES[resolve_namespace(namespace)]


def lightning_classes(qualified: str) -> tuple[type, ...]:
    """``qualified`` (e.g. ``"LightningModule"``, ``"strategies.DDPStrategy"``) of every installed
    namespace, for ``isinstance`` checks that must accept both."""
    return tuple(_lookup(module, qualified) for module in NAMESPACES.values())


def _lookup(module: types.ModuleType, qualified: str) -> Any:
    obj: Any = module
    for part in qualified.split("."):
        obj = getattr(obj, part)
    return obj


def _variant_attribute(namespace: str) -> str:
    return "_" + namespace.replace(".", "_")


class _Variant:
    """Class attribute ``Neutral._<namespace>``: the concrete class of that namespace, made on
    first access. It names the concrete classes for pickle (spawned workers make their own)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def __get__(self, instance: Any, owner: type) -> type:
        if owner._lightning_namespace not in (None, self.namespace):
            raise AttributeError(f"{owner.__qualname__} is a {owner._lightning_namespace} class")
        return owner.for_namespace(self.namespace)


class LightningNeutral:
    """Base of the package's namespace-neutral Lightning classes.

    Subclass it with the Lightning base the concrete classes extend, relative to the namespace::

        class CommunicationMonitor(LightningNeutral, lightning_base="callbacks.Callback"): ...

    ``CommunicationMonitor(...)`` then returns an instance of the concrete class of the namespace
    in use; user subclasses of a neutral class are neutral too.
    """

    _lightning_base: str | None = None
    _lightning_namespace: str | None = None  # set on concrete classes only

    def __init_subclass__(cls, lightning_base: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if lightning_base is not None:
            cls._lightning_base = lightning_base
        if "_lightning_namespace" not in cls.__dict__ and cls._lightning_namespace is None:
            cls._variants = {}  # namespace -> concrete class, made by for_namespace

    def __new__(cls, *args: Any, **kwargs: Any):
        if cls._lightning_namespace is None:
            cls = cls.for_namespace(namespace_in_use())
        return super().__new__(cls)

    @classmethod
    def for_namespace(cls, namespace: str | types.ModuleType) -> type:
        """The concrete class of ``namespace`` (``"lightning.pytorch"``, ``"pytorch_lightning"``,
        ``"lightning"`` or the module) for this neutral class.

        Raises:
            ValueError: if this class is already concrete for the other namespace.
        """
        namespace = resolve_namespace(namespace)
        if cls._lightning_namespace is not None:
            if cls._lightning_namespace != namespace:
                raise ValueError(
                    f"{cls.__qualname__} is a {cls._lightning_namespace} class; "
                    f"use the neutral class's for_namespace({namespace!r})"
                )
            return cls
        variant = cls.__dict__["_variants"].get(namespace)
        if variant is None:
            if cls._lightning_base is None:
                raise TypeError(f"{cls.__qualname__} names no lightning_base")
            base = _lookup(NAMESPACES[namespace], cls._lightning_base)
            attribute = _variant_attribute(namespace)
            variant = type(cls)(
                cls.__name__,
                (cls, base),
                {
                    "__module__": cls.__module__,
                    "__qualname__": f"{cls.__qualname__}.{attribute}",
                    "__doc__": cls.__doc__,
                    "_lightning_namespace": namespace,
                },
            )
            cls.__dict__["_variants"][namespace] = variant
        return variant

    @classmethod
    def load_from_checkpoint(cls, *args: Any, **kwargs: Any) -> Any:
        """Lightning's ``load_from_checkpoint`` of the concrete class of the namespace in use
        (modules and datamodules)."""
        concrete = cls.for_namespace(cls._lightning_namespace or namespace_in_use())
        return super(LightningNeutral, concrete).load_from_checkpoint(*args, **kwargs)


for _namespace in _PREFERENCE:
    setattr(LightningNeutral, _variant_attribute(_namespace), _Variant(_namespace))

"""Dataset specs, the registry of dataset kinds and :func:`load_dataset`.

A dataset is named by a spec string ``KIND[:ARG][?key=value&key=value...]``:

.. code-block:: text

    digits                                  scikit-learn digits, 10-NN graph (the default)
    digits?k=15&seed=1
    metis:/data/4elt.graph                  METIS graph (.gz too), synthetic x/y/masks
    mtx:/data/web-Google.mtx?features=64    Matrix Market (SuiteSparse)
    edgelist:/data/g.txt?directed=false&num_nodes=100
    sbm?num_nodes=5000&num_classes=5&avg_degree=12&p_ratio=20
    rmat?scale=16&edge_factor=16            directed power-law graph (alias: powerlaw)
    ogb:ogbn-arxiv?root=/data/ogb           OGB through ogb's PyG loader (ogbn-mag: typed)
    chunked:/data/g/metadata.json           DGL's chunked graph format, memory-mapped (.chunked)
    mag?scale=0.05                          synthetic graph shaped like ogbn-mag (typed)

Every kind returns the same canonical form (see :func:`load_dataset`). A new kind is one
function plus a :func:`register_dataset_kind` decorator; a kind whose function returns a
``HeteroData`` is a typed graph (its homogeneous view, :mod:`~lightning_gnn_dist.data.hetero`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data, HeteroData

from .contract import canonical_features, check_dataset_argument, enforce_contract
from .errors import DatasetError
from .formats import read_edgelist, read_metis, read_mtx
from .graph import canonicalize, distinct_edges
from .hetero import typed_graph
from .hetero_sources import mag
from .limits import check_graph_fits
from .ogb import DEFAULT_OGB_ROOT, load_ogb
from .synthetic import add_synthetic_features, random_split_masks, rmat, sbm
from .synthetic_attrs import ATTRIBUTE_OPTIONS, add_synthetic_attributes, proteins
from .targets import canonical_targets

__all__ = [
    "DATASET_KINDS",
    "DatasetError",
    "DatasetKind",
    "DatasetSpec",
    "check_dataset_argument",
    "load_dataset",
    "load_digits_graph",
    "parse_dataset_spec",
    "register_dataset_kind",
    "spec_is_typed",
]

#: Options of the step that fills in missing features, labels and masks (with their defaults).
SYNTHETIC_OPTIONS: dict[str, tuple[type, Any]] = {
    "features": (int, 32),
    "classes": (int, 8),
    "seed": (int, 0),
}


ATTRIBUTES = frozenset(ATTRIBUTE_OPTIONS)
"""Spec options applied after loading (:func:`~.synthetic_attrs.add_synthetic_attributes`),
not passed to a kind's ``load``."""

_FILLED = ("x", "y", "train_mask", "val_mask", "test_mask")


@dataclass(frozen=True)
class DatasetSpec:
    """A parsed dataset spec ``KIND[:ARG][?key=value&...]``.

    Args:
        kind (str): the dataset kind, lower case (e.g. ``"metis"``).
        arg (str, optional): the part after ``:`` (a path, an OGB name). (default: ``None``)
        options (Mapping[str, str]): the ``key=value`` pairs, values still strings.
            (default: ``{}``)
    """

    kind: str
    arg: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        text = self.kind if self.arg is None else f"{self.kind}:{self.arg}"
        if self.options:
            text += "?" + "&".join(f"{k}={v}" for k, v in self.options.items())
        return text


@dataclass(frozen=True)
class DatasetKind:
    """A registered kind of dataset.

    Args:
        name (str): the ``KIND`` of the spec.
        load (Callable): ``load(arg, options) -> Data`` with ``options`` typed and complete
            (defaults filled in); it may leave ``x``, ``y`` and masks out.
        options (Mapping[str, tuple[type, Any]]): option name -> (``int``, ``float``, ``bool``
            or ``str``; default). A default of ``None`` means "not set".
        arg (str, optional): what ``ARG`` is (e.g. ``"PATH"``), or ``None`` if the kind takes
            no ``ARG``. (default: ``None``)
        description (str): one line for listings. (default: ``""``)
        aliases (tuple[str, ...]): other ``KIND`` names. (default: ``()``)
        canonical (bool): ``load`` returns the canonical form itself (checked, sorted, with
            ``task``), which :func:`load_dataset` returns as it is instead of copying it into
            canonical form (a memory-mapped graph stays on disk). (default: ``False``)
        typed (bool): ``load`` may return a ``HeteroData`` (a typed graph, which takes
            ``target_type=``). (default: ``False``)
    """

    name: str
    load: Callable[[str | None, dict[str, Any]], Data]
    options: Mapping[str, tuple[type, Any]]
    arg: str | None = None
    description: str = ""
    aliases: tuple[str, ...] = ()
    canonical: bool = False
    typed: bool = False

    def usage(self) -> str:
        """E.g. ``"metis:PATH?features=32&classes=8&seed=0"``."""
        text = self.name if self.arg is None else f"{self.name}:{self.arg}"
        if self.options:
            text += "?" + "&".join(f"{k}={d}" for k, (_, d) in self.options.items())
        return text


#: Registered kinds by name and alias.
DATASET_KINDS: dict[str, DatasetKind] = {}


def register_dataset_kind(
    name: str,
    *,
    options: Mapping[str, tuple[type, Any]],
    arg: str | None = None,
    description: str = "",
    aliases: tuple[str, ...] = (),
    canonical: bool = False,
    typed: bool = False,
) -> Callable[[Callable[[str | None, dict[str, Any]], Data]], Callable[..., Data]]:
    """Register ``load(arg, options) -> Data`` as the dataset kind ``name``.

    Args:
        name (str): the ``KIND`` of the spec (lower case).
        options (Mapping[str, tuple[type, Any]]): option name -> (type, default).
        arg (str, optional): what ``ARG`` is, or ``None`` if none is taken. (default: ``None``)
        description (str): one line for listings. (default: ``""``)
        aliases (tuple[str, ...]): other names of the kind. (default: ``()``)
        canonical (bool): ``load`` returns the canonical form itself (see
            :class:`DatasetKind`). (default: ``False``)
        typed (bool): ``load`` may return a ``HeteroData``. (default: ``False``)
    """

    def decorator(load: Callable[[str | None, dict[str, Any]], Data]) -> Callable[..., Data]:
        kind = DatasetKind(
            name, load, dict(options), arg, description, tuple(aliases), canonical, typed
        )
        for key in (name, *aliases):
            if key in DATASET_KINDS:
                raise ValueError(f"dataset kind {key!r} is already registered")
            DATASET_KINDS[key] = kind
        return load

    return decorator


def parse_dataset_spec(spec: str) -> DatasetSpec:
    """Split ``KIND[:ARG][?key=value&key=value...]`` into its parts.

    ``KIND`` ends at the first ``:`` or ``?``; ``ARG`` runs to the first ``?`` (so a Windows
    path ``metis:C:\\g.graph`` works, a path containing ``?`` does not). Values stay strings;
    :func:`load_dataset` converts them.

    Args:
        spec (str): the dataset spec.

    Returns:
        The :class:`DatasetSpec`.

    Raises:
        DatasetError: empty kind, an option without ``=``, an empty key or a repeated key.
    """
    if not isinstance(spec, str):
        raise TypeError(f"a dataset spec is a string like 'digits' (got {type(spec).__name__})")
    body, _, query = spec.strip().partition("?")
    kind, colon, arg = body.partition(":")
    kind = kind.strip().lower()
    if not kind:
        raise DatasetError(
            f"{spec!r}: the dataset spec has no kind; expected KIND[:ARG][?key=value&...], "
            f"e.g. 'digits' or 'metis:/path/g.graph'"
        )
    options: dict[str, str] = {}
    for item in query.split("&") if query else []:
        if not item:
            continue
        key, equals, value = item.partition("=")
        key = key.strip()
        if not equals or not key:
            raise DatasetError(
                f"{spec!r}: option {item!r} is not key=value; write e.g. '{kind}?seed=1'"
            )
        if key in options:
            raise DatasetError(f"{spec!r}: option {key!r} is given twice")
        options[key] = value.strip()
    return DatasetSpec(kind, arg.strip() if colon else None, options)


def spec_is_typed(spec: str) -> bool | None:
    """Whether the dataset spec names a typed graph: ``True`` (``mag``), ``False`` (a
    homogeneous kind, or one not registered: loading reports it), or ``None`` when only loading
    tells (``ogb:NAME``)."""
    try:
        parsed = parse_dataset_spec(spec)
    except DatasetError:
        return False
    kind = DATASET_KINDS.get(parsed.kind)
    if kind is None or not kind.typed:
        return False
    return None if kind.arg is not None else True


def _convert(source: str, key: str, value: Any, kind: type) -> Any:
    """Convert one option value (a spec string or a Python override) to ``kind``."""
    if value is None:
        return None
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    problem = f"{source}: option {key}={value!r} must be {names[kind]}"
    if isinstance(value, str) and kind is not str:
        text = value.strip().lower()
        if kind is bool:
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise DatasetError(problem)
        try:
            number = int(text) if kind is int else float(text)
        except ValueError:
            raise DatasetError(problem) from None
        if kind is float and not math.isfinite(number):
            raise DatasetError(problem + " (finite)")
        return number
    if kind is bool and isinstance(value, bool | np.bool_):
        return bool(value)
    if kind is int and isinstance(value, int | np.integer) and not isinstance(value, bool):
        return int(value)
    if kind is float and isinstance(value, int | float | np.integer | np.floating):
        if isinstance(value, bool) or not math.isfinite(float(value)):
            raise DatasetError(problem + " (finite)")
        return float(value)
    if kind is str and isinstance(value, str | os.PathLike):
        return os.fspath(value)
    raise DatasetError(problem)


def _typed_options(
    source: str,
    declared: Mapping[str, tuple[type, Any]],
    given: Mapping[str, Any],
    kind_name: str,
) -> dict[str, Any]:
    options = {key: default for key, (_, default) in declared.items()}
    for key, value in given.items():
        if key not in declared:
            known = ", ".join(declared) or "none"
            raise DatasetError(
                f"{source}: unknown option {key}={value!r} for dataset kind {kind_name!r}; "
                f"known options: {known}"
            )
        options[key] = _convert(source, key, value, declared[key][0])
    return options


def load_dataset(
    spec: str | Data | HeteroData,
    *,
    task: str | None = None,
    target_type: str | None = None,
    **overrides: Any,
) -> Data:
    """Load a dataset into the project's canonical form.

    Args:
        spec (str, Data or HeteroData): a spec ``KIND[:ARG][?key=value&...]`` (see the module
            docstring and :data:`DATASET_KINDS`), or an in-memory ``Data``; for a ``Data`` the
            options are ``features``, ``classes`` and ``seed`` of the synthetic fill-in. A
            ``HeteroData`` (or a typed kind: ``mag``, ``ogb:ogbn-mag``) gives its homogeneous
            view (:func:`~lightning_gnn_dist.data.hetero.typed_graph`; option ``seed``: of the
            split made when the target type has no masks).
        task (str, optional): the targets' task (default: inferred from ``y``).
        target_type (str, optional): a typed graph's node type to predict (default: the one
            type with ``y``); refused for a homogeneous graph.
        **overrides: option values that replace those of the spec, e.g.
            ``load_dataset("sbm", num_nodes=500)``.

    Returns:
        A canonical ``Data`` (passed through
        :func:`~lightning_gnn_dist.data.graph.canonicalize`): ``x`` ``[N, d] float32``,
        ``y`` ``[N] int64`` (``-1`` = unlabelled), ``edge_index`` ``[2, E] int64`` coalesced
        (row 0 = source ``j``, row 1 = target ``i``), ``train_mask``, ``val_mask``,
        ``test_mask`` ``[N] bool``, ``num_nodes`` and ``name`` (e.g. ``"digits"``, ``"4elt"``).
        Missing ``x``/``y``/masks are filled by
        :func:`~lightning_gnn_dist.data.synthetic.add_synthetic_features`. The same spec gives
        bit-identical tensors (all randomness is seeded; the default seed is 0).

    Raises:
        FileNotFoundError: a file kind whose file does not exist.
        DatasetError: (a ``ValueError``) unknown kind or option, a non-numeric option value, a
            malformed file (the message names file and line), or labels/masks of the wrong
            shape.
        ValueError: an empty graph.

    Example:
        >>> data = load_dataset("digits")
        >>> data.x.shape, data.num_edges > 0
        (torch.Size([1797, 64]), True)
    """
    if isinstance(spec, HeteroData):
        source = "in-memory HeteroData"
        options = _typed_options(source, {"seed": (int, 0)}, overrides, "HeteroData")
        return typed_graph(spec, target_type, task, seed=options["seed"])
    if isinstance(spec, Data):
        source = f"in-memory Data ({getattr(spec, 'name', None) or 'unnamed'})"
        options = _typed_options(source, SYNTHETIC_OPTIONS, overrides, "Data")
        given = {}
        name = spec.name if isinstance(getattr(spec, "name", None), str) else "graph"
        data = spec
    else:
        parsed = parse_dataset_spec(spec)
        source = str(spec)
        quoted = repr(source)
        kind = DATASET_KINDS.get(parsed.kind)
        if kind is None:
            known = ", ".join(sorted(DATASET_KINDS))
            raise DatasetError(
                f"{quoted}: unknown dataset kind {parsed.kind!r}; known kinds: {known}"
            )
        if kind.arg is not None and not parsed.arg:
            raise DatasetError(
                f"{quoted}: dataset kind {kind.name!r} needs a {kind.arg}; usage: {kind.usage()}"
            )
        if kind.arg is None and parsed.arg is not None:
            raise DatasetError(
                f"{quoted}: dataset kind {kind.name!r} takes no ':{parsed.arg}' part; "
                f"usage: {kind.usage()}"
            )
        if target_type is not None and not kind.typed:
            raise DatasetError(
                f"{quoted}: target_type={target_type!r} names a node type of a heterogeneous "
                f"graph, but dataset kind {kind.name!r} is homogeneous; drop target_type"
            )
        given = {**parsed.options, **overrides}
        options = _typed_options(quoted, kind.options, given, kind.name)
        data = kind.load(parsed.arg, {k: options[k] for k in options if k not in ATTRIBUTES})
        if isinstance(data, HeteroData):
            name = data["name"] if "name" in data else kind.name
            return typed_graph(data, target_type, task, name=name)
        name = data.name if isinstance(getattr(data, "name", None), str) else kind.name
        if kind.canonical:
            if task is not None and task != data.task:  # the targets read as another task
                data.y, data.task = canonical_targets(data.y, data.num_nodes, source, task)
            data.name = name
            return data

    if target_type is not None:
        raise DatasetError(
            f"{source}: target_type={target_type!r} names a node type of a heterogeneous graph, "
            "but this graph has one type; drop target_type"
        )
    data = canonicalize(data, source=source)
    if getattr(data, "x", None) is not None:  # checked before teacher labels are made from x
        data.x = canonical_features(data.x, data.num_nodes, source)
    if getattr(data, "y", None) is not None:
        data.y, _ = canonical_targets(data.y, data.num_nodes, source, task)
    if any(getattr(data, key, None) is None for key in _FILLED):
        features = options.get("features", SYNTHETIC_OPTIONS["features"][1])
        if getattr(data, "x", None) is None:
            check_graph_fits(
                source, data.num_nodes, data.edge_index.size(1), features, what="the graph"
            )
        data = add_synthetic_features(
            data,
            features=features,
            classes=options.get("classes", SYNTHETIC_OPTIONS["classes"][1]),
            seed=options.get("seed", SYNTHETIC_OPTIONS["seed"][1]),
        )
    if "targets" in options:  # the kinds with synthetic targets and edge attributes
        targets = options["targets"] if "targets" in given or task is None else task
        data = add_synthetic_attributes(
            data,
            targets=targets,
            edge_features=options["edge_features"],
            edge_weights=options["edge_weights"],
            seed=options.get("seed", 0),
            source=source,
        )
    data = enforce_contract(data, source, task)
    data.name = name
    return data


# --------------------------------------------------------------------------------------------
# built-in kinds


def load_digits_graph(k: int = 10, seed: int = 0) -> Data:
    """scikit-learn's handwritten digits as a node-classification graph.

    1,797 vertices (8x8 images), 64 features (pixel intensities standardised per feature to
    mean 0 and standard deviation 1; constant pixels become 0), 10 classes. Each vertex is
    joined to its ``k`` nearest neighbours in raw pixel space (Euclidean; ties broken by the
    lower vertex id, distances are exact integers, so the graph is platform independent), and
    the graph is made undirected. The split is :func:`random_split_masks` 60/20/20.

    Args:
        k (int): neighbours per vertex before symmetrisation, ``1..1796``. (default: ``10``)
        seed (int): seed of the train/val/test split. (default: ``0``)

    Returns:
        ``Data`` with ``x`` ``[1797, 64] float32``, ``y`` ``[1797] int64``, ``edge_index``
        ``[2, E] int64`` (both directions of every edge), masks and ``name = "digits"``.
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = np.asarray(digits.data, dtype=np.float64)  # integers 0..16
    num_nodes = pixels.shape[0]
    if not 1 <= k < num_nodes:
        raise DatasetError(f"digits: option k={k} must be in 1..{num_nodes - 1}")
    # Exact: all products and sums are small integers, so float64 BLAS rounds nothing.
    squared = (pixels**2).sum(axis=1)
    distance = squared[:, None] + squared[None, :] - 2.0 * (pixels @ pixels.T)
    np.fill_diagonal(distance, np.inf)
    neighbours = np.argsort(distance, axis=1, kind="stable")[:, :k]  # [N, k]
    centre = np.repeat(np.arange(num_nodes), k)
    src = np.concatenate([neighbours.ravel(), centre])
    dst = np.concatenate([centre, neighbours.ravel()])
    src, dst = distinct_edges(src, dst, num_nodes)  # mutual neighbours: one edge, not two

    std = pixels.std(axis=0)
    x = (pixels - pixels.mean(axis=0)) / np.where(std > 0, std, 1.0)
    train, val, test = random_split_masks(num_nodes, seed)
    data = Data(
        x=torch.from_numpy(x.astype(np.float32)),
        y=torch.from_numpy(np.asarray(digits.target, dtype=np.int64)),
        edge_index=torch.from_numpy(np.stack([src, dst]).astype(np.int64)),
        train_mask=train,
        val_mask=val,
        test_mask=test,
        num_nodes=num_nodes,
    )
    data = canonicalize(data, source="digits")
    data.name = "digits"
    return data


@register_dataset_kind(
    "digits",
    options={"k": (int, 10), "seed": (int, 0)},
    description="scikit-learn digits (1,797 images, 64 features, 10 classes), k-NN graph",
)
def _digits(arg: str | None, options: dict[str, Any]) -> Data:
    return load_digits_graph(k=options["k"], seed=options["seed"])


@register_dataset_kind(
    "metis",
    options={**SYNTHETIC_OPTIONS, **ATTRIBUTE_OPTIONS},
    arg="PATH",
    description="METIS .graph file (undirected); synthetic features, labels and split",
)
def _metis(arg: str | None, options: dict[str, Any]) -> Data:
    return read_metis(arg)


@register_dataset_kind(
    "mtx",
    options={"weights": (bool, False), **SYNTHETIC_OPTIONS, **ATTRIBUTE_OPTIONS},
    arg="PATH",
    description="Matrix Market coordinate file, A[i, j] != 0 is the edge j -> i "
    "(weights=true: its values as edge_weight)",
)
def _mtx(arg: str | None, options: dict[str, Any]) -> Data:
    return read_mtx(arg, weights=options["weights"])


@register_dataset_kind(
    "edgelist",
    options={
        "directed": (bool, True),
        "num_nodes": (int, None),
        "weights": (bool, False),
        **SYNTHETIC_OPTIONS,
        **ATTRIBUTE_OPTIONS,
    },
    arg="PATH",
    description="'src dst [weight]' per line (0-based ids, whitespace or commas)",
)
def _edgelist(arg: str | None, options: dict[str, Any]) -> Data:
    return read_edgelist(
        arg,
        directed=options["directed"],
        num_nodes=options["num_nodes"],
        weights=options["weights"],
    )


@register_dataset_kind(
    "sbm",
    options={
        "num_nodes": (int, 1000),
        "num_classes": (int, 4),
        "avg_degree": (float, 10.0),
        "p_ratio": (float, 10.0),
        "features": (int, 32),
        "noise": (float, 3.0),
        "seed": (int, 0),
        **ATTRIBUTE_OPTIONS,
    },
    description="stochastic block model with class-informative features (undirected)",
)
def _sbm(arg: str | None, options: dict[str, Any]) -> Data:
    return sbm(**options)


@register_dataset_kind(
    "rmat",
    options={
        "scale": (int, 14),
        "edge_factor": (int, 16),
        "a": (float, 0.57),
        "b": (float, 0.19),
        "c": (float, 0.19),
        **SYNTHETIC_OPTIONS,
        **ATTRIBUTE_OPTIONS,
    },
    aliases=("powerlaw",),
    description="directed R-MAT power-law graph on 2**scale vertices",
)
def _rmat(arg: str | None, options: dict[str, Any]) -> Data:
    return rmat(**options)


@register_dataset_kind(
    "proteins",
    options={
        "num_nodes": (int, 2000),
        "avg_degree": (float, 20.0),
        "edge_features": (int, 8),
        "tasks": (int, 112),
        "species": (int, 8),
        "seed": (int, 0),
    },
    description="ogbn-proteins-shaped: edge_attr [E, 8], 112 binary tasks, node_species",
)
def _proteins(arg: str | None, options: dict[str, Any]) -> Data:
    return proteins(**options)


@register_dataset_kind(
    "ogb",
    options={"root": (str, DEFAULT_OGB_ROOT)},
    arg="NAME",
    description="OGB node-property dataset via ogb's PygNodePropPredDataset, e.g. ogbn-arxiv "
    "(ogbn-mag: a typed graph)",
    typed=True,
)
def _ogb(arg: str | None, options: dict[str, Any]) -> Data:
    return load_ogb(arg, root=options["root"])


@register_dataset_kind(
    "chunked",
    options={"cache": (str, None), "seed": (int, 0)},
    arg="PATH",
    description="DGL's chunked graph format (metadata.json + .npy/CSV/Parquet chunks), ingested "
    "once into a memory-mapped canonical copy (cache=DIR; seed: split without masks)",
    canonical=True,
)
def _chunked(arg: str | None, options: dict[str, Any]) -> Data:
    from .chunked_ingest import load_chunked

    return load_chunked(arg, cache=options["cache"], seed=options["seed"])


@register_dataset_kind(
    "mag",
    options={
        "scale": (float, 0.01),
        "features": (int, 128),
        "classes": (int, 32),
        "homophily": (float, 0.7),
        "signal": (float, 0.6),
        "reverse": (bool, True),
        "seed": (int, 0),
    },
    description="typed graph shaped like ogbn-mag (paper/author/institution/field_of_study, "
    "power-law degrees); scale=1 is ogbn-mag's size",
    typed=True,
)
def _mag(arg: str | None, options: dict[str, Any]) -> HeteroData:
    return mag(**options)

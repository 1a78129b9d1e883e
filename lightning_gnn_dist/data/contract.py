"""The dataset contract: what a graph must look like before it is partitioned, checked once.

:func:`check_dataset_argument` runs at construction of a datamodule (before any rank starts) on
an in-memory ``Data``: the targets fit the task, the features hold no ``NaN``, every tensor has
one row per vertex or per edge and no reserved name, and attributes that cannot be partitioned
are named in a warning. :func:`enforce_contract` gives a loaded graph its canonical dtypes and
shapes (:func:`~lightning_gnn_dist.data.datasets.load_dataset` calls it last).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from .attributes import graph_attributes
from .errors import DatasetError
from .targets import canonical_targets

_MASKS = ("train_mask", "val_mask", "test_mask")


def describe(data: Data) -> str:
    """``in-memory Data (name)``: how messages name an in-memory graph."""
    return f"in-memory Data ({getattr(data, 'name', None) or 'unnamed'})"


def check_dataset_argument(
    dataset: Any, task: str | None = None, target_type: str | None = None
) -> None:
    """Refuse, before anything is loaded or partitioned, a ``dataset`` argument that no data
    module can train on (cheap: one pass over ``x`` and ``y``, no copy of the graph).

    Args:
        dataset: a spec string, an in-memory ``Data`` or ``HeteroData``.
        task: the task ``y`` must fit (``None``: inferred), see
            :mod:`~lightning_gnn_dist.data.targets`.
        target_type: a ``HeteroData``'s node type to predict (``None``: the one type with
            ``y``); refused for an in-memory ``Data``.

    Raises:
        DatasetError: (a ``ValueError``) another type, a ``y`` that does not fit ``task`` (or no
            task), ``NaN`` or infinite features, a tensor whose first dimension is neither the
            number of vertices nor of edges, or an attribute with a name the loaders set
            themselves; for a ``HeteroData`` what
            :func:`~lightning_gnn_dist.data.hetero.check_hetero_data` refuses.

    Warns:
        UserWarning: attributes that cannot be partitioned (not tensors, or 0-dimensional):
            they are named and dropped.
    """
    from torch_geometric.data import HeteroData

    if isinstance(dataset, HeteroData):
        from .hetero import check_hetero_data

        check_hetero_data(dataset, target_type, task)
        return
    if isinstance(dataset, str):  # a spec's kind: checked with its target_type when loading
        return
    if not isinstance(dataset, Data):
        raise DatasetError(
            "dataset must be a spec string like 'digits', a torch_geometric Data or HeteroData "
            f"(got {type(dataset).__name__})"
        )
    if target_type is not None:
        raise DatasetError(
            f"target_type={target_type!r} names a node type of a heterogeneous graph, but the "
            "dataset is a homogeneous Data; drop target_type (or pass a HeteroData)"
        )
    source = describe(dataset)
    num_nodes = dataset.num_nodes
    y = getattr(dataset, "y", None)
    if y is not None and num_nodes is not None:
        canonical_targets(y, num_nodes, source, task)
    x = getattr(dataset, "x", None)
    if isinstance(x, Tensor) and x.is_floating_point():
        check_finite_features(x, source)
    try:
        attributes = graph_attributes(dataset)
    except ValueError as error:
        raise DatasetError(f"{source}: {error}") from None
    warn_unpartitioned(attributes.other, source)


def warn_unpartitioned(names: tuple[str, ...], source: str) -> None:
    """Name, in one warning, the attributes that no part and no batch will carry."""
    if names:
        warnings.warn(
            f"{source}: attribute(s) {', '.join(map(repr, names))} are not tensors with one row "
            "per vertex or per edge, so they cannot be partitioned: they are dropped (no part "
            "and no batch carries them); store per-vertex or per-edge values as tensors",
            UserWarning,
            stacklevel=3,
        )


def check_finite_features(x: Tensor, source: str) -> None:
    """Refuse ``NaN`` or infinite features, naming the first vertex and column.

    Raises:
        DatasetError: ``x`` holds a ``NaN`` or infinite value.
    """
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        position = bad.nonzero()[0].tolist()
        value = float(x[tuple(position)])
        where = f"vertex {position[0]}" + (f", column {position[1]}" if len(position) > 1 else "")
        raise DatasetError(
            f"{source}: x holds {value} at {where}; features must be finite: fill missing "
            "values first (e.g. torch.nan_to_num(x), or a column mean)"
        )


def canonical_features(x: Tensor, num_nodes: int, source: str) -> Tensor:
    """``[N]`` or ``[N, d]`` finite numbers → ``[N, d] float32``.

    Raises:
        DatasetError: another shape, or ``NaN``/infinite values.
    """
    if x.dim() == 1:
        x = x.unsqueeze(1)
    if x.dim() != 2 or x.size(0) != num_nodes:
        raise DatasetError(
            f"{source}: x must have shape [num_nodes={num_nodes}, d] (got {tuple(x.shape)})"
        )
    x = x.to(torch.float32).contiguous()
    check_finite_features(x, source)
    return x


def enforce_contract(data: Data, source: str, task: str | None = None) -> Data:
    """Cast ``x``, ``y`` and the masks to the canonical dtypes and shapes (or explain why not),
    with ``y`` in the canonical form of ``task`` (given or inferred); the task is recorded as
    ``data.task``.

    Raises:
        DatasetError: a value or shape that does not fit (the message names it).
    """
    num_nodes = data.num_nodes
    data.x = canonical_features(data.x, num_nodes, source)
    data.y, data.task = canonical_targets(data.y, num_nodes, source, task)
    for key in _MASKS:
        mask = data[key]
        if mask.shape != (num_nodes,):
            raise DatasetError(
                f"{source}: {key} must be a boolean mask of shape [{num_nodes}] "
                f"(got {tuple(mask.shape)}); convert index lists with "
                "torch_geometric.utils.index_to_mask"
            )
        if mask.dtype != torch.bool:
            if not bool(((mask == 0) | (mask == 1)).all()):
                raise DatasetError(f"{source}: {key} must hold only 0/1 or True/False values")
            mask = mask.bool()
        data[key] = mask
    return data

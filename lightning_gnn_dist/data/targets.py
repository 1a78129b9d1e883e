"""Node targets ``y``: which task they are, their canonical form and how many are labelled.

Three tasks, as PyG and torchmetrics name them:

============== ================================= ===================================================
task           canonical ``y``                   unlabelled
============== ================================= ===================================================
``multiclass`` ``[N] int64`` class ids           ``-1``
``multilabel`` ``[N, k] float32`` of 0 and 1      ``NaN`` (per vertex and task)
``regression`` ``[N]`` or ``[N, k] float32``      ``NaN`` (per vertex and task)
============== ================================= ===================================================

Without an explicit task it is inferred from ``y``: integer (or boolean) values of one column
are class ids; integer, boolean or floating values of several columns that are all 0, 1 (or
``NaN``) are multi-label; floating values of one column that are all integral (or ``NaN``) stay
class ids, as before targets other than classes existed; any other floating ``y`` is
regression. A ``y`` of integral floats meant as regression targets needs
``task="regression"``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .errors import DatasetError

TASKS: tuple[str, ...] = ("multiclass", "multilabel", "regression")


@dataclass(frozen=True)
class TargetInfo:
    """What a node-prediction model needs to know of ``y``, recorded in the store's ``target``.

    Attributes:
        task: ``"multiclass"``, ``"multilabel"`` or ``"regression"``.
        num_classes: classes of a multiclass ``y`` (``max + 1``); ``0`` for the other tasks.
        num_tasks: columns of ``y`` (``1`` for ``[N]``): the output width of a multilabel or
            regression model.
    """

    task: str
    num_classes: int
    num_tasks: int

    @property
    def num_outputs(self) -> int:
        """The model's output width: ``num_classes`` (multiclass) or ``num_tasks``."""
        return self.num_classes if self.task == "multiclass" else self.num_tasks

    def to_dict(self) -> dict[str, int | str]:
        return {"task": self.task, "num_classes": self.num_classes, "num_tasks": self.num_tasks}


def check_task(task: str | None) -> str | None:
    """``task`` if it names one of :data:`TASKS` (or is ``None``: inferred).

    Raises:
        ValueError: any other value, naming it and the choices.
    """
    if task is not None and task not in TASKS:
        raise ValueError(
            f"undefined task option {task!r}; choose one of {', '.join(TASKS)} (or leave it "
            "out to infer it from y)"
        )
    return task


def _is_binary(values: Tensor) -> bool:
    """Every value (``NaN`` ignored) is 0 or 1."""
    if values.dtype == torch.bool:
        return True
    known = values[~torch.isnan(values)] if values.is_floating_point() else values
    return bool(((known == 0) | (known == 1)).all())


def _first_bad(values: Tensor, good: Tensor) -> str:
    bad = values[~good]
    return f"{bad[0].item():g}" if bad.is_floating_point() else str(bad[0].item())


def infer_task(y: Tensor) -> str:
    """The task of ``y`` by the rules of the module docstring (``y`` of ``N`` rows)."""
    if y.dim() == 2 and y.size(1) > 1:
        return "multilabel" if _is_binary(y) else "regression"
    if not y.is_floating_point():
        return "multiclass"
    known = y[~torch.isnan(y)]
    integral = (known == known.round()) & torch.isfinite(known)
    return "multiclass" if bool(integral.all()) else "regression"


def canonical_targets(
    y: Tensor, num_nodes: int, source: str, task: str | None = None
) -> tuple[Tensor, str]:
    """``(y, task)``: ``y`` in its task's canonical form (see the module docstring) and the task,
    given or inferred.

    Args:
        y: ``[N]``, ``[N, 1]`` or ``[N, k]`` numbers.
        num_nodes: ``N``.
        source: the dataset, for messages.
        task: the task to check ``y`` against, or ``None`` to infer it.

    Raises:
        DatasetError: a ``y`` of another row count or more than two dimensions, or one that does
            not fit ``task``; the message names the first offending value and what to do.
    """
    check_task(task)
    if not isinstance(y, Tensor):
        raise DatasetError(f"{source}: y must be a tensor (got {type(y).__name__})")
    if y.dim() not in (1, 2) or y.size(0) != num_nodes:
        raise DatasetError(
            f"{source}: y must have one row per vertex, shape [{num_nodes}], [{num_nodes}, 1] "
            f"or [{num_nodes}, k] (got {tuple(y.shape)})"
        )
    if y.is_complex():
        raise DatasetError(f"{source}: y holds complex numbers; give real targets")
    inferred = infer_task(y)
    task = task or inferred
    if task == "multiclass":
        return _classes(y, num_nodes, source), task
    if task == "multilabel":
        labels = y.unsqueeze(1) if y.dim() == 1 else y
        if not _is_binary(labels):
            known = labels if not labels.is_floating_point() else labels[~torch.isnan(labels)]
            value = _first_bad(known, (known == 0) | (known == 1))
            raise DatasetError(
                f"{source}: task='multilabel' needs y of 0 and 1 (NaN = unlabelled), but y holds "
                f"{value}; use task='regression' for real-valued targets"
            )
        return labels.to(torch.float32).contiguous(), task
    values = y.to(torch.float32) if y.dtype != torch.float32 else y
    infinite = torch.isinf(values)
    if bool(infinite.any()):
        raise DatasetError(
            f"{source}: y holds {_first_bad(values, ~infinite)}; regression targets must be "
            "finite (NaN = unlabelled)"
        )
    return values.contiguous(), task


def _classes(y: Tensor, num_nodes: int, source: str) -> Tensor:
    """``[N]`` or ``[N, 1]`` integer (or integral float, ``NaN`` = unlabelled) → ``[N] int64``."""
    if y.dim() == 2 and y.size(1) == 1:
        y = y[:, 0]
    if y.dim() != 1:
        raise DatasetError(
            f"{source}: task='multiclass' needs one class id per vertex, shape [{num_nodes}] or "
            f"[{num_nodes}, 1] (got {tuple(y.shape)}); several columns of 0/1 are "
            "task='multilabel', of other numbers task='regression'"
        )
    if y.is_floating_point():
        y = torch.where(torch.isnan(y), torch.full_like(y, -1), y)
        integral = (y == y.round()) & ~torch.isinf(y)
        if not bool(integral.all()):
            raise DatasetError(
                f"{source}: y holds non-integer values (e.g. {_first_bad(y, integral)}); class "
                "labels must be integers (-1 or NaN for unlabelled); pass task='regression' for "
                "real-valued targets"
            )
    return y.long().contiguous()


def target_info(y: Tensor, task: str) -> TargetInfo:
    """The :class:`TargetInfo` of a canonical ``y`` of ``task``."""
    if task == "multiclass":
        classes = int(y.max()) + 1 if y.numel() else 0
        return TargetInfo(task, max(classes, 0), 1)
    return TargetInfo(task, 0, 1 if y.dim() == 1 else int(y.size(1)))


def labelled_per_vertex(y: Tensor, task: str | None = None) -> Tensor:
    """``[N] int64``: the labelled targets of each vertex of a canonical ``y``: ``0``/``1`` for a
    class id (``-1`` is unlabelled), the number of non-``NaN`` columns otherwise. Summed over a
    mask it is what an exact loss divides by. Without ``task`` the dtype decides (integer:
    class ids)."""
    if task == "multiclass" or (task is None and not y.is_floating_point()):
        return (y >= 0).long()
    known = ~torch.isnan(y)
    return known.long() if known.dim() == 1 else known.sum(1)

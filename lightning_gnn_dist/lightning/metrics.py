"""Losses and metrics of the three node-prediction tasks, over labelled targets only.

============== ======================== ========================== ===========================
task           loss (per labelled item) metrics                    unlabelled (left out)
============== ======================== ========================== ===========================
``multiclass`` cross-entropy per vertex ``acc`` (accuracy, micro)  class id ``-1``
``multilabel`` BCE with logits per      ``rocauc`` (OGB's: the     ``NaN`` (per vertex, task)
               ``(vertex, task)``       mean over tasks of each
                                        task's ROC-AUC)
``regression`` squared error per        ``mae``, ``rmse`` over     ``NaN`` (per vertex, task)
               ``(vertex, task)``       labelled entries
============== ======================== ========================== ===========================

An exact mean loss divides the sum over labelled items by their number; over a split of the whole
graph that number is the datamodule's ``global_label_count("{split}_mask")``. Every metric is a
torchmetrics ``Metric`` whose state is synchronised over ranks, so each logs the global value.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics import MeanAbsoluteError, MeanSquaredError, Metric
from torchmetrics.classification import MulticlassAccuracy

from lightning_gnn_dist.data.targets import TASKS, labelled_per_vertex

TASK_METRICS: dict[str, tuple[str, ...]] = {
    "multiclass": ("acc",),
    "multilabel": ("rocauc",),
    "regression": ("mae", "rmse"),
}
"""The metrics each task logs, as ``{split}_{name}`` (``val_acc``, ``test_rocauc``, ...)."""


def labelled(out: Tensor, y: Tensor, task: str) -> tuple[Tensor, Tensor]:
    """``(outputs, targets)`` of the labelled items of ``out`` and ``y``.

    Args:
        out: model outputs of ``n`` vertices: ``[n, C]`` logits (multiclass), ``[n, k]`` logits
            (multilabel) or ``[n, k]`` predictions (regression; ``[n, 1]`` for a ``[n]`` ``y``).
        y: their targets, canonical (``[n]`` int64 class ids with ``-1`` unlabelled, or ``[n]``
            / ``[n, k]`` float32 with ``NaN`` unlabelled).
        task: ``"multiclass"``, ``"multilabel"`` or ``"regression"``.

    Returns:
        Multiclass: the labelled rows, ``[m, C]`` and ``[m]``. Otherwise the labelled entries,
        both ``[m]`` (``out`` read in ``y``'s shape).
    """
    if task == "multiclass":
        rows = y >= 0
        return out[rows], y[rows]
    out = out.reshape(y.shape)
    known = ~torch.isnan(y)
    return out[known], y[known]


def task_loss(out: Tensor, y: Tensor, task: str) -> Tensor:
    """``[m]``: the loss of each labelled item of :func:`labelled` ``(out, y, task)``:
    cross-entropy (multiclass), binary cross-entropy with logits (multilabel) or squared error
    (regression)."""
    out, y = labelled(out, y, task)
    if task == "multiclass":
        return F.cross_entropy(out, y, reduction="none")
    if task == "multilabel":
        return F.binary_cross_entropy_with_logits(out, y, reduction="none")
    return F.mse_loss(out, y, reduction="none")


def binary_rocauc(scores: Tensor, labels: Tensor) -> float:
    """ROC-AUC of ``scores [m]`` against 0/1 ``labels [m]`` (both classes present): the
    Mann-Whitney statistic with tied scores counted one half, computed from the scores' average
    ranks in float64 — the area sklearn's ``roc_auc_score`` integrates (ties included)."""
    scores = scores.to(torch.float64)
    values, inverse, counts = torch.unique(scores, return_inverse=True, return_counts=True)
    below = torch.cumsum(counts, 0) - counts  # items with a smaller score
    average_rank = below.to(torch.float64) + (counts.to(torch.float64) + 1) / 2  # 1-based
    positive = labels > 0.5
    num_pos = int(positive.sum())
    num_neg = int(labels.numel()) - num_pos
    rank_sum = float(average_rank[inverse][positive].sum())
    return (rank_sum - num_pos * (num_pos + 1) / 2) / (num_pos * num_neg)


def multilabel_rocauc(scores: Tensor, target: Tensor) -> float:
    """OGB's ROC-AUC (``ogb.nodeproppred.Evaluator('ogbn-proteins')``): the mean over tasks of
    each task's ROC-AUC on its labelled vertices, over the tasks with both a 0 and a 1 among
    them (others are skipped, as OGB's evaluator does).

    Args:
        scores: ``[n, k]`` scores (logits or probabilities: AUC reads only their order).
        target: ``[n, k]`` of 0, 1 and ``NaN`` (unlabelled).

    Returns:
        The mean ROC-AUC; ``NaN`` when no task has both classes (OGB's evaluator raises).
    """
    aucs = []
    for task in range(target.size(1)):  # tasks, not vertices: each AUC is vectorised
        column = target[:, task]
        known = ~torch.isnan(column)
        labels = column[known]
        positives = int((labels == 1).sum())
        if positives == 0 or positives == labels.numel():
            continue
        aucs.append(binary_rocauc(scores[known, task], labels))
    return sum(aucs) / len(aucs) if aucs else float("nan")


class MultilabelRocAuc(Metric):
    """:func:`multilabel_rocauc` over every vertex seen on every rank: the scores and targets are
    kept (``cat`` states, flattened) and gathered at ``compute``, so the value is the global one.

    Args:
        num_tasks (int): ``k``, the columns of the targets.
        **kwargs: torchmetrics ``Metric`` options (``sync_on_compute``, ``process_group``, ...).
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, num_tasks: int, **kwargs) -> None:
        super().__init__(**kwargs)
        if not isinstance(num_tasks, int) or num_tasks < 1:
            raise ValueError(f"MultilabelRocAuc needs num_tasks >= 1 (got {num_tasks!r})")
        self.num_tasks = num_tasks
        self.add_state("scores", default=[], dist_reduce_fx="cat")
        self.add_state("target", default=[], dist_reduce_fx="cat")

    def update(self, scores: Tensor, target: Tensor) -> None:
        """``scores [n, k]``, ``target [n, k]`` (0, 1, ``NaN`` = unlabelled); ``n`` may be 0."""
        if scores.shape != target.shape or target.dim() != 2 or target.size(1) != self.num_tasks:
            raise ValueError(
                f"MultilabelRocAuc of {self.num_tasks} tasks needs scores and target of shape "
                f"[n, {self.num_tasks}] (got {tuple(scores.shape)} and {tuple(target.shape)})"
            )
        # 1-D states: a rank that saw no vertex gathers an empty 1-D tensor of the same rank.
        self.scores.append(scores.detach().to(torch.float32).reshape(-1))
        self.target.append(target.detach().to(torch.float32).reshape(-1))

    def compute(self) -> Tensor:
        scores = _cat(self.scores).view(-1, self.num_tasks)
        target = _cat(self.target).view(-1, self.num_tasks)
        return torch.tensor(multilabel_rocauc(scores.cpu(), target.cpu()), dtype=torch.float64)


def _cat(state: Tensor | list[Tensor]) -> Tensor:
    if isinstance(state, Tensor):  # after a sync: one gathered tensor
        return state
    return torch.cat(state) if state else torch.empty(0)


class TaskMetrics(torch.nn.Module):
    """The metrics of ``task`` for one split (see :data:`TASK_METRICS`), updated from the split's
    outputs and targets with the unlabelled items left out.

    Args:
        task (str): ``"multiclass"``, ``"multilabel"`` or ``"regression"``.
        num_outputs (int): classes (multiclass) or tasks ``k``.
    """

    def __init__(self, task: str, num_outputs: int) -> None:
        super().__init__()
        if task not in TASKS:
            raise ValueError(f"undefined task {task!r}; choose one of {', '.join(TASKS)}")
        self.task = task
        if task == "multiclass":
            metrics = {"acc": MulticlassAccuracy(num_outputs, average="micro")}
        elif task == "multilabel":
            metrics = {"rocauc": MultilabelRocAuc(num_outputs)}
        else:
            metrics = {"mae": MeanAbsoluteError(), "rmse": MeanSquaredError(squared=False)}
        self.metrics = torch.nn.ModuleDict(metrics)

    def update(self, out: Tensor, y: Tensor) -> None:
        """``out``/``y`` of the split's vertices, as :func:`labelled` takes them."""
        if self.task == "multilabel":
            self.metrics["rocauc"].update(out.reshape(y.shape), y)
            return
        out, y = labelled(out.detach(), y, self.task)
        for metric in self.metrics.values():
            metric.update(out, y)

    def items(self):
        """``(name, metric)`` pairs, e.g. ``("acc", MulticlassAccuracy)``."""
        return self.metrics.items()


def log_split_metrics(module, split: str, out: Tensor, y: Tensor, task: str) -> None:
    """Update ``module``'s ``{split}_loss`` (a mean metric) and ``split_metrics[split]`` (a
    :class:`TaskMetrics`) with the labelled rows of ``out`` ``[n, C]`` against ``y``, and log
    both (Lightning reduces them over ranks at the epoch's end)."""
    loss = getattr(module, f"{split}_loss")
    loss.update(task_loss(out.detach(), y, task))
    metrics = module.split_metrics[split]
    metrics.update(out, y)
    module.log(f"{split}_loss", loss, batch_size=1)
    for name, metric in metrics.items():
        module.log(f"{split}_{name}", metric, batch_size=1, prog_bar=True)


def training_loss(module, losses: Tensor, sampled: bool, batch) -> Tensor:
    """The loss ``module``'s ``training_step`` returns for the per-target ``losses`` of this
    rank, logged as ``train_loss``. A sampled batch: the mean over this rank's seeds (the ranks'
    mean is logged). A full batch: the mean over the rank's labelled targets, logged as the
    rank's share of the global mean (``batch.num_train_labels_global``, else
    ``num_train_global``), which the ranks sum."""
    total, local = losses.sum(), losses.numel()
    if sampled:
        loss = total / max(1, local)
        module.log("train_loss", loss.detach(), sync_dist=True, batch_size=1, prog_bar=True)
        return loss
    global_count = (
        batch.get("num_train_labels_global", None) or batch.get("num_train_global", None)
    ) or local
    share = total.detach() / max(1, global_count)  # summed over ranks: the global mean
    module.log("train_loss", share, reduce_fx="sum", sync_dist=True, batch_size=1, prog_bar=True)
    return total / max(1, local)


def global_train_labels(datamodule) -> int:
    """Labelled training targets of the whole graph: the datamodule's
    ``global_label_count("train_mask")``, or its ``global_mask_count`` (a datamodule without
    label counts: every training vertex holds one label)."""
    count = getattr(datamodule, "global_label_count", None) or datamodule.global_mask_count
    return int(count("train_mask"))


def labelled_share(partition, global_count: int) -> float:
    """The weight of a rank's mean training loss in the global mean: its labelled training
    targets (class ids other than ``-1``, non-``NaN`` multi-label or regression entries, as
    :func:`~lightning_gnn_dist.data.targets.labelled_per_vertex` counts them) over
    ``global_count``, the whole graph's (or batch's)."""
    mask = partition.train_mask
    if partition.y is None:
        local = int(mask.sum())
    else:
        local = int(labelled_per_vertex(partition.y)[mask].sum())
    return local / max(1, global_count)

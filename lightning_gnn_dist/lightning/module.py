"""``NodePredictor``: the reference LightningModule for node prediction (``NodeClassifier``: its
multiclass name).

It is ordinary single-process PyG code: nothing in it knows about partitions. The task
(``multiclass``, ``multilabel`` or ``regression``, see :mod:`lightning_gnn_dist.lightning.metrics`)
sets the loss, the metrics and which targets count: class id ``-1`` and ``NaN`` targets are
unlabelled and left out of every loss and metric. It reads two batch layouts:

* a whole graph or part (``loader="full"``, ``"subgraph"``): the split's rows are
  ``batch.{split}_mask``; the training loss is the mean over the rank's labelled items, which the
  strategy weights by their share of the whole graph's (``global_label_count``), and is logged as
  the global mean (local sums over ``num_train_labels_global``, summed over ranks);
* seeds first (``loader="neighbor"``, PyG's ``NeighborLoader`` layout, and the exact evaluation
  batches of ``eval_loader="full"``): the split's rows are the first ``batch.batch_size``; a
  sampled batch also carries ``num_sampled_nodes``/``num_sampled_edges``, with which the
  reference models that trim compute each layer only for the vertices the next one needs (when
  the batch was sampled with one hop per layer). The training loss is the mean over the rank's
  labelled seeds, logged as the mean over ranks (the loss whose gradients ``GNNStrategy``
  averages).

Validation and test losses are torchmetrics means over every labelled item evaluated, and the
task's metrics torchmetrics metrics, synchronised across ranks: the global values whatever the
loader.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data
from torchmetrics import MeanMetric

from lightning_gnn_dist.data.targets import check_task
from lightning_gnn_dist.lightning.compat import LightningNeutral
from lightning_gnn_dist.lightning.metrics import (
    TaskMetrics,
    log_split_metrics,
    task_loss,
    training_loss,
)
from lightning_gnn_dist.nn.models import DEEPERGCN_NORMS, MODELS, build_model

SPLITS = ("val", "test")


class NodePredictor(LightningNeutral, lightning_base="LightningModule"):
    """Node prediction with a reference model: class ids, multi-label or real-valued targets.

    ============== ====================== ======================== =========================
    ``task``       output ``[n, ...]``    loss                     logged metrics
    ============== ====================== ======================== =========================
    ``multiclass`` ``num_classes`` logits cross-entropy            ``{split}_acc``
    ``multilabel`` ``num_tasks`` logits   BCE with logits          ``{split}_rocauc`` (OGB's)
    ``regression`` ``num_tasks`` values   mean squared error       ``{split}_mae``,
                                                                   ``{split}_rmse``
    ============== ====================== ======================== =========================

    Every loss is the mean over labelled items (vertices for class ids, ``(vertex, task)``
    entries otherwise); ``{split}_loss`` and ``train_loss`` are logged too. Without arguments
    for the widths and the task it reads them from the datamodule when the Trainer builds it
    (``configure_model``): ``num_features``, ``task``, ``num_classes`` or ``num_tasks``, and the
    width of ``edge_attr`` for ``deepergcn``.

    Args:
        model (str): ``"gcn"``, ``"sage"``, ``"gat"`` or ``"deepergcn"`` (GENConv layers with an
            edge encoder over ``batch.edge_attr``, as for ogbn-proteins; see
            :class:`~lightning_gnn_dist.nn.models.DeeperGCN`). (default: ``"gcn"``)
        hidden_channels (int): hidden width. (default: ``16``)
        num_layers (int): convolutions. (default: ``2``)
        dropout (float): dropout between layers (and GAT attention dropout). (default: ``0.5``)
        lr (float): Adam learning rate. (default: ``0.01``)
        weight_decay (float): Adam weight decay. (default: ``5e-4``)
        in_channels (int, optional): input width; the datamodule's ``num_features`` when
            ``None``. (default: ``None``)
        num_classes (int, optional): classes of a multiclass task; the datamodule's when
            ``None``. Given with ``in_channels`` and no ``task``, it means
            ``task="multiclass"`` and the model is built at once. (default: ``None``)
        heads (int): GAT attention heads in hidden layers. (default: ``4``)
        task (str, optional): ``"multiclass"``, ``"multilabel"`` or ``"regression"``; the
            datamodule's ``task`` when ``None`` (a different one is refused when the model is
            built). (default: ``None``)
        num_tasks (int, optional): columns of a multilabel or regression ``y`` (``1`` for
            ``[N]``); the datamodule's when ``None``. (default: ``None``)
        edge_channels (int, optional): ``deepergcn``'s edge feature width; the datamodule's
            ``edge_attr`` width when ``None`` (``0`` without one). (default: ``None``)
        norm (str, optional): ``deepergcn``'s GENConv MLP norm, ``"batch"``, ``"layer"`` or
            ``None`` (other models take none: another value is refused). (default: ``"batch"``)
    """

    #: The task a subclass always predicts (``NodeClassifier``: ``"multiclass"``).
    default_task: str | None = None

    def __init__(
        self,
        model: str = "gcn",
        hidden_channels: int = 16,
        num_layers: int = 2,
        dropout: float = 0.5,
        lr: float = 0.01,
        weight_decay: float = 5e-4,
        in_channels: int | None = None,
        num_classes: int | None = None,
        heads: int = 4,
        task: str | None = None,
        num_tasks: int | None = None,
        edge_channels: int | None = None,
        norm: str | None = "batch",
    ) -> None:
        super().__init__()
        check_task(task)
        name = type(self).__name__
        if self.default_task is not None and task not in (None, self.default_task):
            raise ValueError(
                f"{name} predicts task={self.default_task!r}, not task={task!r}; use "
                f"NodePredictor(task={task!r})"
            )
        if not isinstance(model, str) or model.lower() not in MODELS:
            raise ValueError(
                f"{name}: unknown model {model!r}; choose one of: gcn, sage, gat, deepergcn"
            )
        if norm != "batch" and model.lower() != "deepergcn":
            raise ValueError(
                f"{name}: norm={norm!r} sets deepergcn's GENConv norm; model={model!r} takes none"
            )
        if norm not in DEEPERGCN_NORMS:
            raise ValueError(f"{name}: undefined norm {norm!r}; choose 'batch', 'layer' or None")
        for key, value in (("num_classes", num_classes), ("num_tasks", num_tasks)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name}: {key} must be an integer >= 1 (got {value!r})")
        self.save_hyperparameters()
        self.model: torch.nn.Module | None = None
        self.task: str | None = task or self.default_task
        if self.task is None and num_classes is not None and num_tasks is None:
            self.task = "multiclass"  # NodeClassifier's arguments
        outputs = num_classes if self.task == "multiclass" else num_tasks
        if in_channels is not None and self.task is not None and outputs is not None:
            self._build(in_channels, outputs, edge_channels or 0)

    # -- the network and metrics ------------------------------------------------------------
    def network(self, in_channels: int, out_channels: int, edge_channels: int = 0):
        """The reference model these settings describe (``[N, in] → [N, out]``)."""
        hp = self.hparams
        extra: dict[str, Any] = {}
        if hp.model.lower() == "gat":
            extra["heads"] = hp.heads
        elif hp.model.lower() == "deepergcn":
            extra.update(edge_channels=edge_channels, norm=hp.norm)
        return build_model(
            hp.model,
            in_channels,
            hp.hidden_channels,
            out_channels,
            num_layers=hp.num_layers,
            dropout=hp.dropout,
            **extra,
        )

    def _build(self, in_channels: int, out_channels: int, edge_channels: int) -> None:
        self.model = self.network(in_channels, out_channels, edge_channels)
        self.split_metrics = torch.nn.ModuleDict(
            {split: TaskMetrics(self.task, out_channels) for split in SPLITS}
        )
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()

    def configure_model(self) -> None:
        if self.model is not None and self._trainer is None:
            return  # load_from_checkpoint builds it from the hyperparameters: no datamodule
        datamodule = self.trainer.datamodule
        stored = getattr(datamodule, "task", None)
        if self.task is not None and stored is not None and stored != self.task:
            raise ValueError(
                f"{type(self).__name__}(task={self.task!r}) but the datamodule's targets are "
                f"task={stored!r}; use NodePredictor(task={stored!r}) (or leave task out) or "
                f"give the datamodule task={self.task!r} if its y fits it"
            )
        if self.model is not None:
            return
        hp = self.hparams
        self.task = self.task or stored or "multiclass"
        in_channels = hp.in_channels or datamodule.num_features
        if self.task == "multiclass":
            outputs = hp.num_classes or datamodule.num_classes
        else:
            outputs = hp.num_tasks or datamodule.num_tasks
        edge_channels = hp.edge_channels
        if edge_channels is None:
            edge_channels = _edge_attr_width(datamodule, hp.model)
        self._build(in_channels, outputs, edge_channels)

    # -- steps ---------------------------------------------------------------------------------
    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        num_sampled_nodes: list[int] | None = None,
        num_sampled_edges: list[int] | None = None,
        **edge_inputs: Tensor,
    ) -> Tensor:
        """Outputs ``[N, num_classes]`` (multiclass logits) or ``[N, num_tasks]``; with the
        per-hop counts of a sampled batch, the reference models that trim return the seeds'
        rows only (``[batch_size, ...]``). ``edge_inputs``: the edge tensors the model reads
        (``edge_attr=`` for ``deepergcn``)."""
        return self.model(x, edge_index, num_sampled_nodes, num_sampled_edges, **edge_inputs)

    def _edge_inputs(self, batch: Data) -> dict[str, Tensor]:
        names = getattr(self.model, "edge_inputs", ())
        return {name: batch[name] for name in names if name in batch}

    def _split_outputs(self, batch: Data, split: str) -> tuple[Tensor, Tensor | slice]:
        """``(outputs, rows)`` of ``split``'s vertices in ``batch`` (``batch.y[rows]`` are their
        targets): the first ``batch.batch_size`` rows of a seeds-first batch (its seeds are the
        split's vertices), else the rows of ``batch.{split}_mask``."""
        edges = self._edge_inputs(batch)
        if "batch_size" in batch:
            trim = [batch.get("num_sampled_nodes"), batch.get("num_sampled_edges")]
            trims = getattr(self.model, "trims", False)
            if not trims or trim[1] is None or len(trim[1]) != len(self.model.convs):
                trim = [None, None]  # not one hop per layer: the whole batch, as PyG code would
            seeds = slice(0, batch.batch_size)
            return self(batch.x, batch.edge_index, *trim, **edges)[seeds], seeds
        mask = batch[f"{split}_mask"]
        return self(batch.x, batch.edge_index, **edges)[mask], mask

    def training_step(self, batch: Data, batch_idx: int) -> Tensor:
        out, rows = self._split_outputs(batch, "train")
        losses = task_loss(out, batch.y[rows], self.task)
        return training_loss(self, losses, "batch_size" in batch, batch)

    def _evaluate(self, batch: Data, split: str) -> None:
        out, rows = self._split_outputs(batch, split)
        y = batch.y[rows]
        log_split_metrics(self, split, out, y, self.task)

    def validation_step(self, batch: Data, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: Data, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def predict_step(self, batch: Data, batch_idx: int) -> dict[str, Tensor]:
        """``{"global_ids": [n] dataset ids, "logits": [n, C or k]}`` of the batch's owned
        vertices, or of its seeds in a seeds-first batch (for ``regression`` the "logits" are
        the predicted values)."""
        if "batch_size" in batch:
            logits, seeds = self._split_outputs(batch, "predict")
            return {"global_ids": batch.n_id[seeds], "logits": logits}
        out = self(batch.x, batch.edge_index, **self._edge_inputs(batch))
        return {"global_ids": batch.global_ids, "logits": out}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay
        )


def _edge_attr_width(datamodule, model: str) -> int:
    """``d`` of the datamodule's ``edge_attr [E, d]`` (``0`` without one).

    Raises:
        ValueError: ``deepergcn`` and an ``edge_attr`` of another shape, naming it.
    """
    record = getattr(datamodule, "edge_attrs", {}).get("edge_attr")
    if record is None:
        return 0
    shape = list(record.get("shape", []))
    if len(shape) != 1:
        if model.lower() == "deepergcn":
            raise ValueError(
                f"deepergcn reads edge_attr [E, d], but the graph's edge_attr has shape "
                f"[E{''.join(f', {n}' for n in shape)}]; reshape it to [E, d] (or set "
                "edge_channels=0 to train without it)"
            )
        return 0
    return int(shape[0])


class NodeClassifier(NodePredictor):
    """:class:`NodePredictor` for class ids (``task="multiclass"``, logging ``{split}_acc``),
    the module of code written before other tasks existed; same arguments (``task`` may only be
    ``"multiclass"``; a datamodule with other targets is refused, naming ``NodePredictor``)."""

    default_task = "multiclass"


__all__ = ["NodeClassifier", "NodePredictor"]

"""``NodeClassifier``: a reference LightningModule for node classification.

It is ordinary single-process PyG code: nothing in it knows about partitions. It reads two batch
layouts:

* a whole graph or part (``loader="full"``, ``"subgraph"``): the split's rows are
  ``batch.{split}_mask``; the training loss is logged as the global mean (local sums over the
  global count ``num_train_global``, summed over ranks);
* seeds first (``loader="neighbor"``, PyG's ``NeighborLoader`` layout, and the exact evaluation
  batches of ``eval_loader="full"``): the split's rows are the first ``batch.batch_size``; a
  sampled batch also carries ``num_sampled_nodes``/``num_sampled_edges``, with which the
  reference models compute each layer only for the vertices the next one needs (when the batch
  was sampled with one hop per layer). The training
  loss is the mean over the rank's seeds, logged as the mean over ranks (the loss whose
  gradients ``GNNStrategy`` averages).

Validation and test losses are torchmetrics means over every evaluated vertex, and accuracies
torchmetrics accuracies, synchronised across ranks: the global values whatever the loader.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from lightning_gnn_dist.lightning.compat import LightningNeutral
from lightning_gnn_dist.nn.models import build_model


class NodeClassifier(LightningNeutral, lightning_base="LightningModule"):
    """Node classification with a reference model (``gcn``, ``sage`` or ``gat``).

    Args:
        model (str): architecture. (default: ``"gcn"``)
        hidden_channels (int): hidden width. (default: ``16``)
        num_layers (int): convolutions. (default: ``2``)
        dropout (float): dropout between layers (and GAT attention dropout). (default: ``0.5``)
        lr (float): Adam learning rate. (default: ``0.01``)
        weight_decay (float): Adam weight decay. (default: ``5e-4``)
        in_channels (int, optional): input width; inferred from the datamodule's
            ``num_features`` when ``None``. (default: ``None``)
        num_classes (int, optional): classes; inferred from the datamodule when ``None``.
            (default: ``None``)
        heads (int): GAT attention heads in hidden layers. (default: ``4``)
    """

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
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model: torch.nn.Module | None = None
        if in_channels is not None and num_classes is not None:
            self._build(in_channels, num_classes)

    def _build(self, in_channels: int, num_classes: int) -> None:
        hp = self.hparams
        extra = {"heads": hp.heads} if hp.model.lower() == "gat" else {}
        self.model = build_model(
            hp.model,
            in_channels,
            hp.hidden_channels,
            num_classes,
            num_layers=hp.num_layers,
            dropout=hp.dropout,
            **extra,
        )
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()

    def configure_model(self) -> None:
        if self.model is not None:
            return
        datamodule = self.trainer.datamodule
        in_channels = self.hparams.in_channels or datamodule.num_features
        num_classes = self.hparams.num_classes or datamodule.num_classes
        self._build(in_channels, num_classes)

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        num_sampled_nodes: list[int] | None = None,
        num_sampled_edges: list[int] | None = None,
    ) -> Tensor:
        """Logits ``[N, num_classes]``; with the per-hop counts of a sampled batch, the
        reference models that trim return the seeds' rows only (``[batch_size, ...]``)."""
        return self.model(x, edge_index, num_sampled_nodes, num_sampled_edges)

    def _split_outputs(self, batch: Data, split: str) -> tuple[Tensor, Tensor | slice]:
        """``(logits, rows)`` of ``split``'s vertices in ``batch`` (``batch.y[rows]`` are their
        labels): the first ``batch.batch_size`` rows of a seeds-first batch (its seeds are the
        split's vertices), else the rows of ``batch.{split}_mask``."""
        if "batch_size" in batch:
            trim = [batch.get("num_sampled_nodes"), batch.get("num_sampled_edges")]
            if trim[1] is None or len(trim[1]) != len(self.model.convs):
                trim = []  # not one hop per layer: run on the whole batch, as PyG code would
            seeds = slice(0, batch.batch_size)
            return self(batch.x, batch.edge_index, *trim)[seeds], seeds
        mask = batch[f"{split}_mask"]
        return self(batch.x, batch.edge_index)[mask], mask

    def training_step(self, batch: Data, batch_idx: int) -> Tensor:
        out, rows = self._split_outputs(batch, "train")
        y = batch.y[rows]
        if "batch_size" in batch:  # the mean over this rank's seeds; the ranks' mean is logged
            loss = F.cross_entropy(out, y)
            self.log("train_loss", loss.detach(), sync_dist=True, batch_size=1, prog_bar=True)
            return loss
        total = F.cross_entropy(out, y, reduction="sum")
        global_count = batch.get("num_train_global", None) or y.numel()
        share = total.detach() / max(1, global_count)  # summed over ranks: the global mean
        self.log("train_loss", share, reduce_fx="sum", sync_dist=True, batch_size=1, prog_bar=True)
        return total / max(1, y.numel())

    def _evaluate(self, batch: Data, split: str) -> None:
        out, rows = self._split_outputs(batch, split)
        y = batch.y[rows]
        loss, metric = getattr(self, f"{split}_loss"), getattr(self, f"{split}_acc")
        loss.update(F.cross_entropy(out, y, reduction="none"))
        metric.update(out, y)
        self.log(f"{split}_loss", loss, batch_size=1)
        self.log(f"{split}_acc", metric, batch_size=1, prog_bar=True)

    def validation_step(self, batch: Data, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: Data, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def predict_step(self, batch: Data, batch_idx: int) -> dict[str, Tensor]:
        """``{"global_ids": [n] dataset ids, "logits": [n, num_classes]}`` of the batch's
        owned vertices, or of its seeds in a seeds-first batch."""
        if "batch_size" in batch:
            logits, seeds = self._split_outputs(batch, "predict")
            return {"global_ids": batch.n_id[seeds], "logits": logits}
        return {"global_ids": batch.global_ids, "logits": self(batch.x, batch.edge_index)}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay
        )

"""``NodeClassifier``: a reference LightningModule for node classification.

It is ordinary single-process PyG code: nothing in it knows about partitions. Under
``GNNStrategy`` each rank sees its part; losses are logged as global means (local sums over
global counts, summed over ranks) and accuracy through torchmetrics, synchronised across ranks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data
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

    def configure_model(self) -> None:
        if self.model is not None:
            return
        datamodule = self.trainer.datamodule
        in_channels = self.hparams.in_channels or datamodule.num_features
        num_classes = self.hparams.num_classes or datamodule.num_classes
        self._build(in_channels, num_classes)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.model(x, edge_index)

    def _loss(self, batch: Data, out: Tensor, split: str) -> tuple[Tensor, Tensor]:
        """``(local mean loss, global-mean share)`` of ``split``'s vertices."""
        mask = batch[f"{split}_mask"]
        total = F.cross_entropy(out[mask], batch.y[mask], reduction="sum")
        local_count = mask.sum().clamp(min=1)
        global_count = batch.get(f"num_{split}_global", None) or int(mask.sum())
        return total / local_count, total.detach() / max(1, global_count)

    def training_step(self, batch: Data, batch_idx: int) -> Tensor:
        out = self(batch.x, batch.edge_index)
        loss, share = self._loss(batch, out, "train")
        self.log("train_loss", share, reduce_fx="sum", sync_dist=True, batch_size=1, prog_bar=True)
        return loss

    def _evaluate(self, batch: Data, split: str, metric: MulticlassAccuracy) -> None:
        out = self(batch.x, batch.edge_index)
        _, share = self._loss(batch, out, split)
        mask = batch[f"{split}_mask"]
        metric.update(out[mask], batch.y[mask])
        prefix = "val" if split == "val" else "test"
        self.log(f"{prefix}_loss", share, reduce_fx="sum", sync_dist=True, batch_size=1)
        self.log(f"{prefix}_acc", metric, batch_size=1, prog_bar=True)

    def validation_step(self, batch: Data, batch_idx: int) -> None:
        self._evaluate(batch, "val", self.val_acc)

    def test_step(self, batch: Data, batch_idx: int) -> None:
        self._evaluate(batch, "test", self.test_acc)

    def predict_step(self, batch: Data, batch_idx: int) -> dict[str, Tensor]:
        return {"global_ids": batch.global_ids, "logits": self(batch.x, batch.edge_index)}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay
        )

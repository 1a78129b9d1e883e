"""PyG's Lightning GraphSAGE example, served by this package's neighbour loader.

``Model`` below has the shape of PyG's ``examples/pytorch_lightning/graph_sage.py``: a plain
``torch_geometric.nn.GraphSAGE``, ``out[:batch.batch_size]`` for the seeds, torchmetrics
accuracy, ``ModelCheckpoint`` on ``val_acc`` and ``trainer.test(ckpt_path="best")``. It knows
nothing about partitions.

Part 1 trains it in one process with :class:`~lightning_gnn_dist.data.NeighborLoader` over the
whole graph (a drop-in for PyG's ``NeighborLoader``/``LightningNodeData``, which need
``pyg-lib`` or ``torch-sparse``). Part 2 trains the same class on 2 CPU processes: each owns one
METIS part, draws seeds from its own training vertices, samples remote neighbourhoods from their
owners and fetches remote feature rows; gradients are averaged like DDP. Only the Trainer's
``strategy``/``devices`` and the DataModule change (``make_trainer``, ``make_datamodule``).

Run from the repository root::

    python examples/neighbor_sage.py                     # both parts
    python examples/neighbor_sage.py --mode distributed --epochs 30

As in ``existing_module.py``, Lightning's ``popen`` launcher re-runs this script for rank 1, so
the re-run skips the single-process part.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.callbacks import ModelCheckpoint
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.nn import GraphSAGE
from torchmetrics import Accuracy

import lightning_gnn_dist  # noqa: F401  (registers strategy="gnn_ddp")
from lightning_gnn_dist import GraphPartitionDataModule
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.loaders import LocalGraphStore, NeighborLoader

# ---------------------------------------------------------------------------------------------
# The user's module, as in PyG's example.
# ---------------------------------------------------------------------------------------------


class Model(pl.LightningModule):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int = 256,
        num_layers: int = 2,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.gnn = GraphSAGE(
            in_channels, hidden_channels, num_layers, out_channels, dropout=dropout
        )
        self.train_acc = Accuracy(task="multiclass", num_classes=out_channels)
        self.val_acc = Accuracy(task="multiclass", num_classes=out_channels)
        self.test_acc = Accuracy(task="multiclass", num_classes=out_channels)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.gnn(x, edge_index)

    def training_step(self, data: Data, batch_idx: int) -> Tensor:
        y_hat = self(data.x, data.edge_index)[: data.batch_size]
        y = data.y[: data.batch_size]
        loss = F.cross_entropy(y_hat, y)
        self.train_acc(y_hat.softmax(dim=-1), y)
        self.log(
            "train_acc",
            self.train_acc,
            prog_bar=True,
            on_step=False,
            on_epoch=True,
            batch_size=y.numel(),
        )
        return loss

    def validation_step(self, data: Data, batch_idx: int) -> None:
        y_hat = self(data.x, data.edge_index)[: data.batch_size]
        self.val_acc(y_hat.softmax(dim=-1), data.y[: data.batch_size])
        self.log(
            "val_acc",
            self.val_acc,
            prog_bar=True,
            on_step=False,
            on_epoch=True,
            batch_size=data.batch_size,
        )

    def test_step(self, data: Data, batch_idx: int) -> None:
        y_hat = self(data.x, data.edge_index)[: data.batch_size]
        self.test_acc(y_hat.softmax(dim=-1), data.y[: data.batch_size])
        self.log(
            "test_acc",
            self.test_acc,
            prog_bar=True,
            on_step=False,
            on_epoch=True,
            batch_size=data.batch_size,
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.01)


class NeighborDataModule(pl.LightningDataModule):
    """Single process: the whole graph behind our ``NeighborLoader`` (where PyG's example uses
    ``LightningNodeData(data, loader="neighbor", ...)``)."""

    def __init__(self, dataset: str, num_neighbors: list[int], batch_size: int) -> None:
        super().__init__()
        self.dataset, self.num_neighbors, self.batch_size = dataset, num_neighbors, batch_size
        self.store: LocalGraphStore | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.store is None:
            self.store = LocalGraphStore(load_dataset(self.dataset))

    def _loader(self, mask: Tensor, shuffle: bool) -> NeighborLoader:
        return NeighborLoader(
            self.store, self.num_neighbors, mask, batch_size=self.batch_size, shuffle=shuffle
        )

    def train_dataloader(self) -> NeighborLoader:
        return self._loader(self.store.data.train_mask, shuffle=True)

    def val_dataloader(self) -> NeighborLoader:
        return self._loader(self.store.data.val_mask, shuffle=False)

    def test_dataloader(self) -> NeighborLoader:
        return self._loader(self.store.data.test_mask, shuffle=False)


# ---------------------------------------------------------------------------------------------
# Single process vs distributed: strategy/devices and the DataModule change; Model does not.
# ---------------------------------------------------------------------------------------------


def make_trainer(distributed: bool, epochs: int, checkpoints: str) -> pl.Trainer:
    return pl.Trainer(
        strategy="gnn_ddp" if distributed else "auto",  # changed line 1 of 2
        devices=2 if distributed else 1,  # changed line 2 of 2
        accelerator="cpu",
        max_epochs=epochs,
        callbacks=[
            ModelCheckpoint(dirpath=checkpoints, monitor="val_acc", save_top_k=1, mode="max")
        ],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def make_datamodule(distributed: bool, args: argparse.Namespace) -> pl.LightningDataModule:
    if distributed:  # changed: the DataModule (LightningNodeData's argument names)
        return GraphPartitionDataModule(
            args.dataset,
            method="metis",
            root=args.root,
            loader="neighbor",
            num_neighbors=[25, 10],
            batch_size=args.batch_size,
            shuffle=True,
        )
    return NeighborDataModule(args.dataset, [25, 10], args.batch_size)


def train_and_test(distributed: bool, args: argparse.Namespace) -> float | None:
    """Fit, then test the best checkpoint; returns the test accuracy (None off rank 0)."""
    pl.seed_everything(args.seed)
    data = load_dataset(args.dataset)  # only for the widths
    model = Model(data.num_features, int(data.y.max()) + 1, hidden_channels=args.hidden)
    with tempfile.TemporaryDirectory() as checkpoints:
        trainer = make_trainer(distributed, args.epochs, checkpoints)
        datamodule = make_datamodule(distributed, args)
        trainer.fit(model, datamodule=datamodule)
        metrics = trainer.test(model, datamodule=datamodule, ckpt_path="best", verbose=False)
    return float(metrics[0]["test_acc"]) if trainer.is_global_zero else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("single", "distributed", "both"), default="both")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=128, help="seeds per step and rank")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--dataset", default="digits", help="load_dataset spec (default: digits)")
    parser.add_argument("--root", default="partitions", help="directory of partition stores")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    launched = "LOCAL_RANK" in os.environ  # a launcher's re-run joins the distributed part only
    if args.mode in ("single", "both") and not launched:
        acc = train_and_test(distributed=False, args=args)
        print(f"single-process test accuracy: {acc:.4f}", flush=True)
    if args.mode in ("distributed", "both"):
        acc = train_and_test(distributed=True, args=args)
        if acc is not None:
            print(f"distributed (gnn_ddp, 2 processes) test accuracy: {acc:.4f}", flush=True)


if __name__ == "__main__":
    main()

"""Train an ordinary PyG LightningModule single-process, then distributed with ``gnn_ddp``.

``GCNNodeClassifier`` below is plain PyTorch Lightning + PyG code: it knows nothing about
partitions, halo exchange or this package. Part 1 trains it in one process on the whole digits
graph with a tiny single-graph DataModule. Part 2 trains the *same class* on 2 CPU processes,
each holding one part of a hypergraph partition; only the Trainer's ``strategy`` and ``devices``
and the DataModule change (see ``make_trainer`` and ``make_datamodule``).

Run (from the repository root; partition stores are written under ``--root``, default
``./partitions``, and Lightning's logs under the current directory)::

    python examples/existing_module.py                      # both parts, 100 epochs each
    python examples/existing_module.py --mode distributed --epochs 200

How the distributed part starts its second process: Lightning's default ``popen`` launcher runs
``python <this script> <same arguments>`` again with ``LOCAL_RANK=1`` when ``trainer.fit`` is
reached. So everything runs under ``if __name__ == "__main__"``, and the re-executed script skips
the single-process part (it only joins the distributed run). Under ``torchrun`` or SLURM, which
set ``LOCAL_RANK`` for every process, use ``--mode distributed``.
"""

from __future__ import annotations

import argparse
import os

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv
from torchmetrics import Accuracy

import lightning_gnn_dist  # noqa: F401  (importing the package registers strategy="gnn_ddp")
from lightning_gnn_dist import GraphPartitionDataModule
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.lightning.datamodule import (
    FullGraphLoader,  # yields the whole graph once per epoch
)

# ---------------------------------------------------------------------------------------------
# The user's existing code: a LightningModule and a single-graph DataModule.
# ---------------------------------------------------------------------------------------------


class GCNNodeClassifier(pl.LightningModule):
    """Two-layer GCN for full-graph node classification, written as for a single process."""

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        hidden_channels: int = 16,
        dropout: float = 0.5,
        lr: float = 0.01,
        weight_decay: float = 5e-4,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.conv1 = GCNConv(in_channels, hidden_channels)
        self.conv2 = GCNConv(hidden_channels, num_classes)
        self.val_acc = Accuracy(task="multiclass", num_classes=num_classes)
        self.test_acc = Accuracy(task="multiclass", num_classes=num_classes)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=self.hparams.dropout, training=self.training)
        return self.conv2(x, edge_index)

    def training_step(self, batch: Data, batch_idx: int) -> Tensor:
        out = self(batch.x, batch.edge_index)
        # The mean over the training vertices this process sees: the whole graph in one process,
        # the rank's own part under gnn_ddp. GNNStrategy (loss_reduction="mean") rescales it by
        # local / global training count and sums gradients over ranks, so the update equals the
        # single-process one. The logged value is per rank; sync_dist averages the ranks' means.
        loss = F.cross_entropy(out[batch.train_mask], batch.y[batch.train_mask])
        self.log("train_loss", loss, batch_size=1, sync_dist=True, prog_bar=True)
        return loss

    def _evaluate(self, batch: Data, mask: Tensor, metric: Accuracy, name: str) -> None:
        out = self(batch.x, batch.edge_index)
        metric.update(out[mask], batch.y[mask])
        # Logging the Metric object: torchmetrics gathers the counts of all ranks in compute().
        self.log(name, metric, batch_size=1, prog_bar=True)

    def validation_step(self, batch: Data, batch_idx: int) -> None:
        self._evaluate(batch, batch.val_mask, self.val_acc, "val_acc")

    def test_step(self, batch: Data, batch_idx: int) -> None:
        self._evaluate(batch, batch.test_mask, self.test_acc, "test_acc")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay
        )


class SingleGraphDataModule(pl.LightningDataModule):
    """The whole dataset as one full batch, for one process."""

    def __init__(self, dataset: str = "digits") -> None:
        super().__init__()
        self.dataset = dataset
        self.data: Data | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.data is None:
            self.data = load_dataset(self.dataset)

    def train_dataloader(self) -> FullGraphLoader:
        return FullGraphLoader(self.data)

    def val_dataloader(self) -> FullGraphLoader:
        return FullGraphLoader(self.data)

    def test_dataloader(self) -> FullGraphLoader:
        return FullGraphLoader(self.data)


# ---------------------------------------------------------------------------------------------
# Single process vs distributed: the only differences are two Trainer arguments (marked
# "changed") and the DataModule. The LightningModule above is the same class in both runs.
# ---------------------------------------------------------------------------------------------


def make_trainer(distributed: bool, epochs: int) -> pl.Trainer:
    return pl.Trainer(
        strategy="gnn_ddp" if distributed else "auto",  # changed line 1 of 2
        devices=2 if distributed else 1,  # changed line 2 of 2
        accelerator="cpu",
        max_epochs=epochs,
        log_every_n_steps=1,  # one step per epoch
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def make_datamodule(distributed: bool, dataset: str, root: str) -> pl.LightningDataModule:
    if distributed:  # changed: the DataModule
        # Partitions the graph once (prepare_data; reused on later runs) and gives every rank
        # its own part with the halo edges; num_parts defaults to the world size.
        return GraphPartitionDataModule(dataset, method="hypergraph", root=root)
    return SingleGraphDataModule(dataset)


def train_and_test(distributed: bool, args: argparse.Namespace) -> float | None:
    """Fit and test a fresh ``GCNNodeClassifier``; returns the test accuracy (None off rank 0)."""
    pl.seed_everything(args.seed)
    data = load_dataset(args.dataset)  # only for the input width and number of classes
    model = GCNNodeClassifier(data.num_features, int(data.y.max()) + 1, dropout=args.dropout)
    trainer = make_trainer(distributed, args.epochs)
    datamodule = make_datamodule(distributed, args.dataset, args.root)
    trainer.fit(model, datamodule=datamodule)
    metrics = trainer.test(model, datamodule=datamodule, verbose=False)
    return float(metrics[0]["test_acc"]) if trainer.is_global_zero else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--mode",
        choices=("single", "distributed", "both"),
        default="both",
        help="single process, gnn_ddp on 2 processes, or one after the other (default: both)",
    )
    parser.add_argument("--epochs", type=int, default=100, help="per run (default: 100)")
    parser.add_argument("--dataset", default="digits", help="load_dataset spec (default: digits)")
    parser.add_argument("--root", default="partitions", help="directory of partition stores")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--dropout",
        type=float,
        default=0.5,
        help="with 0 both runs compute the same updates, so the accuracies match; with dropout "
        "each rank draws its own masks and they differ slightly",
    )
    args = parser.parse_args()

    # Set in processes started by a launcher (Lightning's popen re-run of this script, torchrun,
    # SLURM): those take part in the distributed run only.
    launched = "LOCAL_RANK" in os.environ

    if args.mode in ("single", "both") and not launched:
        acc = train_and_test(distributed=False, args=args)
        print(f"single-process test accuracy: {acc:.4f}", flush=True)
    if args.mode in ("distributed", "both"):
        acc = train_and_test(distributed=True, args=args)
        if acc is not None:
            print(f"distributed (gnn_ddp, 2 processes) test accuracy: {acc:.4f}", flush=True)


if __name__ == "__main__":
    main()

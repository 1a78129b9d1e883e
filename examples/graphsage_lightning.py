"""PyG's Lightning GraphSAGE example, full-graph: one process, then partitioned on N processes.

``Model`` is PyG's ``examples/pytorch_lightning/graph_sage.py`` module written with
``import lightning as L``: ``GraphSAGE(..., norm=BatchNorm1d(hidden))``, torchmetrics accuracy,
``ModelCheckpoint(monitor="val_acc", mode="max")`` and testing the best checkpoint. Full-graph
training replaces PyG's neighbour loader: ``training_step`` uses ``data.train_mask``. It knows
nothing about partitions.

Part 1 trains it in one process with PyG's own ``LightningNodeData(data, loader="full")``. Part 2
trains the same class on ``--devices`` processes: only the Trainer's ``strategy`` (and
``devices``) and the datamodule change (see ``make_trainer`` / ``make_datamodule``). Finally the
best distributed checkpoint is loaded into a single-process model with ``Model.load_from_checkpoint``
for inference on the whole graph.

Run from the repository root (partition stores go to ``--root``, checkpoints to ``--out``)::

    python examples/graphsage_lightning.py                       # both parts, 50 epochs each
    python examples/graphsage_lightning.py --mode distributed --devices 4
    python examples/graphsage_lightning.py --pytorch-lightning   # the pytorch_lightning package

The distributed part uses Lightning's ``popen`` launcher, which runs this script again for every
further rank with ``LOCAL_RANK`` set; the re-run skips part 1 and the single-process inference.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn import BatchNorm1d
from torch_geometric.nn import GraphSAGE
from torchmetrics import Accuracy, MeanMetric

# ``--pytorch-lightning`` runs the same example on the ``pytorch_lightning`` package instead of
# ``lightning``; the package follows whichever the script imported. Read before argparse because
# the module class is defined at import (the launcher re-runs the script with the same argv).
if "--pytorch-lightning" in sys.argv:
    import pytorch_lightning as L
    from pytorch_lightning.callbacks import ModelCheckpoint
else:
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

import lightning_gnn_dist as lgd  # noqa: E402
from lightning_gnn_dist.data import load_dataset  # noqa: E402


class Model(L.LightningModule):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int = 64,
        num_layers: int = 2,
        dropout: float = 0.5,
        lr: float = 0.01,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.gnn = GraphSAGE(
            in_channels,
            hidden_channels,
            num_layers,
            out_channels,
            dropout=dropout,
            norm=BatchNorm1d(hidden_channels),
        )
        # MeanMetric over per-vertex losses: the global mean in one process and across ranks.
        self.train_loss = MeanMetric()
        self.train_acc = Accuracy(task="multiclass", num_classes=out_channels)
        self.val_acc = Accuracy(task="multiclass", num_classes=out_channels)
        self.test_acc = Accuracy(task="multiclass", num_classes=out_channels)

    def forward(self, x, edge_index):
        return self.gnn(x, edge_index)

    def training_step(self, data, batch_idx):
        y_hat = self(data.x, data.edge_index)[data.train_mask]
        y = data.y[data.train_mask]
        losses = F.cross_entropy(y_hat, y, reduction="none")
        self.train_loss(losses)
        self.train_acc(y_hat.softmax(dim=-1), y)
        self.log("train_loss", self.train_loss, on_step=False, on_epoch=True, batch_size=1)
        self.log("train_acc", self.train_acc, prog_bar=True, on_step=False, on_epoch=True)
        return losses.mean()

    def validation_step(self, data, batch_idx):
        y_hat = self(data.x, data.edge_index)[data.val_mask]
        self.val_acc(y_hat.softmax(dim=-1), data.y[data.val_mask])
        self.log("val_acc", self.val_acc, prog_bar=True, on_step=False, on_epoch=True)

    def test_step(self, data, batch_idx):
        y_hat = self(data.x, data.edge_index)[data.test_mask]
        self.test_acc(y_hat.softmax(dim=-1), data.y[data.test_mask])
        self.log("test_acc", self.test_acc, prog_bar=True, on_step=False, on_epoch=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


# ---------------------------------------------------------------------------------------------
# Single process vs distributed: the strategy (with devices) and the datamodule; nothing else.
# ---------------------------------------------------------------------------------------------


def make_trainer(distributed: bool, args: argparse.Namespace, checkpoint: ModelCheckpoint):
    return L.Trainer(
        strategy="gnn_ddp" if distributed else "auto",  # changed
        devices=args.devices if distributed else 1,  # changed
        accelerator="cpu",
        max_epochs=args.epochs,
        callbacks=[checkpoint],
        log_every_n_steps=1,  # one step per epoch
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def make_datamodule(distributed: bool, args: argparse.Namespace):
    if distributed:  # changed: partitioned once, every rank loads its own part
        return lgd.GraphPartitionDataModule(args.dataset, method="hypergraph", root=args.root)
    if L.__name__ == "pytorch_lightning":  # PyG's LightningNodeData is lightning.pytorch only
        return lgd.GraphPartitionDataModule(
            args.dataset, method="random", num_parts=1, root=args.root
        )
    from torch_geometric.data.lightning import LightningNodeData

    return LightningNodeData(load_dataset(args.dataset), loader="full")


def train(distributed: bool, args: argparse.Namespace, data) -> dict | None:
    """Fit, then validate and test the best checkpoint; returns the scores (None off rank 0)."""
    L.seed_everything(args.seed)
    model = Model(data.num_features, int(data.y.max()) + 1, dropout=args.dropout)
    name = "distributed" if distributed else "single"
    checkpoint = ModelCheckpoint(
        dirpath=os.path.join(args.out, name), monitor="val_acc", mode="max", save_top_k=1
    )
    trainer = make_trainer(distributed, args, checkpoint)
    datamodule = make_datamodule(distributed, args)
    trainer.fit(model, datamodule=datamodule)
    train_loss = float(trainer.callback_metrics["train_loss"])  # last epoch, over all ranks
    validated = trainer.validate(ckpt_path="best", datamodule=datamodule, verbose=False)
    tested = trainer.test(ckpt_path="best", datamodule=datamodule, verbose=False)
    if not trainer.is_global_zero:
        return None
    return {
        "best_model_path": checkpoint.best_model_path,
        "best_val_acc": float(checkpoint.best_model_score),
        "best_checkpoint_val_acc": float(validated[0]["val_acc"]),
        "best_checkpoint_test_acc": float(tested[0]["test_acc"]),
        "last_train_loss": train_loss,
    }


@torch.no_grad()
def infer(checkpoint_path: str, data) -> dict:
    """Single-process inference on the whole graph with a checkpoint's weights."""
    model = Model.load_from_checkpoint(checkpoint_path, map_location="cpu").eval()
    pred = model(data.x, data.edge_index).argmax(dim=-1)
    return {
        f"{split}_acc": float((pred[mask] == data.y[mask]).float().mean())
        for split, mask in (("val", data.val_mask), ("test", data.test_mask))
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("single", "distributed", "both"), default="both")
    parser.add_argument("--epochs", type=int, default=50, help="per run (default: 50)")
    parser.add_argument("--devices", type=int, default=2, help="processes (default: 2)")
    parser.add_argument("--dropout", type=float, default=0.5, help="(default: 0.5)")
    parser.add_argument("--dataset", default="digits", help="load_dataset spec (default: digits)")
    parser.add_argument(
        "--root", default="partitions", help="partition stores (default: partitions)"
    )
    parser.add_argument("--out", default="checkpoints", help="checkpoints (default: checkpoints)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--result", help="also write the scores to this JSON file")
    parser.add_argument(
        "--pytorch-lightning",
        action="store_true",
        help="use the pytorch_lightning package instead of lightning (single process: the "
        "package's one-part datamodule instead of PyG's LightningNodeData)",
    )
    args = parser.parse_args()

    data = load_dataset(args.dataset)  # sizes, and the whole graph for single-process inference
    child = "LOCAL_RANK" in os.environ  # a rank started by the launcher (or torchrun)
    results = {}
    if args.mode in ("single", "both") and not child:
        results["single"] = train(False, args, data)
    if args.mode in ("distributed", "both"):
        scores = train(True, args, data)
        if scores is None:
            return  # not rank 0
        scores["inference"] = infer(scores["best_model_path"], data)
        results["distributed"] = scores
    for name, scores in results.items():
        print(
            f"{name}: best val_acc {scores['best_val_acc']:.4f}, best checkpoint re-validated "
            f"{scores['best_checkpoint_val_acc']:.4f}, test_acc {scores['best_checkpoint_test_acc']:.4f}"
        )
    if "distributed" in results:
        inference = results["distributed"]["inference"]
        print(
            f"single-process inference from the distributed best checkpoint: val_acc "
            f"{inference['val_acc']:.4f}, test_acc {inference['test_acc']:.4f}"
        )
    if args.result:
        with open(args.result, "w") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()

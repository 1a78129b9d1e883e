"""A user's module with BatchNorm trains under ``gnn_ddp`` exactly as single-process PyG: the loss
of every epoch, the parameters after 5 epochs and the running statistics (on every rank) match
within 1e-5 at 2, 3 and 4 ranks."""

import json

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.callbacks import ModelCheckpoint
from torch import nn
from torch_geometric.nn import SAGEConv
from torch_geometric.nn import norm as pyg_norm

from lightning_gnn_dist import GraphPartitionDataModule
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.nn import DistBatchNorm

EPOCHS, HIDDEN, LR = 5, 16, 0.1
DATASET = "sbm?num_nodes=240&num_classes=4&avg_degree=6&features=12&seed=5"


class Net(nn.Module):
    """SAGE → BatchNorm1d → ReLU → SAGE → PyG BatchNorm (cumulative average) → linear."""

    def __init__(self):
        super().__init__()
        self.conv1, self.norm1 = SAGEConv(12, HIDDEN), nn.BatchNorm1d(HIDDEN)
        self.conv2, self.norm2 = SAGEConv(HIDDEN, HIDDEN), pyg_norm.BatchNorm(HIDDEN, momentum=None)
        self.head = nn.Linear(HIDDEN, 4)

    def forward(self, x, edge_index):
        x = F.relu(self.norm1(self.conv1(x, edge_index)))
        return self.head(F.relu(self.norm2(self.conv2(x, edge_index))))


class UserModule(pl.LightningModule):
    """Single-process code: mean loss over the batch's training rows."""

    def __init__(self):
        super().__init__()
        self.net = Net()

    def training_step(self, batch, batch_idx):
        out = self.net(batch.x, batch.edge_index)
        mask = batch.train_mask
        loss = F.cross_entropy(out[mask], batch.y[mask])
        share = F.cross_entropy(out[mask], batch.y[mask], reduction="sum") / batch.num_train_global
        self.log("train_loss", share.detach(), reduce_fx="sum", sync_dist=True, batch_size=1)
        return loss

    def _val_loss(self, batch, name):
        out = self.net(batch.x, batch.edge_index)  # eval mode: running statistics
        mask = batch.val_mask
        share = F.cross_entropy(out[mask], batch.y[mask], reduction="sum") / batch.num_val_global
        self.log(name, share, reduce_fx="sum", sync_dist=True, batch_size=1)

    def validation_step(self, batch, batch_idx):
        self._val_loss(batch, "val_loss")

    def test_step(self, batch, batch_idx):  # the validation split again, from a checkpoint
        self._val_loss(batch, "test_loss")

    def configure_optimizers(self):
        return optimizer(self.parameters())


def optimizer(parameters):
    # SGD, not Adam: a bias feeding a BatchNorm has a gradient of zero up to rounding, which Adam
    # would normalise into lr-sized steps of random sign in both runs alike.
    return torch.optim.SGD(parameters, lr=LR, momentum=0.9)


class Recorder(pl.Callback):
    """Every rank writes its losses, parameters and buffers to ``rank<r>.json``."""

    def __init__(self, folder):
        self.folder, self.losses = folder, []

    def on_train_epoch_end(self, trainer, pl_module):
        self.losses.append(float(trainer.callback_metrics["train_loss"]))

    def on_train_end(self, trainer, pl_module):
        assert isinstance(pl_module.net.norm1, DistBatchNorm)
        state = {k: v.tolist() for k, v in pl_module.net.state_dict().items()}
        path = self.folder / f"rank{trainer.global_rank}.json"
        path.write_text(json.dumps({"losses": self.losses, "state": state}))


def reference_run(initial):
    data = load_dataset(DATASET)
    net = Net()
    net.load_state_dict(initial)
    opt = optimizer(net.parameters())
    losses = []
    for _ in range(EPOCHS):
        opt.zero_grad()
        out = net(data.x, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, net.state_dict()


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_batchnorm_training_equals_single_process(world_size, tmp_path):
    pl.seed_everything(0)
    module = UserModule()
    initial = {k: v.clone() for k, v in module.net.state_dict().items()}
    trainer = pl.Trainer(
        strategy="gnn_ddp_fork",
        accelerator="cpu",
        devices=world_size,
        max_epochs=EPOCHS,
        callbacks=[Recorder(tmp_path)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        sync_batchnorm=True,  # accepted on CPU: the strategy's own norm is used instead
    )
    datamodule = GraphPartitionDataModule(
        DATASET, method="random", num_parts=world_size, root=str(tmp_path / "store")
    )
    trainer.fit(module, datamodule=datamodule)
    ref_losses, ref_state = reference_run(initial)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world_size)]
    np.testing.assert_allclose(ranks[0]["losses"], ref_losses, rtol=1e-5, atol=1e-5)
    assert int(ref_state["norm2.module.num_batches_tracked"]) == EPOCHS
    for rank in ranks:
        assert set(rank["state"]) == set(ref_state)
        for key, value in ref_state.items():
            np.testing.assert_allclose(
                np.array(rank["state"][key]), value.numpy(), rtol=1e-5, atol=1e-5, err_msg=key
            )


def test_best_checkpoint_reproduces_the_monitored_validation_score(tmp_path):
    """Running statistics are global, so the checkpoint (written by rank 0) holds the statistics
    every rank validated with: testing from it repeats the best score exactly."""
    pl.seed_everything(0)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val_loss", mode="min")
    trainer = pl.Trainer(
        strategy="gnn_ddp_fork",
        accelerator="cpu",
        devices=2,
        max_epochs=EPOCHS,
        callbacks=[checkpoint],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    datamodule = GraphPartitionDataModule(
        DATASET, method="random", num_parts=2, root=str(tmp_path / "store")
    )
    trainer.fit(UserModule(), datamodule=datamodule)
    # The fork launcher returns the best path to this process, not the score: read it back.
    state = torch.load(checkpoint.best_model_path, weights_only=False)["callbacks"]
    best = float(next(v for k, v in state.items() if "ModelCheckpoint" in k)["best_model_score"])
    tested = trainer.test(datamodule=datamodule, ckpt_path="best", verbose=False)[0]["test_loss"]
    assert tested == pytest.approx(best, rel=1e-6, abs=1e-7)
    # the checkpoint loads into a single-process model whose eval loss is the same number
    data = load_dataset(DATASET)
    single = UserModule.load_from_checkpoint(checkpoint.best_model_path).eval()
    with torch.no_grad():
        out = single.net(data.x, data.edge_index)
    loss = F.cross_entropy(out[data.val_mask], data.y[data.val_mask])
    assert float(loss) == pytest.approx(best, rel=1e-5, abs=1e-6)

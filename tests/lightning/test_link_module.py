"""LinkDataModule and LinkPredictor through Lightning: the same losses and MRR on 1 and 2 ranks,
the monitor's score rows equal their prediction, mini-batches train, bad input is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from lightning_gnn_dist import LinkDataModule, LinkPredictor
from lightning_gnn_dist.lightning.callbacks import CommunicationMonitor
from lightning_gnn_dist.lightning.compat import LightningNeutral
from tests.helpers import random_graph

DATASET = "sbm?num_nodes=300&num_classes=4&avg_degree=8&features=12&seed=2"
EPOCHS = 3


class Recorder(LightningNeutral, lightning_base="Callback"):
    """Rank 0 writes per-epoch losses, validation MRR and the monitor's rows."""

    def __init__(self, path, monitor=None):
        self.path, self.monitor, self.rows = path, monitor, []
        self.losses, self.mrr = [], []

    def on_train_epoch_end(self, trainer, pl_module):
        self.losses.append(float(trainer.callback_metrics["train_loss"]))
        if self.monitor is not None:
            self.rows.append(self.monitor.last_epoch())

    def on_validation_epoch_end(self, trainer, pl_module):
        if "val_mrr" in trainer.callback_metrics:
            self.mrr.append(float(trainer.callback_metrics["val_mrr"]))

    def on_train_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            self.path.write_text(
                json.dumps({"losses": self.losses, "mrr": self.mrr, "rows": self.rows})
            )


def _fit(pl, tmp_path, world_size, root, loader="full", **options):
    pl.seed_everything(0)
    datamodule = LinkDataModule(
        DATASET,
        method="metis",
        num_parts=world_size,
        root=str(root),
        eval_num_negatives=30,
        num_negatives=2,
        loader=loader,
        num_neighbors=[4, 4] if loader == "neighbor" else None,
        batch_size=128,
        **options,
    )
    module = LinkPredictor("sage", hidden_channels=12, metrics=["mrr", "hits@10"])
    monitor = CommunicationMonitor() if world_size > 1 and loader == "full" else None
    out = tmp_path / f"result-{world_size}-{loader}.json"
    callbacks = [Recorder(out, monitor)] + ([monitor] if monitor else [])
    strategy = {"strategy": "gnn_ddp_fork"} if world_size > 1 else {}
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=world_size,
        max_epochs=EPOCHS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        **strategy,
    )
    trainer.fit(module, datamodule=datamodule)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("link-module-stores")


@pytest.mark.parametrize("lightning", ["pytorch_lightning"], indirect=True)
def test_two_ranks_train_as_one_and_score_bytes_equal_the_prediction(lightning, root, tmp_path):
    one = _fit(lightning, tmp_path, 1, root)
    two = _fit(lightning, tmp_path, 2, root)
    np.testing.assert_allclose(two["losses"], one["losses"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(two["mrr"], one["mrr"], rtol=1e-5, atol=1e-5)
    layers = set()
    for epoch_rows in two["rows"]:
        for row in epoch_rows:
            assert row["bytes_total"] == row["predicted_bytes_total"], row
            layers.add((row["layer"], row["direction"]))
    assert {("score", "forward"), ("score", "backward"), ("score.ids", "request")} <= layers
    assert any(layer.startswith("encoder.convs") for layer, _ in layers)


@pytest.mark.parametrize("lightning", ["pytorch_lightning"], indirect=True)
def test_mini_batches_train_with_local_negatives(lightning, root, tmp_path):
    result = _fit(lightning, tmp_path, 2, root, loader="neighbor", negatives="local")
    assert len(result["losses"]) == EPOCHS and np.isfinite(result["losses"]).all()
    assert 0 < result["mrr"][-1] <= 1


def _graph():
    return random_graph(50, 160, seed=1, directed=False, features=4)


class Wide(nn.Module):
    def forward(self, h_src, h_dst):
        return torch.cat([h_src, h_dst], 1)


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda g: LinkDataModule(
                g,
                edge_label_index={
                    "train": torch.tensor([[1, 2], [3, 4]]),
                    "val": torch.tensor([[2], [4]]),
                },
            ),  # fmt: skip
            r"edge \(2, 4\) is a positive pair of both 'train' and 'val'",
        ),
        (
            lambda g: LinkDataModule(g, edge_label_index={"train": torch.tensor([[1], [77]])}),
            r"edge_label_index\['train'\] holds vertex id 77, outside \[0, 50\)",
        ),
        (lambda g: LinkDataModule(g, num_negatives=0), "num_negatives must be an integer >= 1"),
        (
            lambda g: LinkDataModule(g, eval_num_negatives=1000),
            "eval_num_negatives=1000 negatives per positive pair, but the graph has only 50",
        ),
        (
            lambda g: LinkPredictor(decoder=Wide(), in_channels=4, hidden_channels=8),
            r"decoder Wide returns \(3, 16\) for 3 pairs",
        ),
        (lambda g: LinkDataModule(g, negatives="hard"), "undefined negatives option 'hard'"),
        (lambda g: LinkPredictor(loss="hinge"), "undefined loss 'hinge'"),
    ],
)
def test_bad_input_is_refused_at_construction(make, message):
    with pytest.raises(ValueError, match=message):
        make(_graph())

"""Per-rank timing: every rank's compute and exchange-wait seconds reach the monitor, and the
logged max/mean/critical-path ratio are exactly those of the per-rank arrays."""

import json

import numpy as np
import pytest
import pytorch_lightning as pl

from lightning_gnn_dist import (
    CommunicationMonitor,
    GNNStrategy,
    GraphPartitionDataModule,
    NodeClassifier,
)
from lightning_gnn_dist.lightning.callbacks import rank_timing

DATASET = "sbm?num_nodes=120&num_classes=3&avg_degree=6&features=8&seed=2"


def test_rank_timing_reduces_the_per_rank_arrays():
    logged = rank_timing(np.array([1.0, 3.0]), np.array([0.5, 0.25]))
    assert logged == {
        "comm/compute_seconds_max": 3.0,
        "comm/compute_seconds_mean": 2.0,
        "comm/wait_seconds_max": 0.5,
        "comm/wait_seconds_mean": 0.375,
        "comm/critical_path_ratio": 1.5,
    }
    assert rank_timing(np.zeros(2), np.zeros(2))["comm/critical_path_ratio"] == 1.0


class LocalSeconds(pl.Callback):
    """Each rank records its own exchange-wait seconds (its counters) after the monitor ran, and
    what the monitor gathered, into ``rank<r>.json``."""

    def __init__(self, monitor, folder):
        self.monitor, self.folder = monitor, folder
        self.epochs = []

    def on_train_epoch_end(self, trainer, pl_module):
        counters = trainer.strategy.comm_counters["train"].items()
        last = self.monitor.rank_history[-1]
        self.epochs.append(
            {
                "wait": sum(t.seconds for _, _, t in counters),
                "step": self.monitor._step_seconds,
                "gathered_wait": last["wait_seconds"].tolist(),
                "gathered_compute": last["compute_seconds"].tolist(),
                "logged": self.monitor.last_logged,
            }
        )

    def on_train_end(self, trainer, pl_module):
        (self.folder / f"rank{trainer.global_rank}.json").write_text(json.dumps(self.epochs))


@pytest.mark.parametrize("exchange", ["p2p", "broadcast"])
def test_monitor_logs_every_ranks_compute_and_wait(tmp_path, exchange):
    pl.seed_everything(0)
    monitor = CommunicationMonitor()
    trainer = pl.Trainer(
        strategy=GNNStrategy(start_method="fork", exchange=exchange),
        accelerator="cpu",
        devices=2,
        max_epochs=2,
        logger=False,
        callbacks=[monitor, LocalSeconds(monitor, tmp_path)],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    datamodule = GraphPartitionDataModule(DATASET, method="random", root=str(tmp_path / "parts"))
    trainer.fit(NodeClassifier(in_channels=8, num_classes=3), datamodule=datamodule)

    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert len(ranks[0]) == 2
    for epoch in range(2):
        local = [ranks[r][epoch] for r in range(2)]
        wait = np.array([e["wait"] for e in local])
        compute = np.array([e["step"] for e in local]) - wait
        assert (wait > 0).all()  # both ranks waited on real messages
        for r in range(2):  # every rank holds every rank's own seconds, in rank order
            np.testing.assert_allclose(local[r]["gathered_wait"], wait, rtol=1e-12)
            np.testing.assert_allclose(local[r]["gathered_compute"], compute, rtol=1e-12)
        logged = local[0]["logged"]
        assert logged["comm/compute_seconds_max"] == pytest.approx(compute.max(), rel=1e-12)
        assert logged["comm/compute_seconds_mean"] == pytest.approx(compute.mean(), rel=1e-12)
        assert logged["comm/compute_seconds_avg"] == logged["comm/compute_seconds_mean"]
        assert logged["comm/wait_seconds_max"] == pytest.approx(wait.max(), rel=1e-12)
        assert logged["comm/wait_seconds_mean"] == pytest.approx(wait.mean(), rel=1e-12)
        assert logged["comm/seconds_max"] == logged["comm/wait_seconds_max"]
        assert logged["comm/critical_path_ratio"] == pytest.approx(
            compute.max() / compute.mean(), rel=1e-12
        )
        assert logged["comm/critical_path_ratio"] >= 1.0

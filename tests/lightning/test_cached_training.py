"""``GNNStrategy(exchange="cached")`` under Lightning: bound 0 reproduces single-process training
and the exact bytes; a skipping bound is logged by ``CommunicationMonitor``; resuming from a
mid-training checkpoint (cache and version stamps included) equals the uninterrupted run."""

import json

import numpy as np
import pytest
import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_gnn_dist import GNNStrategy, GraphPartitionDataModule, NodeClassifier
from lightning_gnn_dist.lightning.callbacks import CommunicationMonitor
from lightning_gnn_dist.partition.metrics import projected_epoch_bytes
from lightning_gnn_dist.partition.store import PartitionStore
from tests.helpers import fit_quietly
from tests.lightning.test_exactness import (
    DATASET,
    EPOCHS,
    HIDDEN,
    LR,
    Recorder,
    exchange_widths,
    reference_run,
)

WORLD_SIZE = 2


class CacheRecorder(Recorder):
    """Also keeps what the monitor logged each epoch and the exchange's send log."""

    def on_train_epoch_end(self, trainer, pl_module):
        super().on_train_epoch_end(trainer, pl_module)
        self.logged = getattr(self, "logged", []) + [dict(self.monitor.last_logged)]

    def on_train_end(self, trainer, pl_module):
        super().on_train_end(trainer, pl_module)
        if trainer.is_global_zero:
            result = json.loads(self.path.read_text())
            result["logged"] = self.logged
            result["send_log"] = trainer.strategy.graph_context.exchange.send_log
            self.path.write_text(json.dumps(result))


def _fit(tmp_path, root, options, epochs=EPOCHS, ckpt_path=None, checkpoint_dir=None):
    pl.seed_everything(0)
    module = NodeClassifier(
        "gcn", hidden_channels=HIDDEN, dropout=0.0, lr=LR, in_channels=24, num_classes=4
    )
    initial = {k: v.clone() for k, v in module.model.state_dict().items()}
    datamodule = GraphPartitionDataModule(
        DATASET, method="metis", num_parts=WORLD_SIZE, root=str(root)
    )
    monitor = CommunicationMonitor()
    out = tmp_path / f"result-{epochs}-{ckpt_path is not None}.json"
    callbacks = [monitor, CacheRecorder(out, monitor)]
    if checkpoint_dir is not None:
        callbacks.append(ModelCheckpoint(dirpath=checkpoint_dir, save_last=True))
    fit_quietly(
        pl.Trainer,
        module,
        datamodule,
        strategy=GNNStrategy(exchange="cached", start_method="fork", **options),
        devices=WORLD_SIZE,
        epochs=epochs,
        callbacks=callbacks,
        checkpointing=checkpoint_dir is not None,
        ckpt_path=ckpt_path,
    )
    return json.loads(out.read_text()), initial, datamodule


@pytest.mark.parametrize("base", ["p2p", "broadcast"])
def test_bound_zero_trains_like_single_process(base, tmp_path):
    options = {"cache_base": base, "staleness": "epoch-adaptive", "staleness_bound": 0}
    result, initial, datamodule = _fit(tmp_path, tmp_path / "stores", options)
    ref_losses, ref_params = reference_run("gcn", initial)
    np.testing.assert_allclose(result["losses"], ref_losses, rtol=1e-6, atol=1e-6)
    for key, value in ref_params.items():
        np.testing.assert_allclose(
            np.array(result["params"][key]), value.numpy(), rtol=1e-5, atol=1e-6, err_msg=key
        )
    metrics = PartitionStore.open(datamodule.store_path).metrics
    for epoch_rows, logged in zip(result["traffic"], result["logged"], strict=True):
        for r in epoch_rows:  # the exact base's bytes; control = P int32 flags per rank
            assert r["bytes_total"] == r["predicted_bytes_total"]
        if base == "p2p":
            measured = {(r["layer"], r["direction"]): r["bytes_total"] for r in epoch_rows}
            for layer in projected_epoch_bytes(metrics, exchange_widths("gcn")):
                name = f"model.convs.{layer.layer}"
                assert measured[(name, "forward")] == layer.forward_bytes_total
                assert measured[(name, "backward")] == layer.backward_bytes_total
        assert logged["cache/bytes_avoided_fraction"] == 0.0


def test_resume_equals_uninterrupted_and_monitor_logs_skips(tmp_path):
    options = {"staleness": "variation-gap", "staleness_bound": 0.05}
    root = tmp_path / "stores"
    whole, _, _ = _fit(tmp_path, root, options, epochs=6)
    _fit(tmp_path, root, options, epochs=3, checkpoint_dir=tmp_path / "ckpt")
    resumed, _, _ = _fit(tmp_path, root, options, epochs=6, ckpt_path=tmp_path / "ckpt/last.ckpt")
    np.testing.assert_allclose(resumed["losses"], whole["losses"][3:], rtol=1e-7, atol=1e-7)
    for key, value in whole["params"].items():
        np.testing.assert_array_equal(np.array(resumed["params"][key]), np.array(value))
    assert resumed["send_log"] == whole["send_log"]
    # the bound skipped some rounds, and the monitor saw it
    skipped = sum(v for k, v in whole["logged"][-1].items() if k.endswith("rounds_skipped"))
    fractions = [epoch["cache/bytes_avoided_fraction"] for epoch in whole["logged"]]
    senders = [len(entry[2]) for entry in whole["send_log"]]
    assert fractions[0] == 0.0 and max(fractions) > 0.0 and skipped > 0
    assert min(senders) < WORLD_SIZE

"""``GNNStrategy(codec=...)`` under Lightning: the monitor's bytes equal the prediction with the
codec (adaptive agreement included), training stays close to fp32, a resumed run continues the
random streams exactly, bad specs are refused, and the neighbour loader's fetch gets the codec."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_gnn_dist import GNNStrategy, GraphPartitionDataModule, NodeClassifier
from lightning_gnn_dist.comm.codec import CONTROL_LAYER
from lightning_gnn_dist.comm.codec_policy import CodecPolicy
from lightning_gnn_dist.lightning.callbacks import CommunicationMonitor
from tests.helpers import fit_quietly
from tests.lightning.test_exactness import DATASET, HIDDEN, LR, Recorder, reference_run

WORLD_SIZE = 2


def _fit(tmp_path, codec, epochs, ckpt_path=None, checkpoint_dir=None, name="run"):
    pl.seed_everything(0)
    module = NodeClassifier(
        "gcn", hidden_channels=HIDDEN, dropout=0.0, lr=LR, in_channels=24, num_classes=4
    )
    initial = {k: v.clone() for k, v in module.model.state_dict().items()}
    datamodule = GraphPartitionDataModule(
        DATASET, method="metis", num_parts=WORLD_SIZE, root=str(tmp_path / "stores")
    )
    monitor = CommunicationMonitor()
    out = tmp_path / f"{name}.json"
    callbacks = [monitor, Recorder(out, monitor)]
    if checkpoint_dir is not None:
        callbacks.append(ModelCheckpoint(dirpath=checkpoint_dir, save_last=True))
    fit_quietly(
        pl.Trainer,
        module,
        datamodule,
        strategy=GNNStrategy(start_method="fork", codec=codec, codec_tolerance=0.05),
        devices=WORLD_SIZE,
        epochs=epochs,
        callbacks=callbacks,
        checkpointing=checkpoint_dir is not None,
        ckpt_path=ckpt_path,
    )
    return json.loads(out.read_text()), initial


def test_monitor_bytes_equal_prediction_and_training_stays_close(tmp_path):
    codec = {"model.convs.0": "int8", "*": "adaptive"}
    epochs = 4
    result, initial = _fit(tmp_path, codec, epochs)
    chosen = set()
    for epoch_rows in result["traffic"]:
        for r in epoch_rows:
            assert r["bytes_total"] == r["predicted_bytes_total"], r
            if r["layer"] == CONTROL_LAYER:
                continue
            chosen.add((r["layer"], r["codec"]))
            width = r["width"]
            if r["codec"] == "int8":  # narrow rows carry a 1-byte header
                per_row = width + (1 if width < 32 else 2)
            else:
                per_row = (width + 1) // 2 + 2
            assert r["bytes_total"] * 4 * width == r["fp32_bytes_total"] * per_row
    assert ("model.convs.0", "int8") in chosen
    assert {c for layer, c in chosen if layer == "model.convs.1"} <= {"int4", "int8"}
    assert any(r["layer"] == CONTROL_LAYER for r in result["traffic"][1])  # agreed from epoch 1
    ref_losses, _ = reference_run("gcn", initial)
    np.testing.assert_allclose(result["losses"], ref_losses[:epochs], rtol=0.02)


def test_resume_continues_the_random_streams(tmp_path):
    whole, _ = _fit(tmp_path, "int4", epochs=4, name="whole")
    _fit(tmp_path, "int4", epochs=2, checkpoint_dir=tmp_path / "ckpt", name="first")
    resumed, _ = _fit(
        tmp_path, "int4", epochs=4, ckpt_path=tmp_path / "ckpt/last.ckpt", name="resumed"
    )
    np.testing.assert_array_equal(resumed["losses"], whole["losses"][2:])
    for key, value in whole["params"].items():
        np.testing.assert_array_equal(np.array(resumed["params"][key]), np.array(value))


def test_bad_codec_is_refused_and_the_fetch_gets_the_codec():
    with pytest.raises(ValueError, match="'int7'"):
        GNNStrategy(codec="int7")
    with pytest.raises(ValueError, match="sideways"):
        GNNStrategy(codec={"forward": "int8", "sideways": "fp16"})
    assert "codec='bf16'" in repr(GNNStrategy(codec="bf16"))
    with pytest.raises(ValueError, match="exchange='rdm' sends fp32 only"):
        GNNStrategy(exchange="rdm", codec="int8")

    class Store:
        codec = CodecPolicy()

    datamodule = SimpleNamespace(neighbor_loaders=SimpleNamespace(store=Store()))
    strategy = GNNStrategy(codec={"features": "int8", "*": "adaptive"})
    strategy._set_fetch_codec(datamodule)
    assert datamodule.neighbor_loaders.store.codec is strategy.codec_policy
    with pytest.raises(ValueError, match="fixed codec"):
        GNNStrategy(codec="adaptive")._set_fetch_codec(datamodule)

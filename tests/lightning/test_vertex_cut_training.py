"""Lightning training on a vertex cut: ``cd-0`` equals single-process PyG training (losses per
epoch, parameters after 5 epochs) and moves exactly the bytes the vertex-cut metrics predict."""

import json

import numpy as np
import pytest
import pytorch_lightning as pl

from lightning_gnn_dist import GNNStrategy, GraphPartitionDataModule, NodeClassifier
from lightning_gnn_dist.lightning.callbacks import CommunicationMonitor
from lightning_gnn_dist.partition.store import PartitionStore
from tests.helpers import fit_quietly
from tests.lightning.test_exactness import DATASET, EPOCHS, HIDDEN, LR, Recorder, reference_run

# (forward, backward) widths per layer: GCN synchronises min(in, out) columns, SAGE the
# aggregated layer input (no backward for the first layer: its input needs no gradient).
WIDTHS = {"gcn": [(HIDDEN, HIDDEN), (4, 4)], "sage": [(24, 0), (4, 4)]}  # SAGE 2: transformed first


def _fit(kind, world_size, exchange, root, out):
    pl.seed_everything(0)
    module = NodeClassifier(
        kind, hidden_channels=HIDDEN, dropout=0.0, lr=LR, in_channels=24, num_classes=4
    )
    initial = {k: v.clone() for k, v in module.model.state_dict().items()}
    datamodule = GraphPartitionDataModule(
        DATASET, method="vertex-cut", num_parts=world_size, root=str(root)
    )
    monitor = CommunicationMonitor()
    fit_quietly(
        pl.Trainer,
        module,
        datamodule,
        strategy=GNNStrategy(exchange=exchange, start_method="fork"),
        devices=world_size,
        epochs=EPOCHS,
        callbacks=[monitor, Recorder(out, monitor)],
    )
    return initial, json.loads(out.read_text()), PartitionStore.open(datamodule.store_path)


@pytest.mark.parametrize(("kind", "world_size"), [("gcn", 1), ("gcn", 3), ("sage", 2), ("sage", 4)])
def test_cd0_training_equals_single_process(kind, world_size, tmp_path):
    initial, result, store = _fit(kind, world_size, "cd-0", tmp_path, tmp_path / "r.json")
    ref_losses, ref_params = reference_run(kind, initial)
    np.testing.assert_allclose(result["losses"], ref_losses, rtol=1e-5, atol=1e-5)
    for key, value in ref_params.items():
        np.testing.assert_allclose(
            np.array(result["params"][key]), value.numpy(), rtol=1e-5, atol=1e-5, err_msg=key
        )
    rows = int(store.metrics.send_rows.sum())
    assert (rows > 0) == (world_size > 1)
    for epoch_rows in result["traffic"]:
        measured = {(r["layer"], r["direction"]): r["bytes_total"] for r in epoch_rows}
        for layer, (forward, backward) in enumerate(WIDTHS[kind]):
            name = f"model.convs.{layer}"
            assert measured.get((name, "forward"), 0) == rows * forward * 4
            assert measured.get((name, "backward"), 0) == rows * backward * 4
        for r in epoch_rows:
            assert r["bytes_total"] == r["predicted_bytes_total"]


def test_cd_r_training_moves_the_predicted_bins(tmp_path):
    _, result, store = _fit("sage", 2, "cd-2", tmp_path, tmp_path / "r.json")
    assert all(np.isfinite(result["losses"]))
    sent = []
    for epoch_rows in result["traffic"]:
        assert {r["direction"] for r in epoch_rows} == {"forward"}  # no gradient communication
        for r in epoch_rows:
            assert r["bytes_total"] == r["predicted_bytes_total"]
        sent.append(sum(r["bytes_total"] for r in epoch_rows))
    # from epoch r on the roots answer too; every epoch moves less than cd-0's forward
    cd0_forward = int(store.metrics.send_rows.sum()) * (24 + HIDDEN) * 4
    assert 0 < sent[0] < sent[2] < cd0_forward


def test_load_predictions_keeps_one_row_per_split_vertex(tmp_path):
    import torch

    from lightning_gnn_dist import load_predictions

    torch.save(
        {"global_ids": torch.tensor([2, 0]), "logits": torch.tensor([[2.0], [0.0]])},
        tmp_path / "predictions-rank00000.pt",
    )
    torch.save(
        {"global_ids": torch.tensor([1, 2]), "logits": torch.tensor([[1.0], [2.0]])},
        tmp_path / "predictions-rank00001.pt",
    )
    ids, logits = load_predictions(tmp_path)
    assert ids.tolist() == [0, 1, 2] and logits.flatten().tolist() == [0.0, 1.0, 2.0]

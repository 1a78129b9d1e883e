"""``GNNStrategy(exchange="rdm")`` through Lightning: exact training with the order chosen by
timing (``rdm_order="auto"``), every epoch's bytes equal to the plan's prediction."""

import json

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from lightning_gnn_dist import GNNStrategy, GraphPartitionDataModule, NodeClassifier
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.lightning.callbacks import CommunicationMonitor
from lightning_gnn_dist.lightning.compat import LightningNeutral
from tests.helpers import fit_quietly, reference_convs
from tests.lightning.test_exactness import DATASET, LR

# Hidden width 10 has three Pareto orders (sdsd, ddsd, ddss) on this graph at 2 ranks: one
# warm-up step, three timed steps each, then the fastest.
HIDDEN, EPOCHS = 10, 11


class OrderRecorder(LightningNeutral, lightning_base="Callback"):
    """Rank 0 writes losses, parameters, the monitor's rows and the exchange's order report."""

    def __init__(self, path, monitor):
        self.path, self.monitor, self.losses, self.traffic = path, monitor, [], []

    def on_train_epoch_end(self, trainer, pl_module):
        self.losses.append(float(trainer.callback_metrics["train_loss"]))
        self.traffic.append(self.monitor.last_epoch())

    def on_train_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            exchange = trainer.strategy.graph_context.exchange
            result = {
                "losses": self.losses,
                "params": {k: v.tolist() for k, v in pl_module.model.state_dict().items()},
                "traffic": self.traffic,
                "report": exchange.order_report(),
                "memory": trainer.strategy.graph_context.memory_bytes(),
            }
            self.path.write_text(json.dumps(result))


def _reference(initial):
    data = load_dataset(DATASET)
    model = reference_convs("gcn", 24, HIDDEN, 4, 1)
    model.load_state_dict(initial)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, weight_decay=5e-4)
    losses = []
    for _ in range(EPOCHS):
        optimizer.zero_grad()
        out = model.convs[1](F.relu(model.convs[0](data.x, data.edge_index)), data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses, model.state_dict()


def test_rdm_auto_order_trains_exactly_through_lightning(tmp_path):
    pl.seed_everything(0)
    module = NodeClassifier(
        "gcn", hidden_channels=HIDDEN, dropout=0.0, lr=LR, in_channels=24, num_classes=4
    )
    initial = {k: v.clone() for k, v in module.model.state_dict().items()}
    datamodule = GraphPartitionDataModule(DATASET, method="random", num_parts=2, root=str(tmp_path))
    monitor = CommunicationMonitor()
    out = tmp_path / "result.json"
    fit_quietly(
        pl.Trainer,
        module,
        datamodule,
        strategy=GNNStrategy(exchange="rdm", rdm_order="auto", start_method="fork"),
        devices=2,
        epochs=EPOCHS,
        callbacks=[monitor, OrderRecorder(out, monitor)],
    )
    result = json.loads(out.read_text())
    ref_losses, ref_params = _reference(initial)
    np.testing.assert_allclose(result["losses"], ref_losses, rtol=1e-5, atol=1e-5)
    for key, value in ref_params.items():
        np.testing.assert_allclose(
            np.array(result["params"][key]), value.numpy(), rtol=1e-5, atol=1e-5, err_msg=key
        )
    for epoch_rows in result["traffic"]:
        assert {r["direction"] for r in epoch_rows} <= {"forward", "backward"}
        assert sum(r["bytes_total"] for r in epoch_rows) > 0
        for r in epoch_rows:
            assert r["bytes_total"] == r["predicted_bytes_total"], r
    report = result["report"]
    candidates = [c["order"] for c in report["pareto"]]
    assert sorted(candidates) == ["ddsd", "ddss", "sdsd"] and not report["tuning"]
    assert all(len(c["measured_seconds"]) == 3 for c in report["pareto"])
    fastest = min(report["pareto"], key=lambda c: min(c["measured_seconds"]))["order"]
    assert report["order"] == fastest
    assert result["memory"]["adjacency"] > 0 and result["memory"]["feature_columns"] > 0


def test_strategy_validates_rdm_options():
    with pytest.raises(ValueError, match="rdm_order='fast'"):
        GNNStrategy(exchange="rdm", rdm_order="fast")
    with pytest.raises(ValueError, match="replication"):
        GNNStrategy(exchange="rdm", replication=0)
    strategy = GNNStrategy(exchange="rdm", rdm_order="dsds", replication=2)
    assert strategy.exchange_options == {"rdm_order": "dsds", "replication": 2}
    with pytest.raises(ValueError, match="rdm_order='dsds' applies to exchange='rdm' only"):
        GNNStrategy(exchange="p2p", rdm_order="dsds")
    assert "rdm" in repr(strategy) and "dsds" in repr(strategy)

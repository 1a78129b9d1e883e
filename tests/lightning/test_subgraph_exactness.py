"""Sampled-subgraph mini-batch training (``loader="subgraph"``, paper 000 §4.3.3) through
Lightning equals single-process PyG training on the same sequence of induced subgraphs.

For world sizes 1–4 and GCN/GraphSAGE/GAT (dropout off): the loss of every step and the
parameters after the run match within 1e-5, and on every batch each rank's measured rows and bytes
per layer and direction equal the batch plan's prediction.
"""

import json

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from lightning_gnn_dist import GNNStrategy, GraphPartitionDataModule, NodeClassifier
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.data.subgraph_sampler import induced_subgraph, make_sampler
from lightning_gnn_dist.lightning.batch_monitor import BatchCommunicationMonitor
from lightning_gnn_dist.partition.batch_volume import batch_metrics
from lightning_gnn_dist.partition.store import PartitionStore
from tests.helpers import fit_quietly, reference_convs

EPOCHS, STEPS, SIZE, HIDDEN, HEADS, LR = 2, 3, 150, 8, 2, 0.01
DATASET = "sbm?num_nodes=400&num_classes=4&avg_degree=6&features=12&seed=3"


class Recorder(pl.Callback):
    """Rank 0 writes per-step losses, final parameters and the batch monitor's rows."""

    def __init__(self, path, monitor):
        self.path, self.monitor, self.losses = path, monitor, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(trainer.callback_metrics["train_loss"]))

    def on_train_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            params = {k: v.tolist() for k, v in pl_module.model.state_dict().items()}
            self.path.write_text(
                json.dumps(
                    {"losses": self.losses, "params": params, "traffic": self.monitor.history}
                )
            )


def reference_run(kind, state_dict):
    """Plain PyG, one process: the same sampled subgraphs, each trained as a graph of its own."""
    data = load_dataset(DATASET)
    model = reference_convs(kind, 12, HIDDEN, 4, HEADS)
    model.load_state_dict(state_dict)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, weight_decay=5e-4)
    sampler = make_sampler("uniform", data.num_nodes, SIZE, seed=0)
    losses, batches = [], []
    for step in range(EPOCHS * STEPS):
        batch = sampler.sample(step)
        batches.append(batch)
        edge_index = induced_subgraph(data.edge_index, data.num_nodes, batch)
        x, y, mask = data.x[batch], data.y[batch], data.train_mask[batch]
        optimizer.zero_grad()
        out = model.convs[1](F.relu(model.convs[0](x, edge_index)), edge_index)
        loss = F.cross_entropy(out[mask], y[mask])
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return losses, model.state_dict(), data, batches


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    return tmp_path_factory.mktemp("stores")


@pytest.mark.parametrize(
    ("kind", "world_size", "exchange"),
    [(k, w, "p2p") for w in (1, 2, 3, 4) for k in ("gcn", "sage", "gat")]
    + [("gcn", 3, "broadcast"), ("sage", 2, "broadcast")],
)
def test_subgraph_training_equals_single_process(kind, world_size, exchange, stores, tmp_path):
    pl.seed_everything(0)
    module = NodeClassifier(
        kind, hidden_channels=HIDDEN, dropout=0.0, lr=LR, in_channels=12, num_classes=4, heads=HEADS
    )
    initial = {k: v.clone() for k, v in module.model.state_dict().items()}
    datamodule = GraphPartitionDataModule(
        DATASET,
        method="metis",
        num_parts=world_size,
        root=str(stores),
        loader="subgraph",
        subgraph_size=SIZE,
        steps_per_epoch=STEPS,
    )
    monitor = BatchCommunicationMonitor()
    out = tmp_path / "result.json"
    fit_quietly(
        pl.Trainer,
        module,
        datamodule,
        strategy=GNNStrategy(exchange=exchange, start_method="fork"),
        devices=world_size,
        epochs=EPOCHS,
        callbacks=[monitor, Recorder(out, monitor)],
    )
    result = json.loads(out.read_text())

    ref_losses, ref_params, data, batches = reference_run(kind, initial)
    np.testing.assert_allclose(result["losses"], ref_losses, rtol=1e-5, atol=1e-5)
    for key, value in ref_params.items():
        np.testing.assert_allclose(
            np.array(result["params"][key]), value.numpy(), rtol=1e-5, atol=1e-5, err_msg=key
        )

    traffic = result["traffic"]
    assignment = PartitionStore.open(datamodule.store_path).assignment()
    forward = {r["step"]: r for r in traffic if r["layer"] == "model.convs.1"}
    for r in traffic:
        assert r["rows_sent"] == r["predicted_rows_sent"], r
        assert r["bytes_sent"] == r["predicted_bytes_sent"], r
        assert r["bytes_sent"] == [n * r["width"] * 4 for n in r["rows_sent"]]
    assert len(forward) == EPOCHS * STEPS
    # The plan's rows are the batch hypergraph's connectivity−1 cut, computed on the whole graph.
    for step, batch in enumerate(batches if exchange == "p2p" else []):
        expected = batch_metrics(data, assignment, world_size, batch)
        rows = [r for r in traffic if r["step"] == step + 1 and r["layer"] == "model.convs.1"]
        sent = {r["direction"]: r["rows_sent"] for r in rows}
        received = {r["direction"]: r["rows_received"] for r in rows}
        assert sent["forward"] == received["backward"] == expected.send_rows.tolist()
        assert sent["backward"] == received["forward"] == expected.recv_rows.tolist()
    if world_size > 1:
        assert any(sum(r["rows_sent"]) > 0 for r in traffic)

"""Distributed training through Lightning equals single-process PyG training (design §4–5).

For world sizes 1, 2, 4, every partition method and GCN/GraphSAGE/GAT (dropout off): the loss of
every epoch and the parameters after 5 epochs match a plain PyG loop within 1e-5, and the bytes
moved per epoch, per layer and direction, equal the bytes projected from the partition metrics.
"""

import itertools
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lightning_gnn_dist import GraphPartitionDataModule, NodeClassifier
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.lightning.callbacks import CommunicationMonitor
from lightning_gnn_dist.lightning.compat import LightningNeutral
from lightning_gnn_dist.partition.metrics import projected_epoch_bytes
from lightning_gnn_dist.partition.store import PartitionStore
from tests.helpers import fit_quietly, reference_convs

EPOCHS, HIDDEN, HEADS, LR = 5, 16, 2, 0.01
DATASET = "sbm?num_nodes=600&num_classes=4&avg_degree=8&features=24&seed=3"
KINDS, METHODS, WORLD_SIZES = ("gcn", "sage", "gat"), ("hypergraph", "metis", "random"), (1, 2, 4)
# Every combination under pytorch_lightning; under lightning.pytorch the 2-rank runs of one method.
CASES = [
    ("pytorch_lightning", *case) for case in itertools.product(KINDS, METHODS, WORLD_SIZES)
] + [("lightning.pytorch", kind, "hypergraph", 2) for kind in KINDS]


class Recorder(LightningNeutral, lightning_base="Callback"):
    """Rank 0 writes per-epoch losses, final parameters and the monitor's rows to a file."""

    def __init__(self, path, monitor):
        self.path, self.monitor, self.losses, self.traffic = path, monitor, [], []

    def on_train_epoch_end(self, trainer, pl_module):
        self.losses.append(float(trainer.callback_metrics["train_loss"]))
        self.traffic.append(self.monitor.last_epoch())

    def on_train_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            params = {k: v.tolist() for k, v in pl_module.model.state_dict().items()}
            self.path.write_text(
                json.dumps({"losses": self.losses, "params": params, "traffic": self.traffic})
            )


def reference_run(kind, state_dict):
    """Plain PyG, one process, whole graph."""
    data = load_dataset(DATASET)
    model = reference_convs(kind, 24, HIDDEN, 4, HEADS)
    model.load_state_dict(state_dict)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, weight_decay=5e-4)
    losses = []
    for _ in range(EPOCHS):
        optimizer.zero_grad()
        h = F.relu(model.convs[0](data.x, data.edge_index))
        out = model.convs[1](h, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return losses, model.state_dict()


def exchange_widths(kind):
    """(forward, backward) widths per layer: GCN exchanges min(in, out) columns; GAT the layer
    input; SAGE the input of a first layer (which needs no gradient) and min(in, out) after; the
    first layer's input needs no gradient unless it was transformed first."""
    if kind == "gcn":
        return [(HIDDEN, HIDDEN), (4, 4)]
    if kind == "sage":
        return [(24, 0), (4, 4)]
    return [(24, 0), (HIDDEN * HEADS,) * 2]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    return tmp_path_factory.mktemp("stores")


@pytest.mark.parametrize("lightning, kind, method, world_size", CASES, indirect=["lightning"])
def test_distributed_training_equals_single_process(
    lightning, kind, method, world_size, stores, tmp_path
):
    check_exact(lightning, kind, method, world_size, stores, tmp_path)


@pytest.mark.parametrize("method, weight", [("hypergraph", "nnz"), ("metis", "nnz+rows")])
@pytest.mark.parametrize("lightning", ["pytorch_lightning"], indirect=True)
def test_other_vertex_weights_train_exactly(lightning, method, weight, stores, tmp_path):
    """The default weight (``work``) runs in every case above; paper 000's ``nnz`` and METIS'
    two constraints give other parts, trained just as exactly."""
    check_exact(lightning, "gcn", method, 2, stores, tmp_path, {"vertex_weight": weight})


def check_exact(pl, kind, method, world_size, stores, tmp_path, partition_options=None):
    """Fit ``NodeClassifier(kind)`` at ``world_size`` ranks; compare losses and parameters with
    :func:`reference_run` and the measured bytes with the partition's projection."""
    pl.seed_everything(0)
    module = NodeClassifier(
        kind, hidden_channels=HIDDEN, dropout=0.0, lr=LR, in_channels=24, num_classes=4, heads=HEADS
    )
    initial = {k: v.clone() for k, v in module.model.state_dict().items()}
    datamodule = GraphPartitionDataModule(
        DATASET,
        method=method,
        num_parts=world_size,
        root=str(stores),
        partition_options=partition_options,
    )
    monitor = CommunicationMonitor()
    out = tmp_path / "result.json"
    fit_quietly(
        pl.Trainer,
        module,
        datamodule,
        strategy="gnn_ddp_fork",
        devices=world_size,
        epochs=EPOCHS,
        callbacks=[monitor, Recorder(out, monitor)],
    )
    result = json.loads(out.read_text())

    ref_losses, ref_params = reference_run(kind, initial)
    np.testing.assert_allclose(result["losses"], ref_losses, rtol=1e-5, atol=1e-5)
    for key, value in ref_params.items():
        np.testing.assert_allclose(
            np.array(result["params"][key]), value.numpy(), rtol=1e-5, atol=1e-5, err_msg=key
        )

    metrics = PartitionStore.open(datamodule.store_path).metrics
    projected = projected_epoch_bytes(metrics, exchange_widths(kind))
    for epoch_rows in result["traffic"]:
        measured = {(r["layer"], r["direction"]): r["bytes_total"] for r in epoch_rows}
        for layer in projected:
            name = f"model.convs.{layer.layer}"
            assert measured.get((name, "forward"), 0) == layer.forward_bytes_total
            assert measured.get((name, "backward"), 0) == layer.backward_bytes_total
        for r in epoch_rows:
            assert r["bytes_total"] == r["predicted_bytes_total"]
    if world_size > 1 and metrics.total_volume_rows:
        assert any(r["bytes_total"] > 0 for r in result["traffic"][-1])

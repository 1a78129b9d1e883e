"""A user's LightningModule with edge weights and edge features (issue 30) trains exactly through
``GNNStrategy`` full-batch: a weighted ``GCNConv`` (``batch.edge_weight``), ``GINEConv`` and
``GATConv(edge_dim=)`` (``batch.edge_attr``) on an in-memory multigraph, 2 ranks, 5 epochs of
Adam: the parameters equal a plain single-process PyG loop within 1e-5, and every exchange moves
the bytes the partition predicts (edge attributes add none)."""

import json

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, GINEConv

from lightning_gnn_dist import GNNStrategy, GraphPartitionDataModule
from lightning_gnn_dist.lightning.callbacks import CommunicationMonitor
from lightning_gnn_dist.lightning.compat import LightningNeutral
from tests.helpers import fit_quietly, random_graph

EPOCHS, LR, D_EDGE, CLASSES = 5, 0.02, 3, 3


def _graph():
    data = random_graph(60, 260, seed=7, features=6, classes=CLASSES, parallel_edges=True)
    loops = torch.tensor([[4, 4, 9], [4, 4, 9]])  # repeated self loops, each its own weight
    data.edge_index = torch.cat([data.edge_index, loops], dim=1)
    gen = torch.Generator().manual_seed(1)
    num_edges = data.edge_index.size(1)
    data.edge_weight = torch.rand(num_edges, generator=gen) + 0.5
    data.edge_attr = torch.randn(num_edges, D_EDGE, generator=gen)
    data.name = "edge-training"
    return data


class EdgeNet(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        mlp = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
        self.conv1 = GCNConv(6, 8)
        self.conv2 = GINEConv(mlp, train_eps=True, edge_dim=D_EDGE)
        self.conv3 = GATConv(8, CLASSES, heads=2, concat=False, edge_dim=D_EDGE)

    def forward(self, x, edge_index, edge_weight, edge_attr):
        x = self.conv1(x, edge_index, edge_weight).relu()
        x = self.conv2(x, edge_index, edge_attr).relu()
        return self.conv3(x, edge_index, edge_attr)


class EdgeModule(pl.LightningModule):
    """What a user writes single-process: the batch's edge attributes go to the layers."""

    def __init__(self):
        super().__init__()
        self.model = EdgeNet()

    def training_step(self, batch, batch_idx):
        out = self.model(batch.x, batch.edge_index, batch.edge_weight, batch.edge_attr)
        return F.cross_entropy(out[batch.train_mask], batch.y[batch.train_mask])

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=LR)


class Recorder(LightningNeutral, lightning_base="Callback"):
    def __init__(self, path, monitor):
        self.path, self.monitor, self.traffic = path, monitor, []

    def on_train_epoch_end(self, trainer, pl_module):
        self.traffic.append(self.monitor.last_epoch())

    def on_train_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            params = {k: v.tolist() for k, v in pl_module.model.state_dict().items()}
            self.path.write_text(json.dumps({"params": params, "traffic": self.traffic}))


def _reference():
    data = _graph()
    model = EdgeNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    for _ in range(EPOCHS):
        optimizer.zero_grad()
        out = model(data.x, data.edge_index, data.edge_weight, data.edge_attr)
        F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
    return model.state_dict()


def test_a_module_with_edge_weights_and_features_trains_exactly(tmp_path):
    pl.seed_everything(0)
    datamodule = GraphPartitionDataModule(
        _graph(), method="random", num_parts=2, root=str(tmp_path)
    )
    monitor = CommunicationMonitor()
    out = tmp_path / "result.json"
    fit_quietly(
        pl.Trainer,
        EdgeModule(),
        datamodule,
        strategy=GNNStrategy(exchange="p2p", start_method="fork"),
        devices=2,
        epochs=EPOCHS,
        callbacks=[monitor, Recorder(out, monitor)],
    )
    result = json.loads(out.read_text())
    for key, value in _reference().items():
        np.testing.assert_allclose(
            np.array(result["params"][key]), value.numpy(), rtol=1e-5, atol=1e-5, err_msg=key
        )
    for epoch_rows in result["traffic"]:
        forward = {r["layer"] for r in epoch_rows if r["direction"] == "forward"}
        assert forward == {"model.conv1", "model.conv2", "model.conv3"}, epoch_rows
        for r in epoch_rows:
            assert r["bytes_total"] == r["predicted_bytes_total"], r

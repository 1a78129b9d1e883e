"""The model every full-batch fit trains (GCN 2 layers), and the same model as a plain PyG loop."""

from __future__ import annotations

import time

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv

from benchmarks.common.stores import SEED
from lightning_gnn_dist.lightning.module import NodeClassifier

HIDDEN, LR, WEIGHT_DECAY, DROPOUT = 16, 0.01, 5e-4, 0.5
MODEL = {
    "kind": "gcn",
    "hidden_channels": HIDDEN,
    "num_layers": 2,
    "dropout": DROPOUT,
    "lr": LR,
    "weight_decay": WEIGHT_DECAY,
}


def make_module(num_features: int, num_classes: int) -> NodeClassifier:
    """``NodeClassifier("gcn")`` with the benchmark's widths, seeded (same initial weights)."""
    pl.seed_everything(SEED, verbose=False)
    return NodeClassifier(
        "gcn",
        hidden_channels=HIDDEN,
        dropout=DROPOUT,
        lr=LR,
        weight_decay=WEIGHT_DECAY,
        in_channels=num_features,
        num_classes=num_classes,
    )


def exchange_widths(num_features: int, num_classes: int) -> list[int]:
    """Per GCN layer, the exchanged width (``DistGCNConv``: min(in, out)); forward = backward."""
    return [min(num_features, HIDDEN), min(HIDDEN, num_classes)]


def plain_epochs(data: Data, state_dict: dict, epochs: int, cached: bool = False) -> list[float]:
    """Hand-written PyG loop on the whole graph: GCNConv x2, ReLU, dropout, Adam. Returns the
    wall seconds of each epoch (one full-batch step)."""
    model = torch.nn.Module()
    num_features, num_classes = data.x.size(1), int(data.y.max()) + 1
    model.convs = torch.nn.ModuleList(
        [
            GCNConv(num_features, HIDDEN, cached=cached),
            GCNConv(HIDDEN, num_classes, cached=cached),
        ]
    )
    model.load_state_dict(state_dict)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    mask = data.train_mask
    seconds = []
    for _ in range(epochs):
        start = time.perf_counter()
        optimizer.zero_grad()
        h = F.dropout(F.relu(model.convs[0](data.x, data.edge_index)), p=DROPOUT, training=True)
        out = model.convs[1](h, data.edge_index)
        loss = F.cross_entropy(out[mask], data.y[mask])
        loss.backward()
        optimizer.step()
        seconds.append(time.perf_counter() - start)
    return seconds

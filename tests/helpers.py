"""Small graph builders shared by tests (importable as ``tests.helpers``)."""

from __future__ import annotations

import builtins
import gzip
import socket
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch_geometric.data import Data

from lightning_gnn_dist.data.graph import canonicalize, distinct_edges


def random_graph(
    num_nodes: int,
    num_edges: int,
    seed: int,
    directed: bool = True,
    self_loops: bool = True,
    features: int = 0,
    classes: int = 3,
    parallel_edges: bool = False,
) -> Data:
    """A canonical random graph; vertices beyond the edges' reach stay isolated. Repeated draws
    are merged into one edge unless ``parallel_edges`` (a multigraph)."""
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, max(1, num_nodes - 2), (2, num_edges), generator=gen)
    if not self_loops:
        edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    if not directed:
        edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    if not parallel_edges:
        edge_index = torch.from_numpy(np.stack(distinct_edges(*edge_index.numpy(), num_nodes)))
    data = Data(edge_index=edge_index, num_nodes=num_nodes)
    if features:
        data.x = torch.randn(num_nodes, features, generator=gen)
        data.y = torch.randint(0, classes, (num_nodes,), generator=gen)
        masks = torch.rand(num_nodes, generator=gen)
        data.train_mask, data.val_mask, data.test_mask = (
            masks < 0.5,
            (masks >= 0.5) & (masks < 0.75),
            masks >= 0.75,
        )
    return canonicalize(data)


def figure2_graph() -> tuple[Data, list[int]]:
    """The worked example of paper 000 Figure 2 (vertices v1..v6 as ids 0..5, undirected) and
    its partition V1 = {v1, v2}, V2 = {v3, v4}, V3 = {v5, v6}."""
    pairs = [(1, 2), (1, 5), (2, 4), (2, 6), (3, 4), (4, 5), (4, 6)]
    edges = torch.tensor(pairs).t() - 1
    data = canonicalize(Data(edge_index=torch.cat([edges, edges.flip(0)], dim=1), num_nodes=6))
    return data, [0, 0, 1, 1, 2, 2]


def reference_convs(kind: str, in_channels: int, hidden: int, out_channels: int, heads: int):
    """The plain-PyG two-layer model ``NodeClassifier(kind)`` holds (``model.convs``), for
    single-process references that load the distributed run's initial state dict."""
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv

    if kind == "gcn":
        convs = [GCNConv(in_channels, hidden), GCNConv(hidden, out_channels)]
    elif kind == "sage":
        convs = [SAGEConv(in_channels, hidden), SAGEConv(hidden, out_channels)]
    else:
        convs = [
            GATConv(in_channels, hidden, heads=heads),
            GATConv(hidden * heads, out_channels, heads=1, concat=False),
        ]
    model = torch.nn.Module()
    model.convs = torch.nn.ModuleList(convs)
    return model


def fit_quietly(
    trainer_cls,
    module,
    datamodule,
    *,
    strategy,
    devices: int,
    epochs: int,
    callbacks,
    checkpointing: bool = False,
    ckpt_path=None,
):
    """``trainer_cls(...).fit`` on CPU with everything but training off (no logger, progress
    bar, summary or validation; checkpoints only with ``checkpointing``, by a checkpoint
    callback among ``callbacks``), resumed from ``ckpt_path`` if given; returns the Trainer."""
    trainer = trainer_cls(
        strategy=strategy,
        accelerator="cpu",
        devices=devices,
        max_epochs=epochs,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=checkpointing,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    return trainer


def _no_network(*args, **kwargs):
    raise AssertionError("the OGB test tried to use the network (a download was attempted)")


def forbid_ogb_network(monkeypatch, dataset_module) -> None:
    """Any download by OGB's ``dataset_module`` (``ogb.*.dataset_pyg``), URL open, socket
    connection or stdin prompt fails the test."""
    import ogb.utils.url as ogb_url

    monkeypatch.setattr(dataset_module, "download_url", _no_network)
    monkeypatch.setattr(dataset_module, "decide_download", _no_network)
    monkeypatch.setattr(ogb_url, "ur", SimpleNamespace(urlopen=_no_network))
    monkeypatch.setattr(urllib.request, "urlopen", _no_network)
    monkeypatch.setattr(socket.socket, "connect", _no_network)
    monkeypatch.setattr(builtins, "input", _no_network)


def write_gzip_rows(directory: Path, name: str, rows: list[str]) -> None:
    """``directory/name``: ``rows`` as lines of a gzip text file (OGB's raw CSV layout); its
    folder is made when missing."""
    (directory / name).parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(directory / name, "wt") as handle:
        handle.write("".join(row + "\n" for row in rows))

"""Worker side of :mod:`benchmarks.hetero`: RGCN on the typed graph in this interpreter, one
process, timings and test accuracy as JSON.

Runs in this project's venv (``ours``: :class:`~lightning_gnn_dist.nn.HeteroRGCN`, PyG's
``RGCNConv``, the typed neighbour loader) or in DGL's own venv (``dgl``: ``HeteroGraphConv`` of
``GraphConv(norm="right")`` per relation, DGL's ``NeighborSampler`` over blocks), which cannot
import this package: everything is imported inside the functions.

    python benchmarks/hetero/worker.py --system ours --task full --data G.npz --out R.json

``lightning`` is the user's path (:func:`run_lightning`), which reads the graph from its spec
(``--spec``) as a user's datamodule does.
"""

# ruff: noqa: E402  (the environment must be set before torch is imported)
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load(path: str):
    """The exported graph: ``(num_nodes {type: n}, relations [(s, r, d)], edges [2, E_r] per
    relation, paper x, y, train ids, test ids)`` as numpy arrays."""
    import numpy as np

    arrays = np.load(path)
    types = [str(t) for t in arrays["node_types"]]
    num_nodes = dict(zip(types, arrays["num_nodes"].tolist(), strict=True))
    relations = [tuple(str(p) for p in row) for row in arrays["relations"]]
    edges = [arrays[f"edges_{r}"] for r in range(len(relations))]
    return num_nodes, relations, edges, arrays["x"], arrays["y"], arrays["train"], arrays["test"]


def epochs_of(step_epoch, epochs: int) -> list[dict]:
    """Run ``step_epoch()`` ``epochs`` times; CPU and wall seconds of each."""
    records = []
    for _ in range(epochs):
        cpu, wall = time.process_time(), time.perf_counter()
        steps = step_epoch()
        records.append(
            {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall, "steps": steps}
        )
    return records


# -- this project ------------------------------------------------------------------------------
def run_ours(args) -> dict:
    sys.path.insert(0, str(REPO))
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch_geometric.data import HeteroData

    from lightning_gnn_dist.data.hetero import typed_graph
    from lightning_gnn_dist.data.hetero_local import build_typed_partitions
    from lightning_gnn_dist.loaders.hetero_neighbor import HeteroNeighborLoader, TypedGraphStore
    from lightning_gnn_dist.nn.hetero_models import HeteroRGCN, TypeEncoder

    num_nodes, relations, edges, x, y, train, test = load(args.data)
    data = HeteroData()
    for t, n in num_nodes.items():
        data[t].num_nodes = n
    data["paper"].x = torch.from_numpy(x)
    data["paper"].y = torch.from_numpy(y)
    mask = torch.zeros(num_nodes["paper"], dtype=torch.bool)
    mask[torch.from_numpy(train)] = True
    data["paper"].train_mask = mask
    for relation, index in zip(relations, edges, strict=True):
        data[relation].edge_index = torch.from_numpy(index)
    torch.manual_seed(0)
    ids = {t: torch.arange(n) for t, n in num_nodes.items() if t != "paper"}
    encoder = TypeEncoder({"paper": x.shape[1]}, args.hidden, ids)
    model = HeteroRGCN(
        data.metadata(), "paper", encoder, args.hidden, int(y.max()) + 1, 2, args.dropout
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    train_t, test_t = torch.from_numpy(train), torch.from_numpy(test)
    y_t = torch.from_numpy(y)

    def step(out, target):
        loss = F.cross_entropy(out, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    if args.task == "full":

        def epoch():
            model.train()
            step(model(data.x_dict, data)[train_t], y_t[train_t])
            return 1

    else:
        view = typed_graph(data)
        (part,) = build_typed_partitions(view, np.zeros(view.num_nodes, dtype=np.int64), 1)
        store = TypedGraphStore(part)
        loader = HeteroNeighborLoader(
            store, args.fanout, store.target_masks("train"), args.batch_size, shuffle=True
        )

        def epoch():
            model.train()
            steps = 0
            for batch in loader:
                paper = batch["paper"]
                n_id = {t: batch[t].n_id for t in batch.node_types}
                out = model({"paper": paper.x}, batch, n_id)[: paper.batch_size]
                step(out, paper.y[: paper.batch_size])
                steps += 1
            return steps

    records = epochs_of(epoch, args.epochs)
    model.eval()
    with torch.no_grad():
        predicted = model(data.x_dict, data)[test_t].argmax(1)
    accuracy = float((predicted == y_t[test_t]).float().mean())
    return {"records": records, "accuracy": accuracy, "torch": torch.__version__}


def run_lightning(args) -> dict:
    """The user's path: ``GraphPartitionDataModule`` on the spec (one part) and
    ``HeteroNodeClassifier("rgcn")`` under ``Trainer(strategy="gnn_ddp")``, as the
    heterogeneous-graphs guide shows; the same widths, dropout, optimiser, fan-outs and batch
    size as ``ours``. Per epoch: the process's CPU and wall seconds between Lightning's epoch
    hooks (no validation, logger, checkpoint or progress bar); the test accuracy of
    ``trainer.test`` (full batch)."""
    import torch

    sys.path.insert(0, str(REPO))
    import lightning_gnn_dist as lgd
    from benchmarks.peer_dgl.user_path import EpochTimer, timed_trainer  # peer_dgl's user path

    options = {}
    if args.task == "mini":
        options = {"loader": "neighbor", "num_neighbors": list(args.fanout),
                   "batch_size": args.batch_size, "shuffle": True}  # fmt: skip
    torch.manual_seed(0)
    datamodule = lgd.GraphPartitionDataModule(
        args.spec, method="random", num_parts=1, verify_dataset=False,
        root=str(Path(args.out).parent / "stores"), **options,
    )  # fmt: skip
    module = lgd.HeteroNodeClassifier("rgcn", hidden_channels=args.hidden, num_layers=2,
                                      dropout=args.dropout, lr=0.01)  # fmt: skip
    timer = EpochTimer()
    trainer = timed_trainer(1, args.epochs, timer, Path(args.out).parent)
    trainer.fit(module, datamodule=datamodule)
    (tested,) = trainer.test(module, datamodule=datamodule, verbose=False)
    accuracy = next(value for key, value in tested.items() if key.startswith("test_acc"))
    return {"records": timer.records, "accuracy": float(accuracy), "torch": torch.__version__}


# -- DGL ----------------------------------------------------------------------------------------
def run_dgl(args) -> dict:
    import dgl
    import dgl.nn as dglnn
    import torch
    import torch.nn.functional as F
    from torch import nn

    num_nodes, relations, edges, x, y, train, test = load(args.data)
    graph = dgl.heterograph(
        {
            rel: (torch.from_numpy(e[0]), torch.from_numpy(e[1]))
            for rel, e in zip(relations, edges, strict=True)
        },
        num_nodes_dict=num_nodes,
    )
    classes = int(y.max()) + 1

    class Layer(nn.Module):
        """RGCN: a mean per relation (GraphConv, norm right) with its own weight, summed, plus
        one root weight and a bias (PyG RGCNConv(aggr="mean"), no bases)."""

        def __init__(self, d_in, d_out):
            super().__init__()
            self.conv = dglnn.HeteroGraphConv(
                {
                    rel: dglnn.GraphConv(d_in, d_out, norm="right", bias=False,
                                         allow_zero_in_degree=True)
                    for _, rel, _ in relations
                },
                aggregate="sum",
            )  # fmt: skip
            self.root = nn.Linear(d_in, d_out)

        def forward(self, block, h):
            dst = {t: v[: block.num_dst_nodes(t)] for t, v in h.items()} if block.is_block else h
            out = self.conv(block, (h, dst) if block.is_block else h)
            return {t: out.get(t, 0) + self.root(v) for t, v in dst.items()}

    class RGCN(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(x.shape[1], args.hidden)
            self.emb = nn.ModuleDict(
                {t: nn.Embedding(n, args.hidden) for t, n in num_nodes.items() if t != "paper"}
            )
            self.layers = nn.ModuleList(
                [Layer(args.hidden, args.hidden), Layer(args.hidden, classes)]
            )

        def forward(self, blocks, ids):
            h = {t: (self.lin(features[ids[t]]) if t == "paper" else self.emb[t](ids[t]))
                 for t in ids}  # fmt: skip
            for i, (layer, block) in enumerate(zip(self.layers, blocks, strict=True)):
                h = layer(block, h)
                if i == 0:
                    h = {t: F.dropout(F.relu(v), args.dropout, self.training) for t, v in h.items()}
            return h["paper"]

    torch.manual_seed(0)
    features, labels = torch.from_numpy(x), torch.from_numpy(y)
    model = RGCN()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    train_t, test_t = torch.from_numpy(train), torch.from_numpy(test)
    everything = {t: torch.arange(n) for t, n in num_nodes.items()}

    def step(out, target):
        loss = F.cross_entropy(out, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    if args.task == "full":

        def epoch():
            model.train()
            step(model([graph, graph], everything)[train_t], labels[train_t])
            return 1

    else:
        sampler = dgl.dataloading.NeighborSampler([args.fanout[1], args.fanout[0]])
        loader = dgl.dataloading.DataLoader(
            graph, {"paper": train_t}, sampler, batch_size=args.batch_size, shuffle=True
        )

        def epoch():
            model.train()
            steps = 0
            for input_nodes, output_nodes, blocks in loader:
                out = model(blocks, input_nodes)
                step(out, labels[output_nodes["paper"]])
                steps += 1
            return steps

    records = epochs_of(epoch, args.epochs)
    model.eval()
    with torch.no_grad():
        predicted = model([graph, graph], everything)[test_t].argmax(1)
    accuracy = float((predicted == labels[test_t]).float().mean())
    return {"records": records, "accuracy": accuracy, "torch": torch.__version__}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--system", choices=("ours", "dgl", "lightning"), required=True)
    parser.add_argument("--spec", default="", help="the dataset spec (the user's path)")
    parser.add_argument("--task", choices=("full", "mini"), required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--fanout", type=int, nargs=2, default=[10, 10])
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    result = {"ours": run_ours, "dgl": run_dgl, "lightning": run_lightning}[args.system](args)
    Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()

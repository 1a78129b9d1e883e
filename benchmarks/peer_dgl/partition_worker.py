"""DGL's ``partition_graph`` (or full-batch GCN training) on one graph, measured (runs in DGL's
venv, started by :mod:`benchmarks.partition_scale` and :mod:`benchmarks.scaling`).

    /tmp/lgd-dgl-venv/bin/python partition_worker.py --data G.npz --parts 4 --out DIR --result R.json
    /tmp/lgd-dgl-venv/bin/python partition_worker.py --data CANONICAL_DIR --train-epochs 2 --result R.json

``--data`` is an ``.npz`` holding ``edge_index`` (``[2, E]``), ``x`` (``[N, d] float32``), ``y``
and ``train_mask``, or the folder of a ``chunked:`` graph's canonical copy (``edge_index.npy``,
``node-x.npy``, ``y.npy``, ``train_mask.npy``: :mod:`lightning_gnn_dist.data.chunked`). The
graph and its node data are built first (their memory is the "graph" baseline), then
``dgl.distributed.partition_graph`` runs with METIS, balancing the training vertices and the
edges as DistDGL's examples do, and writes the parts to ``DIR``; or (``--train-epochs``) a
two-layer ``GraphConv`` GCN (hidden 64, self loops, Adam) trains full batch in this one process
(DistDGL has no full-batch training). The JSON records the call's CPU seconds (this process and
its children), its wall seconds (per epoch when training), the peak RSS of the process
(``VmHWM``) and the RSS after building the graph. One thread (``OMP_NUM_THREADS=1``), like our
side.
"""

# ruff: noqa: E402  (the environment must be set before torch is imported)
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import resource
import time
from pathlib import Path


def _status(key: str) -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(key))
    return int(line.split()[1]) * 1024


def _cpu() -> float:
    own, children = (
        resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _arrays(path: str) -> dict:
    """``edge_index``, ``x``, ``y``, ``train_mask`` and (canonical folder) ``test_mask`` as
    numpy arrays in memory."""
    import numpy as np

    folder = Path(path)
    if folder.is_dir():
        files = {"edge_index": "edge_index.npy", "x": "node-x.npy", "y": "y.npy"}
        files |= {k: f"{k}.npy" for k in ("train_mask", "test_mask")}
        return {key: np.load(folder / name) for key, name in files.items()}
    with np.load(path) as arrays:
        return {key: arrays[key] for key in arrays.files}


def _train(graph, epochs: int, hidden: int = 64) -> dict:
    import dgl
    import torch
    import torch.nn.functional as F
    from dgl.nn import GraphConv

    graph = dgl.add_self_loop(dgl.remove_self_loop(graph))
    x, y = graph.ndata["feat"], graph.ndata["label"]
    train = graph.ndata["train_mask"].bool()
    classes = int(y.max()) + 1
    convs = torch.nn.ModuleList([GraphConv(x.size(1), hidden), GraphConv(hidden, classes)])
    optimizer = torch.optim.Adam(convs.parameters(), lr=0.01)
    epochs_out = []
    for _ in range(epochs):
        cpu, wall = time.process_time(), time.perf_counter()
        h = F.dropout(F.relu(convs[0](graph, x)), 0.5, True)
        loss = F.cross_entropy(convs[1](graph, h)[train], y[train])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        epochs_out.append(
            {
                "cpu": time.process_time() - cpu,
                "wall": time.perf_counter() - wall,
                "loss": float(loss),
            }
        )
    return {"epochs": epochs_out}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--out", default=None)
    parser.add_argument("--result", required=True)
    parser.add_argument("--train-epochs", type=int, default=0)
    args = parser.parse_args()

    import dgl
    import torch

    torch.set_num_threads(1)
    after_imports = _status("VmRSS")
    arrays = _arrays(args.data)
    src, dst = (torch.from_numpy(a) for a in arrays.pop("edge_index"))
    x = torch.from_numpy(arrays.pop("x"))
    y = torch.from_numpy(arrays.pop("y"))
    train = torch.from_numpy(arrays.pop("train_mask")).to(torch.uint8)
    arrays.clear()
    graph = dgl.graph((src, dst), num_nodes=x.size(0))
    del src, dst
    graph.ndata.update({"feat": x, "label": y, "train_mask": train})
    graph_rss = _status("VmRSS")
    cpu, wall = _cpu(), time.perf_counter()
    result = {}
    if args.train_epochs:
        result = _train(graph, args.train_epochs)
    else:
        dgl.distributed.partition_graph(
            graph,
            "graph",
            args.parts,
            args.out,
            part_method="metis",
            balance_ntypes=graph.ndata["train_mask"],
            balance_edges=True,
        )
    result |= {
        "cpu_seconds": _cpu() - cpu,
        "wall_seconds": time.perf_counter() - wall,
        "peak_rss_bytes": _status("VmHWM"),
        "graph_rss_bytes": graph_rss,
        "after_imports_rss_bytes": after_imports,
        "dgl": dgl.__version__,
    }
    with open(args.result, "w") as file:
        json.dump(result, file)


if __name__ == "__main__":
    main()

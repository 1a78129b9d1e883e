"""DGL's ``partition_graph`` on one graph, measured (runs in DGL's venv, started by
:mod:`benchmarks.partition_speed`'s scale section).

    /tmp/lgd-dgl-venv/bin/python partition_worker.py --data G.npz --parts 4 --out DIR --result R.json

``G.npz`` holds ``edge_index`` (``[2, E]``), ``x`` (``[N, d] float32``), ``y`` and ``train_mask``.
The graph and its node data are built first (their memory is the "graph" baseline), then
``dgl.distributed.partition_graph`` runs with METIS, balancing the training vertices and the edges
as DistDGL's examples do, and writes the parts to ``DIR``. The JSON records the call's CPU seconds
(this process and its children), its wall seconds, the peak RSS of the process (``VmHWM``) and
the RSS after building the graph. One thread (``OMP_NUM_THREADS=1``), like our side.
"""

# ruff: noqa: E402  (the environment must be set before torch is imported)
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import resource
import time


def _status(key: str) -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(key))
    return int(line.split()[1]) * 1024


def _cpu() -> float:
    own, children = (
        resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--parts", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--result", required=True)
    args = parser.parse_args()

    import dgl
    import numpy as np
    import torch

    torch.set_num_threads(1)
    after_imports = _status("VmRSS")
    with np.load(args.data) as arrays:
        src, dst = (torch.from_numpy(a) for a in arrays["edge_index"])
        x = torch.from_numpy(arrays["x"])
        y = torch.from_numpy(arrays["y"])
        train = torch.from_numpy(arrays["train_mask"]).to(torch.uint8)
    graph = dgl.graph((src, dst), num_nodes=x.size(0))
    del src, dst
    graph.ndata.update({"feat": x, "label": y, "train_mask": train})
    graph_rss = _status("VmRSS")
    cpu, wall = _cpu(), time.perf_counter()
    dgl.distributed.partition_graph(
        graph,
        "graph",
        args.parts,
        args.out,
        part_method="metis",
        balance_ntypes=graph.ndata["train_mask"],
        balance_edges=True,
    )
    result = {
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

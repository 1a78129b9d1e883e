"""Memory per rank of a graph with 8 edge features (issue 30): each rank holds its share.

    python -m benchmarks.attribute_memory            # R-MAT scale 16, P = 2 and 4 (~2 min)
    python -m benchmarks.attribute_memory --quick    # R-MAT scale 12, P = 2 (seconds)

The graph is ``rmat?scale=S&edge_features=8&targets=multilabel:16`` (``x [N, 32]``,
``edge_attr [E, 8] float32``, a 16-task multi-label ``y``), partitioned with METIS into a
store per ``P`` (and ``P = 1``: one process holding the whole graph, through the same code
path). Each rank of each store runs, in a fresh interpreter, what a training rank runs first:
``GraphPartitionDataModule(store=...).setup()`` (load and hash its part, build its full batch);
reported are the bytes of every tensor the rank's part holds and the growth of its resident
memory (RSS after ``setup`` minus RSS after the imports).

The claim (issue 30, "Done when"): a rank holds at most its share of the whole graph plus 10 %
of it, ``allowed = W · (s + 0.1)``, where ``W`` is the whole graph's (``P = 1``) measure and the
share ``s = (node bytes · (owned + halo) / N + edge bytes · E_rank / E) / W`` weighs the
whole graph's per-vertex tensors by the rank's owned and halo vertices and its per-edge tensors
(``edge_index``, ``edge_attr``, ``e_id``) by the edges it holds. ``ratio = measured / allowed``
must stay ``≤ 1``. Memory readings do not depend on CPU contention; ``--repeats`` is unused.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import REPO, Benchmark, Run, csv, log
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.store import partition_to_store

_WORKER = r"""
import gc, json, os, sys
from types import SimpleNamespace
import torch
from lightning_gnn_dist import GraphPartitionDataModule

def rss():
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def tensor_bytes(value):
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    return 0

store, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
gc.collect()
before = rss()
dm = GraphPartitionDataModule(store=store)
dm.trainer = SimpleNamespace(num_nodes=1, world_size=world, global_rank=rank)
dm.setup()
gc.collect()
part = dm.local_partition
node, edge = 0, 0
for name, value in vars(part).items():
    size = tensor_bytes(value)
    if name in ("edge_index", "edge_ids", "edge_attrs"):
        edge += size
    elif name in ("x", "y", "train_mask", "val_mask", "test_mask", "node_attrs", "global_ids",
                  "in_degree", "has_self_loop", "num_self_loops"):
        node += size
print(json.dumps({
    "rank": rank, "rss_bytes": rss() - before, "tensor_bytes": sum(
        tensor_bytes(v) for v in vars(part).values()),
    "node_bytes": node, "edge_bytes": edge, "owned": part.num_owned, "halo": part.num_halo,
    "edges": int(part.edge_index.size(1)),
}))
"""


def _rank(store: Path, rank: int, world: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "-c", _WORKER, str(store), str(rank), str(world)],
        capture_output=True, text=True, env=env, check=True, cwd=REPO,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(scale: int, parts: list[int], folder: Path) -> dict:
    spec = f"rmat?scale={scale}&edge_features=8&targets=multilabel:16"
    data = load_dataset(spec)
    num_nodes, num_edges = int(data.num_nodes), int(data.edge_index.size(1))
    stores = {}
    for world in [1, *parts]:
        method = "random" if world == 1 else "metis"
        stores[world] = folder / f"rmat{scale}-p{world}"
        partition_to_store(data, get_partitioner(method), world, stores[world], dataset=spec)
    del data
    whole = _rank(stores[1], 0, 1)
    log(f"{spec}: whole graph {whole['tensor_bytes'] / 2**20:.1f} MiB of tensors")
    rows = []
    for world in parts:
        for rank in range(world):
            got = _rank(stores[world], rank, world)
            share = (
                whole["node_bytes"] * (got["owned"] + got["halo"]) / num_nodes
                + whole["edge_bytes"] * got["edges"] / num_edges
            ) / whole["tensor_bytes"]
            row = {"num_parts": world, **got, "share": share}
            for what in ("tensor_bytes", "rss_bytes"):
                allowed = whole[what] * (share + 0.1)
                row[f"{what}_allowed"] = allowed
                row[f"{what}_ratio"] = got[what] / allowed
            log(
                f"P={world} rank {rank}: share {share:.3f}, tensors "
                f"{row['tensor_bytes_ratio']:.2f}, RSS {row['rss_bytes_ratio']:.2f} of allowed"
            )
            rows.append(row)
    return {
        "dataset": spec,
        "num_nodes": num_nodes,
        "num_edges": num_edges,
        "whole": whole,
        "rows": rows,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scale", type=int, help="R-MAT scale (default: 16; quick 12)")
    parser.add_argument("--parts", type=csv(int), help="parts P (default: 2,4; quick 2)")


def run(r: Run) -> None:
    scale = r.args.scale or (12 if r.quick else 16)
    parts = r.args.parts or ([2] if r.quick else [2, 4])
    with tempfile.TemporaryDirectory(prefix="lgd-bench-") as folder:
        r.report["graph"] = measure(scale, parts, Path(folder))
    r.report["worst_ratio"] = max(
        max(row["tensor_bytes_ratio"], row["rss_bytes_ratio"]) for row in r.report["graph"]["rows"]
    )


def render(report: dict) -> str:
    graph = report["graph"]
    whole = graph["whole"]
    mib = 2**20
    lines = [
        "# Memory per rank with 8 edge features",
        "",
        f"{graph['dataset']} ({graph['num_nodes']} vertices, {graph['num_edges']} edges), METIS "
        f"parts. One process holding the whole graph: {whole['tensor_bytes'] / mib:.1f} MiB of "
        f"tensors, RSS +{whole['rss_bytes'] / mib:.1f} MiB. Allowed per rank = whole × (share "
        "+ 0.1), the share weighing the whole graph's per-vertex tensors by the rank's owned + "
        "halo vertices and its per-edge tensors by the rank's edges; ratio = measured ÷ "
        f"allowed (≤ 1 holds the claim). Worst ratio: {report['worst_ratio']:.2f}.",
        "",
        "| P | rank | owned | halo | edges | share | tensors MiB | allowed MiB | ratio "
        "| RSS MiB | allowed MiB | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in graph["rows"]:
        lines.append(
            f"| {row['num_parts']} | {row['rank']} | {row['owned']} | {row['halo']} | "
            f"{row['edges']} | {row['share']:.3f} | {row['tensor_bytes'] / mib:.1f} | "
            f"{row['tensor_bytes_allowed'] / mib:.1f} | {row['tensor_bytes_ratio']:.2f} | "
            f"{row['rss_bytes'] / mib:.1f} | {row['rss_bytes_allowed'] / mib:.1f} | "
            f"{row['rss_bytes_ratio']:.2f} |"
        )
    return "\n".join(lines) + "\n"


BENCHMARK = Benchmark("attribute_memory", __doc__, run, render, add_arguments)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())

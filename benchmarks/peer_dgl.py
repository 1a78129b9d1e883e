"""This project against DGL 2.1, the peer to beat, on the same graph (issue 19).

    bash benchmarks/peer_dgl_env.sh                  # once: DGL's own venv (torch 2.2.1)
    python benchmarks/peer_dgl.py                    # full run (~15 min on 2 busy cores)
    python benchmarks/peer_dgl.py --quick            # smoke run (~2 min)

Writes ``benchmarks/results/peer_dgl.json`` and ``.md``. Not part of ``make test``.

Every variant runs in a fresh interpreter (``benchmarks/peer_dgl_worker.py``: the DGL variants in
DGL's venv, which cannot import this package) on ``rmat?scale=16&edge_factor=17&features=100&
classes=16`` exported once to an ``.npz``; variants run interleaved (round ``r`` runs every
variant once) and the table gives the median over rounds of each variant's median epoch, and the
median over rounds of the per-round ratio to DGL. One thread per process. Per variant: CPU and
wall seconds per epoch, the phases (sample, gather, forward, backward + optimiser step,
exchange), test accuracy after the fixed epochs, and data memory = peak RSS − RSS after imports.

Variants: full-batch GCN and GraphSAGE (hidden 64, dropout 0.5, Adam 0.01) with this project's
reference models at 1 and 2 ranks (METIS, p2p halo exchange, gloo), plain PyG (``GCNConv`` /
``SAGEConv`` on ``edge_index``) and DGL (``GraphConv(norm="both")`` / ``SAGEConv("mean")``);
mini-batch GraphSAGE 2×256, fan-out [25, 10] (25 neighbours of each seed; DGL's
``NeighborSampler([10, 25])`` lists fan-outs from the input layer), batch 1024, with this
project's ``NeighborLoader`` and DGL's ``DataLoader`` over blocks. DistDGL is not run (see the
report of issue 19): the 2-rank rows are this project's only.
"""

# ruff: noqa: E402  (the environment must be set before torch is imported)
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATASET = "rmat?scale=16&edge_factor=17&features=100&classes=16"
RESULTS = REPO / "benchmarks" / "results"


def prepare(args, workdir: Path) -> None:
    import numpy as np
    import torch

    sys.path.insert(0, str(REPO))
    from lightning_gnn_dist.data import load_dataset
    from lightning_gnn_dist.data.local import build_local_partitions
    from lightning_gnn_dist.partition import get_partitioner

    data = load_dataset(DATASET)
    np.savez(
        workdir / "graph.npz",
        **{
            k: getattr(data, k).numpy() for k in ("edge_index", "x", "y", "train_mask", "test_mask")
        },
    )
    for world_size in (1, 2):
        if world_size == 1:
            assignment = np.zeros(data.num_nodes, dtype=np.int64)
        else:
            assignment = get_partitioner("metis", seed=0).partition(data, world_size)
        (workdir / "parts" / str(world_size)).mkdir(parents=True, exist_ok=True)
        for part in build_local_partitions(data, assignment, world_size):
            part.save(workdir / "parts" / str(world_size) / f"part{part.part_id}.pt")
    del torch


def run_variant(args, workdir: Path, system: str, task: str, world_size: int) -> dict:
    python = args.dgl_python if system == "dgl" else sys.executable
    base = [
        python,
        str(Path(__file__).with_name("peer_dgl_worker.py")),
        "--worker",
        f"{system}:{task}",
        "--data",
        str(workdir / "graph.npz"),
        "--parts",
        str(workdir / "parts"),
        *args.forward,
    ]
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(29500 + os.getpid() % 1000),
    }
    procs = [
        subprocess.Popen(
            [*base, "--out", str(workdir / f"r{rank}.json")], env={**env, "RANK": str(rank)}
        )
        for rank in range(world_size)
    ]
    for proc in procs:
        if proc.wait(timeout=1800) != 0:
            raise RuntimeError(f"{system}:{task} at {world_size} ranks failed")
    results = [json.loads((workdir / f"r{rank}.json").read_text()) for rank in range(world_size)]
    result = results[0]
    result["data_memory_bytes"] = max(r["data_memory_bytes"] for r in results)
    return result


def summarise(result: dict) -> dict:
    records = result["records"][1:]  # the first epoch warms up (caches, allocator)
    phases = sorted({k for r in records for k in r["phases_cpu"]})
    return {
        "cpu_s": statistics.median(r["cpu"] for r in records),
        "wall_s": statistics.median(r["wall"] for r in records),
        "phases_cpu_s": {
            k: statistics.median(r["phases_cpu"].get(k, 0.0) for r in records) for k in phases
        },
        "accuracy": result["accuracy"],
        "data_memory_mib": result["data_memory_bytes"] / 2**20,
    }


VARIANTS = [  # (row, system, task, ranks)
    ("full-batch GCN", "dgl", "gcn-full", 1),
    ("full-batch GCN", "ours", "gcn-full", 1),
    ("full-batch GCN", "pyg", "gcn-full", 1),
    ("full-batch GCN", "ours", "gcn-full", 2),
    ("full-batch SAGE", "dgl", "sage-full", 1),
    ("full-batch SAGE", "ours", "sage-full", 1),
    ("full-batch SAGE", "pyg", "sage-full", 1),
    ("full-batch SAGE", "ours", "sage-full", 2),
    ("mini-batch SAGE", "dgl", "sage-mini", 1),
    ("mini-batch SAGE", "ours", "sage-mini", 1),
    ("mini-batch SAGE", "ours+prefetch", "sage-mini", 1),
    ("mini-batch SAGE", "ours", "sage-mini", 2),
]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only", default="", help="comma-separated rows to run (e.g. 'full-batch GCN')"
    )
    parser.add_argument("--dgl-python", default="/tmp/lgd-dgl-venv/bin/python")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--mini-epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None, help="mini-batch steps per epoch")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--mini-hidden", type=int, default=256)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--fanout", type=int, nargs="+", default=[25, 10])
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.epochs, args.mini_epochs = 1, 4, 2
    args.forward = [
        "--epochs",
        str(args.epochs),
        "--mini-epochs",
        str(args.mini_epochs),
        "--hidden",
        str(args.hidden),
        "--mini-hidden",
        str(args.mini_hidden),
        "--dropout",
        str(args.dropout),
        "--batch-size",
        str(args.batch_size),
        "--fanout",
        *map(str, args.fanout),
    ]
    if not Path(args.dgl_python).exists():
        sys.exit(
            f"no DGL environment at {args.dgl_python}: run bash benchmarks/peer_dgl_env.sh first"
        )
    variants = [v for v in VARIANTS if not args.only or v[0] in args.only.split(",")]
    runs: dict[str, list] = {}
    loads = []
    with tempfile.TemporaryDirectory(prefix="peer_dgl_") as tmp:
        workdir = Path(tmp)
        prepare(args, workdir)
        for round_ in range(args.rounds):
            for row, system, task, ranks in variants:
                loads.append(os.getloadavg()[0])
                key = f"{row} | {system} | {ranks}"
                summary = summarise(run_variant(args, workdir, system, task, ranks))
                runs.setdefault(key, []).append(summary)
                print(
                    f"round {round_}: {key}: {summary['cpu_s'] * 1e3:.0f} ms CPU, {summary['wall_s'] * 1e3:.0f} ms wall, "
                    f"acc {summary['accuracy']:.3f}, {summary['data_memory_mib']:.0f} MiB",
                    flush=True,
                )
    write_results(args, runs, loads)


def write_results(args, runs: dict, loads: list) -> None:
    rows = []
    for key, summaries in runs.items():
        row, system, ranks = key.split(" | ")
        dgl = runs.get(f"{row} | dgl | 1")
        ratio = None
        if dgl:
            ratio = statistics.median(
                s["cpu_s"] / d["cpu_s"] for s, d in zip(summaries, dgl, strict=False)
            )
        phases = sorted({k for s in summaries for k in s["phases_cpu_s"]})
        rows.append(
            {
                "row": row,
                "system": system,
                "ranks": int(ranks),
                "cpu_s": statistics.median(s["cpu_s"] for s in summaries),
                "wall_s": statistics.median(s["wall_s"] for s in summaries),
                "cpu_ratio_to_dgl": ratio,
                "phases_cpu_s": {
                    k: statistics.median(s["phases_cpu_s"].get(k, 0.0) for s in summaries)
                    for k in phases
                },
                "accuracy": statistics.median(s["accuracy"] for s in summaries),
                "data_memory_mib": statistics.median(s["data_memory_mib"] for s in summaries),
            }
        )
    meta = {
        "dataset": DATASET,
        "rounds": args.rounds,
        "epochs": args.epochs,
        "mini_epochs": args.mini_epochs,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, one thread per process",
        "loadavg_1min_during_runs": [round(x, 2) for x in loads],
        "quick": args.quick,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "peer_dgl.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [
        "# This project against DGL 2.1 (issue 19)",
        "",
        f"`{DATASET}`; {meta['machine']}; {args.rounds} interleaved rounds; full-batch {args.epochs} epochs, "
        f"mini-batch {args.mini_epochs} epochs (first epoch not timed). Load average during runs: "
        f"{min(loads):.1f}–{max(loads):.1f}. CPU = process CPU seconds per epoch; ratio = median over rounds "
        "of (variant CPU ÷ DGL CPU) in the same round. Memory = peak RSS − RSS after imports (max over ranks).",
        "",
        "| setting | system | ranks | CPU s/epoch | wall s/epoch | CPU ÷ DGL | phases (CPU s) | test acc | data MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        phases = ", ".join(f"{k} {v:.3f}" for k, v in r["phases_cpu_s"].items())
        ratio = "—" if r["cpu_ratio_to_dgl"] is None else f"{r['cpu_ratio_to_dgl']:.2f}×"
        lines.append(
            f"| {r['row']} | {r['system']} | {r['ranks']} | {r['cpu_s']:.3f} | {r['wall_s']:.3f} | {ratio} | "
            f"{phases} | {r['accuracy']:.3f} | {r['data_memory_mib']:.0f} |"
        )
    (RESULTS / "peer_dgl.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

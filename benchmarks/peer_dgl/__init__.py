"""This project against DGL 2.1, the peer to beat, on the same graph (issue 19).

    bash benchmarks/peer_dgl/env.sh              # once: DGL's own venv (torch 2.2.1), ~2.5 GB
    python -m benchmarks.peer_dgl                # full run (~20 min on 2 busy cores)
    python -m benchmarks.peer_dgl --quick        # smoke run (~4 min)

Not part of ``make test``. Every variant runs in a fresh interpreter
(:mod:`benchmarks.peer_dgl.worker`; the DGL variants in DGL's venv, which cannot import this
package) on ``rmat?scale=16&edge_factor=17&features=100&classes=16``, exported once to an
``.npz`` (this project's ranks load their stored part only). Variants alternate in
``--repeats`` interleaved rounds; a ratio is pooled medians of per-epoch CPU seconds against DGL
in the same rounds, with the per-round range. One thread per process. Per variant: CPU and wall
seconds per epoch (first epoch not timed), the phases (sample + gather, forward, backward +
optimiser step, halo-exchange wait), test accuracy after the fixed epochs, and data memory =
peak RSS − RSS after imports (max over ranks).

Variants: full-batch GCN and GraphSAGE (hidden 64, dropout 0.5, Adam 0.01) with this project's
reference models at 1 and 2 ranks (METIS, p2p halo exchange, gloo on loopback), plain PyG
(``GCNConv``/``SAGEConv`` on ``edge_index``) and DGL (``GraphConv(norm="both")`` with self loops,
``SAGEConv("mean")``); mini-batch GraphSAGE 2×256, fan-out [25, 10] (25 neighbours of each seed;
DGL's ``NeighborSampler([10, 25])`` lists fan-outs from the input layer), batch 1024, with this
project's ``NeighborLoader`` (with and without prefetch) and DGL's ``DataLoader`` over blocks.
DistDGL is not run: the 2-rank rows are this project's only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import (
    REPO,
    Benchmark,
    Run,
    log,
    markdown_table,
    pooled,
    pooled_median,
    ratio,
    ratio_cell,
    run_rounds,
)

DATASET = "rmat?scale=16&edge_factor=17&features=100&classes=16"
WORKER = Path(__file__).with_name("worker.py")
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


def add_arguments(parser) -> None:
    parser.add_argument("--dgl-python", default="/tmp/lgd-dgl-venv/bin/python")
    parser.add_argument("--only", default="", help="comma-separated rows, e.g. 'mini-batch SAGE'")
    parser.add_argument("--epochs", type=int, default=12, help="full-batch epochs")
    parser.add_argument("--mini-epochs", type=int, default=3, help="mini-batch epochs")


def prepare(workdir: Path) -> None:
    """The graph as ``.npz`` for the workers and this project's parts at 1 and 2 ranks."""
    import numpy as np

    from lightning_gnn_dist.data import load_dataset
    from lightning_gnn_dist.data.local import build_local_partitions
    from lightning_gnn_dist.partition import get_partitioner

    data = load_dataset(DATASET)
    keys = ("edge_index", "x", "y", "train_mask", "test_mask")
    np.savez(workdir / "graph.npz", **{k: getattr(data, k).numpy() for k in keys})
    for world_size in (1, 2):
        assignment = (
            np.zeros(data.num_nodes, dtype=np.int64)
            if world_size == 1
            else get_partitioner("metis", seed=0).partition(data, world_size)
        )
        folder = workdir / "parts" / str(world_size)
        folder.mkdir(parents=True, exist_ok=True)
        for part in build_local_partitions(data, assignment, world_size):
            part.save(folder / f"part{part.part_id}.pt")


def run_variant(workdir: Path, settings: dict, system: str, task: str, ranks: int) -> dict:
    """One variant in fresh interpreters (one per rank); rank 0's record, memory max over ranks."""
    python = settings["dgl_python"] if system == "dgl" else sys.executable
    base = [
        python,
        str(WORKER),
        "--worker",
        f"{system}:{task}",
        "--data",
        str(workdir / "graph.npz"),
    ]
    base += ["--parts", str(workdir / "parts"), "--epochs", str(settings["epochs"])]
    base += ["--mini-epochs", str(settings["mini_epochs"])]
    env = {**os.environ, "PYTHONPATH": str(REPO), "WORLD_SIZE": str(ranks)}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29500 + os.getpid() % 1000))
    outs = [workdir / f"r{rank}.json" for rank in range(ranks)]
    procs = [
        subprocess.Popen([*base, "--out", str(out)], env={**env, "RANK": str(rank)})
        for rank, out in enumerate(outs)
    ]
    if any(proc.wait(timeout=1800) != 0 for proc in procs):
        raise RuntimeError(f"{system}:{task} at {ranks} ranks failed")
    results = [json.loads(out.read_text()) for out in outs]
    results[0]["data_memory_bytes"] = max(r["data_memory_bytes"] for r in results)
    return results[0]


def run(r: Run) -> None:
    settings = {
        "dataset": DATASET,
        "epochs": 4 if r.quick else r.args.epochs,
        "mini_epochs": 2 if r.quick else r.args.mini_epochs,
        "dgl_python": r.args.dgl_python,
        "fanout": [25, 10],
        "batch_size": 1024,
        "hidden": 64,
        "mini_hidden": 256,
    }
    if not Path(settings["dgl_python"]).exists():
        raise SystemExit(
            f"no DGL venv at {settings['dgl_python']}: bash benchmarks/peer_dgl/env.sh"
        )
    only = set(filter(None, r.args.only.split(",")))
    variants = [v for v in VARIANTS if not only or v[0] in only]
    details: dict[str, list[dict]] = {}

    def measure(row, system, task, ranks, workdir):
        def call(round_index: int) -> list[float]:
            result = run_variant(workdir, settings, system, task, ranks)
            records = result["records"][1:]  # the first epoch warms up
            details.setdefault(f"{row} | {system} | {ranks}", []).append(
                {
                    "wall": [rec["wall"] for rec in records],
                    "phases": [rec["phases_cpu"] for rec in records],
                    "accuracy": result["accuracy"],
                    "memory_mib": result["data_memory_bytes"] / 2**20,
                    "torch": result["torch"],
                }
            )
            log(f"round {round_index}: {row} | {system} | {ranks}: {records[-1]['cpu']:.3f} s CPU")
            return [rec["cpu"] for rec in records]

        return call

    with tempfile.TemporaryDirectory(prefix="peer_dgl_") as tmp:
        workdir = Path(tmp)
        prepare(workdir)
        samples = run_rounds(
            {f"{v[0]} | {v[1]} | {v[3]}": measure(*v, workdir) for v in variants}, r.repeats
        )
    rows = []
    for row, system, _task, ranks in variants:
        key, peer = f"{row} | {system} | {ranks}", f"{row} | dgl | 1"
        runs = details[key]
        phases = sorted({p for run_ in runs for rec in run_["phases"] for p in rec})
        over = ratio(samples[key], samples[peer]) if peer in samples else None
        rows.append(
            {
                "setting": row,
                "system": system,
                "ranks": ranks,
                "cpu_s": pooled_median(samples[key]),
                "wall_s": pooled_median([run_["wall"] for run_ in runs]),
                "cpu_over_dgl": None if over is None else over.value,
                "cpu_over_dgl_per_round": None if over is None else list(over.per_round),
                "phases_cpu_s": {
                    p: pooled_median([[rec.get(p, 0.0) for rec in run_["phases"]] for run_ in runs])
                    for p in phases
                },
                "accuracy": pooled_median([[run_["accuracy"]] for run_ in runs]),
                "data_memory_mib": max(run_["memory_mib"] for run_ in runs),
                "torch": runs[0]["torch"],
                "epochs_timed": len(pooled(samples[key])),
            }
        )
        r.report.update(
            settings={k: v for k, v in settings.items() if k != "dgl_python"}, rows=rows
        )
        r.save()


def render(report: dict) -> str:
    s = report["settings"]
    rows = [
        {
            "setting": row["setting"],
            "system": row["system"],
            "ranks": row["ranks"],
            "CPU s/epoch": f"{row['cpu_s']:.3f}",
            "wall s/epoch": f"{row['wall_s']:.3f}",
            "CPU ÷ DGL": "—"
            if row["cpu_over_dgl"] is None
            else ratio_cell(row["cpu_over_dgl"], row["cpu_over_dgl_per_round"]),
            "phases (CPU s/epoch)": ", ".join(
                f"{k} {v:.3f}" for k, v in row["phases_cpu_s"].items()
            ),
            "test acc": f"{row['accuracy']:.3f}",
            "data MiB": f"{row['data_memory_mib']:.0f}",
            "torch": row["torch"],
        }
        for row in report["rows"]
    ]
    columns = list(rows[0]) if rows else []
    return (
        "# This project against DGL 2.1 (issue 19)\n\n"
        f"`{s['dataset']}`; full-batch {s['epochs']} epochs (hidden {s['hidden']}), mini-batch "
        f"{s['mini_epochs']} epochs (SAGE 2×{s['mini_hidden']}, fan-out {s['fanout']}, batch "
        f"{s['batch_size']}); the first epoch of each run is not timed. CPU ÷ DGL: pooled median "
        "of per-epoch CPU seconds over DGL's in the same rounds (per-round range). Data memory: "
        "peak RSS − RSS after imports, max over ranks. `ours+prefetch` samples the next batch in "
        "a background thread (its sample phase is the wait for the batch).\n\n"
        + markdown_table(rows, columns)
    )


BENCHMARK = Benchmark(
    "peer_dgl", __doc__, run, render, add_arguments=add_arguments, repeats=3, quick_repeats=1
)

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
reference models at 1 and 2 ranks (METIS with the training, validation and test vertices
balanced across parts, as DistDGL's; p2p halo exchange, gloo on loopback), plain PyG
(``GCNConv``/``SAGEConv`` on ``edge_index``) and DGL (``GraphConv(norm="both")`` with self loops,
``SAGEConv("mean")``); mini-batch GraphSAGE 2×256, fan-out [25, 10] (25 neighbours of each seed;
DGL's ``NeighborSampler([10, 25])`` lists fan-outs from the input layer), batch 1024, with this
project's ``NeighborLoader`` (with and without prefetch) and DGL's ``DataLoader`` over blocks;
at 2 ranks, DistDGL (:mod:`benchmarks.peer_dgl.distdgl`: METIS with balanced training vertices,
a graph server and a trainer per simulated machine, each machine a mount namespace with its own
``/dev/shm``; needs root for ``unshare --mount``, else the row records why it was skipped).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import (
    REPO,
    Benchmark,
    Run,
    load_average,
    log,
    markdown_table,
    pooled,
    pooled_median,
    ratio,
    ratio_cell,
    run_rounds,
)

DATASET = "rmat?scale={scale}&edge_factor=17&features=100&classes=16"
WORKER = Path(__file__).with_name("worker.py")
USER_PATH = ("lightning", "lightning+prefetch")
"""Systems that run the user's path (:mod:`benchmarks.peer_dgl.user_path`)."""
SYSTEMS = {
    "dgl": "DGL 2.1, one process: `DataLoader` over blocks",
    "distdgl": "DistDGL: a graph server and a trainer per simulated machine",
    "lightning": "**the user's path**: PyG's model in the neighbour guide's `LightningModule`, "
    '`loader="neighbor"`, `Trainer(strategy="gnn_ddp", devices=ranks)`',
    "lightning+prefetch": "the user's path with `prefetch=True`",
    "ours": "the project's own `build_model` in a plain loop, trimmed per hop (not the user's path)",
    "ours+prefetch": "as `ours`, prefetching (not the user's path)",
    "pyg": "plain PyG layers on `edge_index`",
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
    ("mini-batch SAGE", "lightning", "sage-mini", 1),
    ("mini-batch SAGE", "lightning+prefetch", "sage-mini", 1),
    ("mini-batch SAGE", "lightning", "sage-mini", 2),
    ("mini-batch SAGE", "lightning+prefetch", "sage-mini", 2),
    ("mini-batch SAGE", "distdgl", "sage-mini", 2),
    ("mini-batch SAGE", "ours", "sage-mini", 1),
    ("mini-batch SAGE", "ours", "sage-mini", 2),
    ("mini-batch GCN", "dgl", "gcn-mini", 1),
    ("mini-batch GCN", "lightning", "gcn-mini", 1),
    ("mini-batch GAT", "dgl", "gat-mini", 1),
    ("mini-batch GAT", "lightning", "gat-mini", 1),
]
DISTDGL = Path(__file__).with_name("distdgl.py")


def add_arguments(parser) -> None:
    parser.add_argument("--dgl-python", default="/tmp/lgd-dgl-venv/bin/python")
    parser.add_argument("--only", default="", help="comma-separated rows, e.g. 'mini-batch SAGE'")
    parser.add_argument("--epochs", type=int, default=12, help="full-batch epochs")
    parser.add_argument("--mini-epochs", type=int, default=3, help="mini-batch epochs")
    parser.add_argument(
        "--scale", type=int, default=16, help="R-MAT scale: 2**scale vertices, 17 edges each"
    )
    parser.add_argument(
        "--ranks", default="", help="comma-separated rank counts to run, e.g. '1' (default: all)"
    )


def distdgl_unavailable_reason(dgl_python: str) -> str | None:
    """Why DistDGL cannot run here (``None`` when it can): it needs root for ``unshare --mount``
    (a private ``/dev/shm`` per simulated machine) and ``dgl.distributed`` in DGL's venv."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "needs root and unshare(1): each simulated machine mounts its own /dev/shm"
    probe = subprocess.run(
        [dgl_python, "-c", "import dgl.distributed"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        return f"dgl.distributed does not import in {dgl_python}: {probe.stderr.strip()[-200:]}"
    return None


def prepare(
    workdir: Path,
    dgl_python: str | None = None,
    dataset: str = DATASET.format(scale=16),
    user_path_ranks: tuple[int, ...] = (),
) -> None:
    """The graph as ``.npz`` for the workers, this project's parts at 1 and 2 ranks, the
    user's-path partition stores at ``user_path_ranks`` (``stores/``) and, given
    ``dgl_python``, DistDGL's 2 parts (``dgl2/``)."""
    import numpy as np

    from benchmarks.peer_dgl.user_path import datamodule_options
    from lightning_gnn_dist import GraphPartitionDataModule
    from lightning_gnn_dist.data import load_dataset
    from lightning_gnn_dist.data.local import build_local_partitions
    from lightning_gnn_dist.partition import get_partitioner

    for ranks in user_path_ranks:  # the datamodule's own partition store, made before timing
        options = {"dataset": dataset, "stores": str(workdir / "stores"), "fanout": [25, 10]}
        options.update(batch_size=1024, prefetch=False)
        GraphPartitionDataModule(
            **{**datamodule_options(_Namespace(options), ranks), "verify_dataset": True}
        ).prepare_data()
    data = load_dataset(dataset)
    keys = ("edge_index", "x", "y", "train_mask", "test_mask")
    np.savez(workdir / "graph.npz", **{k: getattr(data, k).numpy() for k in keys})
    for world_size in (1, 2):
        assignment = (
            np.zeros(data.num_nodes, dtype=np.int64)
            if world_size == 1
            else get_partitioner("metis", seed=0, balance_masks=True).partition(data, world_size)
        )
        folder = workdir / "parts" / str(world_size)
        folder.mkdir(parents=True, exist_ok=True)
        for part in build_local_partitions(data, assignment, world_size):
            part.save(folder / f"part{part.part_id}.pt")
    if dgl_python is not None:
        subprocess.run(
            [dgl_python, str(DISTDGL), "partition", "--data", str(workdir / "graph.npz")]
            + ["--out", str(workdir / "dgl2"), "--parts", "2"],
            check=True,
            stdout=subprocess.DEVNULL,
        )


class _Namespace:
    def __init__(self, values: dict) -> None:
        self.__dict__.update(values)


def run_distdgl(workdir: Path, settings: dict, ranks: int) -> dict:
    """DistDGL at ``ranks`` simulated machines (a server and a trainer each); rank 0's record,
    trainer memory max over ranks."""
    config = workdir / "dgl2" / "rmat.json"
    port = 30000 + os.getpid() % 1000 * 10
    ip_config = workdir / "ip_config.txt"
    ip_config.write_text("".join(f"127.0.0.1 {port + 100 * m}\n" for m in range(ranks)))
    env = {**os.environ, "DGL_IP_CONFIG": str(ip_config), "DGL_CONF_PATH": str(config)}
    env.update(DGL_NUM_CLIENT=str(ranks), WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1")
    env.update(MASTER_PORT=str(29500 + os.getpid() % 1000), PYTHONPATH="")
    args = ["--config", str(config), "--data", str(workdir / "graph.npz")]
    args += ["--epochs", str(settings["mini_epochs"]), "--hidden", str(settings["mini_hidden"])]
    args += ["--batch-size", str(settings["batch_size"]), "--dropout", str(settings["dropout"])]
    args += ["--fanout", *[str(f) for f in settings["fanout"]]]
    outs = [workdir / f"d{m}.json" for m in range(ranks)]
    machine = str(DISTDGL.with_name("distdgl_machine.sh"))
    procs = [
        subprocess.Popen(
            ["unshare", "--mount", machine, settings["dgl_python"], str(m), *args, "--out", str(o)],
            env=env,
            stdout=subprocess.DEVNULL,
        )
        for m, o in enumerate(outs)
    ]
    return _rank_zero_record(
        procs,
        outs,
        f"DistDGL at {ranks} ranks",
        ("data_memory_bytes", "train_memory_bytes", "server_peak_bytes"),
    )


def _rank_zero_record(
    procs: list,
    outs: list[Path],
    what: str,
    maxima: tuple[str, ...] = ("data_memory_bytes", "train_memory_bytes"),
) -> dict:
    """Wait for one process per rank; rank 0's record with ``maxima`` (bytes) taken over
    ranks."""
    if any(proc.wait(timeout=1800) != 0 for proc in procs):
        raise RuntimeError(f"{what} failed")
    results = [json.loads(out.read_text()) for out in outs]
    return {**results[0], **{key: _max_memory(results, key) for key in maxima}}


def _max_memory(results: list[dict], key: str) -> int | None:
    """The largest ``key`` (bytes) over ranks' records, ``None`` where none has it."""
    values = [r[key] for r in results if r.get(key) is not None]
    return max(values) if values else None


def run_variant(workdir: Path, settings: dict, system: str, task: str, ranks: int) -> dict:
    """One variant in fresh interpreters (one per rank); rank 0's record, memory max over ranks."""
    if system == "distdgl":
        return run_distdgl(workdir, settings, ranks)
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
    base += ["--mini-epochs", str(settings["mini_epochs"]), "--dropout", str(settings["dropout"])]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    what = f"{system}:{task} at {ranks} ranks"
    if system in USER_PATH:  # one process: Lightning's launcher starts the other ranks
        out = workdir / "l0.json"
        for stale in workdir.glob("l0.json*"):
            stale.unlink()
        base += ["--ranks", str(ranks), "--dataset", settings["dataset"]]
        base += ["--stores", str(workdir / "stores"), "--out", str(out)]
        proc = subprocess.Popen(base, env=env)
        if proc.wait(timeout=3600) != 0:
            raise RuntimeError(f"{what} failed")
        results = [json.loads(path.read_text()) for path in sorted(workdir.glob("l0.json*"))]
        return {
            **json.loads(out.read_text()),
            **{
                key: _max_memory(results, key)
                for key in ("data_memory_bytes", "train_memory_bytes")
            },
        }
    env.update(WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1")
    env.update(MASTER_PORT=str(29500 + os.getpid() % 1000))
    outs = [workdir / f"r{rank}.json" for rank in range(ranks)]
    procs = [
        subprocess.Popen([*base, "--out", str(out)], env={**env, "RANK": str(rank)})
        for rank, out in enumerate(outs)
    ]
    return _rank_zero_record(procs, outs, what)


def run(r: Run) -> None:
    settings = {
        "dataset": DATASET.format(scale=r.args.scale),
        "scale": r.args.scale,
        "dropout": 0.5,
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
    ranks = {int(n) for n in r.args.ranks.split(",") if n}
    variants = [v for v in VARIANTS if (not only or v[0] in only) and (not ranks or v[3] in ranks)]
    skipped = {}
    if any(v[1] == "distdgl" for v in variants):
        reason = distdgl_unavailable_reason(settings["dgl_python"])
        if reason is not None:
            log(f"DistDGL skipped: {reason}")
            skipped["mini-batch SAGE | distdgl | 2"] = reason
            variants = [v for v in variants if v[1] != "distdgl"]
    details: dict[str, list[dict]] = {}

    def measure(row, system, task, ranks, workdir):
        def call(round_index: int) -> list[float]:
            result = run_variant(workdir, settings, system, task, ranks)
            first, records = result["records"][0], result["records"][1:]  # the first warms up
            details.setdefault(f"{row} | {system} | {ranks}", []).append(
                {
                    "wall": [rec["wall"] for rec in records],
                    "first_epoch": {"cpu": first["cpu"], "wall": first["wall"]},
                    "startup_s": result.get("startup_s"),
                    "load_average": load_average()[0],
                    "phases": [rec["phases_cpu"] for rec in records],
                    "accuracy": result["accuracy"],
                    "steps": result["records"][0].get("steps"),
                    "memory_mib": result["data_memory_bytes"] / 2**20,
                    "train_memory_mib": (result.get("train_memory_bytes") or 0) / 2**20,
                    "server_mib": result.get("server_peak_bytes", 0) / 2**20,
                    "torch": result["torch"],
                }
            )
            log(f"round {round_index}: {row} | {system} | {ranks}: {records[-1]['cpu']:.3f} s CPU")
            return [rec["cpu"] for rec in records]

        return call

    with tempfile.TemporaryDirectory(prefix="peer_dgl_") as tmp:
        workdir = Path(tmp)
        distdgl = any(v[1] == "distdgl" for v in variants)
        user_ranks = tuple(sorted({v[3] for v in variants if v[1] in USER_PATH}))
        log(f"preparing {settings['dataset']} (user's-path stores at ranks {user_ranks})")
        prepare(
            workdir, settings["dgl_python"] if distdgl else None, settings["dataset"], user_ranks
        )
        samples = run_rounds(
            {f"{v[0]} | {v[1]} | {v[3]}": measure(*v, workdir) for v in variants}, r.repeats
        )
    rows = []
    walls = {key: [run_["wall"] for run_ in runs] for key, runs in details.items()}
    for row, system, _task, ranks in variants:
        key, peer = f"{row} | {system} | {ranks}", f"{row} | dgl | 1"
        runs = details[key]
        phases = sorted({p for run_ in runs for rec in run_["phases"] for p in rec})
        over = ratio(samples[key], samples[peer]) if peer in samples else None
        dist_peer = f"{row} | distdgl | {ranks}"
        wall_over = ratio(walls[key], walls[dist_peer]) if dist_peer in walls else None
        rows.append(
            {
                "setting": row,
                "system": system,
                "ranks": ranks,
                "cpu_s": pooled_median(samples[key]),
                "wall_s": pooled_median([run_["wall"] for run_ in runs]),
                "cpu_over_dgl": None if over is None else over.value,
                "cpu_over_dgl_per_round": None if over is None else list(over.per_round),
                "wall_over_distdgl": None if wall_over is None else wall_over.value,
                "wall_over_distdgl_per_round": None
                if wall_over is None
                else list(wall_over.per_round),
                "steps_per_epoch": runs[0]["steps"],
                "first_epoch_cpu_s": statistics.median(r_["first_epoch"]["cpu"] for r_ in runs),
                "first_epoch_wall_s": statistics.median(r_["first_epoch"]["wall"] for r_ in runs),
                "startup_s": _median_or_none([r_["startup_s"] for r_ in runs]),
                "load_average_per_round": [r_["load_average"] for r_ in runs],
                "phases_cpu_s": {
                    p: pooled_median([[rec.get(p, 0.0) for rec in run_["phases"]] for run_ in runs])
                    for p in phases
                },
                "accuracy": pooled_median([[run_["accuracy"]] for run_ in runs]),
                "data_memory_mib": max(run_["memory_mib"] for run_ in runs),
                "train_memory_mib": max(run_["train_memory_mib"] for run_ in runs) or None,
                "server_peak_mib": max(run_["server_mib"] for run_ in runs) or None,
                "torch": runs[0]["torch"],
                "epochs_timed": len(pooled(samples[key])),
            }
        )
        r.report.update(
            settings={k: v for k, v in settings.items() if k != "dgl_python"},
            rows=rows,
            skipped=skipped,
            peak_memory="VmHWM",
        )
        r.save()


def _median_or_none(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def render(report: dict) -> str:
    s = report["settings"]
    if "scale" not in s:
        return _render_issue19(report)
    rows = []
    for row in report["rows"]:
        first = row.get("first_epoch_wall_s")
        startup = row.get("startup_s")
        rows.append(
            {
                "setting": row["setting"],
                "system": row["system"],
                "ranks": row["ranks"],
                "CPU s/epoch": f"{row['cpu_s']:.3f}",
                "wall s/epoch": f"{row['wall_s']:.3f}",
                "CPU ÷ DGL": "—"
                if row["cpu_over_dgl"] is None
                else ratio_cell(row["cpu_over_dgl"], row["cpu_over_dgl_per_round"]),
                "wall ÷ DistDGL": "—"
                if row.get("wall_over_distdgl") is None
                else ratio_cell(row["wall_over_distdgl"], row["wall_over_distdgl_per_round"]),
                "first epoch s (CPU / wall)": "—"
                if first is None
                else f"{row['first_epoch_cpu_s']:.2f} / {first:.2f}",
                "start-up s": "—" if startup is None else f"{startup:.1f}",
                "steps/epoch": row.get("steps_per_epoch") or "—",
                "phases (CPU s/epoch)": ", ".join(
                    f"{k} {v:.3f}" for k, v in row["phases_cpu_s"].items()
                ),
                "test acc": f"{row['accuracy']:.3f}",
                "training MiB": "—"
                if row.get("train_memory_mib") is None
                else f"{row['train_memory_mib']:.0f}",
                "data MiB": f"{row['data_memory_mib']:.0f}"
                + (
                    f" (+ server {row['server_peak_mib']:.0f})"
                    if row.get("server_peak_mib")
                    else ""
                ),
                "load (per round)": ", ".join(
                    f"{load:.1f}" for load in row.get("load_average_per_round", [])
                ),
            }
        )
    columns = list(rows[0]) if rows else []
    systems = sorted({row["system"] for row in report["rows"]})
    torch_versions = sorted({f"{row['system']}: {row['torch']}" for row in report["rows"]})
    return (
        f"# This project against DGL 2.1: the user's path, R-MAT scale {s['scale']} (issue 31)\n\n"
        f"`{s['dataset']}`; mini-batch {s['mini_epochs']} epochs of 2-layer models of width "
        f"{s['mini_hidden']} (dropout {s['dropout']}), fan-out {s['fanout']}, batch "
        f"{s['batch_size']}, Adam; full-batch {s['epochs']} epochs (hidden {s['hidden']}). One "
        "thread per process. The first epoch of each run is not in the per-epoch figures; it "
        "is its own column, and start-up is the seconds from the worker's start (imports "
        "included) to the first epoch. CPU ÷ DGL: pooled median of per-epoch CPU seconds over "
        "DGL's (same model) in the same rounds (per-round range); wall ÷ DistDGL likewise with "
        "wall seconds at the same ranks. Data memory: peak RSS − RSS after imports, max over "
        "ranks, over the whole run: the test's full-neighbourhood inference included (each "
        "layer on the whole graph, or a rank's whole part, at once; DistDGL's is not "
        "counted); training memory: the same peak at the end of the last training epoch "
        "(— in runs before it was recorded). Load: the 1-minute load average after each "
        "round's run of the row.\n\n"
        + _memory_caveat(report)
        + "Systems:\n\n"
        + "".join(f"- `{name}`: {SYSTEMS.get(name, name)}\n" for name in systems)
        + "\nThe user's-path phases: `sample+fetch` (CPU inside the loader, its prefetch thread "
        "included), `forward` (`training_step`), `backward` (with the gradient all-reduce), "
        "`optimizer`, `lightning` (the rest of the main thread: hooks, the strategy's step, "
        "logging), `comm threads` (the process's other threads: gloo's transport; in runs "
        "that record it). DistDGL's CPU includes its server's (`server`).\n\n"
        + markdown_table(rows, columns)
        + "".join(f"\n`{key}` skipped: {why}\n" for key, why in report.get("skipped", {}).items())
        + "\ntorch: "
        + "; ".join(torch_versions)
        + "\n"
    )


def _memory_caveat(report: dict) -> str:
    """A warning above the table of a run whose workers read their peak from ``ru_maxrss``."""
    if report.get("peak_memory") == "VmHWM":
        return ""
    return (
        "**The memory columns of this run are not comparable:** they read `ru_maxrss`, which "
        "includes the harness's own resident set when it started the worker (every system but "
        "DistDGL, whose trainer a shell starts); later runs read `VmHWM`.\n\n"
    )


def _render_issue19(report: dict) -> str:
    """The report of issue 19's runs (committed results without a ``scale`` setting)."""
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
            "wall ÷ DistDGL": "—"
            if row.get("wall_over_distdgl") is None
            else ratio_cell(row["wall_over_distdgl"], row["wall_over_distdgl_per_round"]),
            "steps/epoch": row.get("steps_per_epoch") or "—",
            "phases (CPU s/epoch)": ", ".join(
                f"{k} {v:.3f}" for k, v in row["phases_cpu_s"].items()
            ),
            "test acc": f"{row['accuracy']:.3f}",
            "data MiB": f"{row['data_memory_mib']:.0f}"
            + (f" (+ server {row['server_peak_mib']:.0f})" if row.get("server_peak_mib") else ""),
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
        "`distdgl`: DGL's distributed training, one graph server and one trainer per simulated "
        "machine (METIS, training vertices balanced, split evenly by `node_split`); its CPU "
        "includes its server's (the `server` phase, remote sampling and feature pulls), its data "
        "memory is the trainer's with the server's peak RSS in parentheses (the server holds the "
        "part's graph and features). wall ÷ DistDGL: pooled median of per-epoch wall seconds over "
        "DistDGL's at the same ranks, per-round range; steps/epoch differ where this project's "
        "METIS part holds more training vertices than the even split.\n\n"
        + _memory_caveat(report)
        + markdown_table(rows, columns)
        + "".join(f"\n`{key}` skipped: {why}\n" for key, why in report.get("skipped", {}).items())
    )


BENCHMARK = Benchmark(
    "peer_dgl", __doc__, run, render, add_arguments=add_arguments, repeats=3, quick_repeats=1
)

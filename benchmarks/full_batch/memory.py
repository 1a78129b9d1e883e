"""Section (d): peak RSS per rank against one process on the whole graph, each configuration in
fresh interpreters (:mod:`benchmarks.full_batch.worker`)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common.processes import free_port
from benchmarks.common.stores import store_path
from benchmarks.harness import REPO, log


def start_worker(cfg: dict, root: Path, kind: str, world: int, workdir: Path) -> dict:
    """Start a worker in a fresh interpreter (does not wait)."""
    out = Path(tempfile.mkdtemp(prefix=f"mem-{kind}-{world}-", dir=workdir))
    cmd = [
        sys.executable, "-m", "benchmarks.full_batch.worker", kind,
        "--dataset", cfg["dataset"],
        "--world", str(world),
        "--epochs", str(cfg["memory_epochs"]),
        "--out", str(out),
        "--root", str(root),
        "--store", str(store_path(cfg["dataset"], root, "hypergraph", world)),
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO), MASTER_ADDR="127.0.0.1")
    env["MASTER_PORT"] = str(free_port())
    for key in ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "RANK"):
        env.pop(key, None)
    log_file = open(out / "log.txt", "w")  # closed in finish_worker
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    return {"kind": kind, "world": world, "out": out, "proc": proc, "log": log_file,
            "start": time.perf_counter()}  # fmt: skip


def finish_worker(job: dict) -> dict:
    """Wait for a worker (rank 0) and for every rank's report file."""
    kind, world, out = job["kind"], job["world"], job["out"]
    try:
        code = job["proc"].wait(timeout=600)
    finally:
        job["log"].close()
    deadline = time.monotonic() + 120  # ranks > 0 write their report right after fit
    while code == 0 and len(list(out.glob("rank*.json"))) < world and time.monotonic() < deadline:
        time.sleep(0.2)
    ranks = [json.loads(f.read_text()) for f in sorted(out.glob("rank*.json"))]
    if code != 0 or len(ranks) != world:
        log_text = (out / "log.txt").read_text()[-4000:]
        raise RuntimeError(
            f"worker {kind} P={world}: exit code {code}, {len(ranks)} reports\n{log_text}"
        )
    return {
        "kind": kind,
        "world_size": world,
        "ranks": sorted(ranks, key=lambda r: r["rank"]),
        "wall_seconds": time.perf_counter() - job["start"],
    }


def section_d(cfg: dict, root: Path, partitions: dict[str, Any]) -> dict:
    worlds = cfg["memory_world_sizes"]
    plan = [("single", 1)] + [("dist", w) for w in worlds] + [("dist-stock", max(worlds))]
    with tempfile.TemporaryDirectory(prefix="lgd-full-batch-") as workdir:
        if cfg["memory_parallel"]:  # memory readings do not depend on CPU contention
            jobs = [start_worker(cfg, root, k, w, Path(workdir)) for k, w in plan]
            results = [finish_worker(job) for job in jobs]
        else:
            results = [finish_worker(start_worker(cfg, root, k, w, Path(workdir))) for k, w in plan]
    single, runs = results[0], results[1:]
    base = single["ranks"][0]
    log(f"(d) single process: peak {base['peak_rss_mib']:.0f} MiB")
    for run in runs:
        world = run["world_size"]
        peaks = [r["peak_rss_mib"] for r in run["ranks"]]
        above = [r["peak_above_baseline_mib"] for r in run["ranks"]]
        part = partitions[f"hypergraph-p{world}"]
        run.update(
            {
                "owned_vertices": part["part_sizes"],
                "halo_rows": part["halo_rows"],
                "max_peak_rss_mib": max(peaks),
                "mean_peak_rss_mib": statistics.mean(peaks),
                "sum_peak_rss_mib": sum(peaks),
                "max_peak_ratio_over_single": max(peaks) / base["peak_rss_mib"],
                "max_above_baseline_mib": max(above),
                "max_above_baseline_ratio_over_single": max(above)
                / base["peak_above_baseline_mib"],
            }
        )
        log(f"(d) {run['kind']} P={world}: peak per rank {[round(p) for p in peaks]} MiB")
    return {"single": single, "distributed": runs, "parallel": cfg["memory_parallel"]}

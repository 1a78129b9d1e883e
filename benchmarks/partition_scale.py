"""The large-graph section of :mod:`benchmarks.partition_speed` (issue 34): R-MAT scales 16-20.

    python -m benchmarks.partition_speed --scales 16,18,20 --out benchmarks/results/partition_scale

Every cell (scale x P x method) runs in a fresh interpreter (``python -m benchmarks.partition_scale
CELL_JSON``): it builds ``rmat?scale=S&edge_factor=16&features=64``, then measures the partition
call and the exact metrics of its assignment (the in-memory partition step; writing the store is
not included): CPU seconds of the process and its children (KaMinPar's and Mt-KaHyPar's worker
processes), wall seconds, and the peak memory of the step: the process's peak resident memory
during the step (``VmHWM`` reset before it, so the generator's own peak is not counted; the graph,
its features and the imports are) plus the worker's own peak (reported by the worker: the parent's
``RUSAGE_CHILDREN`` would count the parent's memory at the fork). *Raw graph* is
``edges x 16 B + vertices x 64 x 4 B``.

DGL's ``dgl.distributed.partition_graph`` (METIS, balancing training vertices and edges, as
DistDGL's examples do; it also writes the parts) runs in DGL's venv on the same graph, exported
to ``.npz`` (:mod:`benchmarks.peer_dgl.partition_worker`): CPU seconds and peak resident memory of
its process (the graph, its features and DGL's imports included).

Methods: ``metis``; ``kaminpar`` (KaMinPar + the column-net refinement, the default);
``kaminpar-cut`` (``refine=False``: KaMinPar's edge-cut partition alone); ``metis+refine`` (METIS,
then the same refinement, :func:`~lightning_gnn_dist.partition.volume.refine_volume`);
``hypergraph`` (Mt-KaHyPar, the ``tuned`` preset, with the send-volume refinement), killed after
``--hypergraph-timeout`` seconds; at the smallest scale also Mt-KaHyPar's ``default`` and
``large_k`` presets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common.processes import cpu_seconds, peak_rss_bytes
from benchmarks.harness import REPO, Run, fmt, load_average, log, markdown_table

SPEC = "rmat?scale={scale}&edge_factor=16&features=64"
FEATURES = 64
#: name -> (method, options)
METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "metis": ("metis", {}),
    "kaminpar": ("kaminpar", {}),
    "kaminpar-cut": ("kaminpar", {"refine": False}),
    "metis+refine": ("metis", {}),
    "hypergraph": ("hypergraph", {}),
    "hypergraph-default": ("hypergraph", {"preset": "default"}),
    "hypergraph-large_k": ("hypergraph", {"preset": "large_k"}),
}
SMALLEST_ONLY = ("hypergraph-default", "hypergraph-large_k")
DGL_WORKER = REPO / "benchmarks" / "peer_dgl" / "partition_worker.py"
GIB = 2**30


def cell(scale: int, num_parts: int, name: str, peak_file: str) -> dict[str, Any]:
    """One measured partition step in this (fresh) process."""
    from lightning_gnn_dist.data.datasets import load_dataset
    from lightning_gnn_dist.partition import get_partitioner
    from lightning_gnn_dist.partition.arrays import EdgeView
    from lightning_gnn_dist.partition.volume import refine_volume

    data = load_dataset(SPEC.format(scale=scale))
    method, options = METHODS[name]
    partitioner = get_partitioner(method, seed=0, **options)
    os.environ["LGD_PARTITION_PEAK_FILE"] = peak_file
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset VmHWM: the generator's peak is not the partition step's
    cpu, wall = cpu_seconds(), time.perf_counter()
    assignment = partitioner.partition(data, num_parts)
    if name == "metis+refine":
        from lightning_gnn_dist.partition.weights import vertex_weights

        weights = vertex_weights(data, "work")
        view = EdgeView(data.edge_index, data.num_nodes)
        assignment = refine_volume(view, weights, assignment, num_parts, 0.03).assignment
    partition_cpu, partition_wall = cpu_seconds() - cpu, time.perf_counter() - wall
    metrics = partitioner.metrics(data, assignment, num_parts)
    child_peak = max((int(x) for x in Path(peak_file).read_text().split()), default=0)
    return {
        "num_nodes": data.num_nodes,
        "num_edges": int(data.edge_index.size(1)),
        "cpu_seconds": partition_cpu,
        "wall_seconds": partition_wall,
        "metrics_cpu_seconds": cpu_seconds() - cpu - partition_cpu,
        "process_peak_bytes": peak_rss_bytes(),
        "worker_peak_bytes": child_peak,
        "total_volume_rows": metrics.total_volume_rows,
        "max_send_rows": int(metrics.send_rows.max()),
        "edge_cut": metrics.edge_cut,
        "imbalance": metrics.imbalance,
    }


def _run_cell(scale: int, num_parts: int, name: str, timeout: float | None) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".peak", delete=False) as peak:
        peak_path = peak.name
    args = json.dumps([scale, num_parts, name, peak_path])
    try:
        child = subprocess.run(
            [sys.executable, "-m", "benchmarks.partition_scale", args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"status": f"killed after {timeout:.0f} s"}
    finally:
        Path(peak_path).unlink(missing_ok=True)
    if child.returncode != 0:
        return {"status": f"failed ({child.returncode}): {child.stderr.strip()[-300:]}"}
    return {"status": "ok", **json.loads(child.stdout.strip().splitlines()[-1])}


def _run_dgl(r: Run, scale: int, num_parts: int, npz: Path) -> dict[str, Any]:
    python = r.args.dgl_python
    if not Path(python).is_file():
        return {"status": f"skipped: no DGL venv at {python} (bash benchmarks/peer_dgl/env.sh)"}
    with tempfile.TemporaryDirectory(prefix="lgd-dgl-part-") as folder:
        result = Path(folder) / "result.json"
        child = subprocess.run(
            [python, str(DGL_WORKER), "--data", str(npz), "--parts", str(num_parts)]
            + ["--out", str(Path(folder) / "parts"), "--result", str(result)],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        if child.returncode != 0:
            return {"status": f"failed ({child.returncode}): {child.stderr.strip()[-300:]}"}
        values = json.loads(result.read_text())
    return {
        "status": "ok",
        "cpu_seconds": values["cpu_seconds"],
        "wall_seconds": values["wall_seconds"],
        "process_peak_bytes": values["peak_rss_bytes"],
        "worker_peak_bytes": 0,
        "graph_rss_bytes": values["graph_rss_bytes"],
    }


def _export(scale: int, path: Path) -> None:
    code = (
        "import numpy as np; from lightning_gnn_dist.data.datasets import load_dataset; "
        f"d = load_dataset({SPEC.format(scale=scale)!r}); "
        f"np.savez({str(path)!r}, **{{k: getattr(d, k).numpy() for k in "
        "('edge_index', 'x', 'y', 'train_mask')})"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def run_scales(r: Run) -> None:
    r.report.update(scales=r.args.scales, parts=r.args.parts, scale_rows=[])
    smallest = min(r.args.scales)
    for scale in r.args.scales:
        with tempfile.TemporaryDirectory(prefix="lgd-scale-") as folder:
            npz = Path(folder) / "graph.npz"
            _export(scale, npz)
            for num_parts in r.args.parts:
                names = [n for n in METHODS if scale == smallest or n not in SMALLEST_ONLY]
                for name in ["dgl", *names]:
                    load = load_average()[0]
                    log(f"scale {scale} P={num_parts} {name} (load {load:.1f})")
                    if name == "dgl":
                        row = _run_dgl(r, scale, num_parts, npz)
                    else:
                        timeout = r.args.hypergraph_timeout if "hypergraph" in name else None
                        row = _run_cell(scale, num_parts, name, timeout)
                    row.update(scale=scale, P=num_parts, method=name, load_before=load)
                    log(f"  {row}")
                    r.report["scale_rows"].append(row)
                    r.save()
    r.report["verdicts"] = scale_verdicts(r.report["scale_rows"])


def _raw_bytes(scale: int) -> float:
    """Edges x 16 B + vertices x 64 features x 4 B (edges: R-MAT's, from any of our rows)."""
    return 2**scale * 16 * 16 + 2**scale * FEATURES * 4


def _enrich(rows: list[dict]) -> list[dict]:
    out = []
    by_key = {(r["scale"], r["P"], r["method"]): r for r in rows}
    for row in rows:
        row = dict(row)
        if row.get("status") == "ok":
            peak = row["process_peak_bytes"] + row.get("worker_peak_bytes", 0)
            raw = (
                row["num_edges"] * 16 + row["num_nodes"] * FEATURES * 4
                if "num_edges" in row
                else _raw_bytes(row["scale"])
            )
            row["peak GB"] = peak / 1e9
            row["peak/raw"] = peak / raw
            dgl = by_key.get((row["scale"], row["P"], "dgl"), {})
            metis = by_key.get((row["scale"], row["P"], "metis"), {})
            if dgl.get("status") == "ok":
                row["CPU/DGL"] = row["cpu_seconds"] / dgl["cpu_seconds"]
                row["peak/DGL"] = peak / (dgl["process_peak_bytes"])
            if metis.get("status") == "ok" and "total_volume_rows" in row:
                row["volume/METIS"] = row["total_volume_rows"] / metis["total_volume_rows"]
                row["max send/METIS"] = row["max_send_rows"] / metis["max_send_rows"]
        out.append(row)
    return out


def scale_verdicts(rows: list[dict]) -> list[str]:
    lines = []
    for row in _enrich(rows):
        if row.get("status") != "ok" or row["scale"] != 20:
            continue
        if row["method"] == "kaminpar" and "CPU/DGL" in row:
            lines.append(
                f"scale 20, P = {row['P']}, `kaminpar`: volume {row['volume/METIS']:.3f}× METIS "
                f"(≤ 1: {'yes' if row['volume/METIS'] <= 1 else 'NO'}) in "
                f"{row['CPU/DGL']:.2f}× the CPU of DGL's partition_graph (≤ 2: "
                f"{'yes' if row['CPU/DGL'] <= 2 else 'NO'}); peak {row['peak/raw']:.1f}× the raw "
                f"graph (≤ 5: {'yes' if row['peak/raw'] <= 5 else 'NO'})"
            )
        if row["method"] == "metis" and "peak/DGL" in row:
            lines.append(
                f"scale 20, P = {row['P']}, `metis`: peak memory {row['peak/DGL']:.2f}× DGL's "
                f"(≤ 1: {'yes' if row['peak/DGL'] <= 1 else 'NO'}), {row['peak/raw']:.1f}× the raw "
                "graph"
            )
    return lines


COLUMNS = (
    "scale",
    "P",
    "method",
    "status",
    "total_volume_rows",
    "volume/METIS",
    "max send/METIS",
    "cpu_seconds",
    "CPU/DGL",
    "metrics_cpu_seconds",
    "peak GB",
    "peak/raw",
    "peak/DGL",
    "load_before",
)


def render_scales(report: dict) -> str:
    rows = _enrich(report["scale_rows"])
    return "\n".join(
        [
            "# Partitioning large graphs: R-MAT scales, ours vs DGL (issue 34)",
            "",
            "`rmat?scale=S&edge_factor=16&features=64`; one fresh process per cell, one round "
            "(busy shared machine: `load_before` is the 1-minute load average before the cell). "
            "CPU seconds of the partition call (workers included; `metrics_cpu_seconds` apart); "
            "peak = the process's peak during the step (graph, features, imports included) + "
            "the worker's own peak, in GB (1e9 bytes); raw graph = edges × 16 B + vertices × "
            "64 × 4 B. DGL: `partition_graph` (METIS; writes its parts too), its process's peak.",
            "",
            *[f"* {line}" for line in report.get("verdicts", [])],
            "",
            markdown_table(
                [
                    {k: (fmt(v) if isinstance(v, float) else v) for k, v in row.items()}
                    for row in rows
                ],
                COLUMNS,
            ),
        ]
    )


if __name__ == "__main__":
    scale_, parts_, name_, peak_ = json.loads(sys.argv[1])
    print(json.dumps(cell(scale_, parts_, name_, peak_)))

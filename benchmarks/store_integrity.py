"""What store integrity costs: each check's time as a ratio to loading the part unverified.

    python -m benchmarks.store_integrity            # R-MAT scale 16 and 17, P = 4 (~2 min)
    python -m benchmarks.store_integrity --quick    # R-MAT scale 13, P = 2 (seconds)

For each graph a store is written with the ``random`` partitioner (the partitioner does not
matter here, only the store's size); then, in ``--repeats`` interleaved rounds, one process runs
each check once (the per-part checks once per part):

* ``load unverified``: ``LocalPartition.load(part file)`` — the baseline, what a rank did
  before checksums;
* ``rank load (hash + load)``: ``PartitionStore.load_part(p)``, what a rank does in ``setup``
  (sha256 of its part file, then the load);
* ``datamodule check``: ``PartitionStore.open(path).verify(full=False)``, what
  ``GraphPartitionDataModule.prepare_data`` does (``meta.json`` checksum, every file's size);
* ``partition --out reuse``: ``open(path).verify(full=True)``, what the CLI does before reuse
  (hashes every file, all parts).

Reported: the median seconds (pooled over rounds and parts) and the ratio to the baseline of the
same graph, with its range over rounds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.harness import (
    Benchmark,
    Run,
    csv,
    log,
    pooled_median,
    ratio,
    ratio_cell,
    run_rounds,
)
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.partition import RandomPartitioner
from lightning_gnn_dist.partition.store import PartitionStore, partition_to_store

BASELINE = "load unverified"


def _seconds(calls: list[Callable[[], object]]) -> list[float]:
    """Wall seconds of each call, in order."""
    times = []
    for call in calls:
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def measure(scale: int, num_parts: int, repeats: int, folder: Path) -> dict:
    spec = f"rmat?scale={scale}"
    data = load_dataset(spec)
    path = folder / f"rmat{scale}"
    partition_to_store(data, RandomPartitioner(), num_parts, path, dataset=spec)
    store = PartitionStore.open(path)
    part_files = [path / f"part-{p:05d}.pt" for p in range(num_parts)]
    checks: dict[str, list[Callable[[], object]]] = {
        BASELINE: [lambda f=f: LocalPartition.load(f) for f in part_files],
        "rank load (hash + load)": [lambda p=p: store.load_part(p) for p in range(num_parts)],
        "datamodule check": [lambda: PartitionStore.open(path).verify(full=False)],
        "partition --out reuse": [lambda: PartitionStore.open(path).verify(full=True)],
    }
    samples = run_rounds({name: lambda r, c=c: _seconds(c) for name, c in checks.items()}, repeats)
    ratios = {name: ratio(s, samples[BASELINE]) for name, s in samples.items()}
    log(f"{spec}: " + ", ".join(f"{n} {r.value:.2f}" for n, r in ratios.items()))
    return {
        "dataset": spec,
        "num_nodes": int(data.num_nodes),
        "num_edges": int(data.edge_index.size(1)),
        "num_parts": num_parts,
        "store_bytes": sum(f.stat().st_size for f in path.iterdir()),
        "part_bytes": statistics.median(f.stat().st_size for f in part_files),
        "seconds": {name: pooled_median(s) for name, s in samples.items()},
        "ratio_to_unverified_load": {name: r.value for name, r in ratios.items()},
        "ratio_per_round": {name: list(r.per_round) for name, r in ratios.items()},
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scales", type=csv(int), help="R-MAT scales (default: 16,17; quick 13)")
    parser.add_argument("--parts", type=int, help="parts P (default: 4; quick 2)")


def run(r: Run) -> None:
    scales = r.args.scales or ([13] if r.quick else [16, 17])
    parts = r.args.parts or (2 if r.quick else 4)
    r.report["repeats"] = r.repeats
    r.report["timing"] = (
        f"{r.repeats} interleaved rounds; seconds are medians pooled over rounds and parts, "
        "ratios in parentheses range over rounds"
    )
    with tempfile.TemporaryDirectory(prefix="lgd-bench-") as folder:
        r.report["rows"] = [measure(s, parts, r.repeats, Path(folder)) for s in scales]


def render(report: dict) -> str:
    lines = [
        "# Store integrity: cost of the checks",
        "",
        f"{report['timing']}. Ratio = seconds / seconds of loading one part unverified "
        "(`LocalPartition.load`), same graph, same run.",
        "",
        "| graph | P | part MiB | store MiB | check | seconds | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        for name, seconds in row["seconds"].items():
            per_round = row.get("ratio_per_round", {}).get(name, [])
            lines.append(
                f"| {row['dataset']} ({row['num_nodes']} v, {row['num_edges']} e) | "
                f"{row['num_parts']} | {row['part_bytes'] / 2**20:.1f} | "
                f"{row['store_bytes'] / 2**20:.1f} | {name} | {seconds:.4f} | "
                f"{ratio_cell(row['ratio_to_unverified_load'][name], per_round)} |"
            )
    return "\n".join(lines) + "\n"


BENCHMARK = Benchmark(
    "store_integrity", __doc__, run, render, add_arguments, repeats=5, quick_repeats=3
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())

"""What store integrity costs: each check's time as a ratio to loading the part unverified.

    python benchmarks/store_integrity.py               # rmat scale 16 and 17, P = 4 (~2 min)
    python benchmarks/store_integrity.py --scales 14 --parts 2 --repeats 3   # smoke run

For each graph a store is written with the ``random`` partitioner (the partitioner does not
matter here, only the store's size), then, ``--repeats`` times each, in one process:

* ``load unverified``: ``LocalPartition.load(part file)`` — the baseline, what a rank did
  before checksums;
* ``rank load (hash + load)``: ``PartitionStore.load_part(p)``, what a rank does in ``setup``
  (sha256 of its part file, then the load);
* ``datamodule check``: ``PartitionStore.open(path).verify(full=False)``, what
  ``GraphPartitionDataModule.prepare_data`` does (``meta.json`` checksum, every file's size);
* ``partition --out reuse``: ``open(path).verify(full=True)``, what the CLI does before reuse
  (hashes every file, all parts).

Reported: the median seconds and the ratio to the baseline of the same graph (medians over the
parts too). Outputs ``benchmarks/results/store_integrity.{json,md}``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("LGD_PROGRESS", "0")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

from lightning_gnn_dist.data import load_dataset  # noqa: E402
from lightning_gnn_dist.data.local import LocalPartition  # noqa: E402
from lightning_gnn_dist.partition import RandomPartitioner  # noqa: E402
from lightning_gnn_dist.partition.store import PartitionStore, partition_to_store  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def _median_seconds(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(scale: int, num_parts: int, repeats: int, folder: Path) -> dict:
    spec = f"rmat?scale={scale}"
    data = load_dataset(spec)
    path = folder / f"rmat{scale}"
    partition_to_store(data, RandomPartitioner(), num_parts, path, dataset=spec)
    store = PartitionStore.open(path)
    part_files = [path / f"part-{p:05d}.pt" for p in range(num_parts)]
    rows = {
        "load unverified": statistics.median(
            _median_seconds(lambda f=f: LocalPartition.load(f), repeats) for f in part_files
        ),
        "rank load (hash + load)": statistics.median(
            _median_seconds(lambda p=p: store.load_part(p), repeats) for p in range(num_parts)
        ),
        "datamodule check": _median_seconds(
            lambda: PartitionStore.open(path).verify(full=False), repeats
        ),
        "partition --out reuse": _median_seconds(
            lambda: PartitionStore.open(path).verify(full=True), repeats
        ),
    }
    baseline = rows["load unverified"]
    return {
        "dataset": spec,
        "num_nodes": int(data.num_nodes),
        "num_edges": int(data.edge_index.size(1)),
        "num_parts": num_parts,
        "store_bytes": sum(f.stat().st_size for f in path.iterdir()),
        "part_bytes": statistics.median(f.stat().st_size for f in part_files),
        "seconds": rows,
        "ratio_to_unverified_load": {name: value / baseline for name, value in rows.items()},
    }


def render(report: dict) -> str:
    lines = [
        "# Store integrity: cost of the checks",
        "",
        f"{report['machine']}; {report['repeats']} repeats, medians. Ratio = seconds / seconds of "
        "loading one part unverified (`LocalPartition.load`), same graph, same run.",
        "",
        "| graph | P | part MiB | store MiB | check | seconds | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        for name, seconds in row["seconds"].items():
            lines.append(
                f"| {row['dataset']} ({row['num_nodes']} v, {row['num_edges']} e) | "
                f"{row['num_parts']} | {row['part_bytes'] / 2**20:.1f} | "
                f"{row['store_bytes'] / 2**20:.1f} | {name} | {seconds:.4f} | "
                f"{row['ratio_to_unverified_load'][name]:.2f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="16,17", help="R-MAT scales (default: 16,17)")
    parser.add_argument("--parts", type=int, default=4, help="parts P (default: 4)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats (default: 5)")
    parser.add_argument("--output", type=Path, default=RESULTS / "store_integrity")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lgd-bench-") as folder:
        rows = [
            measure(int(scale), args.parts, args.repeats, Path(folder))
            for scale in args.scales.split(",")
        ]
    load = os.getloadavg()[0]  # the machine may be shared: say how busy it was
    report = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, load average {load:.1f} at the end",
        "repeats": args.repeats,
        "rows": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    args.output.with_suffix(".md").write_text(render(report))
    print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

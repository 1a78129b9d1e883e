"""The benchmark's driver: stores, the plan, one emulated cluster per topology, the report."""

# ruff: noqa: E402  (the environment must be set before torch is imported)
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("LGD_PROGRESS", "0")

import argparse
import datetime
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch

from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.store import partition_to_store
from lightning_gnn_dist.testing.cluster import emulation_unavailable_reason

RESULTS = REPO / "benchmarks" / "results"
WORKER = Path(__file__).with_name("worker.py")


def full_batch(method: str, exchange: str = "p2p", **strategy) -> dict:
    """A full-batch variant: partition ``method``, GNNStrategy ``exchange`` and options."""
    return {"method": method, "strategy": {"exchange": exchange, **strategy}}


def cached(staleness: str, bound: float) -> dict:
    return full_batch("hypergraph", "cached", staleness=staleness, staleness_bound=bound)


#: The neighbour mini-batch loader with ``examples/neighbor_sage.py``'s GraphSAGE (``module``: a
#: LightningModule class path taking in_channels/out_channels, ``model`` its keywords), 8 steps
#: per epoch.
NEIGHBOR = {
    "method": "metis",
    "data": {"loader": "neighbor", "num_neighbors": [10, 5], "batch_size": 512},
    "module": "examples.neighbor_sage.Model",
    "model": {"hidden_channels": 64},
    "trainer": {"limit_train_batches": 8},
}
#: name → how to fit it (``method``/``store``, ``strategy``, ``data``, ``module``, ``model``,
#: ``trainer``: see :mod:`.worker`). One line per variant.
VARIANTS: dict[str, dict] = {
    "p2p/hypergraph": full_batch("hypergraph"),
    "broadcast/hypergraph": full_batch("hypergraph", "broadcast"),
    "p2p/metis": full_batch("metis"),
    "p2p/random": full_batch("random"),
    "cached/epoch-fixed-1": cached("epoch-fixed", 1),
    "cached/epoch-adaptive-3": cached("epoch-adaptive", 3),
    "cached/variation-gap-0.1": cached("variation-gap", 0.1),
    "cd-0": full_batch("vertex-cut", "cd-0"),
    "cd-5": full_batch("vertex-cut", "cd-5"),
    "0c": full_batch("vertex-cut", "0c"),
    "neighbor/metis": NEIGHBOR,
}
#: Variants trained to the end for test accuracy (exact first: the others are compared to it).
ACCURACY_VARIANTS = [
    "p2p/hypergraph",
    "cached/epoch-fixed-1",
    "cached/epoch-adaptive-3",
    "cached/variation-gap-0.1",
]
MODEL = {"model": "gcn", "hidden_channels": 16, "num_layers": 2, "dropout": 0.5, "lr": 0.01}

CONFIGS = {
    "full": {
        "dataset": "rmat?scale=16&edge_factor=10&features=64&classes=8",
        "nodes": [2, 4],
        "bandwidths": [None, "2gbit", "500mbit", "125mbit"],
        "warmup": 1,
        "epochs": 8,  # measured, after the warm-up: a multiple of every cached period here
        "rounds": 2,
        "accuracy_epochs": 60,
    },
    "quick": {
        "dataset": "rmat?scale=12&edge_factor=8&features=64&classes=8",
        "nodes": [2],
        "bandwidths": [None, "1gbit", "100mbit"],
        "warmup": 1,
        "epochs": 4,
        "rounds": 1,
        "accuracy_epochs": 6,
    },
}


def make_stores(dataset: str, parts: int, cache: Path) -> dict[str, str]:
    """One partition store per method at ``parts`` parts (reused when they exist)."""
    data = load_dataset(dataset)
    stores = {}
    for method in sorted({v.get("store", v["method"]) for v in VARIANTS.values()}):
        path = cache / f"p{parts}-{method}"
        partition_to_store(data, get_partitioner(method, seed=0), parts, path, dataset=dataset)
        stores[method] = str(path)
    return stores


def make_plan(config: dict, variants: list[str], stores: dict[str, str]) -> dict:
    """Blocks in run order: rounds alternate the order of bandwidths and of variants; the first
    round probes each bandwidth; one accuracy block at the end (unshaped: accuracy does not
    depend on the link)."""
    blocks = []
    for r in range(config["rounds"]):
        bandwidths = config["bandwidths"] if r % 2 == 0 else config["bandwidths"][::-1]
        for i, bandwidth in enumerate(bandwidths):
            order = variants if (r + i) % 2 == 0 else variants[::-1]
            blocks.append({"round": r, "bandwidth": bandwidth, "variants": order, "probe": r == 0})
    accuracy = [name for name in ACCURACY_VARIANTS if name in variants]
    if accuracy:
        blocks.append({"round": 0, "bandwidth": None, "variants": accuracy, "accuracy": True})
    dims = [int(_spec_value(config["dataset"], "features")), MODEL["hidden_channels"]]
    dims.append(int(_spec_value(config["dataset"], "classes")))
    return {
        "dataset": config["dataset"],
        "stores": stores,
        "variants": {name: VARIANTS[name] for name in variants},
        "model": MODEL,
        "dims": dims,
        "epochs": config["warmup"] + config["epochs"],
        "accuracy_epochs": config["accuracy_epochs"],
        "blocks": blocks,
    }


def _spec_value(spec: str, key: str) -> str:
    return dict(item.split("=") for item in spec.split("?", 1)[1].split("&"))[key]


def run_topology(nodes: int, plan: dict, work: Path, log) -> tuple[list[dict], dict]:
    """Run the plan on an emulated cluster of ``nodes`` nodes × 1 rank; its records and the
    launcher's link statistics."""
    plan_path, out = work / f"plan{nodes}.json", work / f"results{nodes}.jsonl"
    stats = work / f"stats{nodes}.json"
    plan_path.write_text(json.dumps(plan))
    out.unlink(missing_ok=True)
    command = [
        sys.executable,
        "-m",
        "lightning_gnn_dist",
        "emulate",
        f"--nodes={nodes}",
        "--cpus-per-node=1",
        f"--stats-json={stats}",
        "--",
        str(WORKER),
        "--plan",
        str(plan_path),
        "--out",
        str(out),
    ]
    log(f"{nodes} nodes: {' '.join(command[2:])}")
    with (work / f"emulate{nodes}.log").open("w") as output:
        code = subprocess.run(command, cwd=REPO, stdout=output, stderr=subprocess.STDOUT).returncode
    if code != 0:
        lines = (work / f"emulate{nodes}.log").read_text().splitlines()
        errors = [line for line in lines if "Error" in line or "error" in line][-20:]
        raise RuntimeError(
            f"the {nodes}-node run failed with exit code {code}; errors in its log:\n"
            + "\n".join(errors)
        )
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return records, json.loads(stats.read_text())


def _load_average() -> list[float]:
    with open("/proc/loadavg") as handle:
        return [float(v) for v in handle.read().split()[:3]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smoke configuration")
    parser.add_argument("--nodes", type=int, nargs="+", help="topologies (default: the config's)")
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), help="subset")
    parser.add_argument("--cache-dir", type=Path, help="partition stores (default: a temp dir)")
    parser.add_argument("--out", type=Path, help="output stem (default: results/emulated_cluster)")
    parser.add_argument("--render", action="store_true", help="rewrite the markdown from the JSON")
    parser.add_argument(
        "--work-dir", type=Path, help="keep plans, raw records and node logs here (default: temp)"
    )
    args = parser.parse_args(argv)
    from benchmarks.emulated_cluster.report import analyse, render

    mode = "quick" if args.quick else "full"
    stem = args.out or RESULTS / ("emulated_cluster" + ("_quick" if args.quick else ""))
    if args.render:
        stem.with_suffix(".md").write_text(
            render(json.loads(stem.with_suffix(".json").read_text()))
        )
        return 0
    reason = emulation_unavailable_reason()
    if reason is not None:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    config = dict(CONFIGS[mode])
    if args.nodes:
        config["nodes"] = args.nodes
    variants = args.variants or list(VARIANTS)
    cache = args.cache_dir or Path(tempfile.gettempdir()) / "lgd-emulated-cluster-stores"
    start, started = time.perf_counter(), datetime.datetime.now(datetime.timezone.utc)

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    report = {
        "benchmark": "emulated_cluster",
        "command": " ".join(["python -m benchmarks.emulated_cluster", *(argv or sys.argv[1:])]),
        "date": started.isoformat(timespec="seconds"),
        "mode": mode,
        "config": config,
        "variants": {name: VARIANTS[name] for name in variants},
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "kernel": platform.release(),
        },
        "load_average": {"start": _load_average()},
        "topologies": {},
    }
    with tempfile.TemporaryDirectory(prefix="lgd-emulated-bench-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for nodes in config["nodes"]:
            log(f"partitioning {config['dataset']} into {nodes} parts")
            stores = make_stores(config["dataset"], nodes, cache / f"{mode}")
            plan = make_plan(config, variants, stores)
            records, stats = run_topology(nodes, plan, work, log)
            report["topologies"][str(nodes)] = {"records": records, "links": stats, "plan": plan}
            log(f"{nodes} nodes done ({len(records)} records)")
    report["load_average"]["end"] = _load_average()
    report["wall_seconds"] = time.perf_counter() - start
    report["analysis"] = analyse(report)
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1))
    stem.with_suffix(".md").write_text(render(report))
    log(f"wrote {stem}.json and .md")
    return 0

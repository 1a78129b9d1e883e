"""The benchmark's driver: stores, the plan, one emulated cluster per topology (see the package
docstring)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common.stores import build_store
from benchmarks.emulated_cluster.report import MODELLED, analyse_topology
from benchmarks.harness import REPO, Run, log
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.testing.cluster import emulation_unavailable_reason

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
    "rdm/hypergraph": full_batch("hypergraph", "rdm", rdm_order="model"),
}
#: Variants trained to the end for test accuracy (exact first: the others are compared to it).
ACCURACY_VARIANTS = [
    "p2p/hypergraph",
    "cached/epoch-fixed-1",
    "cached/epoch-adaptive-3",
    "cached/variation-gap-0.1",
]
#: The graph whose fit gives the fixed seconds of a training step (its compute is negligible).
TINY = "rmat?scale=8&edge_factor=4&features={features}&classes={classes}"
MODEL = {"model": "gcn", "hidden_channels": 16, "num_layers": 2, "dropout": 0.5, "lr": 0.01}

CONFIGS = {
    "full": {
        "dataset": "rmat?scale=16&edge_factor=10&features=64&classes=8",
        "nodes": [2, 4],
        "bandwidths": [None, "1gbit", "250mbit", "50mbit"],
        "warmup": 1,
        "epochs": 8,  # measured, after the warm-up: a multiple of every cached period here
        "accuracy_epochs": 60,
    },
    "quick": {
        "dataset": "rmat?scale=12&edge_factor=8&features=64&classes=8",
        "nodes": [2],
        "bandwidths": [None, "1gbit", "100mbit"],
        "warmup": 1,
        "epochs": 4,
        "accuracy_epochs": 6,
    },
}


def make_stores(dataset: str, parts: int, cache: Path, variants: list[str]) -> dict[str, str]:
    """One partition store per method the variants use, at ``parts`` parts (built once, reused
    from ``cache`` when they exist)."""
    data = load_dataset(dataset)
    methods = sorted({VARIANTS[v].get("store", VARIANTS[v]["method"]) for v in variants})
    return {m: str(build_store(data, dataset, cache, m, parts).path) for m in methods}


#: Variants the cost model predicts: each fit of them is preceded by a calibration of the compute
#: costs on every node, so that the prediction uses the costs of the same minute of a shared
#: machine.
def make_plan(config: dict, rounds: int, variants: list[str], stores: dict[str, str]) -> dict:
    """Blocks in run order, one fit each: first a probe of every link; then per round every
    variant (forwards in even rounds, backwards in odd ones) at every link rate (alternating
    direction from one variant to the next), so that a variant's fits at the different rates
    are minutes apart at most and the variants compared at one rate are spread over the round
    alike; at the end the accuracy fits (unshaped: accuracy does not depend on the link)."""
    bandwidths = config["bandwidths"]
    blocks: list[dict] = [
        {"round": 0, "bandwidth": bw, "variants": [], "probe": True} for bw in bandwidths
    ]
    step = 0
    for r in range(rounds):
        for name in variants if r % 2 == 0 else variants[::-1]:
            for bw in bandwidths if step % 2 == 0 else bandwidths[::-1]:
                blocks.append(
                    {"round": r, "bandwidth": bw, "variants": [name], "calibrate": name in MODELLED}
                )
            step += 1
    accuracy = [name for name in ACCURACY_VARIANTS if name in variants]
    if accuracy:
        blocks.append({"round": 0, "bandwidth": None, "variants": accuracy, "accuracy": True})
    dims = [int(_spec_value(config["dataset"], "features")), MODEL["hidden_channels"]]
    dims.append(int(_spec_value(config["dataset"], "classes")))
    return {
        "dataset": config["dataset"],
        "tiny_dataset": tiny_dataset(config),
        "stores": stores,
        "variants": {name: VARIANTS[name] for name in variants},
        "model": MODEL,
        "dims": dims,
        "epochs": config["warmup"] + config["epochs"],
        "accuracy_epochs": config["accuracy_epochs"],
        "blocks": blocks,
    }


def tiny_dataset(config: dict) -> str:
    features, classes = (_spec_value(config["dataset"], k) for k in ("features", "classes"))
    return TINY.format(features=features, classes=classes)


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


def add_arguments(parser) -> None:
    parser.add_argument(
        "--variants", type=lambda t: t.split(","), help=f"subset of {','.join(VARIANTS)}"
    )
    parser.add_argument(
        "--work-dir", type=Path, help="keep plans, raw records and node logs here (default: temp)"
    )
    parser.add_argument(
        "--nodes", type=lambda t: [int(n) for n in t.split(",")], help="topologies, e.g. 2,4"
    )


def run(r: Run) -> None:
    reason = emulation_unavailable_reason()
    if reason is not None:
        log(f"skipped: {reason}")
        r.report["skipped"] = reason
        return
    config = dict(CONFIGS["quick" if r.quick else "full"])
    config["nodes"] = r.args.nodes or config["nodes"]
    variants = r.args.variants or list(VARIANTS)
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    r.report.update(config=config, rounds=r.repeats, variants={v: VARIANTS[v] for v in variants})
    topologies = r.report.setdefault("topologies", {})
    with tempfile.TemporaryDirectory(prefix="lgd-emulated-bench-") as tmp:
        work = r.args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for nodes in config["nodes"]:
            if not r.wants(f"{nodes}nodes"):
                continue
            with r.section(f"{nodes}nodes"):
                log(f"partitioning {config['dataset']} into {nodes} parts")
                stores = make_stores(config["dataset"], nodes, r.cache_dir, variants)
                plan = make_plan(config, r.repeats, variants, stores)
                tiny = plan["tiny_dataset"]
                plan["tiny_store"] = str(
                    build_store(load_dataset(tiny), tiny, r.cache_dir, "random", nodes).path
                )
                records, links = run_topology(nodes, plan, work, log)
                topologies[str(nodes)] = {
                    "plan": plan,
                    "links": links,
                    "records": records,
                    "analysis": analyse_topology(records, plan, config["warmup"], nodes),
                }
            r.save()
            log(f"{nodes} nodes done ({len(records)} records)")

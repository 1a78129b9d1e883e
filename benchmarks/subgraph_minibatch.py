"""Sampled-subgraph mini-batches (paper 000 §4.3.3): expected volume per batch of SHP, HP, METIS
and random partitions, and SHP vs HP training at 2 and 4 ranks.

    python -m benchmarks.subgraph_minibatch            # default grid (about 10 min on 2 cores)
    python -m benchmarks.subgraph_minibatch --quick    # smoke run (< 2 min)
    python -m benchmarks.subgraph_minibatch --graphs rmat --parts 16,64 --fractions 0.05,0.1 \\
        --edge-coverage 32 --sections a --out benchmarks/results/subgraph_minibatch_coverage32

(a) Expected volume. For every graph, P and batch fraction f, each method partitions the graph
once (HP, METIS and random do not depend on f; SHP is built for the batch size f with its default
settings: θ = 0.1, δ = 0.5, edge coverage 8, at most 20,000 batches), and the rows moved per SpMM
of a batch (the connectivity−1 cut of the batch's column-net hypergraph, what training measures)
are averaged over ``--samples`` fresh uniform batches drawn with a seed none of the partitioners
used; the same batches for every method. Figures are ratios to HP (``hypergraph`` with
``balance_send_volume=False``, i.e. plain connectivity−1 partitioning, the paper's HP) of the same
cell; the 95 % interval of each mean is in the JSON.

(b) Training. GCN (2 layers, 64 hidden, dropout 0) with ``loader="subgraph"`` (uniform, f = 5 %,
10 steps per epoch, 3 epochs) on the R-MAT graph at 2 and 4 forked gloo ranks, SHP vs HP in
``--repeats`` interleaved rounds: the halo bytes per batch (measured, all ranks, both directions)
and the epoch wall time (median of the epochs after the first; the machine is shared, so read the
time ratios as rough).

Default grid (reduced to fit the 2-core machine): R-MAT scale 13 (8,192 vertices, edge factor 8,
power-law), an SBM of 8,000 vertices and a triangulated 96 × 96 grid mesh (9,216 vertices);
P = 4, 16, 64 on R-MAT and P = 16 on SBM and the mesh; f = 1, 5, 10 %.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pytorch_lightning as pl

from benchmarks.common.fits import fit, quiet
from benchmarks.common.graphs import load_graph
from benchmarks.harness import Benchmark, Run, csv, log, pooled, ratio, ratio_cell, run_rounds
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.data.subgraph_sampler import make_sampler
from lightning_gnn_dist.lightning.batch_monitor import BatchCommunicationMonitor
from lightning_gnn_dist.lightning.datamodule import GraphPartitionDataModule
from lightning_gnn_dist.lightning.module import NodeClassifier
from lightning_gnn_dist.lightning.strategy import GNNStrategy
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.batch_volume import expected_batch_volume
from lightning_gnn_dist.partition.store import partition_to_store

GRAPHS = {
    "rmat": "rmat?scale=13&edge_factor=8",
    "sbm": "sbm?num_nodes=8000&num_classes=8&avg_degree=10",
    "mesh": "grid:96",
    "rmat-small": "rmat?scale=11&edge_factor=8",
}
DEFAULT = {
    "graphs": {"rmat": [4, 16, 64], "sbm": [16], "mesh": [16]},
    "fractions": [0.01, 0.05, 0.1],
    "samples": 200,
    "training": {"graph": "rmat", "world_sizes": [2, 4], "fraction": 0.05, "steps": 10},
}
QUICK = {
    "graphs": {"rmat-small": [4, 16]},
    "fractions": [0.05, 0.1],
    "samples": 50,
    "training": {"graph": "rmat-small", "world_sizes": [2], "fraction": 0.1, "steps": 4},
}
EVAL_SEED = 424242  # batches for the estimate; no partitioner samples with this seed
METHODS = ("shp", "hp", "metis", "random")


def partitioner(method: str, fraction: float, edge_coverage: float):
    if method == "shp":
        return get_partitioner(
            "stochastic-hypergraph", subgraph_size=fraction, edge_coverage=edge_coverage
        )
    if method == "hp":
        return get_partitioner("hypergraph", balance_send_volume=False)
    return get_partitioner(method)


def volume_cells(r: Run, config: dict, coverage: float) -> None:
    for graph, parts in config["graphs"].items():
        data = load_graph(GRAPHS[graph])
        log(f"{graph}: {data.num_nodes} vertices, {data.edge_index.size(1)} edges")
        for num_parts in parts:
            assignments, seconds = {}, {}
            for method in ("hp", "metis", "random"):
                start = time.perf_counter()
                assignments[method] = partitioner(method, 0.0, coverage).partition(data, num_parts)
                seconds[method] = time.perf_counter() - start
            for fraction in config["fractions"]:
                size = max(1, round(fraction * data.num_nodes))
                shp = partitioner("shp", fraction, coverage)
                start = time.perf_counter()
                assignments["shp"] = shp.partition(data, num_parts)
                seconds["shp"] = time.perf_counter() - start
                sampler = make_sampler("uniform", data.num_nodes, size, seed=EVAL_SEED)
                estimates = {
                    m: expected_batch_volume(data, assignments[m], sampler, config["samples"])
                    for m in METHODS
                }
                hp_mean = estimates["hp"].mean_rows
                cell = {
                    "graph": graph,
                    "num_parts": num_parts,
                    "fraction": fraction,
                    "batch_vertices": size,
                    "shp_stats": shp.last_stats,
                    "seconds": {m: seconds[m] for m in METHODS},
                    "expected_rows": {m: e.to_dict() for m, e in estimates.items()},
                    "ratio_to_hp": {
                        m: (e.mean_rows / hp_mean if hp_mean else None)
                        for m, e in estimates.items()
                    },
                }
                r.report["volume"].append(cell)
                r.save()
                log(f"P={num_parts} f={fraction}: "
                    + ", ".join(f"{m} {cell['ratio_to_hp'][m]:.3f}" for m in METHODS)
                    + f" (SHP {seconds['shp']:.1f} s, {shp.last_stats['batches']} batches)")  # fmt: skip


def _train(
    dataset: str, data, method: str, world: int, train: dict, coverage: float, folder: Path
) -> dict:
    """One SHP or HP fit with ``loader="subgraph"``: epoch seconds and per-batch traffic."""
    fraction = train["fraction"]
    store = folder / f"{method}-{world}"
    if not store.exists():
        partition_to_store(data, partitioner(method, fraction, coverage), world, store, dataset)
    dm = GraphPartitionDataModule(
        dataset,
        method="stochastic-hypergraph" if method == "shp" else "hypergraph",
        num_parts=world,
        store=str(store),
        verify_dataset=False,
        loader="subgraph",
        steps_per_epoch=train["steps"],
        subgraph_size=fraction,
    )
    if method == "hp":
        dm.partitioner = partitioner("hp", fraction, coverage)
    pl.seed_everything(0)
    module = NodeClassifier("gcn", hidden_channels=64, dropout=0.0)
    strategy = GNNStrategy(start_method="fork")
    monitor = BatchCommunicationMonitor()
    return fit(module, dm, strategy, world, 3, monitor, limit_val_batches=0)


def training_cells(r: Run, config: dict, coverage: float) -> None:
    train = config["training"]
    dataset = GRAPHS[train["graph"]]
    data = load_dataset(dataset)
    with tempfile.TemporaryDirectory() as folder:
        for world in train["world_sizes"]:
            fits = run_rounds(
                {m: lambda i, m=m, w=world: _train(dataset, data, m, w, train, coverage, Path(folder))
                 for m in ("shp", "hp")},
                r.repeats,
            )  # fmt: skip
            epochs = {m: [f["epoch_seconds"][1:] for f in runs] for m, runs in fits.items()}
            for method, runs in fits.items():
                traffic = [row for f in runs for row in f["traffic"]]
                batches = sum(len({row["step"] for row in f["traffic"]}) for f in runs)
                sent = sum(sum(row["bytes_sent"]) for row in traffic)
                planned = sum(sum(row["predicted_bytes_sent"]) for row in traffic)
                time_ratio = ratio(epochs[method], epochs["hp"])
                r.report["training"].append(
                    {
                        "world_size": world,
                        "method": method,
                        "fraction": train["fraction"],
                        "epoch_seconds": statistics.median(pooled(epochs[method])),
                        "time_ratio_to_hp": time_ratio.value,
                        "time_ratio_to_hp_per_round": list(time_ratio.per_round),
                        "bytes_per_batch": sent / batches,
                        "bytes_equal_plan": sent == planned,
                    }
                )
                log(f"train P={world} {method}: {sent / batches:,.0f} B/batch, "
                    f"{r.report['training'][-1]['epoch_seconds']:.2f} s/epoch")  # fmt: skip
            r.save()


def render(out: dict) -> str:
    lines = [
        "# Sampled-subgraph mini-batches: expected halo volume per batch",
        "",
        f"Rows moved per SpMM of a uniformly sampled batch, averaged over {out['samples']} fresh "
        "batches (the same for every method), as a ratio to HP (plain connectivity−1 hypergraph "
        "partitioning) of the same cell; SHP built for that batch size (θ = 0.1, δ = 0.5, edge "
        f"coverage {out['edge_coverage']:g}, ≤ 20,000 batches). The default grid is "
        "reduced for the 2-core machine: R-MAT scale 13 at P = 4/16/64, SBM and a 96 × 96 "
        "triangulated grid mesh at P = 16 (a run's grid is in its JSON).",
        "",
        "| graph | P | batch | HP rows/batch (95% CI) | SHP / HP | METIS / HP | random / HP "
        "| SHP batches | SHP s | HP s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in out.get("volume", []):
        hp = c["expected_rows"]["hp"]
        r = c["ratio_to_hp"]
        lines.append(
            f"| {c['graph']} | {c['num_parts']} | {c['fraction']:.0%} ({c['batch_vertices']}) "
            f"| {hp['mean_rows']:.1f} ({hp['ci_low']:.1f}–{hp['ci_high']:.1f}) "
            f"| {r['shp']:.3f} | {r['metis']:.3f} | {r['random']:.3f} "
            f"| {c['shp_stats']['batches']} | {c['seconds']['shp']:.1f} | {c['seconds']['hp']:.1f} |"
        )
    if out.get("training"):
        lines += [
            "",
            "## Training: SHP vs HP (GCN, 64 hidden, uniform batches, forked gloo ranks)",
            "",
            f"| ranks | batch | method | halo bytes / batch | SHP / HP bytes | epoch s "
            f"({out['epoch_statistic']}) | SHP / HP time | bytes = plan |",
            "|---|---|---|---|---|---|---|---|",
        ]
        by_key = {(t["world_size"], t["method"]): t for t in out["training"]}
        for t in out["training"]:
            hp = by_key.get((t["world_size"], "hp"))
            ratio_b = t["bytes_per_batch"] / hp["bytes_per_batch"] if hp else float("nan")
            time_cell = ratio_cell(
                t["time_ratio_to_hp"], t.get("time_ratio_to_hp_per_round", []), 3
            )
            lines.append(
                f"| {t['world_size']} | {t['fraction']:.0%} | {t['method']} "
                f"| {t['bytes_per_batch']:,.0f} | {ratio_b:.3f} | {t['epoch_seconds']:.2f} "
                f"| {time_cell} | {'yes' if t['bytes_equal_plan'] else 'NO'} |"
            )
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graphs", type=csv(), help=f"graph names ({', '.join(GRAPHS)})")
    parser.add_argument("--parts", type=csv(int), help="P for every selected graph")
    parser.add_argument("--fractions", type=csv(float), help="batch fractions")
    parser.add_argument("--edge-coverage", type=float, default=8.0, help="SHP's edge_coverage")


def run(r: Run) -> None:
    quiet()
    args = r.args
    config = json.loads(json.dumps(QUICK if r.quick else DEFAULT))
    if args.graphs:
        config["graphs"] = {g: config["graphs"].get(g, [16]) for g in args.graphs}
    if args.parts:
        config["graphs"] = {g: args.parts for g in config["graphs"]}
    if args.fractions:
        config["fractions"] = args.fractions
    r.report.update(config=config, samples=config["samples"], edge_coverage=args.edge_coverage)
    np.seterr(over="ignore")
    if r.wants("a"):
        r.report["volume"] = []
        with r.section("a"):
            volume_cells(r, config, args.edge_coverage)
    if r.wants("b"):
        r.report.update(training=[], epoch_statistic="median")
        with r.section("b"):
            training_cells(r, config, args.edge_coverage)


BENCHMARK = Benchmark(
    "subgraph_minibatch",
    __doc__,
    run,
    render,
    add_arguments,
    sections=("a", "b"),
    repeats=1,
    packages=("mtkahypar", "pymetis"),
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())

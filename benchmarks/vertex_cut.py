"""Vertex cut: Libra replication factor, DistGNN cd-0 / cd-r / 0c against p2p.

    python -m benchmarks.vertex_cut                  # default configuration (~25 min on 2 cores)
    python -m benchmarks.vertex_cut --quick          # smoke configuration (~1 min)
    python -m benchmarks.vertex_cut --sections b     # rerun (b), keep (a) and (c)

Every figure is a ratio against a baseline measured in the same invocation. Sections:

(a) replication factor of the Libra vertex cut at P = 2…64 on a mesh (a triangulated grid), the
    R-MAT and the SBM graphs, against a uniformly random edge assignment (the baseline) and next
    to paper 002 Table 4; partitioning seconds (the 1 M-edge R-MAT is the time bound's graph);
    rows moved per layer and direction by ``cd-0`` against ``p2p`` on a hypergraph partition
    (Mt-KaHyPar);
(b) bytes per epoch and epoch time of ``cd-0``, ``cd-5`` and ``0c`` against ``p2p`` on a
    hypergraph partition at 2 and 4 ranks (GraphSAGE, Lightning fork launcher; bytes measured by
    ``CommunicationMonitor``; cd-5 averaged over the epochs after the first 2r), the modes
    interleaved in ``--repeats`` rounds;
(c) accuracy after a fixed number of epochs of ``cd-0``, ``cd-1``, ``cd-5``, ``0c`` against exact
    ``p2p`` on ``digits`` and on an SBM graph with class-informative features, over several seeds
    (one interleaved round per seed; mean and spread), 4 ranks.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
import pytorch_lightning as pl

from benchmarks.common.fits import fit as lightning_fit
from benchmarks.common.fits import quiet
from benchmarks.common.graphs import load_graph
from benchmarks.harness import Benchmark, Run, log, markdown_table, ratio, run_rounds
from lightning_gnn_dist.data.vertex_cut import vertex_copies
from lightning_gnn_dist.lightning.callbacks import CommunicationMonitor
from lightning_gnn_dist.lightning.datamodule import GraphPartitionDataModule
from lightning_gnn_dist.lightning.module import NodeClassifier
from lightning_gnn_dist.lightning.strategy import GNNStrategy
from lightning_gnn_dist.partition import get_partitioner

#: Paper 002 Table 4: replication factor of Libra partitions (for orientation; other graphs).
PAPER_TABLE4 = {
    "Reddit": {2: 1.59, 4: 2.35, 8: 3.44, 16: 4.89},
    "OGBN-Products": {2: 1.32, 4: 1.82, 8: 2.39, 16: 2.93, 32: 3.55, 64: 4.16},
    "Proteins": {2: 1.18, 4: 1.40, 8: 1.63, 16: 1.86, 32: 2.08, 64: 2.30},
}

CONFIGS = {
    "default": {
        "rf_graphs": {
            "mesh": "grid:250",
            "rmat": "rmat?scale=16&edge_factor=17",
            "sbm": "sbm?num_nodes=50000&num_classes=8&avg_degree=20",
        },
        "rf_parts": [2, 4, 8, 16, 32, 64],
        "hp_parts": [4],
        "speed_dataset": "sbm?num_nodes=20000&num_classes=8&avg_degree=16&features=64",
        "speed_epochs": 20,
        "speed_worlds": [2, 4],
        "accuracy_datasets": ["digits", "sbm?num_nodes=3000&num_classes=4&avg_degree=10"],
        "accuracy_epochs": 100,
        "accuracy_seeds": [0, 1, 2],
        "accuracy_world": 4,
    },
    "quick": {
        "rf_graphs": {"mesh": "grid:60", "rmat": "rmat?scale=12&edge_factor=8"},
        "rf_parts": [2, 4, 16],
        "hp_parts": [4],
        "speed_dataset": "sbm?num_nodes=2000&num_classes=4&avg_degree=10",
        "speed_epochs": 12,
        "speed_worlds": [2],
        "accuracy_datasets": ["digits"],
        "accuracy_epochs": 20,
        "accuracy_seeds": [0],
        "accuracy_world": 2,
    },
}
SPEED_MODES = ["p2p", "cd-0", "cd-5", "0c"]
ACCURACY_MODES = ["p2p", "cd-0", "cd-1", "cd-5", "0c"]
HIDDEN, LR = 32, 0.01


def _label(spec: str) -> str:
    return f"triangulated grid {spec[5:]}²" if spec.startswith("grid:") else spec


# (a) replication factor


def replication_rows(cfg: dict) -> list[dict]:
    rows = []
    for name, spec in cfg["rf_graphs"].items():
        data = load_graph(spec)
        edge_index = data.edge_index.numpy()
        log(f"(a) {name}: {data.num_nodes} vertices, {edge_index.shape[1]} edges")
        for parts in cfg["rf_parts"]:
            partitioner = get_partitioner("vertex-cut", seed=0)
            start = time.perf_counter()
            edge_parts = partitioner.partition(data, parts)
            seconds = time.perf_counter() - start
            metrics = partitioner.metrics(data, edge_parts, parts)
            random_parts = np.random.default_rng(0).integers(0, parts, edge_index.shape[1])
            random_rf = (
                vertex_copies(edge_index, random_parts, data.num_nodes, parts).vertex.size
                / data.num_nodes
            )
            row = {
                "graph": name,
                "spec": _label(spec),
                "vertices": data.num_nodes,
                "edges": int(edge_index.shape[1]),
                "P": parts,
                "rf": metrics.replication_factor,
                "rf_random_edges": random_rf,
                "rf_vs_random": metrics.replication_factor / random_rf,
                "split_share_max": float(metrics.split_share.max()),
                "edge_imbalance": metrics.imbalance,
                "seconds": seconds,
                "cd0_rows_per_layer": metrics.total_volume_rows,
                "send_imbalance_random_roots": float(
                    metrics.send_rows.max() / max(metrics.send_rows.mean(), 1e-12)
                ),
            }
            balanced = get_partitioner("vertex-cut", seed=0, root_choice="balanced")
            sends = balanced.metrics(data, edge_parts, parts).send_rows
            row["send_imbalance_balanced_roots"] = float(sends.max() / max(sends.mean(), 1e-12))
            if parts in cfg["hp_parts"]:
                hp = get_partitioner("hypergraph-mtkahypar", seed=0)
                start = time.perf_counter()
                assignment = hp.partition(data, parts)
                row["hp_seconds"] = time.perf_counter() - start
                row["p2p_rows_per_layer"] = hp.metrics(data, assignment, parts).total_volume_rows
                row["cd0_rows_vs_p2p"] = row["cd0_rows_per_layer"] / max(
                    1, row["p2p_rows_per_layer"]
                )
            log(
                f"    P={parts}: RF {row['rf']:.3f} (random edges {random_rf:.3f}), "
                f"{seconds:.2f} s"
                + (
                    f", cd-0/p2p rows {row['cd0_rows_vs_p2p']:.2f}"
                    if "cd0_rows_vs_p2p" in row
                    else ""
                )
            )
            rows.append(row)
    return rows


# (b), (c) Lightning fits


def fit(dataset: str, mode: str, world: int, epochs: int, seed: int, root: Path) -> dict:
    """One GraphSAGE fit: rank 0's epoch seconds, traffic and validation accuracy."""
    method = "hypergraph-mtkahypar" if mode == "p2p" else "vertex-cut"
    pl.seed_everything(seed, verbose=False)
    module = NodeClassifier("sage", hidden_channels=HIDDEN, dropout=0.5, lr=LR)
    datamodule = GraphPartitionDataModule(
        dataset, method=method, num_parts=world, root=str(root), seed=seed
    )
    strategy = GNNStrategy(exchange=mode, start_method="fork", timeout=600)
    return lightning_fit(
        module,
        datamodule,
        strategy,
        world,
        epochs,
        CommunicationMonitor(),
        check_val_every_n_epoch=epochs,
    )


def bytes_per_epoch(result: dict, skip: int) -> float:
    per_epoch: dict[int, int] = {}
    for row in result["traffic"]:
        per_epoch[row["epoch"]] = per_epoch.get(row["epoch"], 0) + row["bytes_total"]
    values = [v for e, v in sorted(per_epoch.items()) if e >= skip] or [0]
    return float(statistics.mean(values))


def _skip(mode: str) -> int:
    """Epochs left out of a mode's averages: the warm-up, or cd-r's first 2r epochs."""
    return 2 * int(mode[3:]) if mode.startswith("cd-") and mode != "cd-0" else 1


def speed_rows(cfg: dict, root: Path, repeats: int) -> list[dict]:
    rows = []
    for world in cfg["speed_worlds"]:
        fits = run_rounds(
            {
                mode: lambda r, m=mode, w=world: fit(
                    cfg["speed_dataset"], m, w, cfg["speed_epochs"], 0, root
                )
                for mode in SPEED_MODES
            },
            repeats,
            lambda r, mode, _, w=world: log(f"(b) round {r + 1}: {mode} at {w} ranks"),
        )
        epochs = {m: [f["epoch_seconds"][_skip(m) :] for f in runs] for m, runs in fits.items()}
        base_bytes = bytes_per_epoch(fits["p2p"][0], 0)
        cd0_bytes = bytes_per_epoch(fits["cd-0"][0], 0)
        for mode, runs in fits.items():
            measured = bytes_per_epoch(runs[0], _skip(mode))
            time_ratio = ratio(epochs[mode], epochs["p2p"])
            rows.append(
                {
                    "ranks": world,
                    "mode": mode,
                    "bytes_per_epoch": measured,
                    "bytes_vs_p2p": measured / base_bytes if base_bytes else None,
                    "bytes_vs_cd0": measured / cd0_bytes if cd0_bytes else None,
                    "epoch_ms": 1000 * statistics.median(sum(epochs[mode], [])),
                    "time_vs_p2p": time_ratio.value,
                    "time_vs_p2p_per_round": list(time_ratio.per_round),
                }
            )
    return rows


def accuracy_rows(cfg: dict, root: Path) -> list[dict]:
    rows = []
    seeds, world, epochs = cfg["accuracy_seeds"], cfg["accuracy_world"], cfg["accuracy_epochs"]
    for dataset in cfg["accuracy_datasets"]:
        fits = run_rounds(
            {
                mode: lambda r, m=mode, d=dataset: fit(d, m, world, epochs, seeds[r], root)
                for mode in ACCURACY_MODES
            },
            len(seeds),
            lambda r, mode, res, d=dataset: log(
                f"(c) {d} seed {seeds[r]} {mode}: {res['val_acc'][-1]:.3f}"
            ),
        )
        accs = {mode: [100 * f["val_acc"][-1] for f in runs] for mode, runs in fits.items()}
        exact = statistics.mean(accs["p2p"])
        for mode, values in accs.items():
            rows.append(
                {
                    "dataset": dataset,
                    "mode": mode,
                    "seeds": len(values),
                    "val_acc_mean": statistics.mean(values),
                    "val_acc_std": statistics.pstdev(values),
                    "minus_p2p_points": statistics.mean(values) - exact,
                }
            )
    return rows


def render(report: dict) -> str:
    cfg = report["config"]
    lines = [
        "# Vertex cut (Libra) and DistGNN's partial-aggregate modes",
        "",
        "The machine is shared: compare ratios within a section (the provenance above says how "
        "busy it was).",
        "",
        "## (a) Replication factor (RF, average copies per vertex)",
        "",
        "`rf_vs_random` divides by the RF of a uniformly random edge assignment measured in the "
        "same run; `cd0_rows_vs_p2p` compares the rows one layer moves per direction: cd-0's "
        "partial-aggregate rows (2 per leaf copy) against p2p's halo rows on a Mt-KaHyPar "
        "hypergraph partition. `seconds` is the vertex-cut partitioner alone. "
        "`send_imbalance_*_roots`: busiest part's sent rows per synchronisation ÷ mean, with the "
        'paper\'s random roots and with load-aware (`root_choice="balanced"`) roots.',
        "",
        markdown_table(
            report.get("replication", []),
            [
                "graph",
                "vertices",
                "edges",
                "P",
                "rf",
                "rf_random_edges",
                "rf_vs_random",
                "split_share_max",
                "edge_imbalance",
                "seconds",
                "cd0_rows_vs_p2p",
                "send_imbalance_random_roots",
                "send_imbalance_balanced_roots",
            ],
        ),
        "Graphs: " + "; ".join(f"{k}: `{_label(v)}`" for k, v in cfg["rf_graphs"].items()) + ".",
        "",
        "Paper 002 Table 4 (Libra RF, for orientation; other graphs): "
        + "; ".join(
            f"{g}: " + ", ".join(f"P={p} {v}" for p, v in t.items())
            for g, t in PAPER_TABLE4.items()
        )
        + ".",
        "",
        f"## (b) Bytes and epoch time against p2p (`{cfg['speed_dataset']}`, GraphSAGE, "
        f"{cfg['speed_epochs']} epochs)",
        "",
        markdown_table(
            report.get("speed", []),
            [
                "ranks",
                "mode",
                "bytes_per_epoch",
                "bytes_vs_p2p",
                "bytes_vs_cd0",
                "epoch_ms",
                "time_vs_p2p",
            ],
        ),
        "",
        f"## (c) Validation accuracy after {cfg['accuracy_epochs']} epochs "
        f"({cfg['accuracy_world']} ranks, GraphSAGE, seeds {cfg['accuracy_seeds']})",
        "",
        markdown_table(
            report.get("accuracy", []),
            ["dataset", "mode", "seeds", "val_acc_mean", "val_acc_std", "minus_p2p_points"],
        ),
        "",
        "## Notes",
        "",
        *notes(report),
        "",
    ]
    return "\n".join(lines)


def notes(report: dict) -> list[str]:
    out = []
    speed = report.get("speed", [])
    for world in sorted({r["ranks"] for r in speed}):
        cd5 = next((r for r in speed if r["ranks"] == world and r["mode"] == "cd-5"), None)
        zero = next((r for r in speed if r["ranks"] == world and r["mode"] == "0c"), None)
        if cd5 and cd5["bytes_vs_cd0"] is not None:
            out.append(
                f"* {world} ranks: cd-5 moves {cd5['bytes_vs_cd0']:.3f}× the bytes per epoch of "
                f"cd-0 (target ≤ 0.25); 0c moves {zero['bytes_per_epoch']:.0f} bytes."
            )
    for row in report.get("accuracy", []):
        if row["mode"] == "cd-5":
            verdict = "within" if abs(row["minus_p2p_points"]) <= 1 else "NOT within"
            out.append(
                f"* {row['dataset']}: cd-5 is {row['minus_p2p_points']:+.2f} points from exact "
                f"p2p (mean over {row['seeds']} seeds): {verdict} 1 point."
            )
    big = [r for r in report.get("replication", []) if r["edges"] >= 1_000_000]
    if big:
        worst = max(big, key=lambda r: r["seconds"])
        out.append(
            f"* Time bound: the vertex-cut partitioner took at most {worst['seconds']:.2f} s on "
            f"{worst['graph']} ({worst['edges']:,} edges, P = {worst['P']}); bound 10 s."
        )
    return out


def run(r: Run) -> None:
    quiet()
    cfg = CONFIGS["quick" if r.quick else "default"]
    root = r.cache_dir
    r.report["config"] = cfg
    if r.wants("a"):
        with r.section("a"):
            r.report["replication"] = replication_rows(cfg)
    if r.wants("b"):
        with r.section("b"):
            r.report["speed"] = speed_rows(cfg, root, r.repeats)
    if r.wants("c"):
        with r.section("c"):
            r.report["accuracy"] = accuracy_rows(cfg, root)


BENCHMARK = Benchmark(
    "vertex_cut",
    __doc__,
    run,
    render,
    sections=("a", "b", "c"),
    repeats=1,
    packages=("mtkahypar",),
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())

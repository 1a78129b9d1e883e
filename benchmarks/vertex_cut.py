"""Vertex-cut benchmark: Libra replication factor, DistGNN cd-0 / cd-r / 0c against p2p.

    python benchmarks/vertex_cut.py            # default configuration (~10 min on 2 cores)
    python benchmarks/vertex_cut.py --quick    # smoke configuration (~1 min)

Writes ``benchmarks/results/vertex_cut.json`` and ``benchmarks/results/vertex_cut.md``. Every
figure is a ratio against a baseline measured in the same invocation. Sections:

(a) replication factor of the Libra vertex cut at P = 2…64 on a mesh, the R-MAT and the SBM
    graphs, against a uniformly random edge assignment (the baseline) and next to paper 002
    Table 4; partitioning seconds (the 1 M-edge R-MAT is the time bound's graph); rows moved per
    layer and direction by ``cd-0`` against ``p2p`` on a hypergraph partition (Mt-KaHyPar);
(b) bytes per epoch and epoch time of ``cd-0``, ``cd-5`` and ``0c`` against ``p2p`` on a
    hypergraph partition at 2 and 4 ranks (GraphSAGE, Lightning fork launcher; bytes measured by
    ``CommunicationMonitor``; cd-5 bytes averaged over the epochs after the first 2r);
(c) accuracy after a fixed number of epochs of ``cd-0``, ``cd-1``, ``cd-5``, ``0c`` against exact
    ``p2p`` on ``digits`` and on an SBM graph with class-informative features, over several seeds
    (mean and spread), 4 ranks.

Meshes: the METIS example meshes are used when ``/usr/share/doc/libmetis-dev/examples/graphs``
exists; otherwise a triangulated 2-D grid (a finite-element-like mesh) stands in.
"""

# ruff: noqa: E402  (the environment must be set before torch is imported)
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
os.environ.setdefault("LGD_PROGRESS", "0")

import argparse
import datetime
import json
import logging
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np
import pytorch_lightning as pl
import torch
from torch_geometric.data import Data

from lightning_gnn_dist import GNNStrategy, GraphPartitionDataModule, NodeClassifier
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.data.graph import canonicalize
from lightning_gnn_dist.data.vertex_cut import vertex_copies
from lightning_gnn_dist.lightning.callbacks import CommunicationMonitor
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.report import markdown_table

RESULTS = REPO / "benchmarks" / "results"
METIS_MESH = Path("/usr/share/doc/libmetis-dev/examples/graphs/copter2.graph")

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


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def grid_mesh(side: int) -> Data:
    """A triangulated ``side × side`` grid: each cell split by one diagonal, both directions."""
    ids = np.arange(side * side).reshape(side, side)
    pairs = [
        (ids[:, :-1], ids[:, 1:]),
        (ids[:-1, :], ids[1:, :]),
        (ids[:-1, :-1], ids[1:, 1:]),
    ]
    src = np.concatenate([a.ravel() for a, _ in pairs])
    dst = np.concatenate([b.ravel() for _, b in pairs])
    edges = torch.from_numpy(np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])]))
    return canonicalize(Data(edge_index=edges, num_nodes=side * side))


def load_graph(spec: str) -> Data:
    if spec.startswith("grid:"):
        if METIS_MESH.exists():
            return load_dataset(f"metis:{METIS_MESH}")
        return grid_mesh(int(spec.split(":")[1]))
    return load_dataset(spec)


def mesh_label(spec: str) -> str:
    return f"metis:{METIS_MESH.name}" if METIS_MESH.exists() else f"triangulated grid {spec[5:]}²"


# ------------------------------------------------------------------------------------------
# (a) replication factor


def replication_rows(cfg: dict) -> list[dict]:
    rows = []
    for name, spec in cfg["rf_graphs"].items():
        data = load_graph(spec)
        edge_index = data.edge_index.numpy()
        _log(f"(a) {name}: {data.num_nodes} vertices, {edge_index.shape[1]} edges")
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
                "spec": mesh_label(spec) if spec.startswith("grid:") else spec,
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
            _log(
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


# ------------------------------------------------------------------------------------------
# (b), (c) Lightning fits


class Recorder(pl.Callback):
    """Rank 0: epoch wall times, the monitor's rows and the final validation accuracy."""

    def __init__(self, path: Path, monitor: CommunicationMonitor) -> None:
        self.path, self.monitor, self.seconds, self.val_acc = Path(path), monitor, [], None

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.seconds.append(time.perf_counter() - self._start)

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if "val_acc" in trainer.callback_metrics:
            self.val_acc = float(trainer.callback_metrics["val_acc"])

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.is_global_zero:
            self.path.write_text(
                json.dumps(
                    {
                        "epoch_seconds": self.seconds,
                        "traffic": self.monitor.history,
                        "val_acc": self.val_acc,
                    }
                )
            )


def fit(dataset: str, mode: str, world: int, epochs: int, seed: int, root: Path) -> dict:
    method = "hypergraph-mtkahypar" if mode in ("p2p",) else "vertex-cut"
    pl.seed_everything(seed, verbose=False)
    module = NodeClassifier("sage", hidden_channels=HIDDEN, dropout=0.5, lr=LR)
    datamodule = GraphPartitionDataModule(
        dataset, method=method, num_parts=world, root=str(root), seed=seed
    )
    monitor = CommunicationMonitor()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "fit.json"
        trainer = pl.Trainer(
            strategy=GNNStrategy(exchange=mode, start_method="fork", timeout=600),
            accelerator="cpu",
            devices=world,
            max_epochs=epochs,
            callbacks=[Recorder(out, monitor), monitor],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            check_val_every_n_epoch=epochs,
            log_every_n_steps=1,
        )
        trainer.fit(module, datamodule=datamodule)
        return json.loads(out.read_text())


def bytes_per_epoch(result: dict, skip: int) -> float:
    per_epoch: dict[int, int] = {}
    for row in result["traffic"]:
        per_epoch[row["epoch"]] = per_epoch.get(row["epoch"], 0) + row["bytes_total"]
    values = [v for e, v in sorted(per_epoch.items()) if e >= skip] or [0]
    return float(statistics.mean(values))


def speed_rows(cfg: dict, root: Path) -> list[dict]:
    rows = []
    for world in cfg["speed_worlds"]:
        results = {}
        for mode in SPEED_MODES:
            _log(f"(b) {mode} at {world} ranks")
            results[mode] = fit(cfg["speed_dataset"], mode, world, cfg["speed_epochs"], 0, root)
        base = results["p2p"]
        base_ms = 1000 * statistics.median(base["epoch_seconds"][1:])
        base_bytes = bytes_per_epoch(base, 0)
        cd0_bytes = bytes_per_epoch(results["cd-0"], 0)
        for mode, result in results.items():
            skip = 2 * int(mode[3:]) if mode.startswith("cd-") and mode != "cd-0" else 1
            ms = 1000 * statistics.median(result["epoch_seconds"][skip:] or [float("nan")])
            measured = bytes_per_epoch(result, skip)
            rows.append(
                {
                    "ranks": world,
                    "mode": mode,
                    "bytes_per_epoch": measured,
                    "bytes_vs_p2p": measured / base_bytes if base_bytes else None,
                    "bytes_vs_cd0": measured / cd0_bytes if cd0_bytes else None,
                    "epoch_ms": ms,
                    "time_vs_p2p": ms / base_ms,
                }
            )
    return rows


def accuracy_rows(cfg: dict, root: Path) -> list[dict]:
    rows = []
    for dataset in cfg["accuracy_datasets"]:
        accs: dict[str, list[float]] = {mode: [] for mode in ACCURACY_MODES}
        for seed in cfg["accuracy_seeds"]:
            for mode in ACCURACY_MODES:
                result = fit(
                    dataset, mode, cfg["accuracy_world"], cfg["accuracy_epochs"], seed, root
                )
                accs[mode].append(100 * result["val_acc"])
            _log(
                f"(c) {dataset} seed {seed}: "
                + ", ".join(f"{m} {a[-1]:.1f}" for m, a in accs.items())
            )
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


# ------------------------------------------------------------------------------------------


def write_markdown(report: dict, path: Path) -> None:
    cfg = report["config"]
    lines = [
        "# Vertex cut (Libra) and DistGNN's partial-aggregate modes",
        "",
        f"Machine: {report['machine']}. Full data: `vertex_cut.json`. Runs (the machine is "
        "shared: the load average says how busy it was; compare ratios within a section):",
        "",
        *(
            f"* {key}: `{run['command']}` on {run['date']}, {run['seconds']:.0f} s, load "
            f"average {run['load_average_at_start']:.1f} at start"
            for key, run in report["runs"].items()
        ),
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
            report["replication"],
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
        "Graphs: "
        + "; ".join(
            f"{k}: `{mesh_label(v) if v.startswith('grid:') else v}`"
            for k, v in cfg["rf_graphs"].items()
        )
        + ".",
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
            report["speed"],
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
            report["accuracy"],
            ["dataset", "mode", "seeds", "val_acc_mean", "val_acc_std", "minus_p2p_points"],
        ),
        "",
        "## Notes",
        "",
        *report["notes"],
        "",
    ]
    path.write_text("\n".join(lines))


def notes(report: dict) -> list[str]:
    out = []
    speed = report["speed"]
    for world in sorted({r["ranks"] for r in speed}):
        cd5 = next((r for r in speed if r["ranks"] == world and r["mode"] == "cd-5"), None)
        zero = next((r for r in speed if r["ranks"] == world and r["mode"] == "0c"), None)
        if cd5 and cd5["bytes_vs_cd0"] is not None:
            out.append(
                f"* {world} ranks: cd-5 moves {cd5['bytes_vs_cd0']:.3f}× the bytes per epoch of "
                f"cd-0 (target ≤ 0.25); 0c moves {zero['bytes_per_epoch']:.0f} bytes."
            )
    for row in report["accuracy"]:
        if row["mode"] == "cd-5":
            verdict = "within" if abs(row["minus_p2p_points"]) <= 1 else "NOT within"
            out.append(
                f"* {row['dataset']}: cd-5 is {row['minus_p2p_points']:+.2f} points from exact "
                f"p2p (mean over {row['seeds']} seeds): {verdict} 1 point."
            )
    big = [r for r in report["replication"] if r["edges"] >= 1_000_000]
    if big:
        worst = max(big, key=lambda r: r["seconds"])
        out.append(
            f"* Time bound: the vertex-cut partitioner took at most {worst['seconds']:.2f} s on "
            f"{worst['graph']} ({worst['edges']:,} edges, P = {worst['P']}); bound 10 s."
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke configuration")
    parser.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "lgd-vc-bench"))
    parser.add_argument("--sections", default="abc", help="subset of 'abc' to run")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    cfg = CONFIGS["quick" if args.quick else "default"]
    root = Path(args.cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    name = "vertex_cut_quick" if args.quick else "vertex_cut"
    path = RESULTS / f"{name}.json"
    # A subset of sections replaces those sections of an existing report (so the sections can
    # run as separate invocations on a busy machine); each section keeps its own command line.
    report = json.loads(path.read_text()) if path.exists() and args.sections != "abc" else {}
    report.setdefault("runs", {})
    report.update(
        machine=f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.platform()}, torch {torch.__version__}",
        config=cfg,
    )
    command = "python benchmarks/vertex_cut.py" + (" --quick" if args.quick else "")
    sections = {"a": ("replication", replication_rows), "b": ("speed", speed_rows)}
    sections["c"] = ("accuracy", accuracy_rows)
    for letter, (key, run) in sections.items():
        if letter not in args.sections:
            report.setdefault(key, [])
            continue
        start = time.perf_counter()
        load = os.getloadavg()[0]
        report[key] = run(cfg) if letter == "a" else run(cfg, root)
        report["runs"][key] = {
            "command": f"{command} --sections {letter}" if args.sections != "abc" else command,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "seconds": time.perf_counter() - start,
            "load_average_at_start": load,
        }
    report["notes"] = notes(report)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))
    write_markdown(report, RESULTS / f"{name}.md")
    _log(f"wrote {RESULTS / name}.md/json")


if __name__ == "__main__":
    main()

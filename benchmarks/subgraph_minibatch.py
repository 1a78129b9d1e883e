"""Sampled-subgraph mini-batches (paper 000 §4.3.3): expected volume per batch of SHP, HP, METIS
and random partitions, and SHP vs HP training at 2 and 4 ranks.

    python benchmarks/subgraph_minibatch.py            # default grid (about 10 min on 2 cores)
    python benchmarks/subgraph_minibatch.py --quick    # smoke run (< 2 min), *_quick.{json,md}
    python benchmarks/subgraph_minibatch.py --graphs rmat --parts 16 --fractions 0.05
    python benchmarks/subgraph_minibatch.py --graphs rmat --parts 16,64 --fractions 0.05,0.1 \
        --edge-coverage 32 --no-training      # results/subgraph_minibatch_coverage32.*

(a) Expected volume. For every graph, P and batch fraction f, each method partitions the graph
once (HP, METIS and random do not depend on f; SHP is built for the batch size f with its default
settings: θ = 0.1, δ = 0.5, edge coverage 8, at most 20,000 batches), and the rows moved per SpMM
of a batch (the connectivity−1 cut of the batch's column-net hypergraph, what training measures) are
averaged over ``--samples`` fresh uniform batches drawn with a seed none of the partitioners used;
the same batches for every method. Figures are ratios to HP (``hypergraph`` with
``balance_send_volume=False``, i.e. plain connectivity−1 partitioning, the paper's HP) of the same
cell; the 95 % interval of each mean is in the JSON.

(b) Training. GCN (2 layers, 64 hidden, dropout 0) with ``loader="subgraph"`` (uniform, f = 5 %,
10 steps per epoch, 3 epochs) on the R-MAT graph at 2 and 4 forked gloo ranks, SHP vs HP: the
halo bytes per batch (measured, all ranks, both directions) and the wall time of an epoch (the
faster of epochs 2 and 3; the machine is shared, so read the time ratios as rough).

Default grid (reduced to fit the 2-core machine, documented in the markdown): R-MAT scale 13
(8,192 vertices, edge factor 8, power-law), an SBM of 8,000 vertices and a triangulated 96 × 96
grid mesh (9,216 vertices; the METIS example meshes are not installed on this machine);
P = 4, 16, 64 on R-MAT and P = 16 on SBM and the mesh; f = 1, 5, 10 %.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("LGD_PROGRESS", "0")
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402
from torch_geometric.data import Data  # noqa: E402

from lightning_gnn_dist import GNNStrategy, GraphPartitionDataModule, NodeClassifier  # noqa: E402
from lightning_gnn_dist.data import load_dataset  # noqa: E402
from lightning_gnn_dist.data.graph import canonicalize  # noqa: E402
from lightning_gnn_dist.data.subgraph_sampler import make_sampler  # noqa: E402
from lightning_gnn_dist.data.synthetic import add_synthetic_features  # noqa: E402
from lightning_gnn_dist.lightning.batch_monitor import BatchCommunicationMonitor  # noqa: E402
from lightning_gnn_dist.partition import get_partitioner  # noqa: E402
from lightning_gnn_dist.partition.batch_volume import expected_batch_volume  # noqa: E402
from lightning_gnn_dist.partition.store import partition_to_store  # noqa: E402

warnings.filterwarnings("ignore", message=".*(does not have many workers|deprecated|log_every).*")
for _name in ("pytorch_lightning", "lightning_fabric"):
    logging.getLogger(_name).setLevel(logging.WARNING)

RESULTS = REPO / "benchmarks" / "results"
GRAPHS = {
    "rmat": "rmat?scale=13&edge_factor=8",
    "sbm": "sbm?num_nodes=8000&num_classes=8&avg_degree=10",
    "mesh": "mesh",  # built by triangulated_grid(): the METIS example meshes are not installed here
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


def triangulated_grid(side: int = 96) -> Data:
    """A 2-D finite-element-like mesh: a ``side × side`` grid with one diagonal per cell
    (undirected, degree ≤ 6), synthetic features and labels."""
    ids = torch.arange(side * side).view(side, side)
    pairs = [
        (ids[:, :-1], ids[:, 1:]),
        (ids[:-1, :], ids[1:, :]),
        (ids[:-1, :-1], ids[1:, 1:]),
    ]
    src = torch.cat([a.flatten() for a, _ in pairs])
    dst = torch.cat([b.flatten() for _, b in pairs])
    edge_index = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
    data = canonicalize(Data(edge_index=edge_index, num_nodes=side * side))
    data = add_synthetic_features(data, features=32, classes=8, seed=0)
    data.name = "mesh"
    return data


def load(graph: str) -> Data:
    return triangulated_grid() if GRAPHS[graph] == "mesh" else load_dataset(GRAPHS[graph])


EDGE_COVERAGE = 8.0  # SHP's default; --edge-coverage changes it (and the output's name)


def partitioner(method: str, fraction: float):
    if method == "shp":
        return get_partitioner(
            "stochastic-hypergraph", subgraph_size=fraction, edge_coverage=EDGE_COVERAGE
        )
    if method == "hp":
        return get_partitioner("hypergraph", balance_send_volume=False)
    return get_partitioner(method)


def volume_cells(config: dict, out: dict, save) -> None:
    for graph, parts in config["graphs"].items():
        data = load(graph)
        print(f"{graph}: {data.num_nodes} vertices, {data.edge_index.size(1)} edges", flush=True)
        for num_parts in parts:
            fixed = {}
            for method in ("hp", "metis", "random"):
                start = time.perf_counter()
                fixed[method] = partitioner(method, 0.0).partition(data, num_parts)
                fixed[f"{method}_seconds"] = time.perf_counter() - start
            for fraction in config["fractions"]:
                size = max(1, round(fraction * data.num_nodes))
                shp = partitioner("shp", fraction)
                start = time.perf_counter()
                assignments = {"shp": shp.partition(data, num_parts), **fixed}
                seconds = {
                    "shp": time.perf_counter() - start,
                    **{m: fixed[f"{m}_seconds"] for m in ("hp", "metis", "random")},
                }
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
                    "seconds": seconds,
                    "expected_rows": {m: e.to_dict() for m, e in estimates.items()},
                    "ratio_to_hp": {
                        m: (e.mean_rows / hp_mean if hp_mean else None)
                        for m, e in estimates.items()
                    },
                }
                out["volume"].append(cell)
                save()
                print(
                    f"  P={num_parts} f={fraction}: "
                    + ", ".join(f"{m} {cell['ratio_to_hp'][m]:.3f}" for m in METHODS)
                    + f" (SHP {seconds['shp']:.1f} s, {shp.last_stats['batches']} batches)",
                    flush=True,
                )


class EpochTimer(pl.Callback):
    def __init__(self, path: Path, monitor: BatchCommunicationMonitor) -> None:
        self.path, self.monitor, self.times = path, monitor, []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.start = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.times.append(time.perf_counter() - self.start)

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.is_global_zero:
            self.path.write_text(json.dumps({"times": self.times, "traffic": self.monitor.history}))


def training_cells(config: dict, out: dict, save) -> None:
    train = config["training"]
    dataset, fraction = GRAPHS[train["graph"]], train["fraction"]
    data = load_dataset(dataset)
    with tempfile.TemporaryDirectory() as folder:
        for world_size in train["world_sizes"]:
            for method in ("shp", "hp"):
                name = "stochastic-hypergraph" if method == "shp" else "hypergraph"
                store = Path(folder) / f"{method}-{world_size}"
                partition_to_store(data, partitioner(method, fraction), world_size, store, dataset)
                options = {"subgraph_size": fraction} if method == "shp" else {}
                dm = GraphPartitionDataModule(
                    dataset,
                    method=name,
                    num_parts=world_size,
                    store=str(store),
                    verify_dataset=False,
                    loader="subgraph",
                    steps_per_epoch=train["steps"],
                    **({"subgraph_size": fraction} | options),
                )
                if method == "hp":
                    dm.partitioner = partitioner("hp", fraction)
                monitor = BatchCommunicationMonitor()
                result = Path(folder) / f"result-{method}-{world_size}.json"
                pl.seed_everything(0)
                module = NodeClassifier("gcn", hidden_channels=64, dropout=0.0)
                trainer = pl.Trainer(
                    strategy=GNNStrategy(start_method="fork"),
                    accelerator="cpu",
                    devices=world_size,
                    max_epochs=3,
                    callbacks=[monitor, EpochTimer(result, monitor)],
                    logger=False,
                    enable_checkpointing=False,
                    enable_progress_bar=False,
                    enable_model_summary=False,
                    num_sanity_val_steps=0,
                    limit_val_batches=0,
                )
                trainer.fit(module, datamodule=dm)
                measured = json.loads(result.read_text())
                steps = {r["step"] for r in measured["traffic"]}
                bytes_total = sum(sum(r["bytes_sent"]) for r in measured["traffic"])
                predicted = sum(sum(r["predicted_bytes_sent"]) for r in measured["traffic"])
                out["training"].append(
                    {
                        "world_size": world_size,
                        "method": method,
                        "fraction": fraction,
                        # the faster of the epochs after the first (the machine is shared)
                        "epoch_seconds": min(measured["times"][1:]),
                        "bytes_per_batch": bytes_total / len(steps),
                        "bytes_equal_plan": bytes_total == predicted,
                    }
                )
                save()
                print(
                    f"  train P={world_size} {method}: {bytes_total / len(steps):,.0f} B/batch, "
                    f"{min(measured['times'][1:]):.2f} s/epoch",
                    flush=True,
                )


def render(out: dict) -> str:
    lines = [
        "# Sampled-subgraph mini-batches: expected halo volume per batch",
        "",
        f"Generated by `benchmarks/subgraph_minibatch.py{' --quick' if out['quick'] else ''}` "
        f"on {out['date']} ({out['cpus']} CPU cores). Rows moved per SpMM of a uniformly sampled "
        f"batch, averaged over {out['samples']} fresh batches (the same for every method), as a "
        "ratio to HP (plain connectivity−1 hypergraph partitioning) of the same cell; SHP built "
        f"for that batch size (θ = 0.1, δ = 0.5, edge coverage {out.get('edge_coverage', 8):g}, "
        "≤ 20,000 batches). The default grid is reduced for the 2-core machine: R-MAT scale 13 at "
        "P = 4/16/64, SBM and a 96 × 96 triangulated grid mesh at P = 16 (a run's grid is in its JSON).",
        "",
        "| graph | P | batch | HP rows/batch (95% CI) | SHP / HP | METIS / HP | random / HP "
        "| SHP batches | SHP s | HP s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in out["volume"]:
        hp = c["expected_rows"]["hp"]
        r = c["ratio_to_hp"]
        lines.append(
            f"| {c['graph']} | {c['num_parts']} | {c['fraction']:.0%} ({c['batch_vertices']}) "
            f"| {hp['mean_rows']:.1f} ({hp['ci_low']:.1f}–{hp['ci_high']:.1f}) "
            f"| {r['shp']:.3f} | {r['metis']:.3f} | {r['random']:.3f} "
            f"| {c['shp_stats']['batches']} | {c['seconds']['shp']:.1f} | {c['seconds']['hp']:.1f} |"
        )
    if out["training"]:
        lines += [
            "",
            "## Training: SHP vs HP (GCN, 64 hidden, uniform batches, forked gloo ranks)",
            "",
            "| ranks | batch | method | halo bytes / batch | SHP / HP bytes | epoch s (best of 2) "
            "| SHP / HP time | bytes = plan |",
            "|---|---|---|---|---|---|---|---|",
        ]
        by_key = {(t["world_size"], t["method"]): t for t in out["training"]}
        for t in out["training"]:
            hp = by_key.get((t["world_size"], "hp"))
            ratio_b = t["bytes_per_batch"] / hp["bytes_per_batch"] if hp else float("nan")
            ratio_t = t["epoch_seconds"] / hp["epoch_seconds"] if hp else float("nan")
            lines.append(
                f"| {t['world_size']} | {t['fraction']:.0%} | {t['method']} "
                f"| {t['bytes_per_batch']:,.0f} | {ratio_b:.3f} | {t['epoch_seconds']:.2f} "
                f"| {ratio_t:.3f} | {'yes' if t['bytes_equal_plan'] else 'NO'} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    global EDGE_COVERAGE
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke configuration")
    parser.add_argument("--graphs", help="comma-separated graph names (default grid's P)")
    parser.add_argument("--parts", help="comma-separated P for every selected graph")
    parser.add_argument("--fractions", help="comma-separated batch fractions")
    parser.add_argument("--no-training", action="store_true", help="skip part (b)")
    parser.add_argument(
        "--edge-coverage",
        type=float,
        default=EDGE_COVERAGE,
        help="SHP's edge_coverage; other than 8 writes subgraph_minibatch_coverage<C>.*",
    )
    parser.add_argument(
        "--training-only",
        action="store_true",
        help="keep part (a) of the existing JSON, run part (b) again",
    )
    args = parser.parse_args(argv)
    config = json.loads(json.dumps(QUICK if args.quick else DEFAULT))
    if args.graphs:
        names = args.graphs.split(",")
        config["graphs"] = {g: config["graphs"].get(g, [16]) for g in names}
    if args.parts:
        parts = [int(p) for p in args.parts.split(",")]
        config["graphs"] = {g: parts for g in config["graphs"]}
    if args.fractions:
        config["fractions"] = [float(f) for f in args.fractions.split(",")]
    stem = "subgraph_minibatch_quick" if args.quick else "subgraph_minibatch"
    if args.edge_coverage != EDGE_COVERAGE:
        EDGE_COVERAGE = args.edge_coverage
        stem += f"_coverage{args.edge_coverage:g}"
    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "cpus": os.cpu_count(),
        "config": config,
        "samples": config["samples"],
        "edge_coverage": EDGE_COVERAGE,
        "torch": torch.__version__,
        "volume": [],
        "training": [],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        (RESULTS / f"{stem}.json").write_text(json.dumps(out, indent=1))
        (RESULTS / f"{stem}.md").write_text(render(out))

    np.seterr(over="ignore")
    if args.training_only:
        previous = json.loads((RESULTS / f"{stem}.json").read_text())
        out.update({k: previous[k] for k in ("date", "config", "samples", "volume")})
    else:
        volume_cells(config, out, save)
    if not args.no_training:
        training_cells(config, out, save)
    out["finished"] = True
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Full-batch training benchmark: overhead, exchange modes, partitioners, memory per rank.

    python benchmarks/full_batch.py            # full configuration (< 12 min on 2 cores)
    python benchmarks/full_batch.py --quick    # smoke configuration (< 1 min)
    python benchmarks/full_batch.py --section c    # rerun (c) only, keep the other sections

Writes ``benchmarks/results/full_batch.json`` and ``benchmarks/results/full_batch.md``. Every
figure is a ratio against a baseline measured in the same invocation, and every time is a median
over epochs after one warm-up epoch per fit. Sections:

(a) ``GNNStrategy`` with one process against a hand-written single-process PyG loop (same
    GCNConv x2 model, same initial weights, same graph, same Adam);
(b) ``p2p`` against ``broadcast`` halo exchange at 2 and 4 ranks (hypergraph partition): bytes
    per epoch (measured by ``CommunicationMonitor`` and predicted from the partition) and epoch
    time;
(c) hypergraph, metis and random partitions at 4 ranks, each balanced by the vertex weights
    of ``lightning_gnn_dist.partition.weights`` (``nnz``, ``work``, ``nnz+rows``): epoch time
    and bytes normalised to random and to METIS, and per rank the owned rows and non-zeros, the
    compute and exchange-wait seconds (``CommunicationMonitor``), the CPU seconds of the training
    step, and the cost model's prediction;
(d) peak RSS per rank at 2 and 4 ranks against one process training on the whole graph, each in
    fresh interpreters (this script in ``--worker`` mode; multi-rank runs through Lightning's
    subprocess launcher).

Timing fits (a)-(c) use the ``gnn_ddp_fork`` launcher (cheap start-up; the fork happens after
partitioning, so partitioning is never part of an epoch); with ``repeats`` > 1 the fits being
compared run interleaved (A B B A ...) and their epochs are pooled. Partition stores are cached
under ``--cache-dir`` (default: a directory in the system temp dir).
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
import resource
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import psutil
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
import torch_geometric
from torch_geometric.nn import GCNConv

import lightning_gnn_dist
from lightning_gnn_dist import GNNStrategy, GraphPartitionDataModule, NodeClassifier
from lightning_gnn_dist.costmodel import calibrate, predict_epoch
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.lightning.callbacks import CommunicationMonitor
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.store import PartitionStore, partition_to_store
from lightning_gnn_dist.partition.weights import reference_costs

#: RSS once torch, Lightning, PyG and the package are imported, before any graph data exists.
RSS_AFTER_IMPORTS = psutil.Process().memory_info().rss

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
warnings.filterwarnings(
    "ignore", message=".*(does not have many workers|deprecated|log_every_n_steps).*"
)
for _name in ("pytorch_lightning", "lightning_fabric", "lightning.pytorch"):
    logging.getLogger(_name).setLevel(logging.WARNING)

RESULTS = REPO / "benchmarks" / "results"
SEED, EPSILON = 0, 0.03
HIDDEN, LR, WEIGHT_DECAY, DROPOUT = 16, 0.01, 5e-4, 0.5

#: Section (c): ``method`` or ``method:vertex_weight`` (the partitioner's ``vertex_weight=``).
SECTION_C_METHODS = [
    "hypergraph:nnz",
    "hypergraph:work",
    "metis:nnz",
    "metis:work",
    "metis:nnz+rows",
    "random",
]

CONFIGS = {
    "full": {
        # 131,072 vertices, 1,239,664 directed edges after canonicalisation (edge_factor=8 gives
        # 999,342, just under 1M)
        "dataset": "rmat?scale=17&edge_factor=10&features=64&classes=8",
        "epochs": 9,  # per fit: 1 warm-up + 8 measured
        "repeats": 3,  # fits per configuration, interleaved (A B B A A B)
        "memory_epochs": 3,
        "world_sizes": [2, 4],
        "methods": SECTION_C_METHODS,
        "methods_world_size": 4,
        "memory_world_sizes": [2, 4],
        "memory_parallel": False,
    },
    "quick": {
        "dataset": "sbm?num_nodes=3000&num_classes=4&avg_degree=10&features=64&seed=0",
        "epochs": 4,
        "repeats": 1,
        "memory_epochs": 2,
        "world_sizes": [2, 4],
        "methods": SECTION_C_METHODS,
        "methods_world_size": 4,
        "memory_world_sizes": [2],
        "memory_parallel": True,  # keeps the smoke run under a minute
    },
}


# ------------------------------------------------------------------------------------------
# pieces shared by the driver and the workers


class PrebuiltPartitionDataModule(GraphPartitionDataModule):
    """``GraphPartitionDataModule`` that skips ``prepare_data`` when its store already exists.

    The stock ``prepare_data`` loads the whole dataset on local rank 0 to fingerprint it against
    the store even when the store exists. The driver builds and checks every store before any
    fit, so the fits skip that; section (d) measures the stock behaviour separately.
    """

    def prepare_data(self) -> None:
        if not (self.store_path / "meta.json").exists():
            super().prepare_data()


def split_variant(name: str) -> tuple[str, dict]:
    """``"metis:nnz+rows"`` → ``("metis", {"vertex_weight": "nnz+rows"})``."""
    method, _, weight = name.partition(":")
    return method, ({"vertex_weight": weight} if weight else {})


class StepCPUTimer(pl.Callback):
    """Every rank: CPU seconds of its process during each training step (``process_time``).
    Unlike wall time it does not count the time the rank waits for a core, so it shows each
    rank's work even when 4 ranks time-share 2 cores; waiting in gloo blocks (no CPU). Each rank
    writes ``path.rank<r>.json`` at the end of training."""

    def __init__(self, path: Path) -> None:
        self.path, self.seconds = Path(path), []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.seconds.append(0.0)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._start = time.process_time()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.seconds[-1] += time.process_time() - self._start

    def on_train_end(self, trainer, pl_module) -> None:
        path = self.path.with_suffix(f".rank{trainer.global_rank}.json")
        path.write_text(json.dumps(self.seconds))


class EpochTimer(pl.Callback):
    """Rank 0: wall time of each training epoch; at the end of training writes the times and the
    communication monitor's rows to ``path``. It goes first in the callback list, so the
    monitor's end-of-epoch gather is outside the timed interval."""

    def __init__(self, path: Path, monitor: CommunicationMonitor | None = None) -> None:
        self.path, self.monitor, self.seconds = Path(path), monitor, []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.seconds.append(time.perf_counter() - self._start)

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.is_global_zero:
            rows = self.monitor.history if self.monitor is not None else []
            ranks = [
                {k: r[k].tolist() for k in ("compute_seconds", "wait_seconds")}
                for r in (self.monitor.rank_history if self.monitor is not None else [])
            ]
            self.path.write_text(
                json.dumps({"epoch_seconds": self.seconds, "traffic": rows, "ranks": ranks})
            )


def make_module(num_features: int, num_classes: int) -> NodeClassifier:
    pl.seed_everything(SEED, verbose=False)
    return NodeClassifier(
        "gcn",
        hidden_channels=HIDDEN,
        dropout=DROPOUT,
        lr=LR,
        weight_decay=WEIGHT_DECAY,
        in_channels=num_features,
        num_classes=num_classes,
    )


def make_trainer(strategy: GNNStrategy, devices: int, epochs: int, callbacks: list) -> pl.Trainer:
    return pl.Trainer(
        strategy=strategy,
        accelerator="cpu",
        devices=devices,
        max_epochs=epochs,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        log_every_n_steps=1,
    )


def plain_epochs(data, state_dict: dict, epochs: int, cached: bool = False) -> list[float]:
    """Hand-written PyG loop on the whole graph: GCNConv x2, ReLU, dropout, Adam. Returns the
    wall time of each epoch (one full-batch step)."""
    model = torch.nn.Module()
    num_features, num_classes = data.x.size(1), int(data.y.max()) + 1
    model.convs = torch.nn.ModuleList(
        [
            GCNConv(num_features, HIDDEN, cached=cached),
            GCNConv(HIDDEN, num_classes, cached=cached),
        ]
    )
    model.load_state_dict(state_dict)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    mask = data.train_mask
    seconds = []
    for _ in range(epochs):
        start = time.perf_counter()
        optimizer.zero_grad()
        h = F.dropout(F.relu(model.convs[0](data.x, data.edge_index)), p=DROPOUT, training=True)
        out = model.convs[1](h, data.edge_index)
        loss = F.cross_entropy(out[mask], data.y[mask])
        loss.backward()
        optimizer.step()
        seconds.append(time.perf_counter() - start)
    return seconds


def vm_hwm_bytes() -> int:
    """``VmHWM`` of ``/proc/self/status``: the RSS high-water mark of this process's own address
    space (a new one starts at ``exec``)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def rss_report() -> dict:
    """RSS high-water mark, after-import RSS and current RSS of this process, in MiB.

    ``ru_maxrss`` is recorded too but not used: Linux folds the pre-``exec`` address space into
    it, which under ``vfork`` (what ``subprocess`` uses) is the parent's, so a small child
    started by a big parent reports the parent's peak.
    """
    peak = vm_hwm_bytes()
    return {
        "pid": os.getpid(),
        "peak_rss_mib": peak / 2**20,
        "baseline_rss_mib": RSS_AFTER_IMPORTS / 2**20,
        "end_rss_mib": psutil.Process().memory_info().rss / 2**20,
        "peak_above_baseline_mib": (peak - RSS_AFTER_IMPORTS) / 2**20,
        "ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def exit_now() -> None:
    """End a worker once its report is written: tearing down torch and Lightning takes seconds
    on a loaded machine and measures nothing."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# ------------------------------------------------------------------------------------------
# worker mode (section (d)): fresh interpreters, one per rank


def worker(args: argparse.Namespace) -> None:
    out = Path(args.out)
    if args.worker == "single":
        data = load_dataset(args.dataset)
        module = make_module(data.x.size(1), int(data.y.max()) + 1)
        state = {k: v.clone() for k, v in module.model.state_dict().items()}
        del module
        plain_epochs(data, state, args.epochs)
        (out / "rank0.json").write_text(json.dumps({"rank": 0, **rss_report()}))
        exit_now()
    store = PartitionStore.open(args.store)
    module = make_module(int(store.meta["num_features"]), int(store.meta["num_classes"]))
    cls = GraphPartitionDataModule if args.worker == "dist-stock" else PrebuiltPartitionDataModule
    datamodule = cls(args.dataset, method=args.method, num_parts=args.world, root=args.root)
    strategy = GNNStrategy(exchange="p2p", start_method="popen", timeout=600)
    trainer = make_trainer(strategy, args.world, args.epochs, [])
    trainer.fit(module, datamodule=datamodule)
    rank = trainer.global_rank
    report = {"rank": rank, "world_size": trainer.world_size, **rss_report()}
    (out / f"rank{rank}.json").write_text(json.dumps(report))
    # The launcher ends every rank when rank 0 exits: wait for the others' reports first.
    deadline = time.monotonic() + 120
    while rank == 0 and len(list(out.glob("rank*.json"))) < trainer.world_size:
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    exit_now()


# ------------------------------------------------------------------------------------------
# driver: partitions and timing fits


def median_ms(seconds: list[float]) -> float:
    return 1000.0 * statistics.median(seconds)


def interleaved(keys: list, repeats: int) -> list:
    """``keys`` forwards, backwards, forwards ... ``repeats`` times (A B C C B A ...), so slow
    drift of the machine's load affects every configuration alike."""
    order = []
    for i in range(repeats):
        order += keys if i % 2 == 0 else keys[::-1]
    return order


def store_path(cfg: dict, root: Path, name: str, parts: int) -> Path:
    method, options = split_variant(name)
    dm = GraphPartitionDataModule(
        cfg["dataset"], method=method, num_parts=parts, root=str(root), partition_options=options
    )
    return dm.store_path


def build_stores(cfg: dict, data, root: Path, sections: str = "abcd") -> dict:
    """Partition (or reuse the cached store) for every (method, parts) the run needs."""
    needed = {(m, cfg["methods_world_size"]) for m in cfg["methods"]}
    if sections != "c":
        needed |= {("random", 1)} | {("hypergraph", p) for p in cfg["world_sizes"]}
        needed |= {("hypergraph", p) for p in cfg["memory_world_sizes"]}
    info = {}
    for method, parts in sorted(needed, key=lambda mp: (mp[1], mp[0])):
        path = store_path(cfg, root, method, parts)
        cached = path.exists()
        start = time.perf_counter()
        base, options = split_variant(method)
        partitioner = get_partitioner(base, seed=SEED, epsilon=EPSILON, **options)
        store = partition_to_store(data, partitioner, parts, path, dataset=cfg["dataset"])
        metrics = store.metrics
        info[f"{method}-p{parts}"] = {
            "method": method,
            "settings": store.meta["settings"],
            "num_parts": parts,
            "store": str(path),
            "cached": cached,
            "partition_seconds": store.meta["seconds"],
            "this_run_seconds": time.perf_counter() - start,
            "total_volume_rows": metrics.total_volume_rows,
            "max_send_rows": int(metrics.send_rows.max()),
            "imbalance": metrics.imbalance,
            "rows_imbalance": metrics.rows_imbalance,
            "edge_cut": int(metrics.edge_cut),
            "part_sizes": metrics.part_sizes.tolist(),
            "part_nnz": metrics.part_nnz.tolist(),
            "halo_rows": metrics.halo_rows.tolist(),
        }
        print(
            f"  store {method} P={parts}: {'cached' if cached else 'built'} "
            f"({store.meta['seconds']:.1f} s partitioning)",
            flush=True,
        )
    return info


def exchange_widths(num_features: int, num_classes: int) -> list[int]:
    """Per GCN layer, the exchanged width (DistGCNConv: min(in, out)); forward = backward."""
    return [min(num_features, HIDDEN), min(HIDDEN, num_classes)]


def predicted_bytes(metrics, exchange: str, widths: list[int]) -> int:
    """Bytes per epoch from the partition alone: sum over layers of forward + backward."""
    if exchange == "p2p":
        rows = int(metrics.send_rows.sum())  # backward moves the same rows back
    else:  # broadcast: each block to every peer forward, one partial block per peer backward
        rows = (metrics.num_parts - 1) * int(metrics.num_nodes)
    return sum(2 * rows * w * 4 for w in widths)


def fork_fit(cfg: dict, root: Path, key: tuple, workdir: Path) -> dict:
    """One ``gnn_ddp_fork`` fit of ``key = (method, world_size, exchange)``; rank 0 writes epoch
    times and the monitor's rows to a file."""
    name, world, exchange = key
    method, options = split_variant(name)
    environ = dict(os.environ)
    store = PartitionStore.open(store_path(cfg, root, name, world))
    module = make_module(int(store.meta["num_features"]), int(store.meta["num_classes"]))
    datamodule = PrebuiltPartitionDataModule(
        cfg["dataset"], method=method, num_parts=world, root=str(root), partition_options=options
    )
    slug = name.replace(":", "-").replace("+", "-")
    out = workdir / f"fit-{slug}-{world}-{exchange}-{time.monotonic_ns()}.json"
    monitor = CommunicationMonitor()
    strategy = GNNStrategy(exchange=exchange, start_method="fork", timeout=600)
    callbacks = [EpochTimer(out, monitor), monitor, StepCPUTimer(out)]
    trainer = make_trainer(strategy, world, cfg["epochs"], callbacks)
    start = time.perf_counter()
    try:
        trainer.fit(module, datamodule=datamodule)
    finally:  # the launcher writes MASTER_PORT and friends into this process's environment
        os.environ.clear()
        os.environ.update(environ)
    result = json.loads(out.read_text())
    result["fit_wall_seconds"] = time.perf_counter() - start
    result["cpu_seconds"] = [  # [rank][epoch]
        json.loads(out.with_suffix(f".rank{r}.json").read_text()) for r in range(world)
    ]
    return result


def traffic_per_epoch(result: dict) -> dict[int, dict]:
    """Per epoch: bytes (summed over layers, directions, ranks), the monitor's prediction, and
    the exchange wait (sum over layers and directions of the slowest rank's wait)."""
    epochs: dict[int, dict] = {}
    for row in result["traffic"]:
        e = epochs.setdefault(row["epoch"], {"bytes": 0, "predicted": 0, "wait": 0.0})
        e["bytes"] += row["bytes_total"]
        e["predicted"] += row["predicted_bytes_total"]
        e["wait"] += row["seconds_max"]
    return epochs


def run_fits(cfg, root, workdir, widths, keys: list[tuple], label: str) -> dict[tuple, dict]:
    """Fit every key ``repeats`` times, interleaved; pool the measured epochs per key."""
    pooled: dict[tuple, dict] = {}
    for key in interleaved(keys, cfg["repeats"]):
        fit = fork_fit(cfg, root, key, workdir)
        epochs = traffic_per_epoch(fit)
        if sorted(epochs) != list(range(cfg["epochs"])):
            raise RuntimeError(f"{key}: monitor rows for epochs {sorted(epochs)}")
        run = pooled.setdefault(
            key,
            {
                "epoch_seconds": [],
                "repeat_epoch_seconds": [],
                "wait_seconds": [],
                "fits": [],
                "rank_compute_seconds": [],  # [epoch][rank], pooled over fits
                "rank_wait_seconds": [],
                "rank_cpu_seconds": [],
            },
        )
        run["epoch_seconds"] += fit["epoch_seconds"][1:]  # drop the warm-up epoch
        run["rank_compute_seconds"] += [r["compute_seconds"] for r in fit["ranks"][1:]]
        run["rank_wait_seconds"] += [r["wait_seconds"] for r in fit["ranks"][1:]]
        run["rank_cpu_seconds"] += [list(e) for e in zip(*fit["cpu_seconds"], strict=True)][1:]
        run["repeat_epoch_seconds"].append(fit["epoch_seconds"][1:])
        run["wait_seconds"] += [epochs[e]["wait"] for e in sorted(epochs)[1:]]
        run["fits"].append(
            {
                "epoch_seconds": fit["epoch_seconds"],
                "fit_wall_seconds": fit["fit_wall_seconds"],
                "bytes_per_epoch": sorted({(v["bytes"], v["predicted"]) for v in epochs.values()}),
            }
        )
        print(
            f"  ({label}) {key[0]} P={key[1]} {key[2]}: "
            f"{median_ms(fit['epoch_seconds'][1:]):.1f} ms/epoch, "
            f"{epochs[0]['bytes']:,} B/epoch",
            flush=True,
        )
    for (method, world, exchange), run in pooled.items():
        seen = {tuple(pair) for fit in run["fits"] for pair in fit["bytes_per_epoch"]}
        if len(seen) != 1:
            raise RuntimeError(f"{method} P={world} {exchange}: bytes differ between epochs {seen}")
        measured, monitor_predicted = seen.pop()
        metrics = PartitionStore.open(store_path(cfg, root, method, world)).metrics
        predicted = predicted_bytes(metrics, exchange, widths)
        per_rank = {
            f"{k}_ms": [1000.0 * statistics.median(col) for col in zip(*run[k], strict=True)]
            for k in ("rank_compute_seconds", "rank_wait_seconds", "rank_cpu_seconds")
        }
        run.update(
            {
                **per_rank,
                "method": method,
                "world_size": world,
                "exchange": exchange,
                "epoch_ms": median_ms(run["epoch_seconds"]),
                "exchange_wait_ms": median_ms(run["wait_seconds"]),
                "epochs_measured": len(run["epoch_seconds"]),
                "bytes_measured": measured,
                "bytes_predicted": predicted,
                "bytes_predicted_monitor": monitor_predicted,
                "bytes_match": measured == predicted == monitor_predicted,
            }
        )
    return pooled


def repeat_ratios(a: list[list[float]], b: list[list[float]]) -> list[float]:
    """Per repeat block, median epoch time of ``a``'s fit over ``b``'s fit in that block: the
    spread of these shows how much the machine's load moved a ratio."""
    return [statistics.median(x) / statistics.median(y) for x, y in zip(a, b, strict=True)]


def section_a(cfg: dict, data, root: Path, workdir: Path) -> dict:
    module = make_module(data.x.size(1), int(data.y.max()) + 1)
    state = {k: v.clone() for k, v in module.model.state_dict().items()}
    names = ["plain", "plain_cached", "gnn_strategy"]
    per_repeat: dict[str, list[list[float]]] = {name: [] for name in names}
    for name in interleaved(names, max(2, cfg["repeats"])):
        if name == "gnn_strategy":
            seconds = fork_fit(cfg, root, ("random", 1, "p2p"), workdir)["epoch_seconds"]
        else:
            seconds = plain_epochs(data, state, cfg["epochs"], cached=name == "plain_cached")
        per_repeat[name].append(seconds[1:])
    times = {name: [t for fit in fits for t in fit] for name, fits in per_repeat.items()}
    ms = {name: median_ms(values) for name, values in times.items()}
    return {
        "ratio_gnn_strategy_over_plain_per_repeat": repeat_ratios(
            per_repeat["gnn_strategy"], per_repeat["plain"]
        ),
        "ratio_plain_cached_over_plain_per_repeat": repeat_ratios(
            per_repeat["plain_cached"], per_repeat["plain"]
        ),
        "plain_epoch_ms": ms["plain"],
        "plain_cached_epoch_ms": ms["plain_cached"],
        "gnn_strategy_epoch_ms": ms["gnn_strategy"],
        "ratio_gnn_strategy_over_plain": ms["gnn_strategy"] / ms["plain"],
        "ratio_plain_cached_over_plain": ms["plain_cached"] / ms["plain"],
        "ratio_gnn_strategy_over_plain_cached": ms["gnn_strategy"] / ms["plain_cached"],
        "epochs_measured": {name: len(values) for name, values in times.items()},
        "epoch_seconds": times,
    }


def section_b(cfg, root, workdir, widths) -> list[dict]:
    rows = []
    for world in cfg["world_sizes"]:
        keys = [("hypergraph", world, "p2p"), ("hypergraph", world, "broadcast")]
        runs = run_fits(cfg, root, workdir, widths, keys, "b")
        p2p, bc = runs[keys[0]], runs[keys[1]]
        rows.append(
            {
                "world_size": world,
                "p2p": p2p,
                "broadcast": bc,
                "bytes_ratio_p2p_over_broadcast": p2p["bytes_measured"] / bc["bytes_measured"],
                "time_ratio_p2p_over_broadcast": p2p["epoch_ms"] / bc["epoch_ms"],
                "time_ratio_p2p_over_broadcast_per_repeat": repeat_ratios(
                    p2p["repeat_epoch_seconds"], bc["repeat_epoch_seconds"]
                ),
            }
        )
    return rows


def max_over_mean(values: list[float]) -> float:
    return max(values) / statistics.mean(values)


def section_c(cfg, root, workdir, widths, dims: list[int]) -> list[dict]:
    """Every partition of ``cfg["methods"]`` at ``methods_world_size`` ranks, with ratios to
    random and to METIS (``metis:nnz``), per-rank timings, and the cost model's prediction
    (compute calibrated in this invocation, loopback network, the machine's cores)."""
    world = cfg["methods_world_size"]
    keys = [(method, world, "p2p") for method in cfg["methods"]]
    runs = run_fits(cfg, root, workdir, widths, keys, "c")
    costs = calibrate(dims)
    metrics = {
        key: PartitionStore.open(store_path(cfg, root, key[0], world)).metrics for key in keys
    }
    predicted = {
        key: predict_epoch(metrics[key], dims, costs, network="loopback", cores=os.cpu_count())
        for key in keys
    }
    # The same model with one core per rank and the costs the "work" weight was fitted with
    # (per-rank step CPU time): what the epoch ratios would be without oversubscription.
    dedicated = {
        key: predict_epoch(metrics[key], dims, reference_costs(), network="loopback").epoch_seconds
        for key in keys
    }
    ref, gp = runs[("random", world, "p2p")], runs.get(("metis:nnz", world, "p2p"))
    ref_pred = predicted[("random", world, "p2p")]
    rows = []
    for key, run in runs.items():
        estimate = predicted[key]
        row = {
            **run,
            "vertex_weight": split_variant(key[0])[1].get("vertex_weight", "–"),
            "time_ratio_over_random": run["epoch_ms"] / ref["epoch_ms"],
            "time_ratio_over_random_per_repeat": repeat_ratios(
                run["repeat_epoch_seconds"], ref["repeat_epoch_seconds"]
            ),
            "bytes_ratio_over_random": run["bytes_measured"] / ref["bytes_measured"],
            "compute_max_over_mean": max_over_mean(run["rank_compute_seconds_ms"]),
            "cpu_max_over_mean": max_over_mean(run["rank_cpu_seconds_ms"]),
            "predicted_epoch_ms": 1000.0 * estimate.epoch_seconds,
            "predicted_compute_ms": (1000.0 * estimate.compute_seconds).tolist(),
            "predicted_compute_max_over_mean": max_over_mean(estimate.compute_seconds.tolist()),
            "predicted_ratio_over_random": estimate.epoch_seconds / ref_pred.epoch_seconds,
            "dedicated_predicted_ratio_over_random": dedicated[key]
            / dedicated[("random", world, "p2p")],
        }
        if gp is not None:
            row["time_ratio_over_metis"] = run["epoch_ms"] / gp["epoch_ms"]
            row["time_ratio_over_metis_per_repeat"] = repeat_ratios(
                run["repeat_epoch_seconds"], gp["repeat_epoch_seconds"]
            )
            row["cpu_max_ratio_over_metis"] = max(run["rank_cpu_seconds_ms"]) / max(
                gp["rank_cpu_seconds_ms"]
            )
            row["dedicated_predicted_ratio_over_metis"] = (
                dedicated[key] / dedicated[("metis:nnz", world, "p2p")]
            )
        row["cpu_max_ratio_over_random"] = max(run["rank_cpu_seconds_ms"]) / max(
            ref["rank_cpu_seconds_ms"]
        )
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------
# driver: memory (section (d))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_worker(cfg, root, kind: str, world: int, workdir: Path, port: int) -> dict:
    """Start this script in ``--worker`` mode in a fresh interpreter (does not wait)."""
    out = Path(tempfile.mkdtemp(prefix=f"mem-{kind}-{world}-", dir=workdir))
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        kind,
        "--dataset",
        cfg["dataset"],
        "--world",
        str(world),
        "--epochs",
        str(cfg["memory_epochs"]),
        "--out",
        str(out),
        "--root",
        str(root),
        "--method",
        "hypergraph",
        "--store",
        str(store_path(cfg, root, "hypergraph", world)),
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    for key in ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "RANK"):
        env.pop(key, None)
    log = open(out / "log.txt", "w")  # closed in finish_worker
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    return {
        "kind": kind,
        "world": world,
        "out": out,
        "proc": proc,
        "log": log,
        "start": time.perf_counter(),
    }


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
        log = (out / "log.txt").read_text()[-4000:]
        raise RuntimeError(
            f"worker {kind} P={world}: exit code {code}, {len(ranks)} reports\n{log}"
        )
    return {
        "kind": kind,
        "world_size": world,
        "ranks": sorted(ranks, key=lambda r: r["rank"]),
        "wall_seconds": time.perf_counter() - job["start"],
    }


def section_d(cfg, root, workdir, partitions) -> dict:
    worlds = cfg["memory_world_sizes"]
    plan = [("single", 1)] + [("dist", w) for w in worlds] + [("dist-stock", max(worlds))]
    if cfg["memory_parallel"]:  # memory readings do not depend on CPU contention
        jobs = [start_worker(cfg, root, k, w, workdir, free_port()) for k, w in plan]
        results = [finish_worker(job) for job in jobs]
    else:
        results = [
            finish_worker(start_worker(cfg, root, k, w, workdir, free_port())) for k, w in plan
        ]
    single, runs = results[0], results[1:]
    base = single["ranks"][0]
    print(f"  (d) single process: peak {base['peak_rss_mib']:.0f} MiB", flush=True)
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
        print(
            f"  (d) {run['kind']} P={world}: peak per rank {[round(p) for p in peaks]} MiB",
            flush=True,
        )
    return {"single": single, "distributed": runs, "parallel": cfg["memory_parallel"]}


# ------------------------------------------------------------------------------------------
# report


def machine_info() -> dict:
    return {
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "pytorch_lightning": pl.__version__,
        "torch_geometric": torch_geometric.__version__,
        "lightning_gnn_dist": lightning_gnn_dist.__version__,
        "torch_threads_per_process": torch.get_num_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME"),
    }


def ratio_cell(ratio: float, per_repeat: list[float]) -> str:
    """``0.68 (0.60–0.75)``: the pooled-median ratio and the range of the per-repeat ratios."""
    if len(per_repeat) < 2:
        return f"{ratio:.2f}"
    return f"{ratio:.2f} ({min(per_repeat):.2f}–{max(per_repeat):.2f})"


def wait_cell(run: dict) -> str:
    """The broadcast exchange blocks inside its collectives when it posts, so the monitor's
    wait time (measured around ``wait()``) is always 0 for it: not comparable, not shown."""
    return "n/a" if run["exchange"] == "broadcast" else f"{run['exchange_wait_ms']:.1f}"


def stock_delta(d: dict) -> str:
    """`` (rank 0: +N MiB)``: what the stock ``prepare_data`` adds to rank 0's peak."""
    runs = {(r["kind"], r["world_size"]): r for r in d["distributed"]}
    for (kind, world), stock in runs.items():
        prebuilt = runs.get(("dist", world))
        if kind == "dist-stock" and prebuilt is not None:
            delta = stock["ranks"][0]["peak_rss_mib"] - prebuilt["ranks"][0]["peak_rss_mib"]
            return f" (rank 0 at {world} ranks: {delta:+.0f} MiB)"
    return ""


def _all_match(report: dict) -> bool:
    runs = [row[e] for row in report["b"] for e in ("p2p", "broadcast")] + report["c"]
    return all(run["bytes_match"] for run in runs)


def _ms_list(values: list[float]) -> str:
    return ", ".join(f"{v:.0f}" for v in values)


def section_c_markdown(report: dict, world: int) -> list[str]:
    c = report["c"]
    rerun = report.get("c_rerun")
    lines = [
        "",
        f"## (c) partitioners and vertex weights at {world} ranks (p2p exchange)",
        "",
    ]
    if rerun:
        lines += [
            f"Section (c) was rerun alone by `{rerun['command']}` on {rerun['date']} (1-minute "
            f"load average {rerun['load_average']['start'][0]:.1f} at its start, "
            f"{rerun['load_average']['end'][0]:.1f} at its end); the other sections are from "
            "the run named at the top.",
            "",
        ]
    lines += [
        "`method:weight` is the partitioner with `vertex_weight=weight` "
        "(`lightning_gnn_dist.partition.weights`): `nnz` the row non-zeros of Â (paper 000), "
        "`work` the cost model's per-vertex layer work for this model's widths, `nnz+rows` "
        "non-zeros and rows as two METIS constraints. Time ratios: pooled medians, in "
        "parentheses the range over repeat blocks.",
        "",
        "| method | volume (rows/exchange) | nnz imb. | rows imb. | owned vertices per rank | "
        "bytes / random | epoch time (ms) | time / random | time / METIS | exchange wait (ms) "
        "| partitioning (s, not in epoch) |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in c:
        part = report["partitions"][f"{r['method']}-p{r['world_size']}"]
        sizes = ", ".join(f"{s:,}" for s in part["part_sizes"])
        over_metis = (
            ratio_cell(r["time_ratio_over_metis"], r["time_ratio_over_metis_per_repeat"])
            if "time_ratio_over_metis" in r
            else "–"
        )
        lines.append(
            f"| {r['method']} | {part['total_volume_rows']:,} | {part['imbalance']:.3f} "
            f"| {part.get('rows_imbalance', max(part['part_sizes']) * len(part['part_sizes']) / sum(part['part_sizes'])):.3f} "
            f"| {sizes} | {r['bytes_ratio_over_random']:.3f} | {r['epoch_ms']:.1f} "
            f"| {ratio_cell(r['time_ratio_over_random'], r['time_ratio_over_random_per_repeat'])} "
            f"| {over_metis} | {wait_cell(r)} | {part['partition_seconds']:.1f} |"
        )
    lines += [
        "",
        "Per rank (medians over the measured epochs of all fits, ms): 'compute' is "
        "`CommunicationMonitor`'s step time minus exchange wait (wall clock, so on this "
        "oversubscribed machine it also counts time a rank waits for a core), 'wait' its "
        "exchange wait, 'CPU' the process CPU time of the training step (`time.process_time`, "
        "which does not count waiting for a core or for peers: the rank's own work). "
        "'Predicted' is the cost model (`costmodel.predict_epoch`, compute calibrated in this "
        "run, loopback network, compute scaled by ranks / cores). 'One core per rank' is the "
        "same model without that scaling and with the costs the `work` weight was fitted with "
        "(`weights.reference_costs()`): model output for a machine where the ranks do not "
        "share cores, not measured.",
        "",
        "| method | compute per rank | max/mean compute | wait per rank | CPU per rank | "
        "max/mean CPU | max CPU / random's | max CPU / METIS's | predicted compute per rank | "
        "predicted max/mean | predicted epoch / random's | one core per rank: "
        "predicted epoch / random's | / METIS's |",
        "|---|---|---:|---|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in c:
        over_metis = (
            f"{r['cpu_max_ratio_over_metis']:.2f}" if "cpu_max_ratio_over_metis" in r else "–"
        )
        lines.append(
            f"| {r['method']} | {_ms_list(r['rank_compute_seconds_ms'])} "
            f"| {r['compute_max_over_mean']:.2f} | {_ms_list(r['rank_wait_seconds_ms'])} "
            f"| {_ms_list(r['rank_cpu_seconds_ms'])} | {r['cpu_max_over_mean']:.2f} "
            f"| {r['cpu_max_ratio_over_random']:.2f} | {over_metis} "
            f"| {_ms_list(r['predicted_compute_ms'])} "
            f"| {r['predicted_compute_max_over_mean']:.2f} "
            f"| {r['predicted_ratio_over_random']:.2f} "
            f"| {r['dedicated_predicted_ratio_over_random']:.2f} "
            f"| {r.get('dedicated_predicted_ratio_over_metis', float('nan')):.2f} |"
        )
    lines += [
        "",
        "Measured bytes equal the predicted bytes in every run of (b) and (c): "
        + ("**yes**." if _all_match(report) else "**NO**."),
        "'nnz imb.' and 'rows imb.' are max / mean over the parts of the non-zeros of Â and of "
        "the owned vertices: balancing non-zeros alone leaves the per-row (dense, element-wise) "
        "work and the feature memory unbalanced on a power-law graph.",
    ]
    return lines


def write_markdown(report: dict, path: Path) -> None:
    m, g, cfg = report["machine"], report["graph"], report["config"]
    a, b, d = report["a"], report["b"], report["d"]
    load = report["load_average"]
    lines = [
        "# Full-batch training benchmark",
        "",
        f"Generated by `{report['command']}` on {report['date']} ({report['mode']} mode, "
        f"{report['wall_seconds']:.0f} s wall). Machine: {m['logical_cores']} cores, "
        f"{m['memory_gib']} GiB, CPU only; torch {m['torch']}, pytorch-lightning "
        f"{m['pytorch_lightning']}, PyG {m['torch_geometric']}; {m['torch_threads_per_process']} "
        f"torch thread per process, gloo on loopback. 1-minute load average {load['start'][0]:.1f} "
        f"at the start and {load['end'][0]:.1f} at the end (other work shared the machine).",
        "",
        f"Graph: `{g['spec']}`: {g['num_nodes']:,} vertices, {g['num_edges']:,} directed edges "
        f"after canonicalisation, {g['num_features']} features, {g['num_classes']} classes, "
        f"{g['train_vertices']:,} training vertices. Model: GCNConv({g['num_features']}, {HIDDEN}) "
        f"→ ReLU → dropout {DROPOUT} → GCNConv({HIDDEN}, {g['num_classes']}), Adam (lr {LR}, "
        f"weight decay {WEIGHT_DECAY}), one full-batch step per epoch. Each fit runs "
        f"{cfg['epochs']} epochs, the first is a warm-up and is dropped; each configuration is fit "
        f"{cfg['repeats']} time(s) (section (a): at least twice), interleaved with the "
        "configurations it is compared with (A B B A A B ...), and times are medians over the "
        "pooled epochs. A time ratio is the ratio of pooled medians; in parentheses, the smallest "
        "and largest ratio between fits of the same repeat block, which shows how much the "
        "machine's load moved it.",
        "",
        "## How to read",
        "",
        "Every comparison is a ratio of runs made in this invocation, so the speed of the machine "
        "and slow drifts in its load cancel; absolute numbers only show the scale. A ratio below 1 "
        "means the configuration in the row is cheaper than the baseline named in the column. "
        "Epoch time is rank 0's wall time from `on_train_epoch_start` to `on_train_epoch_end`: the "
        "step, the halo exchange, the gradient all-reduce and Lightning's per-step work "
        "(validation, sanity checks, checkpointing, progress bars and loggers are off; "
        "partitioning happens before, its time is listed separately). Bytes are the halo-exchange "
        "bytes of one epoch summed over layers, forward and backward, and ranks, as counted by "
        "`CommunicationMonitor`; 'predicted' is computed from the partition alone (p2p: the rows of "
        "the send plans; broadcast: (P−1)·N rows per layer and direction) times the exchanged "
        f"width (GCN exchanges min(in, out) = {report['widths']} columns per layer) times 4 bytes. "
        "'Exchange wait' is `CommunicationMonitor`'s time spent waiting for halo rows, summed "
        "over layers and directions, of the slowest rank, for p2p; it includes waiting for a "
        "slower peer to reach the exchange. The broadcast mode runs its collectives "
        "synchronously before the point where the monitor times the wait, so it always "
        "reports 0 there (n/a). "
        f"**Oversubscription:** the machine has {m['logical_cores']} cores, so 4 ranks "
        "time-share them (and 2 ranks share them with anything else running): multi-rank epoch "
        "times are not speed-ups over one process, and epoch times of different world sizes "
        "should not be compared with each other (when other processes load the machine, more "
        "ranks also get a larger share of it). The ratios still compare like with like, "
        "because both sides of every ratio in (b) and (c) run the same number of ranks on the "
        "same cores, interleaved in time.",
        "",
        "## (a) GNNStrategy with one process vs a plain PyG loop",
        "",
        "| configuration | epoch time (ms) | ratio to plain |",
        "|---|---:|---:|",
        f"| plain PyG loop, whole graph, `GCNConv` (default, normalisation recomputed every call) "
        f"| {a['plain_epoch_ms']:.1f} | 1.00 |",
        f"| plain PyG loop, `GCNConv(cached=True)` | {a['plain_cached_epoch_ms']:.1f} "
        f"| {ratio_cell(a['ratio_plain_cached_over_plain'], a['ratio_plain_cached_over_plain_per_repeat'])} |",
        f"| Lightning + GNNStrategy, 1 process (`gnn_ddp_fork`, devices=1) "
        f"| {a['gnn_strategy_epoch_ms']:.1f} "
        f"| {ratio_cell(a['ratio_gnn_strategy_over_plain'], a['ratio_gnn_strategy_over_plain_per_repeat'])} |",
        "",
        "GNNStrategy over the cached plain loop: "
        f"{a['ratio_gnn_strategy_over_plain_cached']:.2f}. The distributed GCN layer computes the "
        "normalised adjacency once per partition (with global degrees) and reuses it, like "
        "`cached=True`; the default `GCNConv` recomputes it in every forward pass. Epochs measured "
        "per configuration: "
        + ", ".join(f"{k} {v}" for k, v in a["epochs_measured"].items())
        + ".",
        "",
        "## (b) p2p vs broadcast halo exchange (hypergraph partition)",
        "",
        "| ranks | exchange | bytes/epoch measured | bytes/epoch predicted | match | "
        "epoch time (ms) | exchange wait (ms) | bytes p2p/broadcast | time p2p/broadcast |",
        "|---:|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for row in b:
        for ex in ("p2p", "broadcast"):
            r = row[ex]
            time_ratio = ratio_cell(
                row["time_ratio_p2p_over_broadcast"],
                row["time_ratio_p2p_over_broadcast_per_repeat"],
            )
            ratios = (
                f"{row['bytes_ratio_p2p_over_broadcast']:.3f} | {time_ratio}"
                if ex == "p2p"
                else " | "
            )
            lines.append(
                f"| {row['world_size']} | {ex} | {r['bytes_measured']:,} | {r['bytes_predicted']:,} "
                f"| {'yes' if r['bytes_match'] else 'NO'} | {r['epoch_ms']:.1f} | "
                f"{wait_cell(r)} | {ratios} |"
            )
    world_c = cfg["methods_world_size"]
    lines += section_c_markdown(report, world_c)
    lines += [
        "",
        "## (d) peak memory per rank vs one process on the whole graph",
        "",
        "| configuration | ranks | owned vertices per rank | peak RSS per rank (MiB) | "
        "after-import RSS (MiB) | max peak / single | max (peak − after-import) / single |",
        "|---|---:|---|---|---:|---:|---:|",
    ]
    single = d["single"]["ranks"][0]
    lines.append(
        f"| one process, whole graph, plain PyG loop | 1 | {g['num_nodes']:,} | "
        f"{single['peak_rss_mib']:.0f} | {single['baseline_rss_mib']:.0f} | 1.00 | 1.00 |"
    )
    for run in d["distributed"]:
        label = (
            "GNNStrategy, stock `GraphPartitionDataModule`"
            if run["kind"] == "dist-stock"
            else "GNNStrategy, stores prebuilt, `prepare_data` skipped"
        )
        ranks = sorted(run["ranks"], key=lambda r: r["rank"])
        peaks = ", ".join(f"{r['peak_rss_mib']:.0f}" for r in ranks)
        sizes = ", ".join(f"{s:,}" for s in run["owned_vertices"])
        base = statistics.mean(r["baseline_rss_mib"] for r in ranks)
        lines.append(
            f"| {label} | {run['world_size']} | {sizes} | {peaks} | {base:.0f} | "
            f"{run['max_peak_ratio_over_single']:.2f} | "
            f"{run['max_above_baseline_ratio_over_single']:.2f} |"
        )
    lines += [
        "",
        f"Single process: peak {single['peak_rss_mib']:.0f} MiB, of which "
        f"{single['peak_above_baseline_mib']:.0f} MiB above the after-import RSS.",
        "",
        "Method: every configuration runs in fresh interpreters: this script in `--worker` mode "
        'started with `subprocess`, and for several ranks `GNNStrategy(start_method="popen")`, '
        "Lightning's subprocess launcher, which starts ranks 1.. as new `python` processes. No "
        "rank is a fork of a process that held the graph, so copy-on-write pages cannot hide or "
        "double-count memory. Each process reports `VmHWM` from `/proc/self/status` (its RSS "
        "high-water mark since `exec`) after `fit` (or after the plain loop) to a file of its own. "
        "`ru_maxrss` from `getrusage` is recorded in the JSON but not used: Linux folds the "
        "address space a process had before `exec` into it, and `subprocess` starts children "
        "with `vfork`, whose pre-`exec` address space is the parent's, so rank 0 (started by "
        "this driver) reports the driver's peak. 'After-import RSS' is measured once torch, "
        "Lightning, PyG and the package are imported, before any graph data exists; every process "
        "pays it (about 0.4 GiB here), so the last column compares only what the graph and "
        "training add. In the 'prebuilt' rows the datamodule skips `prepare_data` because the "
        "stores exist, so no rank ever holds the whole graph. The stock "
        "`GraphPartitionDataModule.prepare_data` loads the whole dataset on local rank 0 (to "
        "fingerprint it against the store) even when the store exists; compare rank 0 in the "
        f"'stock' row with the 'prebuilt' row of the same size{stock_delta(d)}. Training ran "
        f"{cfg['memory_epochs']} epochs"
        + (
            "; the configurations ran concurrently (memory readings do not depend on CPU "
            "contention)."
            if d["parallel"]
            else "; the configurations ran one after another."
        ),
        "",
    ]
    path.write_text("\n".join(lines))


def driver(args: argparse.Namespace) -> None:
    mode = "quick" if args.quick else "full"
    cfg = dict(CONFIGS[mode])
    for key in ("dataset", "epochs", "repeats"):
        if getattr(args, key):
            cfg[key] = getattr(args, key)
    root = Path(args.cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="lgd-full-batch-"))
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    load_start = os.getloadavg()

    print(f"[{mode}] loading {cfg['dataset']}", flush=True)
    data = load_dataset(cfg["dataset"])
    num_features, num_classes = data.x.size(1), int(data.y.max()) + 1
    widths = exchange_widths(num_features, num_classes)
    graph = {
        "spec": cfg["dataset"],
        "num_nodes": int(data.num_nodes),
        "num_edges": int(data.edge_index.size(1)),
        "num_features": num_features,
        "num_classes": num_classes,
        "train_vertices": int(data.train_mask.sum()),
    }
    print(f"  {graph['num_nodes']:,} vertices, {graph['num_edges']:,} edges", flush=True)
    dims = [num_features, HIDDEN, num_classes]
    t = time.perf_counter()
    partitions = build_stores(cfg, data, root, args.section)
    timings = {"partition": time.perf_counter() - t}
    json_path, md_path = out_dir / "full_batch.json", out_dir / "full_batch.md"
    if args.section == "c":
        del data
        report = json.loads(json_path.read_text())
        if report["mode"] != mode:
            raise SystemExit(f"{json_path} holds a {report['mode']!r} run; rerun all sections")
        print(f"(c) partitioners at {cfg['methods_world_size']} ranks", flush=True)
        t = time.perf_counter()
        report["c"] = section_c(cfg, root, workdir, widths, dims)
        report["partitions"].update(partitions)
        report["config"]["methods"] = cfg["methods"]
        report["section_wall_seconds"]["c"] = time.perf_counter() - t
        report["c_rerun"] = {
            "date": date,
            "command": shlex.join([Path(sys.executable).name, *sys.argv]),
            "load_average": {"start": load_start, "end": os.getloadavg()},
            "wall_seconds": time.perf_counter() - start,
        }
        json_path.write_text(json.dumps(report, indent=1))
        write_markdown(report, md_path)
        print(f"wrote {json_path} and {md_path} (section (c) only)", flush=True)
        return

    t = time.perf_counter()
    print("(a) GNNStrategy, 1 process vs plain PyG", flush=True)
    a = section_a(cfg, data, root, workdir)
    timings["a"] = time.perf_counter() - t
    print(
        f"  plain {a['plain_epoch_ms']:.1f} ms, plain cached {a['plain_cached_epoch_ms']:.1f} ms, "
        f"GNNStrategy {a['gnn_strategy_epoch_ms']:.1f} ms",
        flush=True,
    )
    del data  # the whole graph is not needed any more

    t = time.perf_counter()
    print("(b) p2p vs broadcast", flush=True)
    b = section_b(cfg, root, workdir, widths)
    timings["b"] = time.perf_counter() - t

    t = time.perf_counter()
    print(f"(c) partitioners at {cfg['methods_world_size']} ranks", flush=True)
    c = section_c(cfg, root, workdir, widths, dims)
    timings["c"] = time.perf_counter() - t

    t = time.perf_counter()
    print("(d) peak memory per rank", flush=True)
    d = section_d(cfg, root, workdir, partitions)
    timings["d"] = time.perf_counter() - t

    report = {
        "benchmark": "full_batch",
        "mode": mode,
        "date": date,
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "cwd": os.getcwd(),
        "machine": machine_info(),
        "load_average": {"start": load_start, "end": os.getloadavg()},
        "config": cfg,
        "model": {
            "kind": "gcn",
            "hidden_channels": HIDDEN,
            "num_layers": 2,
            "dropout": DROPOUT,
            "lr": LR,
            "weight_decay": WEIGHT_DECAY,
        },
        "graph": graph,
        "widths": widths,
        "partitions": partitions,
        "a": a,
        "b": b,
        "c": c,
        "d": d,
        "section_wall_seconds": timings,
        "wall_seconds": time.perf_counter() - start,
    }
    json_path.write_text(json.dumps(report, indent=1))
    write_markdown(report, md_path)
    print(f"wrote {json_path} and {md_path} ({report['wall_seconds']:.0f} s)", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small smoke configuration (< 1 min)")
    parser.add_argument("--dataset", help="override the dataset spec")
    parser.add_argument("--epochs", type=int, help="override epochs per fit (first is warm-up)")
    parser.add_argument("--repeats", type=int, help="override fits per configuration")
    parser.add_argument(
        "--cache-dir",
        default=os.path.join(tempfile.gettempdir(), "lightning_gnn_dist_bench"),
        help="partition store cache (default: %(default)s)",
    )
    parser.add_argument(
        "--out-dir", default=str(RESULTS), help="where the .json and .md go (default: %(default)s)"
    )
    parser.add_argument(
        "--section",
        choices=["all", "c"],
        default="all",
        help="'c': rerun only section (c) and keep the other sections of the existing results "
        "JSON in --out-dir (default: all)",
    )
    parser.add_argument(
        "--render", metavar="JSON", help="only rewrite the .md (next to JSON) from a results JSON"
    )
    # worker mode (internal)
    parser.add_argument(
        "--worker", choices=["single", "dist", "dist-stock"], help=argparse.SUPPRESS
    )
    parser.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--method", default="hypergraph", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
    elif args.render:
        json_path = Path(args.render)
        write_markdown(json.loads(json_path.read_text()), json_path.with_suffix(".md"))
    else:
        driver(args)


if __name__ == "__main__":
    main()

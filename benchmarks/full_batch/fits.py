"""Timed full-batch fits: stores built first, ``gnn_ddp_fork`` fits in interleaved rounds, bytes
checked against the partition's prediction. ``cost_model`` uses these fits too."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.common.fits import fit
from benchmarks.common.stores import build_store, prebuilt_datamodule, store_path
from benchmarks.full_batch.model import make_module
from benchmarks.harness import log, run_rounds
from lightning_gnn_dist.lightning.callbacks import CommunicationMonitor
from lightning_gnn_dist.lightning.strategy import GNNStrategy
from lightning_gnn_dist.partition.store import PartitionStore

#: A fit: ``(method[:vertex_weight], world size, exchange)``.
Key = tuple[str, int, str]


def median_ms(seconds: list[float]) -> float:
    return 1000.0 * statistics.median(seconds)


def build_stores(cfg: dict, data: Any, root: Path, needed: set[tuple[str, int]]) -> dict:
    """Partition (or reuse the cached store) for every ``(method, parts)``; their metrics."""
    info = {}
    for method, parts in sorted(needed, key=lambda mp: (mp[1], mp[0])):
        path = store_path(cfg["dataset"], root, method, parts)
        cached = path.exists()
        start = time.perf_counter()
        store = build_store(data, cfg["dataset"], root, method, parts)
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
        log(
            f"store {method} P={parts}: {'cached' if cached else 'built'} "
            f"({store.meta['seconds']:.1f} s partitioning)"
        )
    return info


def predicted_bytes(metrics: Any, exchange: str, widths: list[int]) -> int:
    """Bytes per epoch from the partition alone: sum over layers of forward + backward."""
    if exchange == "p2p":
        rows = int(metrics.send_rows.sum())  # backward moves the same rows back
    else:  # broadcast: each block to every peer forward, one partial block per peer backward
        rows = (metrics.num_parts - 1) * int(metrics.num_nodes)
    return sum(2 * rows * w * 4 for w in widths)


def fork_fit(cfg: dict, root: Path, key: Key, cpu_times: bool = True) -> dict:
    """One ``gnn_ddp_fork`` fit of ``key`` on its prebuilt store (see :func:`common.fits.fit`)."""
    name, world, exchange = key
    store = PartitionStore.open(store_path(cfg["dataset"], root, name, world))
    module = make_module(int(store.meta["num_features"]), int(store.meta["num_classes"]))
    datamodule = prebuilt_datamodule(cfg["dataset"], root, name, world)
    strategy = GNNStrategy(exchange=exchange, start_method="fork", timeout=600)
    return fit(
        module,
        datamodule,
        strategy,
        world,
        cfg["epochs"],
        monitor=CommunicationMonitor(),
        cpu_times=cpu_times,
        limit_val_batches=0,
    )


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


def _pool(cfg: dict, fits: list[dict]) -> dict:
    """A key's fits, warm-up epochs dropped: epochs pooled, per-fit lists kept for the ratios."""
    run: dict[str, Any] = {k: [] for k in ("epoch_seconds", "repeat_epoch_seconds", "wait_seconds",
                                            "fits", "rank_compute_seconds", "rank_wait_seconds",
                                            "rank_cpu_seconds")}  # fmt: skip
    for result in fits:
        epochs = traffic_per_epoch(result)
        if sorted(epochs) != list(range(cfg["epochs"])):
            raise RuntimeError(f"monitor rows for epochs {sorted(epochs)}, not {cfg['epochs']}")
        run["epoch_seconds"] += result["epoch_seconds"][1:]  # drop the warm-up epoch
        run["rank_compute_seconds"] += [r["compute_seconds"] for r in result["ranks"][1:]]
        run["rank_wait_seconds"] += [r["wait_seconds"] for r in result["ranks"][1:]]
        per_epoch = [list(e) for e in zip(*result["cpu_seconds"], strict=True)]
        run["rank_cpu_seconds"] += per_epoch[1:]  # [epoch][rank]
        run["repeat_epoch_seconds"].append(result["epoch_seconds"][1:])
        run["wait_seconds"] += [epochs[e]["wait"] for e in sorted(epochs)[1:]]
        run["fits"].append(
            {
                "epoch_seconds": result["epoch_seconds"],
                "fit_wall_seconds": result["fit_wall_seconds"],
                "bytes_per_epoch": sorted({(v["bytes"], v["predicted"]) for v in epochs.values()}),
            }
        )
    return run


def run_fits(cfg: dict, root: Path, widths: list[int], keys: list[Key], label: str) -> dict:
    """Fit every key in ``cfg["repeats"]`` interleaved rounds; pool each key's measured epochs;
    check that every epoch moved the bytes the partition predicts."""

    def progress(r: int, key: Key, result: dict) -> None:
        log(
            f"({label}) round {r + 1}: {key[0]} P={key[1]} {key[2]}: "
            f"{median_ms(result['epoch_seconds'][1:]):.1f} ms/epoch"
        )

    fits = run_rounds(
        {k: lambda r, k=k: fork_fit(cfg, root, k) for k in keys}, cfg["repeats"], progress
    )
    pooled = {}
    for (method, world, exchange), results in fits.items():
        run = _pool(cfg, results)
        seen = {tuple(pair) for f in run["fits"] for pair in f["bytes_per_epoch"]}
        if len(seen) != 1:
            raise RuntimeError(f"{method} P={world} {exchange}: bytes differ between epochs {seen}")
        measured, monitor_predicted = seen.pop()
        metrics = PartitionStore.open(store_path(cfg["dataset"], root, method, world)).metrics
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
        pooled[(method, world, exchange)] = run
    return pooled

"""The full-batch benchmark's run: stores, then sections (a)-(c), timed fits compared in
interleaved rounds, and (d) from :mod:`.memory`."""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

from benchmarks.common.fits import quiet
from benchmarks.common.stores import split_variant, store_path
from benchmarks.full_batch import CONFIGS
from benchmarks.full_batch.fits import build_stores, fork_fit, run_fits
from benchmarks.full_batch.memory import section_d
from benchmarks.full_batch.model import HIDDEN, MODEL, exchange_widths, make_module, plain_epochs
from benchmarks.harness import Run, log, pooled, ratio, run_rounds
from lightning_gnn_dist.costmodel import calibrate, predict_epoch
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.partition.store import PartitionStore
from lightning_gnn_dist.partition.weights import reference_costs


def section_a(cfg: dict, data: Any, root: Path) -> dict:
    """GNNStrategy with one process against the plain PyG loop (and its ``cached=True`` form),
    in at least two interleaved rounds; epoch seconds after the warm-up epoch."""
    module = make_module(data.x.size(1), int(data.y.max()) + 1)
    state = {k: v.clone() for k, v in module.model.state_dict().items()}
    variants = {
        "plain": lambda r: plain_epochs(data, state, cfg["epochs"])[1:],
        "plain_cached": lambda r: plain_epochs(data, state, cfg["epochs"], cached=True)[1:],
        "gnn_strategy": lambda r: fork_fit(cfg, root, ("random", 1, "p2p"))["epoch_seconds"][1:],
    }
    rounds = run_rounds(variants, max(2, cfg["repeats"]))
    ms = {name: 1000.0 * statistics.median(pooled(s)) for name, s in rounds.items()}
    over_plain = ratio(rounds["gnn_strategy"], rounds["plain"])
    cached_over_plain = ratio(rounds["plain_cached"], rounds["plain"])
    log(f"(a) plain {ms['plain']:.1f} ms, cached {ms['plain_cached']:.1f} ms, "
        f"GNNStrategy {ms['gnn_strategy']:.1f} ms")  # fmt: skip
    return {
        "ratio_gnn_strategy_over_plain_per_repeat": list(over_plain.per_round),
        "ratio_plain_cached_over_plain_per_repeat": list(cached_over_plain.per_round),
        "plain_epoch_ms": ms["plain"],
        "plain_cached_epoch_ms": ms["plain_cached"],
        "gnn_strategy_epoch_ms": ms["gnn_strategy"],
        "ratio_gnn_strategy_over_plain": over_plain.value,
        "ratio_plain_cached_over_plain": cached_over_plain.value,
        "ratio_gnn_strategy_over_plain_cached": ms["gnn_strategy"] / ms["plain_cached"],
        "epochs_measured": {name: len(pooled(s)) for name, s in rounds.items()},
        "epoch_seconds": {name: pooled(s) for name, s in rounds.items()},
    }


def section_b(cfg: dict, root: Path, widths: list[int]) -> list[dict]:
    """p2p against broadcast on the hypergraph partition at every world size."""
    rows = []
    for world in cfg["world_sizes"]:
        keys = [("hypergraph", world, "p2p"), ("hypergraph", world, "broadcast")]
        runs = run_fits(cfg, root, widths, keys, "b")
        p2p, bc = runs[keys[0]], runs[keys[1]]
        time_ratio = ratio(p2p["repeat_epoch_seconds"], bc["repeat_epoch_seconds"])
        rows.append(
            {
                "world_size": world,
                "p2p": p2p,
                "broadcast": bc,
                "bytes_ratio_p2p_over_broadcast": p2p["bytes_measured"] / bc["bytes_measured"],
                "time_ratio_p2p_over_broadcast": time_ratio.value,
                "time_ratio_p2p_over_broadcast_per_repeat": list(time_ratio.per_round),
            }
        )
    return rows


def max_over_mean(values: list[float]) -> float:
    return max(values) / statistics.mean(values)


def section_c(cfg: dict, root: Path, widths: list[int], dims: list[int]) -> list[dict]:
    """Every partition of ``cfg["methods"]`` at ``methods_world_size`` ranks, with ratios to
    random and to METIS (``metis:nnz``), per-rank timings, and the cost model's prediction
    (compute calibrated in this invocation, loopback network, the machine's cores)."""
    world = cfg["methods_world_size"]
    keys = [(method, world, "p2p") for method in cfg["methods"]]
    runs = run_fits(cfg, root, widths, keys, "c")
    costs = calibrate(dims)
    metrics = {
        key: PartitionStore.open(store_path(cfg["dataset"], root, key[0], world)).metrics
        for key in keys
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
        over_random = ratio(run["repeat_epoch_seconds"], ref["repeat_epoch_seconds"])
        row = {
            **run,
            "vertex_weight": split_variant(key[0])[1].get("vertex_weight", "–"),
            "time_ratio_over_random": over_random.value,
            "time_ratio_over_random_per_repeat": list(over_random.per_round),
            "bytes_ratio_over_random": run["bytes_measured"] / ref["bytes_measured"],
            "compute_max_over_mean": max_over_mean(run["rank_compute_seconds_ms"]),
            "cpu_max_over_mean": max_over_mean(run["rank_cpu_seconds_ms"]),
            "predicted_epoch_ms": 1000.0 * estimate.epoch_seconds,
            "predicted_compute_ms": (1000.0 * estimate.compute_seconds).tolist(),
            "predicted_compute_max_over_mean": max_over_mean(estimate.compute_seconds.tolist()),
            "predicted_ratio_over_random": estimate.epoch_seconds / ref_pred.epoch_seconds,
            "dedicated_predicted_ratio_over_random": dedicated[key]
            / dedicated[("random", world, "p2p")],
            "cpu_max_ratio_over_random": max(run["rank_cpu_seconds_ms"])
            / max(ref["rank_cpu_seconds_ms"]),
        }
        if gp is not None:
            over_metis = ratio(run["repeat_epoch_seconds"], gp["repeat_epoch_seconds"])
            row["time_ratio_over_metis"] = over_metis.value
            row["time_ratio_over_metis_per_repeat"] = list(over_metis.per_round)
            row["cpu_max_ratio_over_metis"] = max(run["rank_cpu_seconds_ms"]) / max(
                gp["rank_cpu_seconds_ms"]
            )
            row["dedicated_predicted_ratio_over_metis"] = (
                dedicated[key] / dedicated[("metis:nnz", world, "p2p")]
            )
        rows.append(row)
    return rows


def _stores_needed(cfg: dict, r: Run) -> set[tuple[str, int]]:
    needed = {(m, cfg["methods_world_size"]) for m in cfg["methods"]} if r.wants("c") else set()
    if r.wants("a"):
        needed.add(("random", 1))
    if r.wants("b"):
        needed |= {("hypergraph", p) for p in cfg["world_sizes"]}
    if r.wants("d"):
        needed |= {("hypergraph", p) for p in cfg["memory_world_sizes"]}
    return needed


def run(r: Run) -> None:
    """The sections ``r`` selects, after building (or reusing) the stores they need."""
    quiet()
    mode = "quick" if r.quick else "full"
    cfg = dict(CONFIGS[mode], repeats=r.repeats)
    cfg.update({k: getattr(r.args, k) for k in ("dataset", "epochs") if getattr(r.args, k)})
    root = r.cache_dir
    log(f"[{mode}] loading {cfg['dataset']}")
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
    r.report.update(mode=mode, config=cfg, model=MODEL, graph=graph, widths=widths)
    with r.section("partition"):
        partitions = build_stores(cfg, data, root, _stores_needed(cfg, r))
    r.report.setdefault("partitions", {}).update(partitions)
    if r.wants("a"):
        with r.section("a"):
            r.report["a"] = section_a(cfg, data, root)
    del data  # the whole graph is not needed any more
    if r.wants("b"):
        with r.section("b"):
            r.report["b"] = section_b(cfg, root, widths)
    if r.wants("c"):
        with r.section("c"):
            r.report["c"] = section_c(cfg, root, widths, [num_features, HIDDEN, num_classes])
    if r.wants("d"):
        with r.section("d"):
            r.report["d"] = section_d(cfg, root, r.report["partitions"])

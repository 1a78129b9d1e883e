"""Ratios, shares, targets and cost-model predictions from the workers' records (stored in the
report; :mod:`.render` reads only the report)."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from benchmarks.harness import ratio
from lightning_gnn_dist.costmodel import ComputeCosts, Network, predict_epoch
from lightning_gnn_dist.partition.store import PartitionStore
from lightning_gnn_dist.testing.cluster import parse_rate

#: (label, variant, baseline): the epoch-time ratios of the report.
COMPARISONS = [
    ("p2p ÷ broadcast (hypergraph)", "p2p/hypergraph", "broadcast/hypergraph"),
    ("hypergraph ÷ random (p2p)", "p2p/hypergraph", "p2p/random"),
    ("hypergraph ÷ METIS (p2p)", "p2p/hypergraph", "p2p/metis"),
    ("METIS ÷ random (p2p)", "p2p/metis", "p2p/random"),
    ("cached epoch-fixed 1 ÷ exact p2p", "cached/epoch-fixed-1", "p2p/hypergraph"),
    ("cached epoch-adaptive 3 ÷ exact p2p", "cached/epoch-adaptive-3", "p2p/hypergraph"),
    ("cached variation-gap 0.1 ÷ exact p2p", "cached/variation-gap-0.1", "p2p/hypergraph"),
    ("cd-5 ÷ cd-0", "cd-5", "cd-0"),
    ("0c ÷ cd-0", "0c", "cd-0"),
    ("rdm ÷ p2p (hypergraph)", "rdm/hypergraph", "p2p/hypergraph"),
]
#: (label, variant, baseline, largest ratio): the issue's targets, checked at the bandwidth
#: where the exchange is at least 30 % of a random partition's epoch.
TARGETS = [
    ("hypergraph ≤ 0.85 × random", "p2p/hypergraph", "p2p/random", 0.85),
    ("hypergraph ≤ 0.95 × METIS", "p2p/hypergraph", "p2p/metis", 0.95),
    ("p2p ≤ 0.5 × broadcast", "p2p/hypergraph", "broadcast/hypergraph", 0.5),
    ("cached (epoch-fixed 1) ≤ 0.7 × exact epoch", "cached/epoch-fixed-1", "p2p/hypergraph", 0.7),
    ("cd-5 ≤ 0.7 × cd-0", "cd-5", "cd-0", 0.7),
]
#: Variants the cost model predicts (the exact full-batch modes it covers).
MODELLED = {"p2p/hypergraph", "broadcast/hypergraph", "p2p/metis", "p2p/random", "rdm/hypergraph"}
SHARE_TARGET = 0.30


def _bw(bandwidth: str | None) -> str:
    return bandwidth or "unshaped"


def _fit_mean(record: dict, warmup: int) -> float:
    """Mean epoch seconds of a fit after the warm-up (means, not medians: cached and cd-r
    alternate cheap and dear epochs)."""
    return float(np.mean(record["epoch_seconds"][warmup:]))


def _ratio(values: dict[int, float], base: dict[int, float]) -> dict[str, Any] | None:
    """The harness's ratio of two variants' per-fit means (one sample per round)."""
    rounds = sorted(set(values) & set(base))
    if not rounds:
        return None
    return ratio([[values[r]] for r in rounds], [[base[r]] for r in rounds]).as_dict()


def analyse_topology(records: list[dict], plan: dict, warmup: int, nodes: int) -> dict:
    """Per bandwidth: each variant's epoch, bytes and time split; the ratios; the random
    partition's exchange share; projected epochs; the targets; predicted ÷ measured."""
    fits = [r for r in records if r["kind"] == "fit" and not r["accuracy"]]
    costs = _costs(next(r for r in records if r["kind"] == "calibration")["costs"])
    probes = {_bw(r["bandwidth"]): r for r in records if r["kind"] == "probe"}
    epoch: dict[str, dict[str, dict[int, float]]] = {}
    cpu: dict[str, dict[str, dict[int, float]]] = {}
    fit_costs: dict[str, dict[str, dict[int, ComputeCosts]]] = {}
    detail: dict[str, dict[str, list[dict]]] = {}
    for record in fits:
        bw, name = _bw(record["bandwidth"]), record["variant"]
        epoch.setdefault(bw, {}).setdefault(name, {})[record["round"]] = _fit_mean(record, warmup)
        rows = detail.setdefault(bw, {}).setdefault(name, [])
        rows.append(_fit_detail(record, warmup))
        cpu.setdefault(bw, {}).setdefault(name, {})[record["round"]] = rows[-1]["cpu_max"]
        if record.get("costs"):
            by_round = fit_costs.setdefault(bw, {}).setdefault(name, {})
            by_round[record["round"]] = _costs(record["costs"])
    result: dict[str, Any] = {"costs": vars(costs), "cells": {}}
    for bw in epoch:
        cell: dict[str, Any] = {"epoch": {}, "ratios": {}, "detail": {}}
        for name, by_round in epoch[bw].items():
            cell["epoch"][name] = statistics.median(by_round.values())
            cell["detail"][name] = _merge(detail[bw][name])
        for label, variant, baseline in COMPARISONS:
            if variant in epoch[bw] and baseline in epoch[bw]:
                cell["ratios"][label] = _ratio(epoch[bw][variant], epoch[bw][baseline])
        random = cell["detail"].get("p2p/random", {})
        if "wait_share" in random:
            cell["random_wait_share"] = random["wait_share"]
        free = epoch.get("unshaped", {}).get("p2p/random")
        if free and "p2p/random" in epoch[bw]:
            cell["random_exchange_share"] = 1 - statistics.median(
                free.values()
            ) / statistics.median(epoch[bw]["p2p/random"].values())
        _project(cell, bw, epoch, cpu)
        probe = probes.get(bw)
        if probe is not None and probe["levels"].get("inter_node"):
            network = Network.from_probe(probe)  # one-way and duplex bandwidth, latency
            cell["network"] = vars(network)
            cell["predicted"] = _predict(plan, epoch[bw], fit_costs.get(bw, {}), network)
            random_prediction = cell["predicted"].get("p2p/random")
            if random_prediction is not None:  # transfer time of its exact bytes on the link
                cell["random_transfer_share"] = (
                    random_prediction["comm"] / cell["epoch"]["p2p/random"]
                )
        result["cells"][bw] = cell
    _anchor(result["cells"])
    result["comparisons"] = {variant: label for label, variant, _ in COMPARISONS}
    result["accuracy"] = {
        r["variant"]: r["test_acc"] for r in records if r["kind"] == "fit" and r["accuracy"]
    }
    result["targets"] = _targets(result, "random_transfer_share", "ratios")
    result["projected_targets"] = _targets(result, "projected_random_share", "projected_ratios")
    return result


def _fit_detail(record: dict, warmup: int) -> dict:
    d: dict[str, Any] = {
        "cpu_max": float(np.max([np.mean(c[warmup:]) for c in record["cpu_seconds"]])),
        "fetch_share": float(
            np.mean(
                [
                    np.sum(f[warmup:]) / max(1e-12, np.sum(record["epoch_seconds"][warmup:]))
                    for f in record["fetch_seconds"]
                ]
            )
        ),
        "load": record["load_average"],
    }
    if "bytes" in record:
        d["bytes"] = float(np.mean(record["bytes"][warmup:]))
        d["predicted_bytes"] = float(np.mean(record["predicted_bytes"][warmup:]))
        # the cached modes' prediction is their exact base's: skipped rounds move less
        exact = not record["variant"].startswith("cached")
        d["exact_match"] = record["bytes"] == record["predicted_bytes"] if exact else None
        d["compute_max"] = float(np.mean([max(c) for c in record["compute_seconds"][warmup:]]))
        d["wait_max"] = float(np.mean([max(w) for w in record["wait_seconds"][warmup:]]))
        d["wait_share"] = d["wait_max"] / float(np.mean(record["epoch_seconds"][warmup:]))
    return d


def _merge(fits: list[dict]) -> dict:
    merged: dict[str, Any] = {}
    for key in fits[0]:
        values = [f[key] for f in fits]
        if key == "exact_match":
            merged[key] = None if None in values else all(values)
        elif key == "load":
            merged[key] = [min(v[0] for v in values), max(v[1] for v in values)]
        else:
            merged[key] = statistics.median(values)
    return merged


def _costs(per_rank: list[dict]) -> ComputeCosts:
    """The median over ranks of each calibrated cost."""
    return ComputeCosts(**{k: statistics.median(c[k] for c in per_rank) for k in per_rank[0]})


def _predict(plan, epoch: dict, costs: dict, network: Network) -> dict[str, dict]:
    """Per modelled variant: each fit predicted with the compute costs calibrated just before
    it and the probed network of the link; predicted ÷ measured per round. No ``cores``: the
    costs were calibrated on every rank at once, so where two nodes share a core (4 nodes)
    they already include the sharing (scaling them by P / cores again doubled the compute)."""
    dims = plan["dims"]
    predicted = {}
    for name in MODELLED & set(costs) & set(epoch):
        variant = plan["variants"][name]
        metrics = PartitionStore.open(plan["stores"][variant["method"]]).metrics
        estimates = {
            r: predict_epoch(metrics, dims, c, network, variant["strategy"]["exchange"])
            for r, c in costs[name].items()
            if r in epoch[name]
        }
        seconds = {r: e.epoch_seconds for r, e in estimates.items()}
        if not seconds:
            continue
        predicted[name] = {
            "seconds": statistics.median(seconds.values()),
            "compute": statistics.median(
                float(e.compute_seconds.max()) for e in estimates.values()
            ),
            "comm": statistics.median(float(e.comm_seconds.max()) for e in estimates.values()),
            **_ratio(seconds, epoch[name]),
        }
    return predicted


def _project(cell: dict, bw: str, epoch: dict, cpu: dict) -> None:
    """The epoch on a node that nobody else's work slows down, per round: the slowest rank's
    CPU seconds (its own work) + what the link added (the epoch on the link − unshaped, ≥ 0).
    On a shared machine the wall-clock compute also counts time waiting for a core."""
    free = epoch.get("unshaped", {})
    projected: dict[str, dict[int, float]] = {}
    for name, by_round in epoch[bw].items():
        rounds = set(by_round) & set(free.get(name, {})) & set(cpu[bw][name])
        projected[name] = {
            r: cpu[bw][name][r] + max(0.0, by_round[r] - free[name][r]) for r in rounds
        }
    cell["projected"] = {n: statistics.median(v.values()) for n, v in projected.items() if v}
    cell["projected_ratios"] = {}
    for label, variant, baseline in COMPARISONS:
        if projected.get(variant) and projected.get(baseline):
            cell["projected_ratios"][label] = _ratio(projected[variant], projected[baseline])
    random = projected.get("p2p/random")
    if random and bw != "unshaped":
        added = [random[r] - cpu[bw]["p2p/random"][r] for r in random]
        cell["projected_random_share"] = statistics.median(added) / statistics.median(
            random.values()
        )


def _anchor(cells: dict) -> None:
    """The network part of the model alone: the measured unshaped epoch plus the predicted
    extra communication time of the link (predicted comm at the link − at the unshaped one)."""
    free = cells.get("unshaped", {})
    for bw, cell in cells.items():
        for name, p in cell.get("predicted", {}).items():
            base = free.get("predicted", {}).get(name)
            if bw == "unshaped" or base is None:
                continue
            p["anchored_seconds"] = free["epoch"][name] + p["comm"] - base["comm"]
            p["anchored_ratio"] = p["anchored_seconds"] / cell["epoch"][name]


def _targets(result: dict, share_key: str, ratios_key: str) -> dict:
    """The bandwidth where the exchange is ≥ 30 % of random's epoch (the fastest such link; the
    share is the transfer time of the random partition's exact bytes on the probed link ÷ its
    measured epoch, or projected: see :func:`_project`), and each target there."""
    shaped = [
        (bw, c[share_key])
        for bw, c in result["cells"].items()
        if bw != "unshaped" and share_key in c
    ]
    shaped.sort(key=lambda item: -parse_rate(item[0]))  # fastest link first
    eligible = [bw for bw, share in shaped if share >= SHARE_TARGET]
    chosen = eligible[0] if eligible else (max(shaped, key=lambda x: x[1])[0] if shaped else None)
    checks = []
    if chosen is not None:
        ratios = result["cells"][chosen][ratios_key]
        labels = {(v, b): label for label, v, b in COMPARISONS}
        for label, variant, baseline, limit in TARGETS:
            match = ratios.get(labels[(variant, baseline)])
            if match is not None:
                checks.append(
                    {"target": label, "ratio": match["ratio"], "met": match["ratio"] <= limit}
                )
    return {"bandwidth": chosen, "checks": checks}

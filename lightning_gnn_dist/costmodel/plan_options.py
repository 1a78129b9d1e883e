"""``GraphPartitionDataModule(method="auto", plan_options=...)``: the options of the automatic plan
(:mod:`.plan`), checked when the datamodule is built. Each check raises one ``ValueError`` naming
the option, the value and what to give instead."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from lightning_gnn_dist.costmodel.network import NETWORKS, Network, TwoLevelNetwork
from lightning_gnn_dist.costmodel.plan import (
    AUTO_METHODS,
    EXACT_EXCHANGES,
    MULTI_NODE_EXCHANGES,
    STALE_EXCHANGES,
    resolve_network,
    split_label,
)
from lightning_gnn_dist.partition.placement import Topology
from lightning_gnn_dist.partition.work import ComputeCosts, gcn_layers
from lightning_gnn_dist.utils.checks import check_bool, check_int, check_number

PLAN_OPTIONS = (
    "widths",
    "network",
    "allow_stale",
    "methods",
    "exchanges",
    "costs",
    "cores",
    "top_k",
    "timed_steps",
)
"""Keys of ``GraphPartitionDataModule(plan_options=...)`` (see :func:`check_plan_options`)."""


def check_plan_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate ``plan_options`` (a copy is returned).

    Keys: ``widths`` (required: the GCN's ``[d_0, ..., d_L]``, integers in ``[1,
    MAX_WIDTH]``), ``network`` (a preset name, a :class:`Network`, its dictionary, or a path to
    ``probe --json`` output; default ``"loopback"``; on several nodes also a
    :class:`TwoLevelNetwork` or its dictionary, see :func:`~.plan.resolve_network`; positive,
    finite rates), ``allow_stale`` (``True`` or ``False``; default ``False``), ``methods``
    (vertex partition methods, optionally ``method/placement``, each once, or one name; default
    :data:`~.plan.AUTO_METHODS`), ``exchanges`` (default: every mode that applies), ``costs`` (a
    :class:`ComputeCosts` or its dictionary, finite seconds >= 0; default:
    :func:`~.calibrate.calibrate` now), ``cores`` (cores the ranks share on one machine, >= 1;
    default: one per rank), ``top_k`` (time the best ``top_k`` predictions for ``timed_steps``
    steps on every rank in ``setup`` and keep the fastest, see :mod:`.timing`; default ``3``;
    ``0``: the model decides alone) and ``timed_steps`` (default ``3``).

    Raises:
        ValueError: an unknown key (the valid ones are listed), no ``widths``, or a bad value
            (the message names the option and the value).
    """
    if options is not None and not isinstance(options, Mapping):
        raise ValueError(
            f"plan_options must be a dictionary like {{'widths': [64, 16, 10]}} (got {options!r})"
        )
    options = dict(options or {})
    unknown = sorted(set(options) - set(PLAN_OPTIONS))
    if unknown:
        raise ValueError(f"unknown plan option(s) {unknown}; valid: {', '.join(PLAN_OPTIONS)}")
    if "widths" not in options:
        raise ValueError(
            "method='auto' needs the model's layer widths to predict epochs: "
            "plan_options={'widths': [d_0, ..., d_L]} (e.g. [num_features, 16, num_classes])"
        )
    options["widths"] = _check_widths(options["widths"])
    options.setdefault("network", "loopback")
    _check_network(options["network"])
    options["allow_stale"] = check_bool(
        "plan option allow_stale", options.get("allow_stale", False)
    )
    options["methods"] = _check_methods(options.get("methods", AUTO_METHODS))
    menu = EXACT_EXCHANGES + STALE_EXCHANGES
    exchanges = options.get("exchanges")
    if exchanges is not None:
        exchanges = [exchanges] if isinstance(exchanges, str) else exchanges
        if not isinstance(exchanges, Sequence):
            raise ValueError(
                f"plan option exchanges={exchanges!r}: give a list of exchange modes, e.g. "
                "['p2p', 'rdm']"
            )
        exchanges = list(exchanges)
        bad = [e for e in exchanges if e not in menu + MULTI_NODE_EXCHANGES]
        if bad or not exchanges:
            raise ValueError(
                f"plan exchanges {exchanges}: choose among {', '.join(menu)} (on several nodes "
                f"also {', '.join(MULTI_NODE_EXCHANGES)})"
            )
        stale = [e for e in exchanges if e in STALE_EXCHANGES]
        if stale and not options["allow_stale"]:
            raise ValueError(
                f"exchange {stale[0]!r} trains on stale rows; pass allow_stale=True to let the "
                "plan trade accuracy for time"
            )
        options["exchanges"] = exchanges
    for key, low in (("top_k", 0), ("timed_steps", 1)):
        value = options.get(key, 3)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"plan option {key}={value!r}: give an integer >= {low}")
        options[key] = value
    if options.get("cores") is not None:
        options["cores"] = check_int("plan option cores", options["cores"], 1)
    if options.get("costs") is not None:
        options["costs"] = _check_costs(options["costs"])
    return options


MAX_WIDTH = 2**24
"""The widest layer a plan takes (16,777,216 columns): a wider ``widths`` entry is a typo."""


def _check_widths(widths: Any) -> list[int]:
    """``widths`` as a list of at least two integers in ``[1, MAX_WIDTH]``."""
    if isinstance(widths, str | bytes) or not isinstance(widths, Sequence):
        raise ValueError(
            f"plan option widths={widths!r}: give the GCN's layer widths as a list of integers "
            "[d_0, ..., d_L], e.g. [num_features, 16, num_classes]"
        )
    checked = [check_int(f"plan option widths[{i}]", d, 1, MAX_WIDTH) for i, d in enumerate(widths)]
    gcn_layers(checked)  # at least two widths
    return checked


def _check_methods(methods: Any) -> list[str]:
    """``methods`` (partition labels, or one as a string) as a non-empty list of vertex
    partitions of known methods and placements."""
    from lightning_gnn_dist.partition import PARTITIONERS  # importing registers every method

    if isinstance(methods, str):
        methods = [methods]
    if not isinstance(methods, Sequence) or not methods:
        raise ValueError(
            f"plan option methods={methods!r}: give a non-empty list of partition methods, "
            f"e.g. {list(AUTO_METHODS)}"
        )
    vertex = sorted(m for m, cls in PARTITIONERS.items() if cls.kind == "vertex")
    for label in methods:
        if not isinstance(label, str):
            raise ValueError(
                f"plan option methods: {label!r} is not a method name; choose among "
                f"{', '.join(vertex)}"
            )
        method, placement = split_label(label)
        if method not in PARTITIONERS:
            raise ValueError(
                f"plan option methods: unknown partition method {method!r}; choose among "
                f"{', '.join(vertex)}"
            )
        if PARTITIONERS[method].kind != "vertex":
            raise ValueError(
                f"plan option methods: {method!r} makes a {PARTITIONERS[method].kind} "
                f"partition; the plan's candidates are vertex partitions ({', '.join(vertex)})"
            )
    if len(set(methods)) != len(methods):
        raise ValueError(f"plan option methods={list(methods)} names a method twice")
    return list(methods)


def _check_network(network: Any) -> None:
    """Refuse a ``network`` that :func:`resolve_network` cannot read, or whose rates are not
    positive and finite."""
    kinds = (str, os.PathLike, Mapping, Network, TwoLevelNetwork)
    if not isinstance(network, kinds):
        raise ValueError(
            f"plan option network={network!r}: give a preset ({', '.join(sorted(NETWORKS))}), "
            "a file written by `python -m lightning_gnn_dist probe --json FILE`, a Network or "
            "its dictionary"
        )
    try:
        resolved = resolve_network(network, Topology(2, 2))  # every level it holds
    except (KeyError, TypeError, ValueError) as error:
        if isinstance(error, ValueError) and "neither a preset" in str(error):
            raise
        what = f"missing key {error}" if isinstance(error, KeyError) else str(error)
        raise ValueError(
            f"plan option network={network!r}: {what}; a network dictionary has "
            "bandwidth_bytes_per_s and latency_s (or intra_node and inter_node, each one)"
        ) from None
    levels = (
        (resolved.intra_node, resolved.inter_node)
        if isinstance(resolved, TwoLevelNetwork)
        else (resolved,)
    )
    for level in levels:
        rates = (level.bandwidth_bytes_per_s, level.duplex_bandwidth)
        if not all(math.isfinite(r) and r > 0 for r in rates) or not (
            math.isfinite(level.latency_s) and level.latency_s >= 0
        ):
            raise ValueError(
                f"plan option network={network!r}: bandwidths must be positive and finite "
                "bytes/s and the latency finite seconds >= 0"
            )


def _check_costs(costs: Any) -> ComputeCosts:
    """``costs`` (a :class:`ComputeCosts` or its dictionary) with finite seconds >= 0."""
    names = [f.name for f in fields(ComputeCosts)]
    if isinstance(costs, Mapping):
        unknown = sorted(set(costs) - set(names))
        if unknown:
            raise ValueError(
                f"plan option costs: unknown key {unknown[0]!r}; valid: {', '.join(names)}"
            )
        missing = [n for n in ("aggregate_seconds", "dense_seconds") if n not in costs]
        if missing:
            raise ValueError(
                f"plan option costs: {missing[0]!r} is missing; give at least "
                "aggregate_seconds and dense_seconds (or leave costs out to calibrate)"
            )
        costs = ComputeCosts(**costs)
    if not isinstance(costs, ComputeCosts):
        raise ValueError(
            f"plan option costs={costs!r}: give a ComputeCosts or its dictionary "
            f"({', '.join(names)}), or leave it out to calibrate"
        )
    for name in names:
        check_number(f"plan option costs.{name}", getattr(costs, name), 0)
    return costs

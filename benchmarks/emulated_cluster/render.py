"""The markdown of the emulated-cluster benchmark (reads only the report)."""

from __future__ import annotations

from typing import Any

from benchmarks.harness import markdown_table, ratio_cell
from lightning_gnn_dist.testing.cluster import parse_rate


def _table(header: list[str], rows: list[list[Any]]) -> str:
    """Rows of preformatted cells as the harness's markdown table."""
    return markdown_table(
        [dict(zip(header, map(str, row), strict=True)) for row in rows],
        header,
        formats={column: str for column in header},
    )


def _ratio_cell(ratio: dict | None) -> str:
    return "–" if ratio is None else ratio_cell(ratio["ratio"], ratio["per_round"])


def _nominal_bytes(bw: str) -> float | None:
    return None if bw == "unshaped" else parse_rate(bw) / 8


def render(report: dict) -> str:
    title = "# Emulated cluster: communication measured where it costs time\n"
    if "skipped" in report:
        return f"{title}\nNot measured: {report['skipped']}.\n"
    config = report["config"]
    dims = next(iter(report["topologies"].values()))["plan"]["dims"] if report["topologies"] else []
    out = [
        title,
        f"Graph `{config['dataset']}`; model GCN {dims} (hidden 16, dropout 0.5, Adam 0.01), one "
        f"full-batch step per epoch; each fit {config['warmup']} warm-up + {config['epochs']} "
        f"measured epochs (mean epoch time per fit), {report['rounds']} interleaved round(s): a "
        "ratio is the variant's median epoch over rounds ÷ the baseline's, in parentheses its "
        "range over rounds. Nodes are network namespaces on a virtual switch (`python -m "
        "lightning_gnn_dist emulate`), each link shaped with `tbf` in both directions, each "
        "node pinned to one core (4 nodes share the 2 cores: each computes at about half a "
        "core); the link rate changes between blocks of the same processes. Scaling: a cluster "
        "node computes ~N× faster than one core here (N ≈ 32–64), so B Gbit/s between real "
        "nodes ≈ B/N Gbit/s here: 100 Gbit/s InfiniBand ≈ 1.5–3 Gbit/s, 10–25 Gbit/s Ethernet "
        "≈ 150–800 Mbit/s. 'unshaped' is the bare veth link (memory speed): the epoch without "
        "a network cost.\n",
    ]
    for nodes, topology in report["topologies"].items():
        out.append(_topology(int(nodes), topology["analysis"]))
    return "\n".join(out)


def _topology(nodes: int, result: dict) -> str:
    cells = result["cells"]
    bws = sorted(cells, key=lambda bw: -(_nominal_bytes(bw) or float("inf")))
    shaped = [bw for bw in bws if bw != "unshaped"]
    variants = list(next(iter(cells.values()))["epoch"])
    parts = [f"## {nodes} nodes × 1 rank\n"]
    rows = []
    for bw in bws:
        net = cells[bw].get("network")
        nominal = _nominal_bytes(bw)
        rows.append(
            [
                bw,
                f"{net['bandwidth_bytes_per_s'] / 1e6:.1f}" if net else "–",
                f"{net['bandwidth_bytes_per_s'] / nominal:.2f}" if net and nominal else "–",
                f"{net['latency_s'] * 1e6:.0f}" if net else "–",
                _duplex(net),
            ]
        )
    parts.append(
        "**Network probe** (`python -m lightning_gnn_dist probe` inside the cluster: gloo "
        "ping-pong between nodes, fitted latency + bytes / bandwidth; duplex = the all-to-all's "
        "bandwidth per rank, every link busy both ways, ÷ the ping-pong's):\n\n"
        + _table(["link", "fitted MB/s", "÷ nominal", "latency (µs)", "duplex MB/s"], rows)
    )
    rows = []
    for name in variants:
        row = [name]
        for bw in bws:
            epoch = cells[bw]["epoch"].get(name)
            row.append(f"{epoch * 1e3:.0f}" if epoch is not None else "–")
        detail = cells[bws[0]]["detail"].get(name, {})
        row.append(f"{detail['bytes'] / 1e6:.2f}" if "bytes" in detail else "–")
        match = [cells[bw]["detail"].get(name, {}).get("exact_match") for bw in bws]
        row.append("–" if None in match else ("yes" if all(match) else "**no**"))
        rows.append(row)
    parts.append(
        "**Epoch time (ms)** per link, and halo bytes per epoch (all ranks; measured by "
        "`CommunicationMonitor`, = predicted from the partition; the cached modes are predicted "
        "as their exact base, which they undercut, so '–'):\n\n"
        + _table(["variant", *bws, "MB / epoch", "measured = predicted"], rows)
    )

    def share(key: str) -> list[str]:
        return [f"{cells[bw][key] * 100:.0f} %" if key in cells[bw] else "–" for bw in shaped]

    rows = [
        ["random: transfer time ÷ epoch", *share("random_transfer_share")],
        ["random: exchange wait ÷ epoch", *share("random_wait_share")],
        ["random: 1 − unshaped epoch ÷ epoch", *share("random_exchange_share")],
    ]
    labels = list(next(iter(cells.values()))["ratios"])
    for label in labels:
        rows.append([label] + [_ratio_cell(cells[bw]["ratios"].get(label)) for bw in shaped])
    parts.append(
        "**Epoch-time ratios.** The first rows give the exchange's share of the random "
        "partition's epoch on each link, three ways: the transfer time of its exact bytes at "
        "the probed bandwidth (the cost model's communication term) ÷ its measured epoch (the "
        "share the targets use); the slowest rank's measured exchange wait ÷ the epoch (which "
        "also counts waiting for a peer that a busy core holds up); 1 − its unshaped epoch ÷ "
        "its epoch on the link (fits minutes apart, so the machine's load moves it):\n\n"
        + _table(["", *shaped], rows)
    )
    targets = result["targets"]
    if targets["bandwidth"] is not None:
        parts.append(_targets_table(targets, "measured epochs"))
        parts.append(_where_the_time_went(cells[targets["bandwidth"]], targets["bandwidth"]))
    rows = [
        ["exchange share of random's projected epoch"]
        + [
            f"{cells[bw]['projected_random_share'] * 100:.0f} %"
            if "projected_random_share" in cells[bw]
            else "–"
            for bw in shaped
        ]
    ]
    for label in labels:
        rows.append(
            [label]
            + [_ratio_cell(cells[bw].get("projected_ratios", {}).get(label)) for bw in shaped]
        )
    parts.append(
        "**Projected to an unshared node.** On this shared machine the ranks' wall-clock compute "
        "also counts the time they wait for a core that other people's work holds (the CPU "
        "column above). Projected epoch = the slowest rank's CPU seconds (its own work) + what "
        "the link added to the epoch (epoch on the link − unshaped epoch, same round): the "
        "epoch a node would have with its core to itself. Ratios of projected epochs, per round "
        "as above:\n\n" + _table(["", *shaped], rows)
    )
    projected = result.get("projected_targets", {})
    if projected.get("bandwidth") is not None:
        parts.append(_targets_table(projected, "projected epochs"))
    parts.append(_cached(result, cells, targets["bandwidth"]))
    parts.append(_neighbor(cells, bws))
    parts.append(_cost_model(cells, shaped, bws))
    return "\n".join(parts)


def _targets_table(targets: dict, what: str) -> str:
    rows = [
        [c["target"], f"{c['ratio']:.2f}", "**yes**" if c["met"] else "**no**"]
        for c in targets["checks"]
    ]
    return (
        f"**Targets, {what}**, at {targets['bandwidth']} (the fastest link where the exchange "
        "takes ≥ 30 % of random's epoch, or the link where it takes most):\n\n"
        + _table(["target", "ratio", "met"], rows)
    )


def _where_the_time_went(cell: dict, bw: str) -> str:
    rows = []
    for name, d in cell["detail"].items():
        if "compute_max" not in d:
            continue
        rows.append(
            [
                name,
                f"{cell['epoch'][name] * 1e3:.0f}",
                f"{d['compute_max'] * 1e3:.0f}",
                f"{d['wait_max'] * 1e3:.0f}",
                f"{d['cpu_max'] * 1e3:.0f}",
                f"{d['bytes'] / 1e6:.2f}",
                f"{d['load'][0]:.1f}–{d['load'][1]:.1f}",
            ]
        )
    return (
        f"**Where the time went** at {bw} (slowest rank, means over measured epochs; compute = "
        "training step minus exchange wait, so it includes the gradient all-reduce and waiting "
        "for a slower peer; CPU = process CPU time of the epoch):\n\n"
        + _table(
            [
                "variant",
                "epoch ms",
                "compute ms",
                "exchange wait ms",
                "CPU ms",
                "MB / epoch",
                "load",
            ],
            rows,
        )
    )


def _cached(result: dict, cells: dict, bw: str | None) -> str:
    accuracy = result.get("accuracy", {})
    exact_acc = accuracy.get("p2p/hypergraph")
    cell = cells.get(bw or "unshaped", {})
    exact = cell.get("detail", {}).get("p2p/hypergraph", {})
    rows = []
    for name, acc in accuracy.items():
        d = cell.get("detail", {}).get(name, {})
        avoided = 1 - d["bytes"] / exact["bytes"] if "bytes" in d and exact.get("bytes") else None
        label = result.get("comparisons", {}).get(name)
        ratio = cell["ratios"].get(label) if label else None
        rows.append(
            [
                name,
                "–" if avoided is None else f"{avoided * 100:.0f} %",
                _ratio_cell(ratio) if ratio else "1",
                f"{acc:.4f}" if acc is not None else "–",
                f"{(acc - exact_acc) * 100:+.2f}" if None not in (acc, exact_acc) else "–",
            ]
        )
    return (
        f"**cached (SANCUS) against exact p2p** (hypergraph partition; epoch ratio at {bw}; test "
        "accuracy after the accuracy fits, exact evaluation):\n\n"
        + _table(["variant", "bytes avoided", "epoch ÷ exact", "test acc", "Δ points"], rows)
    )


def _neighbor(cells: dict, bws: list[str]) -> str:
    rows = []
    for bw in bws:
        d = cells[bw]["detail"].get("neighbor/metis")
        if d is not None:
            epoch = cells[bw]["epoch"]["neighbor/metis"]
            rows.append([bw, f"{epoch * 1e3:.0f}", f"{d['fetch_share'] * 100:.0f} %"])
    if not rows:
        return ""
    return (
        "**Neighbour mini-batch loader** (METIS, `examples/neighbor_sage.py`'s GraphSAGE, hidden "
        "64, fan-out [10, 5], 512 seeds per step and rank, 8 steps per epoch): remote share = seconds in the loader's remote exchanges "
        "(sampling requests and feature fetches) ÷ epoch, mean over ranks:\n\n"
        + _table(["link", "epoch ms", "remote share"], rows)
    )


def _duplex(net: dict | None) -> str:
    duplex = (net or {}).get("duplex_bandwidth_bytes_per_s")
    if not duplex:
        return "–"
    return f"{duplex / 1e6:.1f} ({duplex / net['bandwidth_bytes_per_s']:.2f})"


def _cost_parts(cells: dict, shaped: list[str]) -> str:
    """Where the prediction and the measured epoch differ: compute and communication apart."""
    free = cells.get("unshaped", {}).get("epoch", {})
    rows = []
    for bw in shaped:
        for name, p in sorted(cells[bw].get("predicted", {}).items()):
            detail = cells[bw]["detail"][name]
            added = cells[bw]["epoch"][name] - free[name] if name in free else None
            rows.append(
                [
                    bw,
                    name,
                    f"{p['ratio']:.2f}",
                    f"{p['compute'] * 1e3:.0f}",
                    f"{detail['compute_max'] * 1e3:.0f}",
                    f"{detail['cpu_max'] * 1e3:.0f}",
                    f"{p['comm'] * 1e3:.0f}",
                    f"{added * 1e3:.0f}" if added is not None else "–",
                    f"{detail['wait_max'] * 1e3:.0f}",
                ]
            )
    return (
        "**Cost model, the parts** (ms per epoch, medians over rounds): predicted compute "
        "against the slowest rank's measured compute (wall clock: training step − exchange wait, "
        "so it also holds the waits for a core that other work holds) and its CPU time; "
        "predicted communication against what the link added to the epoch (epoch on the link − "
        "unshaped epoch) and the slowest rank's exchange wait:\n\n"
        + _table(
            [
                "link",
                "variant",
                "pred ÷ meas",
                "pred compute",
                "meas compute",
                "CPU",
                "pred comm",
                "link added",
                "exchange wait",
            ],
            rows,
        )
    )


def _cost_model(cells: dict, shaped: list[str], bws: list[str]) -> str:
    rows = []
    names = sorted({n for bw in bws for n in cells[bw].get("predicted", {})})
    for name in names:
        row = [name]
        for bw in bws:
            p = cells[bw].get("predicted", {}).get(name)
            if p is None:
                row.append("–")
                continue
            ratio = ratio_cell(p["ratio"], p["per_round"])
            cell = f"{p['seconds'] * 1e3:.0f} / {cells[bw]['epoch'][name] * 1e3:.0f} = {ratio}"
            if "anchored_ratio" in p:
                cell += f" ({p['anchored_ratio']:.2f})"
            row.append(cell)
        rows.append(row)
    full = [p["ratio"] for bw in shaped for p in cells[bw].get("predicted", {}).values()]
    anchored = [
        p["anchored_ratio"]
        for bw in shaped
        for p in cells[bw].get("predicted", {}).values()
        if "anchored_ratio" in p
    ]
    summary = ""
    if full:
        summary = (
            f"Predicted ÷ measured on the shaped links: {min(full):.2f} to {max(full):.2f} "
            "(target 0.75–1.25)"
        )
    if anchored:
        summary += (
            f"; the network part alone (in parentheses: measured unshaped epoch + predicted "
            f"extra communication time on the link): {min(anchored):.2f} to "
            f"{max(anchored):.2f}."
        )
    duplex = any(
        (cells[bw].get("network") or {}).get("duplex_bandwidth_bytes_per_s") for bw in shaped
    )
    if not duplex:  # a run of the model before the duplex calibration: say so, as it was
        return (
            "**Cost model** (the model of this run, before the duplex calibration: one-way "
            "bandwidth, a flat broadcast tree, compute scaled by P / cores; "
            "`emulated_cluster_costmodel.md` has today's). `costmodel.predict_epoch`: the "
            "partition's metrics, the compute costs calibrated on every node's core just before "
            "each fit, the probed network of each link; predicted ms / measured ms = ratio, in "
            "parentheses its range over rounds. "
            + summary
            + "\n\n"
            + _table(["variant", *bws], rows)
        )
    return (
        "**Cost model** (`costmodel.predict_epoch`: the partition's metrics, the compute costs "
        "calibrated on every node's core at once just before each fit (`costmodel.calibrate`, "
        "plus the fixed seconds of a step from a short fit on a tiny graph over the bare link; "
        "so they include what "
        "the shared machine's load and two nodes on one core did to the compute that minute: no "
        "further P / cores scaling), the probed network of each link (`Network.from_probe`: "
        "latency per message, the one-way bandwidth, and the all-to-all's duplex bandwidth for "
        "exchanges, all-to-alls and rings); broadcast priced as gloo runs it (binomial tree, "
        "ring reduce-scatter + gather); predicted ms / measured ms = ratio, in parentheses its "
        "range over rounds). "
        + summary
        + "\n\n"
        + _table(["variant", *bws], rows)
        + "\n"
        + _cost_parts(cells, shaped)
    )

"""What the partition quality tables say, computed from the rows: summaries and observations."""

from __future__ import annotations

import math
from typing import Any

from benchmarks.partition_quality.config import LABELS, METHODS, VS_METIS


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _cells(report: dict) -> dict[tuple[str, int, str], dict]:
    return {(r["graph"], r["num_parts"], r["method"]): r for r in report["rows"]}


def summarise(report: dict[str, Any]) -> dict[str, Any]:
    kinds = {g["name"]: g["kind"] for g in report["graphs"]}
    cells = _cells(report)
    ok = [r for r in report["rows"] if r["status"] == "ok"]
    summary: dict[str, Any] = {"mesh_geomean_vs_random": {}, "power_law_hp_vs_metis": []}
    meshes = [g for g, k in kinds.items() if k == "mesh"]
    for method in (*VS_METIS, "metis"):
        rows = [r for r in ok if r["method"] == method and r["graph"] in meshes]
        if not rows:
            continue
        summary["mesh_geomean_vs_random"][method] = {
            "cells": len(rows),
            "graphs": sorted({r["graph"] for r in rows}),
            "parts": sorted({r["num_parts"] for r in rows}),
            **{
                key: _geomean([r[f"{column}_vs_random"] for r in rows])
                for key, column in (
                    ("vol_avg", "avg_send_rows"),
                    ("vol_max", "max_send_rows"),
                    ("msgs_avg", "avg_messages"),
                    ("msgs_max", "max_messages"),
                )
            },
        }
    for graph in (g for g, k in kinds.items() if k == "power-law"):
        for num_parts in report["settings"]["parts"]:
            gp = cells.get((graph, num_parts, "metis"))
            for method in VS_METIS:
                hp = cells.get((graph, num_parts, method))
                if hp is None or gp is None or hp["status"] != "ok" or gp["status"] != "ok":
                    if hp is not None:
                        summary["power_law_hp_vs_metis"].append(
                            {"graph": graph, "num_parts": num_parts, "method": method,
                             "status": hp["status"], "note": hp.get("note")}
                        )  # fmt: skip
                    continue
                summary["power_law_hp_vs_metis"].append(
                    {
                        "graph": graph,
                        "num_parts": num_parts,
                        "method": method,
                        "status": "ok",
                        "hp_total": hp["total_volume_rows"],
                        "gp_total": gp["total_volume_rows"],
                        "total_ratio": hp["total_volume_rows"] / gp["total_volume_rows"],
                        "hp_max": hp["max_send_rows"],
                        "hp_max_km1": hp.get("unrefined_max_send_rows"),
                        "hp_total_km1": hp.get("unrefined_total_volume_rows"),
                        "refine_moves": hp.get("refine_moves"),
                        "gp_max": gp["max_send_rows"],
                        "max_ratio": hp["max_send_rows"] / gp["max_send_rows"],
                        "hp_lower_total": hp["total_volume_rows"] < gp["total_volume_rows"],
                        "hp_lower_max": hp["max_send_rows"] < gp["max_send_rows"],
                    }
                )
    return summary


def _seconds(row: dict) -> str:
    if row["status"] == "ok":
        s = row["seconds"]
        return f"{s:.2f}" if s < 10 else f"{s:.0f}"
    return row["note"] or row["status"]


def display_rows(report: dict, graph: str) -> list[dict]:
    order = {m: i for i, m in enumerate((*VS_METIS, "metis", "random"))}
    rows = sorted(
        (r for r in report["rows"] if r["graph"] == graph),
        key=lambda r: (r["num_parts"], order.get(r["method"], 9)),
    )
    out = []
    for r in rows:
        ok = r["status"] == "ok"
        out.append(
            {
                "method": LABELS.get(r["method"], r["method"]),
                "P": r["num_parts"],
                "vol avg/RP": r["avg_send_rows_vs_random"] if ok else None,
                "vol max/RP": r["max_send_rows_vs_random"] if ok else None,
                "msgs avg/RP": r["avg_messages_vs_random"] if ok else None,
                "msgs max/RP": r["max_messages_vs_random"] if ok else None,
                "total volume": r["total_volume_rows"] if ok else None,
                "edge cut": r["edge_cut"] if ok else None,
                "imbalance": r["imbalance"] if ok else None,
                "seconds": _seconds(r),
            }
        )
    return out


def hp_gp_rows(report: dict) -> list[dict]:
    cells = _cells(report)
    out = []
    for g in report["graphs"]:
        for num_parts in report["settings"]["parts"]:
            gp = cells.get((g["name"], num_parts, "metis"))
            if gp is None or gp["status"] != "ok":
                continue
            for method in VS_METIS:
                hp = cells.get((g["name"], num_parts, method))
                if hp is None or hp["status"] != "ok":
                    continue
                out.append(
                    {
                        "graph": g["name"],
                        "P": num_parts,
                        "HP backend": LABELS[method][4:-1],
                        "total vol HP/GP": hp["total_volume_rows"] / gp["total_volume_rows"],
                        "max vol HP/GP": hp["max_send_rows"] / gp["max_send_rows"],
                        "msgs avg HP/GP": hp["avg_messages"] / gp["avg_messages"]
                        if gp["avg_messages"]
                        else None,
                        "msgs max HP/GP": hp["max_messages"] / gp["max_messages"]
                        if gp["max_messages"]
                        else None,
                        "seconds HP/GP": hp["seconds"] / gp["seconds"] if gp["seconds"] else None,
                    }
                )
    return out


def observations(report: dict[str, Any]) -> list[str]:
    """Bullet points computed from the rows (what the tables say, in words)."""
    kinds = {g["name"]: g["kind"] for g in report["graphs"]}
    cells = _cells(report)
    ok = [r for r in report["rows"] if r["status"] == "ok"]
    out = []
    for graph, kind in kinds.items():
        parts = []
        for method in (*VS_METIS, "metis"):
            ratios = [
                (r["num_parts"], r["total_volume_rows_vs_random"])
                for r in ok
                if r["graph"] == graph and r["method"] == method
            ]
            if ratios:
                text = ", ".join(f"{v:.3g} (P={p})" for p, v in ratios)
                parts.append(f"{LABELS[method]} {text}")
        if parts:
            out.append(f"{graph} ({kind}), total volume / RP: " + "; ".join(parts) + ".")
    for method in VS_METIS:
        pairs = [
            (r, cells.get((r["graph"], r["num_parts"], "metis")))
            for r in ok
            if r["method"] == method
        ]
        pairs = [(hp, gp) for hp, gp in pairs if gp is not None and gp["status"] == "ok"]
        if not pairs:
            continue
        lower_total = sum(hp["total_volume_rows"] < gp["total_volume_rows"] for hp, gp in pairs)
        lower_max = [hp["max_send_rows"] < gp["max_send_rows"] for hp, gp in pairs]
        higher_max = [
            f"{hp['graph']} P={hp['num_parts']} ({hp['max_send_rows'] / gp['max_send_rows']:.3g}x)"
            for hp, gp in pairs
            if hp["max_send_rows"] >= gp["max_send_rows"]
        ]
        text = (
            f"{LABELS[method]} vs GP: lower total volume in {lower_total} of {len(pairs)} cells, "
            f"lower maximum volume in {sum(lower_max)} of {len(pairs)}"
        )
        if higher_max:
            text += "; maximum not lower on " + ", ".join(higher_max)
        out.append(text + ".")
    above_rp = [
        f"{LABELS[r['method']]} on {r['graph']} P={r['num_parts']} "
        f"({r['max_send_rows_vs_random']:.3g})"
        for r in ok
        if r["method"] != "random" and (r["max_send_rows_vs_random"] or 0) > 1
    ]
    if above_rp:
        out.append(
            "Busiest rank sends more than under RP (vol max/RP > 1): " + ", ".join(above_rp) + "."
        )
    both = [
        (r, cells.get((r["graph"], r["num_parts"], "hypergraph-mtkahypar")))
        for r in ok
        if r["method"] == "hypergraph-kahypar"
    ]
    both = [(k, m) for k, m in both if m is not None and m["status"] == "ok"]
    if both:
        ratio = _geomean([k["total_volume_rows"] / m["total_volume_rows"] for k, m in both])
        speed = _geomean([k["seconds"] / m["seconds"] for k, m in both])
        out.append(
            f"KaHyPar vs Mt-KaHyPar where both finished ({len(both)} cells): total volume "
            f"{ratio:.3g}x, time {speed:.3g}x (geometric means)."
        )
    for method in METHODS:
        seconds = [r["seconds"] for r in ok if r["method"] == method]
        if seconds and method != "random":
            out.append(
                f"{LABELS[method]} took {min(seconds):.3g}–{max(seconds):.3g} s per partition "
                f"({len(seconds)} cells, {sum(seconds):,.1f} s in all)."
            )
    return [f"* {line}" for line in out]

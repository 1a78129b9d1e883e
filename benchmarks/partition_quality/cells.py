"""Running the partition quality cells: one forked child per (graph, P, method), time limits, a
run-wide budget, and ``--resume``."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from benchmarks.common.graphs import missing
from benchmarks.common.processes import run_in_child
from benchmarks.harness import REPO, Run, load_average, log, read_json
from benchmarks.partition_quality.config import (
    FINGERPRINT_DATA_MODULES,
    GRAPHS,
    LABELS,
    METHODS,
    PAPER_OPTIONS,
)
from benchmarks.partition_quality.summary import summarise
from lightning_gnn_dist.data.datasets import load_dataset, parse_dataset_spec
from lightning_gnn_dist.partition.base import partitioner_options
from lightning_gnn_dist.partition.compare import compare_partitioners


def _cell(data: Any, num_parts: int, method: str, seed: int, epsilon: float) -> dict:
    """Body of the forked child: one ``compare_partitioners`` row (the paper's options where the
    method takes them: ``random`` has no vertex weight)."""
    accepted = partitioner_options(method)
    options = {k: v for k, v in PAPER_OPTIONS.items() if k in accepted}
    return compare_partitioners(
        data, num_parts, methods=[method], seed=seed, epsilon=epsilon, options=options
    )[0]


def source_fingerprint() -> str:
    """SHA-256 (16 hex digits) of the code a cell runs: ``partition/`` (``.py``, ``.ini``) and
    the graph loading and canonicalisation modules of ``data/``.

    Recorded at the start and the end of a run: the hypergraph backends are imported inside the
    cells, so an edit to them during a run would otherwise go unnoticed.
    """
    digest = hashlib.sha256()
    package = REPO / "lightning_gnn_dist"
    files = [p for p in (package / "partition").rglob("*") if p.suffix in (".py", ".ini")]
    files += [package / "data" / f"{name}.py" for name in FINGERPRINT_DATA_MODULES]
    for path in sorted(files):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def graph_kind(spec: str) -> str:
    kind = parse_dataset_spec(spec).kind
    return {"metis": "mesh", "rmat": "power-law", "powerlaw": "power-law", "sbm": "sbm"}.get(
        kind, kind
    )


def _empty_row(graph: str, num_parts: int, method: str, status: str, note: str) -> dict:
    return {
        "graph": graph,
        "method": method,
        "num_parts": num_parts,
        "status": status,
        "note": note,
    }


def _reusable(previous: dict | None, args: Any, limits: dict) -> dict:
    """Rows of an earlier run of the same settings that ``--resume`` keeps: results, and
    timeouts at a limit at least the current one (running them again could not succeed)."""
    if previous is None:
        return {}
    old = previous["settings"]
    if (old["seed"], old["epsilon"]) != (args.seed, args.epsilon):
        raise SystemExit(
            f"--resume: the existing results used seed {old['seed']} and epsilon "
            f"{old['epsilon']}, not {args.seed} and {args.epsilon}; drop --resume to start over"
        )
    specs = {g["name"]: g["spec"] for g in previous["graphs"]}
    kept = {}
    for row in previous["rows"]:
        name, method = row["graph"], row["method"]
        if specs.get(name) != GRAPHS.get(name, name):
            continue
        limit = limits.get(method)
        if row["status"] == "ok" or (
            row["status"] == "timeout" and limit is not None and row["timeout_s"] >= limit
        ):
            kept[(name, row["num_parts"], method)] = row
    return kept


def _load_graphs(report: dict, names: list[str]) -> dict[str, Any]:
    datasets = {}
    for name in names:
        spec = GRAPHS.get(name, name)
        reason = missing(spec)
        if reason:
            report["skipped"].append(f"{name} ({reason})")
            continue
        start = time.perf_counter()
        data = load_dataset(spec)
        datasets[name] = data
        src, dst = data.edge_index
        report["graphs"].append(
            {
                "name": name,
                "spec": spec,
                "kind": graph_kind(spec),
                "num_nodes": int(data.num_nodes),
                "num_edges": int(data.edge_index.size(1)),
                "num_self_loops": int((src == dst).sum()),
                "nnz_a_hat": int((src != dst).sum()) + int(data.num_nodes),
                "load_seconds": round(time.perf_counter() - start, 2),
            }
        )
        log(f"loaded {name}: {data.num_nodes:,} vertices, {data.edge_index.size(1):,} edges")
    return datasets


def _merge_previous(report: dict, previous: dict, args: Any) -> None:
    """A narrower ``--resume`` keeps the other graphs, P and methods as they were."""
    current = {g["name"]: g for g in report["graphs"]}
    report["graphs"] = [current.pop(g["name"], g) for g in previous["graphs"]]
    report["graphs"] += list(current.values())
    report["rows"] = [
        r
        for r in previous["rows"]
        if not (
            r["graph"] in args.graphs
            and r["num_parts"] in args.parts
            and r["method"] in args.methods
        )
    ]
    settings = report["settings"]
    settings["graphs"] = [g["name"] for g in report["graphs"]]
    settings["parts"] = sorted({*args.parts, *(r["num_parts"] for r in report["rows"])})
    used = {*args.methods, *(r["method"] for r in report["rows"])}
    settings["methods"] = [m for m in METHODS if m in used]


def _measure(args, datasets, name, num_parts, method, limit, limit_for_method, timed_out) -> dict:
    """One cell in a forked child; a timeout at the method's own limit skips its larger P."""
    result = run_in_child(
        _cell, datasets[name], num_parts, method, args.seed, args.epsilon, timeout=limit
    )
    if result.status == "ok":
        return {
            "graph": name,
            **result.value,
            "status": "ok",
            "note": None,
            "wall_seconds": result.seconds,
        }
    if result.status == "error":
        return _empty_row(name, num_parts, method, "error", result.value)
    why = "" if limit == limit_for_method else " (run budget)"
    row = _empty_row(name, num_parts, method, "timeout", f"timeout after {limit:.0f} s{why}")
    row["timeout_s"] = limit
    if not why:  # the method's own limit: larger P would be slower
        timed_out[(name, method)] = (num_parts, limit)
    return row


def run(r: Run) -> None:
    args, report = r.args, r.report
    run_start = time.perf_counter()
    deadline = run_start + args.budget
    limits = {
        "hypergraph-kahypar": args.timeout_kahypar,
        "hypergraph-mtkahypar": args.timeout_mtkahypar,
    }
    json_path = r.stem.with_suffix(".json")
    previous = read_json(json_path) if args.resume and json_path.is_file() else None
    kept = _reusable(previous, args, limits)
    invocation = {
        "command": r.command,
        "date": report["date"],
        "budget_s": args.budget,
        "timeouts_s": limits,
        "load_average_start": load_average(),
        "package_source_sha256_start": source_fingerprint(),
    }
    report.update(
        complete=False,
        runs=[*previous.get("runs", []), invocation] if previous else [invocation],
        settings={
            "graphs": args.graphs,
            "parts": args.parts,
            "methods": args.methods,
            "seed": args.seed,
            "epsilon": args.epsilon,
            "timeouts_s": limits,
            "budget_s": args.budget,
            "cell_isolation": "forked child per cell, killed with its process group on timeout",
        },
        json_name=json_path.name,
        skipped=[],
        graphs=[],
        rows=[],
    )
    datasets = _load_graphs(report, args.graphs)
    if previous:
        _merge_previous(report, previous, args)
    run_index = len(report["runs"]) - 1
    timed_out: dict[tuple[str, str], tuple[int, float]] = {}
    for method in [m for m in METHODS if m in args.methods]:
        limit_for_method = limits.get(method)
        for name in [g for g in args.graphs if g in datasets]:
            for num_parts in args.parts:
                if (name, num_parts, method) in kept:
                    row = kept[(name, num_parts, method)]
                    if row["status"] == "timeout" and "(run budget)" not in row["note"]:
                        timed_out[(name, method)] = (num_parts, row["timeout_s"])
                    report["rows"].append(row)
                    log(_describe_row(row) + f" [kept from run {row.get('run', 0) + 1}]")
                    continue
                left = deadline - time.perf_counter()
                limit = left if limit_for_method is None else min(limit_for_method, left)
                if (name, method) in timed_out:
                    p, t = timed_out[(name, method)]
                    row = _empty_row(
                        name,
                        num_parts,
                        method,
                        "skipped",
                        f"not run: timed out at P={p} after {t:.0f} s",
                    )
                elif limit < 1:
                    note = f"not run: run budget of {args.budget:.0f} s spent"
                    row = _empty_row(name, num_parts, method, "skipped", note)
                else:
                    row = _measure(
                        args, datasets, name, num_parts, method, limit, limit_for_method, timed_out
                    )
                row["run"] = run_index
                report["rows"].append(row)
                log(_describe_row(row))
                invocation["wall_seconds"] = round(time.perf_counter() - run_start, 1)
                report["summary"] = summarise(report)
                r.save()
    invocation["load_average_end"] = load_average()
    invocation["package_source_sha256_end"] = source_fingerprint()
    invocation["wall_seconds"] = round(time.perf_counter() - run_start, 1)
    report["complete"] = all(
        row["status"] in ("ok", "timeout") or row["note"].startswith("not run: timed out")
        for row in report["rows"]
    )
    report["summary"] = summarise(report)


def _describe_row(row: dict) -> str:
    head = f"{row['graph']:>10} P={row['num_parts']:<3} {LABELS.get(row['method'], row['method'])}"
    if row["status"] != "ok":
        return f"{head}: {row['note']}"
    return (
        f"{head}: volume {row['total_volume_rows']:,} "
        f"({row['total_volume_rows_vs_random']:.3g} of RP), max send {row['max_send_rows']:,}, "
        f"imbalance {row['imbalance']:.3f}, {row['seconds']:.1f} s"
    )

"""Heterogeneous graphs (issue 33) on the ogbn-mag-shaped generator.

    python -m benchmarks.hetero                # default: mag?scale=0.025 (~1.06 M edges)
    python -m benchmarks.hetero --quick        # smoke run (scale 0.004)

Graph: ``mag?scale=S&features=128&classes=32`` — papers, authors, institutions, fields of study
with ogbn-mag's mean degrees times ``S``, the four relations and their reverses (7 relations;
``cites`` symmetric), power-law degrees, features and labels on papers only. Sections:

(partition) the bytes each relation's halo exchange moves per layer (rows × 64 columns × 4
    bytes, forward; the relation's metrics, :func:`~lightning_gnn_dist.partition.types.
    relation_metrics`) for the hypergraph (Mt-KaHyPar), METIS, KaMinPar and random partitions
    of the typed graph at 2 and 4 parts, each balanced per node type and per training paper,
    and the homogeneous view's (what RGCN exchanges), normalised to random; with the
    partition's seconds and the worst class balance (max part ÷ mean part over the types and
    the training papers).
(rgcn) CPU seconds per epoch of RGCN (2 layers, hidden 64, mean per relation, a root weight,
    dropout 0.5, Adam 0.01; featureless types as learnable rows of width 64, papers projected
    by a ``Linear``) in one process, this project (``HeteroRGCN``: PyG's ``RGCNConv``; mini-batch
    with the typed neighbour loader) against DGL 2.1 (``HeteroGraphConv`` of
    ``GraphConv(norm="right")`` per relation; mini-batch over DGL's blocks), full graph and
    mini-batch (fan-out 10 per relation and hop, 1024 seeds), in ``--repeats`` interleaved
    rounds of fresh interpreters (the first epoch of each run not timed), with the test
    accuracy after the run's epochs. DGL runs in its own venv (``bash
    benchmarks/peer_dgl/env.sh``). The row that counts is ``lightning``, the user's path
    (``GraphPartitionDataModule`` and ``HeteroNodeClassifier("rgcn")`` under
    ``Trainer(strategy="gnn_ddp")``, as the guide shows); ``ours`` (``HeteroRGCN`` in a plain
    loop) is an extra row.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import (
    REPO,
    Benchmark,
    Run,
    fmt,
    load_average,
    log,
    markdown_table,
    pooled_median,
    ratio,
    ratio_cell,
    run_rounds,
)

DATASET = "mag?scale={scale}&features=128&classes=32"
WORKER = Path(__file__).with_name("worker.py")
METHODS = ("hypergraph", "metis", "kaminpar", "random")
PARTS = (2, 4)
WIDTH = 64
TASKS = ("full", "mini")


def add_arguments(parser) -> None:
    parser.add_argument("--scale", type=float, default=None, help="share of ogbn-mag's size")
    parser.add_argument("--dgl-python", default="/tmp/lgd-dgl-venv/bin/python")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per RGCN run")


# -- (partition) --------------------------------------------------------------------------------
def partition_section(view, parts: tuple[int, ...]) -> dict:
    from lightning_gnn_dist.partition import get_partitioner
    from lightning_gnn_dist.partition.metrics import partition_metrics
    from lightning_gnn_dist.partition.types import balance_classes, relation_metrics

    classes = balance_classes(view)
    out: dict = {}
    for num_parts in parts:
        cells = {}
        for method in METHODS:
            try:
                partitioner = get_partitioner(method)
            except ValueError as error:  # an optional backend not installed
                log(f"{method} skipped: {error}")
                continue
            start = time.perf_counter()  # wall: the hypergraph backends run in a child
            assignment = partitioner.partition(view, num_parts)
            seconds = time.perf_counter() - start
            relations = relation_metrics(view, assignment, num_parts)
            homogeneous = partition_metrics(view, assignment, num_parts)
            balance = max(
                np.bincount(assignment[classes == c], minlength=num_parts).max()
                / max(1, (classes == c).sum() / num_parts)
                for c in np.unique(classes)
            )
            cells[method] = {
                "seconds": seconds,
                "class_balance_max": float(balance),
                "rows": {key: int(m.total_volume_rows) for key, m in relations.items()},
                "max_send_rows": {key: int(m.send_rows.max()) for key, m in relations.items()},
                "homogeneous_rows": int(homogeneous.total_volume_rows),
            }
            log(
                f"P={num_parts} {method}: {seconds:.1f} s, relation rows "
                f"{sum(cells[method]['rows'].values()):,}, homogeneous "
                f"{cells[method]['homogeneous_rows']:,}"
            )
        out[str(num_parts)] = cells
    return out


# -- (rgcn) -------------------------------------------------------------------------------------
def export(view, data, path: Path) -> None:
    """The typed graph as ``.npz`` for both workers (per relation edges, paper x/y, split)."""
    schema = view.hetero.schema
    arrays = {
        "node_types": np.array(schema.node_types),
        "num_nodes": np.array(schema.num_nodes),
        "relations": np.array([list(e) for e in schema.edge_types]),
        "x": data["paper"].x.numpy(),
        "y": data["paper"].y.numpy(),
        "train": data["paper"].train_mask.nonzero().view(-1).numpy(),
        "test": data["paper"].test_mask.nonzero().view(-1).numpy(),
    }
    for r, edge_type in enumerate(schema.edge_types):
        arrays[f"edges_{r}"] = data[edge_type].edge_index.numpy()
    np.savez(path, **arrays)


def run_worker(
    python: str, system: str, task: str, data: Path, epochs: int, spec: str, workdir: Path
) -> dict:
    with tempfile.TemporaryDirectory(prefix="hetero_", dir=workdir) as tmp:
        out = Path(tmp) / "r.json"
        command = [python, str(WORKER), "--system", system, "--task", task, "--data", str(data)]
        command += ["--out", str(out), "--epochs", str(epochs), "--spec", spec]
        env = {**os.environ, "PYTHONPATH": str(REPO) if system != "dgl" else ""}
        subprocess.run(command, check=True, env=env)
        return json.loads(out.read_text())


SYSTEMS = ("dgl", "lightning", "ours")


def rgcn_section(data_path: Path, python: str, epochs: int, repeats: int, spec: str) -> dict:
    details: dict[str, list] = {}

    def measure(system: str, task: str):
        def call(round_index: int) -> list[float]:
            result = run_worker(
                python if system == "dgl" else sys.executable, system, task, data_path, epochs,
                spec, data_path.parent,
            )  # fmt: skip
            timed = result["records"][1:]  # the first epoch warms up
            details.setdefault(f"{task} | {system}", []).append(
                {
                    "accuracy": result["accuracy"],
                    "wall": [r["wall"] for r in timed],
                    "steps": timed[0]["steps"],
                    "load_average": load_average()[0],
                    "torch": result["torch"],
                }
            )
            log(f"round {round_index}: {task} | {system}: {timed[-1]['cpu']:.2f} s CPU/epoch")
            return [r["cpu"] for r in timed]

        return call

    variants = {f"{t} | {s}": measure(s, t) for t in TASKS for s in SYSTEMS}
    samples = run_rounds(variants, repeats)
    rows = []
    for task in TASKS:
        for system in SYSTEMS:
            key = f"{task} | {system}"
            runs = details[key]
            over = ratio(samples[key], samples[f"{task} | dgl"])
            rows.append(
                {
                    "task": task,
                    "system": system,
                    "cpu_s": pooled_median(samples[key]),
                    "wall_s": pooled_median([r["wall"] for r in runs]),
                    "cpu_over_dgl": over.value,
                    "cpu_over_dgl_per_round": list(over.per_round),
                    "accuracy": float(np.median([r["accuracy"] for r in runs])),
                    "steps_per_epoch": runs[0]["steps"],
                    "load_average_per_round": [r["load_average"] for r in runs],
                    "torch": runs[0]["torch"],
                }
            )
    return {"epochs": epochs, "rows": rows}


def run(r: Run) -> None:
    from lightning_gnn_dist.data import load_dataset
    from lightning_gnn_dist.data.hetero_sources import mag

    scale = r.args.scale if r.args.scale is not None else (0.004 if r.quick else 0.025)
    spec = DATASET.format(scale=scale)
    epochs = r.args.epochs or (3 if r.quick else 6)
    view = load_dataset(spec)
    schema = view.hetero.schema
    r.report["settings"] = {
        "dataset": spec,
        "num_nodes": dict(zip(schema.node_types, schema.num_nodes, strict=True)),
        "num_edges": dict(zip(schema.relation_keys, schema.num_edges, strict=True)),
        "total_edges": int(view.num_edges),
        "width": WIDTH,
    }
    if r.wants("partition"):
        with r.section("partition"):
            r.report["partition"] = partition_section(view, PARTS)
        r.save()
    if r.wants("rgcn"):
        if not Path(r.args.dgl_python).exists():
            raise SystemExit(f"no DGL venv at {r.args.dgl_python}: bash benchmarks/peer_dgl/env.sh")
        options = dict(
            scale=scale, features=128, classes=32, homophily=0.7, signal=0.6, reverse=True
        )
        with r.section("rgcn"), tempfile.TemporaryDirectory(prefix="hetero_") as tmp:
            path = Path(tmp) / "graph.npz"
            export(view, mag(**options), path)
            r.report["rgcn"] = rgcn_section(path, r.args.dgl_python, epochs, r.repeats, spec)
        r.save()


def render(report: dict) -> str:
    s = report["settings"]
    lines = [
        "# Heterogeneous graphs: partitions per relation and RGCN against DGL (issue 33)\n",
        f"`{s['dataset']}`: {s['total_edges']:,} edges; vertices "
        + ", ".join(f"{t} {n:,}" for t, n in s["num_nodes"].items())
        + "; edges per relation "
        + ", ".join(f"{k} {n:,}" for k, n in s["num_edges"].items())
        + ".\n",
    ]
    if "partition" in report:
        lines.append(
            "\n## Bytes per relation and layer\n\nForward bytes one layer's halo exchange moves "
            f"per relation (rows × {s['width']} columns × 4 bytes), summed over ranks; in "
            "brackets ÷ random's. `homogeneous`: the rows of the homogeneous view (RGCN's one "
            "exchange). Every partition is balanced per node type and per training paper "
            "(`class balance`: the largest class's max part ÷ mean part).\n"
        )
        for parts, cells in report["partition"].items():
            baseline = cells.get("random")
            keys = list(next(iter(cells.values()))["rows"])
            rows = []
            for key in [*keys, "homogeneous", "total (relations)"]:
                row = {"relation": key}
                for method, cell in cells.items():
                    value = _rows(cell, key)
                    base = _rows(baseline, key) if baseline else None
                    ratio_text = f" ({value / base:.2f})" if base else ""
                    row[method] = f"{fmt(value * s['width'] * 4 / 2**20)} MiB{ratio_text}"
                rows.append(row)
            rows.append({"relation": "partition seconds"} | {
                m: f"{c['seconds']:.1f}" for m, c in cells.items()
            })  # fmt: skip
            rows.append({"relation": "class balance"} | {
                m: f"{c['class_balance_max']:.3f}" for m, c in cells.items()
            })  # fmt: skip
            columns = ["relation", *cells]
            lines.append(f"\n### {parts} parts\n\n" + markdown_table(rows, columns) + "\n")
    if "rgcn" in report:
        rgcn = report["rgcn"]
        rows = [
            {
                "task": row["task"],
                "system": row["system"],
                "CPU s/epoch": f"{row['cpu_s']:.3f}",
                "wall s/epoch": f"{row['wall_s']:.3f}",
                "CPU ÷ DGL": ratio_cell(row["cpu_over_dgl"], row["cpu_over_dgl_per_round"]),
                "steps/epoch": row["steps_per_epoch"],
                f"test acc ({rgcn['epochs']} epochs)": f"{row['accuracy']:.3f}",
                "torch": row["torch"],
                "load (per round)": ", ".join(f"{v:.1f}" for v in row["load_average_per_round"]),
            }
            for row in rgcn["rows"]
        ]
        lines.append(
            "\n## RGCN, one process: this project against DGL 2.1\n\nCPU seconds per epoch "
            "(pooled median over the rounds, first epoch of each run not timed); CPU ÷ DGL in "
            "the same rounds (per-round range). Mini-batch: fan-out 10 per relation and hop, "
            "1024 training papers per step. Systems: `dgl`: DGL 2.1 in a plain loop; "
            "`lightning`: **the user's path** — `GraphPartitionDataModule` on the spec and "
            '`HeteroNodeClassifier("rgcn")` under `Trainer(strategy="gnn_ddp")`, as the '
            "guide shows (one process); `ours`: `HeteroRGCN` in a plain loop (not the user's "
            "path).\n\n" + markdown_table(rows, list(rows[0])) + "\n"
        )
    return "".join(lines)


def _rows(cell: dict | None, key: str) -> int:
    if cell is None:
        return 0
    if key == "homogeneous":
        return cell["homogeneous_rows"]
    if key == "total (relations)":
        return sum(cell["rows"].values())
    return cell["rows"][key]


BENCHMARK = Benchmark(
    "hetero",
    __doc__,
    run,
    render,
    add_arguments=add_arguments,
    sections=("partition", "rgcn"),
    repeats=3,
    quick_repeats=1,
)

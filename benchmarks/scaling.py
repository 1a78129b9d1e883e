"""Scaling from chunked files to trained epochs: R-MAT scales 16-22, ours against DGL (issue 34).

    python -m benchmarks.scaling --scales 16,18,20,22 --parts 2,4 --out benchmarks/results/scaling

Per scale (``rmat?scale=S&edge_factor=16&features=64``, 8 classes), every cell in a fresh
process, one at a time, one round (the machine is shared: the 1-minute load average before each
cell is recorded):

* **input**: the chunked files written by
  :func:`~lightning_gnn_dist.data.chunked_write.write_rmat_chunked` (4 files per array; the same
  graph as the spec, bit for bit), then ingested into the memory-mapped canonical copy
  (``chunked:PATH``, :mod:`lightning_gnn_dist.data.chunked`).
* **partition step**: ``partition_to_store`` on the memory-mapped graph (partitioning, metrics,
  building and writing every part), for ``kaminpar``, ``metis`` and ``hypergraph``: CPU seconds
  (workers included), wall seconds, peak memory = the process's peak during the step (``VmHWM``
  reset after the graph is mapped; imports and the pages of the graph it reads included) + the
  partitioner worker's own peak, × the raw graph (edges × 16 B + vertices × 64 × 4 B), total
  volume (rows per SpMM) and the projected halo bytes of one training epoch; a method that is
  refused (its memory estimate above what the machine has), killed after ``--timeout`` seconds
  or stopped by the memory watchdog is recorded as such. DGL 2.1's ``partition_graph`` (METIS,
  training vertices and edges balanced; it also writes its parts) runs on the same graph in its
  venv, its graph read from the canonical copy.
* **training** (not the user's path: a plain loop, no Lightning): full-batch GCN
  (64 → 64 → 8, dropout 0.5, Adam), ``--epochs`` epochs on P ranks
  (p2p halo exchange over gloo, one thread per rank), each rank memory-mapping its part of the
  ``kaminpar`` store: CPU seconds of the last epoch summed over ranks, its wall seconds (slowest
  rank), both per edge, halo bytes sent per epoch (measured), and every rank's peak memory.
  DGL beside: ``GraphConv`` GCN of the same widths in one process (DistDGL has no full-batch
  training).

A memory watchdog stops any cell when the machine's ``MemAvailable`` falls below
``--min-free-gib`` (other work shares the machine): such a cell reads "stopped: out of memory".
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common.processes import cpu_seconds, peak_rss_bytes, rss_bytes
from benchmarks.harness import (
    REPO,
    Benchmark,
    Run,
    csv,
    fmt,
    load_average,
    log,
    markdown_table,
)

FEATURES, CLASSES, HIDDEN, EDGE_FACTOR = 64, 8, 64, 16
METHODS = ("kaminpar", "metis", "hypergraph")
DGL_WORKER = REPO / "benchmarks" / "peer_dgl" / "partition_worker.py"
GIB = 2**30


# --------------------------------------------------------------------------------------------
# measurement helpers (in the cell processes)


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # VmHWM := VmRSS


def _meta(root: Path, scale: int) -> Path:
    return root / f"rmat{scale}" / "metadata.json"


def cell_write(root: str, scale: int) -> dict[str, Any]:
    from lightning_gnn_dist.data.chunked_write import write_rmat_chunked

    folder = Path(root) / f"rmat{scale}"
    shutil.rmtree(folder, ignore_errors=True)
    cpu, wall = cpu_seconds(), time.perf_counter()
    write_rmat_chunked(folder, scale, EDGE_FACTOR, features=FEATURES, classes=CLASSES)
    return {"cpu_seconds": cpu_seconds() - cpu, "wall_seconds": time.perf_counter() - wall,
            "process_peak_bytes": peak_rss_bytes()}  # fmt: skip


def cell_ingest(root: str, scale: int) -> dict[str, Any]:
    from lightning_gnn_dist.data.datasets import load_dataset

    meta = _meta(Path(root), scale)
    shutil.rmtree(meta.parent / "lgd-canonical", ignore_errors=True)
    cpu, wall = cpu_seconds(), time.perf_counter()
    data = load_dataset(f"chunked:{meta}")
    return {
        "cpu_seconds": cpu_seconds() - cpu,
        "wall_seconds": time.perf_counter() - wall,
        "process_peak_bytes": peak_rss_bytes(),
        "num_nodes": int(data.num_nodes),
        "num_edges": int(data.edge_index.size(1)),
    }


def cell_partition(root: str, scale: int, parts: int, method: str) -> dict[str, Any]:
    from lightning_gnn_dist.data.datasets import load_dataset
    from lightning_gnn_dist.partition import get_partitioner
    from lightning_gnn_dist.partition.metrics import paper_gcn_widths, projected_epoch_bytes
    from lightning_gnn_dist.partition.store import partition_to_store

    spec = f"chunked:{_meta(Path(root), scale)}"
    data = load_dataset(spec)
    peak_file = Path(root) / f".peak-{os.getpid()}"
    peak_file.write_text("")
    os.environ["LGD_PARTITION_PEAK_FILE"] = str(peak_file)
    before = rss_bytes()
    _reset_peak()
    cpu, wall = cpu_seconds(), time.perf_counter()
    path = Path(root) / "stores" / f"rmat{scale}-{method}-p{parts}"
    try:
        store = partition_to_store(
            data, get_partitioner(method, seed=0), parts, path, dataset=spec, force=True
        )
    except MemoryError as error:
        return {"status": f"refused: {str(error).split(';')[0]}"}
    row = {
        "cpu_seconds": cpu_seconds() - cpu,
        "wall_seconds": time.perf_counter() - wall,
        "rss_before_bytes": before,
        "process_peak_bytes": peak_rss_bytes(),
        "worker_peak_bytes": max((int(v) for v in peak_file.read_text().split()), default=0),
    }
    peak_file.unlink()
    metrics = store.metrics
    layers = projected_epoch_bytes(metrics, paper_gcn_widths([FEATURES, HIDDEN, CLASSES]))
    row.update(
        num_nodes=int(data.num_nodes),
        num_edges=int(data.edge_index.size(1)),
        total_volume_rows=metrics.total_volume_rows,
        projected_epoch_bytes=sum(x.forward_bytes_total + x.backward_bytes_total for x in layers),
        store_bytes=sum(store.meta["file_bytes"].values()),
    )
    return row


def cell_train_rank(store: str, epochs: int, result: str) -> dict[str, Any]:
    """One rank of the full-batch run (started by :func:`_train` with the torchrun variables)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from lightning_gnn_dist.comm import make_exchange
    from lightning_gnn_dist.nn import GraphContext, build_model, use_graph_context
    from lightning_gnn_dist.partition.store import PartitionStore

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    after_imports = rss_bytes()
    opened = PartitionStore.open(store)
    part = opened.load_part(rank)
    loaded = rss_bytes()
    torch.manual_seed(0)
    model = build_model("gcn", part.x.size(1), HIDDEN, int(opened.meta["num_classes"]), dropout=0.5)
    for parameter in model.parameters():  # gradients summed over ranks (timing, as peer_dgl)
        parameter.register_hook(lambda g: (dist.all_reduce(g), g / world)[1])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    context = GraphContext(part, make_exchange("p2p", part))
    mask = part.train_mask
    records = []
    for _ in range(epochs):
        dist.barrier()
        sent = context.exchange.counter.total("bytes_sent")
        cpu, wall = time.process_time(), time.perf_counter()
        with use_graph_context(context):
            loss = F.cross_entropy(model(part.x, part.edge_index)[mask], part.y[mask])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        records.append({"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall,
                        "bytes_sent": context.exchange.counter.total("bytes_sent") - sent})  # fmt: skip
    values = {"rank": rank, "epochs": records, "after_imports_bytes": after_imports,
              "after_load_bytes": loaded, "peak_bytes": peak_rss_bytes(),
              "edges": int(part.edge_index.size(1))}  # fmt: skip
    Path(result).write_text(json.dumps(values))
    dist.destroy_process_group()
    return values


CELLS = {
    "write": cell_write,
    "ingest": cell_ingest,
    "partition": cell_partition,
    "train-rank": cell_train_rank,
}


# --------------------------------------------------------------------------------------------
# the parent: cells in watched processes


def _mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 1 << 62


def _watched(
    commands: list[tuple[list[str], dict]], r: Run, timeout: float | None = None
) -> str | None:
    """Run ``(command, extra environment)`` pairs at once, each in its own process group;
    ``None`` when all exit 0, else why not (the first failure's output tail, the timeout, or the
    memory watchdog)."""
    timeout, min_free = timeout or r.args.timeout, r.args.min_free_gib * GIB
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    logs = [tempfile.TemporaryFile() for _ in commands]
    procs = [
        subprocess.Popen(
            c,
            cwd=REPO,
            env={**env, **e},
            stdout=log_,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        for (c, e), log_ in zip(commands, logs, strict=True)
    ]
    start, reason = time.perf_counter(), None
    while any(p.poll() is None for p in procs):
        if time.perf_counter() - start > timeout:
            reason = f"killed after {timeout:.0f} s"
        elif _mem_available() < min_free:
            reason = f"stopped: out of memory (MemAvailable < {min_free / GIB:.0f} GiB)"
        if reason:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
            break
        time.sleep(0.2)
    for p in procs:
        p.wait()
    if reason is None:
        for p, log_ in zip(procs, logs, strict=True):
            if p.returncode:
                log_.seek(0)
                tail = log_.read().decode(errors="replace").strip().splitlines()[-3:]
                reason = f"failed ({p.returncode}): {' '.join(tail)[-300:]}"
                break
    for log_ in logs:
        log_.close()
    return reason


def _cell(r: Run, name: str, *args: Any, timeout: float | None = None) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as out:
        result = Path(out.name)
    code = (f"import json, sys; from benchmarks.scaling import CELLS; "
            f"json.dump(CELLS[{name!r}](*{list(args)!r}), open({str(result)!r}, 'w'))")  # fmt: skip
    reason = _watched([([sys.executable, "-c", code], {})], r, timeout)
    try:
        return {"status": reason} if reason else {"status": "ok", **json.loads(result.read_text())}
    finally:
        result.unlink(missing_ok=True)


def _dgl(r: Run, root: Path, scale: int, parts: int | None) -> dict[str, Any]:
    python = r.args.dgl_python
    if not Path(python).is_file():
        return {"status": f"skipped: no DGL venv at {python} (bash benchmarks/peer_dgl/env.sh)"}
    with tempfile.TemporaryDirectory(prefix="lgd-dgl-") as folder:
        result = Path(folder) / "result.json"
        command = [python, str(DGL_WORKER), "--data", str(_meta(root, scale).parent / "lgd-canonical"),
                   "--result", str(result)]  # fmt: skip
        if parts is None:
            command += ["--train-epochs", str(r.args.epochs)]
        else:
            command += ["--parts", str(parts), "--out", str(Path(folder) / "parts")]
        reason = _watched([(command, {})], r)
        if reason:
            return {"status": reason}
        values = json.loads(result.read_text())
    row = {"status": "ok", "cpu_seconds": values["cpu_seconds"],
           "wall_seconds": values["wall_seconds"], "process_peak_bytes": values["peak_rss_bytes"]}  # fmt: skip
    if "epochs" in values:
        row["epochs"] = values["epochs"]
    return row


def _train(r: Run, root: Path, scale: int, parts: int) -> dict[str, Any]:
    store = root / "stores" / f"rmat{scale}-kaminpar-p{parts}"
    if not (store / "meta.json").is_file():
        return {"status": "skipped: no kaminpar store"}
    from benchmarks.common.processes import free_port

    folder = Path(tempfile.mkdtemp(prefix="lgd-train-"))
    try:
        base = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
                "WORLD_SIZE": str(parts), "OMP_NUM_THREADS": "1"}  # fmt: skip
        commands = []
        for rank in range(parts):
            code = ("from benchmarks.scaling import cell_train_rank; "
                    f"cell_train_rank({str(store)!r}, {r.args.epochs}, {str(folder / f'{rank}.json')!r})")  # fmt: skip
            commands.append(([sys.executable, "-c", code], {**base, "RANK": str(rank)}))
        reason = _watched(commands, r)
        if reason:
            return {"status": reason}
        ranks = [json.loads((folder / f"{rank}.json").read_text()) for rank in range(parts)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"status": "ok", "ranks": ranks}


def run(r: Run) -> None:
    root = Path(r.args.data_root)
    root.mkdir(parents=True, exist_ok=True)
    scales = [12] if r.quick else r.args.scales
    parts_list = [2] if r.quick else r.args.parts
    r.report.update(scales=scales, parts=parts_list, epochs=r.args.epochs, rows=[])

    def record(row: dict[str, Any]) -> None:
        row["free_gib_after"] = _mem_available() / GIB
        log(
            f"  {row.get('status')}: {json.dumps({k: v for k, v in row.items() if k not in ('ranks', 'epochs')})[:300]}"
        )
        r.report["rows"].append(row)
        r.save()

    for scale in scales:
        for step in ("write", "ingest"):
            load = load_average()[0]
            log(f"scale {scale}: {step} (load {load:.1f})")
            record({**_cell(r, step, str(root), scale), "scale": scale, "step": step,
                    "load_before": load})  # fmt: skip
        for parts in parts_list:
            for method in ("dgl", *r.args.methods):
                load = load_average()[0]
                log(f"scale {scale}, P={parts}: partition with {method} (load {load:.1f})")
                timeout = r.args.hypergraph_timeout if method == "hypergraph" else None
                row = (_dgl(r, root, scale, parts) if method == "dgl"
                       else _cell(r, "partition", str(root), scale, parts, method, timeout=timeout))  # fmt: skip
                record({**row, "scale": scale, "step": "partition", "P": parts, "method": method,
                        "load_before": load})  # fmt: skip
                if method not in ("dgl", "kaminpar"):
                    shutil.rmtree(root / "stores" / f"rmat{scale}-{method}-p{parts}", True)
        for parts in parts_list:
            load = load_average()[0]
            log(f"scale {scale}: train on {parts} ranks (load {load:.1f})")
            record({**_train(r, root, scale, parts), "scale": scale, "step": "train", "P": parts,
                    "system": "ours", "load_before": load})  # fmt: skip
        load = load_average()[0]
        log(f"scale {scale}: DGL full-batch training in one process (load {load:.1f})")
        record({**_dgl(r, root, scale, None), "scale": scale, "step": "train", "P": 1,
                "system": "dgl", "load_before": load})  # fmt: skip
        if not r.args.keep:
            shutil.rmtree(root / "stores", ignore_errors=True)
            shutil.rmtree(root / f"rmat{scale}", ignore_errors=True)


# --------------------------------------------------------------------------------------------
# the report


def _graph_sizes(rows: list[dict]) -> dict[int, tuple[int, int]]:
    return {
        row["scale"]: (row["num_nodes"], row["num_edges"])
        for row in rows
        if row["step"] == "ingest" and row.get("status") == "ok"
    }


def _raw(sizes: dict[int, tuple[int, int]], scale: int) -> float | None:
    if scale not in sizes:
        return None
    num_nodes, num_edges = sizes[scale]
    return num_edges * 16 + num_nodes * FEATURES * 4


def _gb(value: float | None) -> float | None:
    return None if value is None else value / 1e9


def input_rows(rows: list[dict]) -> list[dict]:
    sizes = _graph_sizes(rows)
    out = []
    for scale in sorted({row["scale"] for row in rows}):
        raw = _raw(sizes, scale)
        line: dict[str, Any] = {"scale": scale}
        if scale in sizes:
            line.update(vertices=sizes[scale][0], edges=sizes[scale][1], **{"raw GB": _gb(raw)})
        for row in rows:
            if row["scale"] != scale or row["step"] not in ("write", "ingest"):
                continue
            step = row["step"]
            if row.get("status") != "ok":
                line[f"{step} CPU s"] = row.get("status")
                continue
            line[f"{step} CPU s"] = row["cpu_seconds"]
            line[f"{step} wall s"] = row["wall_seconds"]
            line[f"{step} peak GB"] = _gb(row["process_peak_bytes"])
            if raw:
                line[f"{step} ×raw"] = row["process_peak_bytes"] / raw
        out.append(line)
    return out


def partition_rows(rows: list[dict]) -> list[dict]:
    sizes = _graph_sizes(rows)
    cells = {(r["scale"], r["P"], r["method"]): r for r in rows if r["step"] == "partition"}
    out = []
    for (scale, parts, method), row in cells.items():
        line: dict[str, Any] = {"scale": scale, "P": parts, "method": method,
                                "status": row.get("status")}  # fmt: skip
        if row.get("status") == "ok":
            peak = row["process_peak_bytes"] + row.get("worker_peak_bytes", 0)
            raw = _raw(sizes, scale)
            dgl, metis = (
                cells.get((scale, parts, "dgl"), {}),
                cells.get((scale, parts, "metis"), {}),
            )
            line.update(**{"CPU s": row["cpu_seconds"], "wall s": row["wall_seconds"],
                           "peak GB": _gb(peak), "×raw": peak / raw if raw else None})  # fmt: skip
            if dgl.get("status") == "ok" and method != "dgl":
                line["CPU ×DGL"] = row["cpu_seconds"] / dgl["cpu_seconds"]
                line["peak ×DGL"] = peak / dgl["process_peak_bytes"]
            if "total_volume_rows" in row:
                line["volume rows"] = row["total_volume_rows"]
                line["halo MB/epoch"] = row["projected_epoch_bytes"] / 1e6
                if metis.get("status") == "ok":
                    line["volume ×METIS"] = row["total_volume_rows"] / metis["total_volume_rows"]
        line["load"] = row.get("load_before")
        out.append(line)
    return out


def train_rows(rows: list[dict]) -> list[dict]:
    sizes = _graph_sizes(rows)
    out = []
    for row in rows:
        if row["step"] != "train":
            continue
        line: dict[str, Any] = {"scale": row["scale"], "system": row["system"], "ranks": row["P"],
                                "status": row.get("status")}  # fmt: skip
        edges = sizes.get(row["scale"], (0, 0))[1]
        if row.get("status") == "ok":
            if row["system"] == "dgl":
                last = row["epochs"][-1]
                cpu, wall, peaks, sent = (
                    last["cpu"],
                    last["wall"],
                    [row["process_peak_bytes"]],
                    None,
                )
            else:
                lasts = [rank["epochs"][-1] for rank in row["ranks"]]
                cpu = sum(e["cpu"] for e in lasts)
                wall = max(e["wall"] for e in lasts)
                sent = sum(e["bytes_sent"] for e in lasts)
                peaks = [rank["peak_bytes"] for rank in row["ranks"]]
            line.update(**{"epoch CPU s": cpu, "epoch wall s": wall,
                           "CPU ns/edge": 1e9 * cpu / edges if edges else None,
                           "wall ns/edge": 1e9 * wall / edges if edges else None,
                           "halo MB/epoch": None if sent is None else sent / 1e6,
                           "peak GB/rank": _gb(max(peaks)), "peak GB, all": _gb(sum(peaks))})  # fmt: skip
        line["load"] = row.get("load_before")
        out.append(line)
    return out


def verdicts(rows: list[dict]) -> list[str]:
    lines = []
    for line in partition_rows(rows):
        if line["method"] == "kaminpar" and line["scale"] >= 20 and "×raw" in line:
            ok = line["×raw"] <= 5
            lines.append(
                f"scale {line['scale']}, P = {line['P']}: the `kaminpar` partition step peaks at "
                f"{line['×raw']:.2f}× the raw graph (≤ 5: {'yes' if ok else 'NO'})"
            )
        if line["method"] == "dgl" and line["scale"] >= 22:
            lines.append(
                f"scale {line['scale']}, P = {line['P']}: DGL's `partition_graph`: "
                + (
                    f"done, peak {line['peak GB']:.1f} GB"
                    if line["status"] == "ok"
                    else line["status"]
                )
            )
    for line in train_rows(rows):
        if line["scale"] >= 22 and line["system"] == "ours":
            lines.append(
                f"scale {line['scale']}: full-batch GCN on {line['ranks']} ranks: "
                + (
                    f"trained, {line['epoch wall s']:.1f} s per epoch, {line['peak GB/rank']:.2f} GB"
                    " at most per rank"
                    if line["status"] == "ok"
                    else str(line["status"])
                )  # fmt: skip
            )
    return lines


def _cells(lines: list[dict]) -> list[dict]:
    return [{k: fmt(v) if isinstance(v, float) else v for k, v in line.items()} for line in lines]


def render(report: dict) -> str:
    rows = report["rows"]
    partition_columns = ("scale", "P", "method", "status", "CPU s", "wall s", "CPU ×DGL",
                         "peak GB", "×raw", "peak ×DGL", "volume rows", "volume ×METIS",
                         "halo MB/epoch", "load")  # fmt: skip
    train_columns = ("scale", "system", "ranks", "status", "epoch CPU s", "epoch wall s",
                     "CPU ns/edge", "wall ns/edge", "halo MB/epoch", "peak GB/rank",
                     "peak GB, all", "load")  # fmt: skip
    input_columns = ("scale", "vertices", "edges", "raw GB", "write CPU s", "write wall s",
                     "write peak GB", "ingest CPU s", "ingest wall s", "ingest peak GB",
                     "ingest ×raw")  # fmt: skip
    return "\n".join(
        [
            "# Scaling: chunked files → partition store → full-batch epochs, ours vs DGL (issue 34)",
            "",
            f"R-MAT, edge factor 16, {FEATURES} features, {CLASSES} classes; one fresh process "
            "per cell, one round, on a shared machine (`load`: 1-minute load average before the "
            "cell). Raw graph = edges × 16 B + vertices × 64 × 4 B; GB = 1e9 bytes. Peak of a "
            "partition cell = the process's peak during the step (imports and the graph's pages "
            "it read included) + the partitioner worker's; DGL: its process's peak (graph "
            f"included). Training: epoch {report['epochs']} of {report['epochs']}, CPU summed "
            "over ranks, wall of the slowest rank, halo bytes sent (measured) summed over ranks.",
            "",
            *[f"* {line}" for line in verdicts(rows)],
            "",
            "## Input: chunked files written, then ingested",
            "",
            markdown_table(_cells(input_rows(rows)), input_columns),
            "",
            "## The partition step (partition + metrics + every part built and written)",
            "",
            markdown_table(_cells(partition_rows(rows)), partition_columns),
            "",
            "## Full-batch GCN training",
            "",
            "Not the user's path: the project's `build_model(\"gcn\")` in a plain loop over the "
            "strategy's `p2p` exchange on a gloo group (what `GNNStrategy` runs per step, without "
            "Lightning), as DGL's side is its GCN in a plain loop.",
            "",
            markdown_table(_cells(train_rows(rows)), train_columns),
        ]
    )


def add_arguments(parser) -> None:
    parser.add_argument("--scales", type=csv(int), default=[16, 18, 20, 22])
    parser.add_argument("--parts", type=csv(int), default=[2, 4])
    parser.add_argument("--methods", type=csv(), default=list(METHODS))
    parser.add_argument("--epochs", type=int, default=2, help="full-batch epochs per run")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per cell")
    parser.add_argument(
        "--hypergraph-timeout",
        type=float,
        default=150.0,
        help="seconds per hypergraph cell (about 5x DGL's partition_graph at scale 20)",
    )
    parser.add_argument(
        "--min-free-gib", type=float, default=1.5, help="memory watchdog threshold (MemAvailable)"
    )
    parser.add_argument("--data-root", default=str(Path(tempfile.gettempdir()) / "lgd-scaling"))
    parser.add_argument("--keep", action="store_true", help="keep each scale's files and stores")
    parser.add_argument("--dgl-python", default="/tmp/lgd-dgl-venv/bin/python")


BENCHMARK = Benchmark("scaling", __doc__, run, render, add_arguments)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())

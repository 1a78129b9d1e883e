"""This project against DGL 2.1, the peer to beat, on the same graph (issue 19).

    bash benchmarks/peer_dgl_env.sh                  # once: DGL's own venv (torch 2.2.1)
    python benchmarks/peer_dgl.py                    # full run (~15 min on 2 busy cores)
    python benchmarks/peer_dgl.py --quick            # smoke run (~2 min)

Writes ``benchmarks/results/peer_dgl.json`` and ``.md``. Not part of ``make test``.

Every variant runs in a fresh interpreter (this file in ``--worker`` mode: the DGL variants in
DGL's venv, which cannot import this package) on ``rmat?scale=16&edge_factor=17&features=100&
classes=16`` exported once to an ``.npz``; variants run interleaved (round ``r`` runs every
variant once) and the table gives the median over rounds of each variant's median epoch, and the
median over rounds of the per-round ratio to DGL. One thread per process. Per variant: CPU and
wall seconds per epoch, the phases (sample, gather, forward, backward + optimiser step,
exchange), test accuracy after the fixed epochs, and data memory = peak RSS − RSS after imports.

Variants: full-batch GCN and GraphSAGE (hidden 64, dropout 0.5, Adam 0.01) with this project's
reference models at 1 and 2 ranks (METIS, p2p halo exchange, gloo), plain PyG (``GCNConv`` /
``SAGEConv`` on ``edge_index``) and DGL (``GraphConv(norm="both")`` / ``SAGEConv("mean")``);
mini-batch GraphSAGE 2×256, fan-out [25, 10] (25 neighbours of each seed; DGL's
``NeighborSampler([10, 25])`` lists fan-outs from the input layer), batch 1024, with this
project's ``NeighborLoader`` and DGL's ``DataLoader`` over blocks. DistDGL is not run (see the
report of issue 19): the 2-rank rows are this project's only.
"""

# ruff: noqa: E402  (the environment must be set before torch is imported)
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATASET = "rmat?scale=16&edge_factor=17&features=100&classes=16"
RESULTS = REPO / "benchmarks" / "results"


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS"))
    return int(line.split()[1]) * 1024


# ---------------------------------------------------------------------------- workers (any venv)
def _timed(fn, clock):
    start = clock()
    value = fn()
    return value, clock() - start


class Phases:
    """CPU and wall seconds per named phase, summed over an epoch."""

    def __init__(self):
        self.cpu, self.wall = {}, {}

    def __call__(self, name, fn):
        c, w = time.process_time(), time.perf_counter()
        value = fn()
        self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - c
        self.wall[name] = self.wall.get(name, 0.0) + time.perf_counter() - w
        return value


def train(args, data, model, batches, epochs):
    """Run ``epochs`` epochs of ``batches(phases)`` (yields ``(x, graph, y, ...)`` closures) and
    return per-epoch CPU/wall seconds and phases."""
    import torch
    import torch.nn.functional as F

    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    records = []
    for _ in range(epochs):
        phases = Phases()
        c, w = time.process_time(), time.perf_counter()
        model.train()
        for forward, target in batches(phases):
            out = phases("forward", forward)

            def backward(out=out, target=target):
                loss = F.cross_entropy(out, target)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

            phases("backward", backward)
        records.append(
            {
                "cpu": time.process_time() - c,
                "wall": time.perf_counter() - w,
                "phases_cpu": phases.cpu,
                "phases_wall": phases.wall,
            }
        )
    return records


def worker(args) -> dict:
    import numpy as np
    import torch

    torch.set_num_threads(1)
    system, task = args.worker.split(":")
    if system == "dgl":
        import dgl  # noqa: F401
    else:
        sys.path.insert(0, str(REPO))
        import torch_geometric  # noqa: F401

        import lightning_gnn_dist  # noqa: F401
    torch.manual_seed(0)
    after_imports = rss_bytes()
    data = None
    if system != "ours":  # a rank of this project loads its part only
        arrays = np.load(args.data)
        data = {k: torch.from_numpy(arrays[k]) for k in arrays.files}
    runner = {"dgl": run_dgl, "ours": run_ours, "pyg": run_pyg}[system]
    records, accuracy = runner(args, task, data)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "records": records,
        "accuracy": accuracy,
        "data_memory_bytes": peak - after_imports,
        "torch": torch.__version__,
    }


def accuracy_of(logits, y):
    return float((logits.argmax(-1) == y).float().mean())


def run_dgl(args, task, data):
    import dgl
    import torch
    from dgl.nn import GraphConv, SAGEConv

    src, dst = data["edge_index"]
    num_nodes = data["x"].size(0)
    graph = dgl.graph((src, dst), num_nodes=num_nodes)
    x, y = data["x"], data["y"]
    train_mask, test_mask = data["train_mask"], data["test_mask"]
    model_name, mode = task.split("-")
    if mode == "full":
        graph = dgl.add_self_loop(dgl.remove_self_loop(graph)) if model_name == "gcn" else graph
        conv = (
            (lambda i, o: GraphConv(i, o))
            if model_name == "gcn"
            else (lambda i, o: SAGEConv(i, o, "mean"))
        )
        model = _DGLStack(conv, [x.size(1), args.hidden, 16], args.dropout)

        def batches(phases):
            yield (lambda: model(graph, x)[train_mask]), y[train_mask]

        records = train(args, data, model, batches, args.epochs)
        model.eval()
        with torch.no_grad():
            return records, accuracy_of(model(graph, x)[test_mask], y[test_mask])
    sampler = dgl.dataloading.NeighborSampler(list(reversed(args.fanout)))
    seeds = train_mask.nonzero().view(-1)
    loader = dgl.dataloading.DataLoader(
        graph, seeds, sampler, batch_size=args.batch_size, shuffle=True
    )
    model = _DGLStack(
        lambda i, o: SAGEConv(i, o, "mean"), [x.size(1), args.mini_hidden, 16], args.dropout
    )

    def batches(phases):
        iterator = iter(loader)
        while True:
            try:
                input_nodes, output_nodes, blocks = phases("sample", lambda: next(iterator))
            except StopIteration:
                return
            h = phases("gather", lambda nodes=input_nodes: x[nodes])
            yield (lambda h=h, blocks=blocks: model(blocks, h)), y[output_nodes]

    records = train(args, data, model, batches, args.mini_epochs)
    model.eval()
    with torch.no_grad():  # full-neighbourhood inference, layer by layer on the whole graph
        graph = dgl.add_self_loop(graph) if False else graph
        return records, accuracy_of(model(graph, x)[test_mask], y[test_mask])


class _DGLStack:  # built lazily so the class body needs no torch import
    def __new__(cls, conv, dims, dropout):
        import torch
        import torch.nn.functional as F

        class Stack(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.convs = torch.nn.ModuleList(
                    conv(dims[i], dims[i + 1]) for i in range(len(dims) - 1)
                )

            def forward(self, graphs, h):
                for i, layer in enumerate(self.convs):
                    graph = graphs[i] if isinstance(graphs, list) else graphs
                    h = layer(graph, h)
                    if i < len(self.convs) - 1:
                        h = F.dropout(F.relu(h), dropout, self.training)
                return h

        return Stack()


def _ours_model(args, task, in_channels):
    from lightning_gnn_dist.nn import build_model

    model_name, mode = task.split("-")
    hidden = args.hidden if mode == "full" else args.mini_hidden
    return build_model(model_name, in_channels, hidden, 16, dropout=args.dropout)


def run_ours(args, task, data):
    import torch
    import torch.distributed as dist

    from lightning_gnn_dist.comm import make_exchange
    from lightning_gnn_dist.data.local import LocalPartition
    from lightning_gnn_dist.nn import GraphContext, use_graph_context

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1:
        dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=world_size)
    rank = dist.get_rank() if world_size > 1 else 0
    part = LocalPartition.load(Path(args.parts) / f"{world_size}" / f"part{rank}.pt")
    del data  # a rank holds its part only
    model = _ours_model(args, task, part.x.size(1))
    if task.endswith("full"):
        context = GraphContext(part, make_exchange("p2p", part))
        mask = part.train_mask

        def batches(phases):
            def forward():
                with use_graph_context(context):
                    return model(part.x, part.edge_index)[mask]

            yield forward, part.y[mask]

        records = train(args, None, _Synced(model, world_size), batches, args.epochs)
        for record in records:
            record["phases_cpu"]["exchange_wait"] = context.exchange.counter.total("seconds") / len(
                records
            )
        model.eval()
        with torch.no_grad(), use_graph_context(context):
            out = model(part.x, part.edge_index)
        return records, _global_accuracy(out, part, world_size)
    from lightning_gnn_dist.loaders import NeighborLoader
    from lightning_gnn_dist.loaders.graph_store import PartitionedGraphStore

    store = PartitionedGraphStore(part)
    count = torch.tensor([int(part.train_mask.sum())])
    if world_size > 1:  # every rank runs the same number of steps
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
    steps = args.steps or -(-int(count) // args.batch_size)
    loader = NeighborLoader(
        store,
        args.fanout,
        part.train_mask,
        batch_size=args.batch_size,
        shuffle=True,
        num_steps=steps,
    )

    def batches(phases):
        for step, positions in enumerate(loader.batches()):
            batch = phases(
                "sample+gather",
                lambda positions=positions, step=step: loader.make_batch(positions, step),
            )
            b = batch.batch_size
            yield (
                (
                    lambda batch=batch, b=b: model(batch.x, batch.edge_index, **_trim_args(batch))[
                        :b
                    ]
                ),
                batch.y[:b],
            )
        loader.epoch += 1

    records = train(args, None, _Synced(model, world_size), batches, args.mini_epochs)
    model.eval()
    context = GraphContext(part, make_exchange("p2p", part))
    with torch.no_grad(), use_graph_context(context):
        out = model(part.x, part.edge_index)
    return records, _global_accuracy(out, part, world_size)


def _trim_args(batch):
    return {
        "num_sampled_nodes": batch.num_sampled_nodes,
        "num_sampled_edges": batch.num_sampled_edges,
    }


def _Synced(model, world_size):
    """The model with gradients summed over ranks after every backward (full-batch exactness:
    the loss is each rank's mean, so the sum over ranks is a mean of means; fine for timing)."""
    import torch.distributed as dist

    if world_size > 1:
        for p in model.parameters():
            p.register_hook(lambda g: (dist.all_reduce(g), g / world_size)[1])
    return model


def _global_accuracy(out, part, world_size):
    import torch
    import torch.distributed as dist

    mask = part.test_mask
    counts = torch.tensor([float((out[mask].argmax(-1) == part.y[mask]).sum()), float(mask.sum())])
    if world_size > 1:
        dist.all_reduce(counts)
    return float(counts[0] / counts[1])


def run_pyg(args, task, data):
    import torch
    from torch_geometric.nn import GCNConv, SAGEConv

    conv = GCNConv if task.startswith("gcn") else SAGEConv
    x, y, edge_index = data["x"], data["y"], data["edge_index"]
    train_mask, test_mask = data["train_mask"], data["test_mask"]

    class Stack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList([conv(x.size(1), args.hidden), conv(args.hidden, 16)])

        def forward(self, x, edge_index):
            h = torch.nn.functional.dropout(
                self.convs[0](x, edge_index).relu(), args.dropout, self.training
            )
            return self.convs[1](h, edge_index)

    model = Stack()

    def batches(phases):
        yield (lambda: model(x, edge_index)[train_mask]), y[train_mask]

    records = train(args, data, model, batches, args.epochs)
    model.eval()
    with torch.no_grad():
        return records, accuracy_of(model(x, edge_index)[test_mask], y[test_mask])


# -------------------------------------------------------------------------------- driver
def prepare(args, workdir: Path) -> None:
    import numpy as np
    import torch

    sys.path.insert(0, str(REPO))
    from lightning_gnn_dist.data import load_dataset
    from lightning_gnn_dist.data.local import build_local_partitions
    from lightning_gnn_dist.partition import get_partitioner

    data = load_dataset(DATASET)
    np.savez(
        workdir / "graph.npz",
        **{
            k: getattr(data, k).numpy() for k in ("edge_index", "x", "y", "train_mask", "test_mask")
        },
    )
    for world_size in (1, 2):
        if world_size == 1:
            assignment = np.zeros(data.num_nodes, dtype=np.int64)
        else:
            assignment = get_partitioner("metis", seed=0).partition(data, world_size)
        (workdir / "parts" / str(world_size)).mkdir(parents=True, exist_ok=True)
        for part in build_local_partitions(data, assignment, world_size):
            part.save(workdir / "parts" / str(world_size) / f"part{part.part_id}.pt")
    del torch


def run_variant(args, workdir: Path, system: str, task: str, world_size: int) -> dict:
    python = args.dgl_python if system == "dgl" else sys.executable
    base = [
        python,
        __file__,
        "--worker",
        f"{system}:{task}",
        "--data",
        str(workdir / "graph.npz"),
        "--parts",
        str(workdir / "parts"),
        *args.forward,
    ]
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(29500 + os.getpid() % 1000),
    }
    procs = [
        subprocess.Popen(
            [*base, "--out", str(workdir / f"r{rank}.json")], env={**env, "RANK": str(rank)}
        )
        for rank in range(world_size)
    ]
    for proc in procs:
        if proc.wait(timeout=1800) != 0:
            raise RuntimeError(f"{system}:{task} at {world_size} ranks failed")
    results = [json.loads((workdir / f"r{rank}.json").read_text()) for rank in range(world_size)]
    result = results[0]
    result["data_memory_bytes"] = max(r["data_memory_bytes"] for r in results)
    return result


def summarise(result: dict) -> dict:
    records = result["records"][1:]  # the first epoch warms up (caches, allocator)
    phases = sorted({k for r in records for k in r["phases_cpu"]})
    return {
        "cpu_s": statistics.median(r["cpu"] for r in records),
        "wall_s": statistics.median(r["wall"] for r in records),
        "phases_cpu_s": {
            k: statistics.median(r["phases_cpu"].get(k, 0.0) for r in records) for k in phases
        },
        "accuracy": result["accuracy"],
        "data_memory_mib": result["data_memory_bytes"] / 2**20,
    }


VARIANTS = [  # (row, system, task, ranks)
    ("full-batch GCN", "dgl", "gcn-full", 1),
    ("full-batch GCN", "ours", "gcn-full", 1),
    ("full-batch GCN", "pyg", "gcn-full", 1),
    ("full-batch GCN", "ours", "gcn-full", 2),
    ("full-batch SAGE", "dgl", "sage-full", 1),
    ("full-batch SAGE", "ours", "sage-full", 1),
    ("full-batch SAGE", "pyg", "sage-full", 1),
    ("full-batch SAGE", "ours", "sage-full", 2),
    ("mini-batch SAGE", "dgl", "sage-mini", 1),
    ("mini-batch SAGE", "ours", "sage-mini", 1),
    ("mini-batch SAGE", "ours", "sage-mini", 2),
]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only", default="", help="comma-separated rows to run (e.g. 'full-batch GCN')"
    )
    parser.add_argument("--dgl-python", default="/tmp/lgd-dgl-venv/bin/python")
    parser.add_argument("--worker", default="")
    parser.add_argument("--data", default="")
    parser.add_argument("--parts", default="")
    parser.add_argument("--out", default="")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--mini-epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None, help="mini-batch steps per epoch")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--mini-hidden", type=int, default=256)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--fanout", type=int, nargs="+", default=[25, 10])
    args = parser.parse_args()
    if args.worker:
        Path(args.out).write_text(json.dumps(worker(args)))
        return
    if args.quick:
        args.rounds, args.epochs, args.mini_epochs = 1, 4, 2
    args.forward = [
        "--epochs",
        str(args.epochs),
        "--mini-epochs",
        str(args.mini_epochs),
        "--hidden",
        str(args.hidden),
        "--mini-hidden",
        str(args.mini_hidden),
        "--dropout",
        str(args.dropout),
        "--batch-size",
        str(args.batch_size),
        "--fanout",
        *map(str, args.fanout),
    ]
    if not Path(args.dgl_python).exists():
        sys.exit(
            f"no DGL environment at {args.dgl_python}: run bash benchmarks/peer_dgl_env.sh first"
        )
    variants = [v for v in VARIANTS if not args.only or v[0] in args.only.split(",")]
    runs: dict[str, list] = {}
    loads = []
    with tempfile.TemporaryDirectory(prefix="peer_dgl_") as tmp:
        workdir = Path(tmp)
        prepare(args, workdir)
        for round_ in range(args.rounds):
            for row, system, task, ranks in variants:
                loads.append(os.getloadavg()[0])
                key = f"{row} | {system} | {ranks}"
                summary = summarise(run_variant(args, workdir, system, task, ranks))
                runs.setdefault(key, []).append(summary)
                print(
                    f"round {round_}: {key}: {summary['cpu_s'] * 1e3:.0f} ms CPU, {summary['wall_s'] * 1e3:.0f} ms wall, "
                    f"acc {summary['accuracy']:.3f}, {summary['data_memory_mib']:.0f} MiB",
                    flush=True,
                )
    write_results(args, runs, loads)


def write_results(args, runs: dict, loads: list) -> None:
    rows = []
    for key, summaries in runs.items():
        row, system, ranks = key.split(" | ")
        dgl = runs.get(f"{row} | dgl | 1")
        ratio = None
        if dgl:
            ratio = statistics.median(
                s["cpu_s"] / d["cpu_s"] for s, d in zip(summaries, dgl, strict=False)
            )
        phases = sorted({k for s in summaries for k in s["phases_cpu_s"]})
        rows.append(
            {
                "row": row,
                "system": system,
                "ranks": int(ranks),
                "cpu_s": statistics.median(s["cpu_s"] for s in summaries),
                "wall_s": statistics.median(s["wall_s"] for s in summaries),
                "cpu_ratio_to_dgl": ratio,
                "phases_cpu_s": {
                    k: statistics.median(s["phases_cpu_s"].get(k, 0.0) for s in summaries)
                    for k in phases
                },
                "accuracy": statistics.median(s["accuracy"] for s in summaries),
                "data_memory_mib": statistics.median(s["data_memory_mib"] for s in summaries),
            }
        )
    meta = {
        "dataset": DATASET,
        "rounds": args.rounds,
        "epochs": args.epochs,
        "mini_epochs": args.mini_epochs,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, one thread per process",
        "loadavg_1min_during_runs": [round(x, 2) for x in loads],
        "quick": args.quick,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "peer_dgl.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [
        "# This project against DGL 2.1 (issue 19)",
        "",
        f"`{DATASET}`; {meta['machine']}; {args.rounds} interleaved rounds; full-batch {args.epochs} epochs, "
        f"mini-batch {args.mini_epochs} epochs (first epoch not timed). Load average during runs: "
        f"{min(loads):.1f}–{max(loads):.1f}. CPU = process CPU seconds per epoch; ratio = median over rounds "
        "of (variant CPU ÷ DGL CPU) in the same round. Memory = peak RSS − RSS after imports (max over ranks).",
        "",
        "| setting | system | ranks | CPU s/epoch | wall s/epoch | CPU ÷ DGL | phases (CPU s) | test acc | data MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        phases = ", ".join(f"{k} {v:.3f}" for k, v in r["phases_cpu_s"].items())
        ratio = "—" if r["cpu_ratio_to_dgl"] is None else f"{r['cpu_ratio_to_dgl']:.2f}×"
        lines.append(
            f"| {r['row']} | {r['system']} | {r['ranks']} | {r['cpu_s']:.3f} | {r['wall_s']:.3f} | {ratio} | "
            f"{phases} | {r['accuracy']:.3f} | {r['data_memory_mib']:.0f} |"
        )
    (RESULTS / "peer_dgl.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

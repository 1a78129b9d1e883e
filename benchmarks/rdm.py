"""RDM (paper 003) against p2p and broadcast, and the cost model's order against measurement.

    python benchmarks/rdm.py            # R-MAT and a mesh, 2 and 4 ranks (≈ 15 min on 2 cores)
    python benchmarks/rdm.py --quick    # smoke configuration (< 2 min)

Writes ``benchmarks/results/rdm.json`` and ``rdm.md``. Per configuration (graph × ranks) one
forked gloo group (loopback, ``OMP_NUM_THREADS=1``) trains a 2-layer GCN full-batch with every
variant: ``p2p`` on a random and on a hypergraph partition, ``broadcast``, and **all 16 RDM
orders** (the model's pick, the auto pick — the exchange's own ``order="auto"`` procedure, run
first — and the worst order are among them), plus the model's pick computing the input gradient
as the paper does. Variants run interleaved: each round runs every variant for ``steps`` steps
in a fresh random order; a step's time is the slowest rank's wall time of forward, loss,
backward, gradient all-reduce and optimiser step; per round every variant's median step is
divided by the same round's ``p2p``-on-hypergraph median, and the table reports the median of
those ratios (robust to the machine's load, which is recorded). Bytes are the counters' per-step
bytes summed over ranks (RDM: equal to the plan's prediction, checked here); memory per rank is
the graph structure a rank holds (RDM: ``Â``/``Âᵀ`` CSR and the static features' column slice;
p2p: its ``LocalPartition``) and its peak RSS.

Table VIII check: is the model's pick the measured fastest order, or within 10% of it?
"""

# ruff: noqa: E402  (the environment must be set before torch is imported)
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
os.environ.setdefault("LGD_PROGRESS", "0")

import argparse
import datetime
import json
import multiprocessing as mp
import platform
import random
import resource
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import fields
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch_geometric.nn import GCNConv

from lightning_gnn_dist.comm import make_exchange
from lightning_gnn_dist.comm.rdm_plan import all_orders
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.nn import distribute, use_graph_context
from lightning_gnn_dist.nn.context import make_graph_context
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.report import markdown_table
from lightning_gnn_dist.partition.store import PartitionStore, partition_to_store

MESH = "metis:/usr/share/doc/libmetis-dev/examples/graphs/{}.graph?features=64&classes=8"
CONFIGS = {
    "full": {
        "graphs": {
            "rmat": "rmat?scale=14&edge_factor=16&features=64&classes=8",
            "mesh": MESH.format("4elt"),
        },
        "ranks": [2, 4],
        "hidden": 32,
        "rounds": 5,
        "steps": 3,
    },
    "quick": {
        "graphs": {"rmat": "rmat?scale=11&edge_factor=8&features=32&classes=4"},
        "ranks": [2],
        "hidden": 16,
        "rounds": 2,
        "steps": 2,
    },
}
BASELINE = "p2p hypergraph"


class Net(torch.nn.Module):
    def __init__(self, dims):
        super().__init__()
        torch.manual_seed(0)
        self.convs = torch.nn.ModuleList(
            GCNConv(a, b) for a, b in zip(dims, dims[1:], strict=False)
        )

    def forward(self, x, edge_index):
        x = torch.relu(self.convs[0](x, edge_index))
        return self.convs[1](x, edge_index)


def structure_bytes(part) -> int:
    """Bytes of a ``LocalPartition``'s graph structure and plans (not features, labels, masks)."""
    skip = {"x", "y", "train_mask", "val_mask", "test_mask", "global_ids"}
    return sum(
        v.numel() * v.element_size()
        for v in (getattr(part, f.name) for f in fields(part) if f.name not in skip)
        if isinstance(v, torch.Tensor)
    )


def rank_main(rank: int, world: int, stores: dict, dims: list[int], cfg: dict) -> dict:
    """Every variant on this rank; returns per-variant step times, bytes and memory."""
    parts = {m: PartitionStore.open(p).load_part(rank) for m, p in stores.items()}
    count = torch.tensor([parts["random"].train_mask.sum()], dtype=torch.float64)
    dist.all_reduce(count)
    global_train = int(count)
    model = distribute(Net(dims))
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    variants, contexts = {}, {}
    for mode, method in (("p2p", "random"), ("p2p", "hypergraph"), ("broadcast", "random")):
        part = parts[method]
        contexts[f"{mode} {method}"] = make_graph_context(part, make_exchange(mode, part))
        variants[f"{mode} {method}"] = (f"{mode} {method}", None, False)
    part = parts["random"]
    rdm = make_graph_context(part, make_exchange("rdm", part, order="auto"))
    rdm.prepare(model)
    contexts["rdm"] = rdm
    report = {"pareto": [c.__dict__ for c in rdm.exchange.candidates]}
    report["model_pick"] = rdm.exchange.candidates[0].order

    def step(name: str, x: torch.Tensor) -> tuple[float, float, float]:
        context = contexts["rdm" if name.startswith("rdm") else name]
        context.exchange.counter.reset()
        start, cpu = time.perf_counter(), time.process_time()
        model.zero_grad()
        with use_graph_context(context):
            out = model(x, context.partition.edge_index)
        mask = context.partition.train_mask
        loss = F.cross_entropy(out[mask], context.partition.y[mask], reduction="sum")
        (loss / global_train).backward()
        flat = torch.cat([p.grad.flatten() for p in model.parameters()])
        dist.all_reduce(flat)
        optimizer.step()
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        sent = sum(t.bytes_sent for _, _, t in context.exchange.counter.items())
        predicted = sum(
            int(b[rank].sum()) for _, _, b in context.exchange.counter.predicted_items()
        )
        if name.startswith("rdm") and predicted != sent:
            raise AssertionError(f"{name}: {sent} bytes sent, {predicted} predicted")
        return wall, cpu, sent

    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # timing only: weights stay
    features = part.x  # the static feature matrix of the random partition (rdm, p2p random)
    # the auto procedure: warm-up plus three timed steps per Pareto order, as in training
    epoch = 0
    while rdm.exchange.tuning or epoch == 0:
        rdm.exchange.begin_round(epoch)
        step("rdm", features)
        epoch += 1
    report["auto_pick"] = rdm.exchange.order
    report["auto_seconds"] = rdm.exchange.measured
    for order in all_orders(2):
        variants[f"rdm {order}"] = ("rdm", order, False)
    variants["rdm model pick + input grad"] = ("rdm", report["model_pick"], True)
    rng = random.Random(0)
    times = {name: [] for name in variants}
    cpu_times = {name: [] for name in variants}
    sent = {}
    for round_ in range(cfg["rounds"] + 1):  # round 0 warms every variant up
        names = list(variants)
        rng.shuffle(names)
        for name in names:
            context_name, order, grad = variants[name]
            if order is not None:
                rdm.exchange.order = order
            x = parts["hypergraph"].x if "hypergraph" in name else features
            x = x.detach().requires_grad_(grad)
            walls, cpus = [], []
            for _ in range(cfg["steps"]):
                wall, cpu, nbytes = step(context_name, x)
                walls.append(wall)
                cpus.append(cpu)
            reduced = torch.tensor([statistics.median(walls), statistics.median(cpus), nbytes])
            dist.all_reduce(reduced[:2], op=dist.ReduceOp.MAX)
            total = torch.tensor([nbytes], dtype=torch.float64)
            dist.all_reduce(total)
            if round_:
                times[name].append(float(reduced[0]))
                cpu_times[name].append(float(reduced[1]))
            sent[name] = int(total)
    model.load_state_dict(initial)
    memory = {
        "rdm_structure_bytes": sum(rdm.memory_bytes().values()),
        "p2p_structure_bytes": structure_bytes(parts["hypergraph"]),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    return {"times": times, "cpu": cpu_times, "bytes": sent, "report": report, "memory": memory}


def _worker(rank, world, init, queue, args):
    torch.set_num_threads(1)
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{init}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=600),
        )
        queue.put((rank, "ok", rank_main(rank, world, *args)))
    except BaseException:
        queue.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_group(world: int, *args) -> list[dict]:
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [
            ctx.Process(target=_worker, args=(r, world, f"{tmp}/init", queue, args))
            for r in range(world)
        ]
        for p in procs:
            p.start()
        results = {}
        for _ in range(world):
            rank, status, value = queue.get(timeout=3600)
            if status == "error":
                raise RuntimeError(f"rank {rank} failed:\n{value}")
            results[rank] = value
        for p in procs:
            p.join()
    return [results[r] for r in range(world)]


def summarise(graph: str, world: int, ranks: list[dict], data) -> dict:
    """Per variant: median ratio to the baseline per round, median ms, bytes; the picks."""
    first = ranks[0]
    base = first["times"][BASELINE]
    rows = []
    for name, walls in first["times"].items():
        ratios = [w / b for w, b in zip(walls, base, strict=True)]
        rows.append(
            {
                "graph": graph,
                "ranks": world,
                "variant": name,
                "step_ms": 1e3 * statistics.median(walls),
                "cpu_ms": 1e3 * statistics.median(first["cpu"][name]),
                f"vs {BASELINE}": statistics.median(ratios),
                "bytes_per_step": first["bytes"][name],
            }
        )
    report = first["report"]
    orders = {
        r["variant"][4:]: r
        for r in rows
        if r["variant"].startswith("rdm ") and len(r["variant"]) == 8
    }
    fastest = min(orders, key=lambda o: orders[o][f"vs {BASELINE}"])
    worst = max(orders, key=lambda o: orders[o][f"vs {BASELINE}"])
    ratio = lambda o: orders[o][f"vs {BASELINE}"] / orders[fastest][f"vs {BASELINE}"]  # noqa: E731
    pareto = [c["order"] for c in report["pareto"]]
    return {
        "graph": graph,
        "ranks": world,
        "vertices": data.num_nodes,
        "edges": data.edge_index.size(1),
        "rows": rows,
        "pareto": pareto,
        "model_pick": report["model_pick"],
        "auto_pick": report["auto_pick"],
        "auto_seconds": report["auto_seconds"],
        "fastest": fastest,
        "worst": worst,
        "model_pick_vs_fastest": ratio(report["model_pick"]),
        "auto_pick_vs_fastest": ratio(report["auto_pick"]),
        "pareto_best_vs_fastest": min(ratio(o) for o in pareto),
        "non_pareto_best_vs_fastest": min(ratio(o) for o in orders if o not in pareto),
        "memory_per_rank": [r["memory"] for r in ranks],
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "lgd-rdm"))
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    args = parser.parse_args(argv)
    cfg = CONFIGS["quick" if args.quick else "full"]
    start, load_start = time.perf_counter(), os.getloadavg()
    configs = []
    for graph, spec in cfg["graphs"].items():
        data = load_dataset(spec)
        dims = [data.x.size(1), cfg["hidden"], int(data.y.max()) + 1]
        for world in cfg["ranks"]:
            stores = {}
            for method in ("random", "hypergraph"):
                path = Path(args.cache_dir) / f"{graph}-{method}-{world}"
                partition_to_store(data, get_partitioner(method), world, path, dataset=spec)
                stores[method] = str(path)
            load = os.getloadavg()[0]
            ranks = run_group(world, stores, dims, cfg)
            summary = summarise(graph, world, ranks, data)
            summary["load_average"] = [load, os.getloadavg()[0]]
            configs.append(summary)
            print(
                f"{graph} P={world}: model {summary['model_pick']} "
                f"({summary['model_pick_vs_fastest']:.2f}x the fastest {summary['fastest']}), "
                f"auto {summary['auto_pick']} (load {load:.1f})",
                flush=True,
            )
    result = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "torch": torch.__version__,
        },
        "config": cfg,
        "dims_hidden": cfg["hidden"],
        "seconds": time.perf_counter() - start,
        "load_average": {"start": load_start, "end": os.getloadavg()},
        "configs": configs,
    }
    out = Path(args.out)
    name = "rdm_quick" if args.quick else "rdm"
    (out / f"{name}.json").write_text(json.dumps(result, indent=1, default=float))
    write_markdown(result, out / f"{name}.md")


def write_markdown(result: dict, path: Path) -> None:
    lines = [
        "# RDM vs p2p and broadcast; the order model vs measurement",
        "",
        f"{result['date']}, {result['machine']['cpus']} CPUs, torch {result['machine']['torch']}, "
        f"load {result['load_average']['start'][0]:.1f} → {result['load_average']['end'][0]:.1f}; "
        "generated by `benchmarks/rdm.py`. Step = slowest rank's wall time; ratios are "
        f"medians over rounds of (variant ÷ `{BASELINE}`) in the same round.",
        "",
    ]
    for c in result["configs"]:
        lines += [
            f"## {c['graph']} ({c['vertices']} vertices, {c['edges']} edges), {c['ranks']} ranks",
            "",
            f"Pareto {', '.join(c['pareto'])}; model pick **{c['model_pick']}** "
            f"({c['model_pick_vs_fastest']:.2f}× the fastest, {c['fastest']}); auto pick "
            f"**{c['auto_pick']}** ({c['auto_pick_vs_fastest']:.2f}×); best Pareto order "
            f"{c['pareto_best_vs_fastest']:.2f}×, best non-Pareto {c['non_pareto_best_vs_fastest']:.2f}×; "
            f"worst {c['worst']}. Load {c['load_average'][0]:.1f}.",
            "",
        ]
        keep = {BASELINE, "p2p random", "broadcast random", "rdm model pick + input grad"}
        keep |= {f"rdm {c[k]}" for k in ("model_pick", "auto_pick", "fastest", "worst")}
        rows = sorted((r for r in c["rows"] if r["variant"] in keep), key=lambda r: r["step_ms"])
        lines.append(
            markdown_table(
                rows, ["variant", "step_ms", "cpu_ms", f"vs {BASELINE}", "bytes_per_step"]
            )
        )
        memory = c["memory_per_rank"]
        lines += [
            "",
            "Memory per rank (MB): RDM structure "
            + ", ".join(f"{m['rdm_structure_bytes'] / 1e6:.1f}" for m in memory)
            + "; p2p (hypergraph) structure "
            + ", ".join(f"{m['p2p_structure_bytes'] / 1e6:.1f}" for m in memory)
            + "; peak RSS "
            + ", ".join(f"{m['peak_rss_bytes'] / 1e6:.0f}" for m in memory),
            "",
        ]
    path.write_text("\n".join(lines))


if __name__ == "__main__":
    main()

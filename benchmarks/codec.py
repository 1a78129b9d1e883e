"""Codec benchmark (issue 22): bytes and accuracy of every codec in every exchange mode.

    python benchmarks/codec.py            # 3 graphs x 5 modes x 6 codecs x 3 seeds
    python benchmarks/codec.py --quick    # digits only, 1 seed, few epochs (smoke run)

For each graph (``digits``: scikit-learn digits kNN graph; ``sbm``: stochastic block model;
``rmat``: directed power-law R-MAT graph; all with 64 features), each mode (``p2p``,
``broadcast``, ``cached`` with a variation-gap bound, ``cd-0`` on a vertex cut, and ``neighbor``:
owner-compute mini-batches whose remote feature rows are fetched with the codec) and each codec
(``fp32``, ``fp16``, ``bf16``, ``int8``, ``int4``, ``adaptive``; the fetch takes no
``adaptive``), it trains a 2-layer GraphSAGE (hidden 64: every exchanged row is 64 wide, so int8
moves (64 + 4)/256 = 0.266x the fp32 bytes) for a fixed number of epochs over three seeds on
2 forked gloo ranks, with the package's layers, graph contexts and exchanges (the code path of
``GNNStrategy``: summed gradients, loss over the global training count), and reports:

* bytes on the wire (counters, both directions, codec zero points and scales included) ÷ the
  fp32 run's bytes of the same mode and seed (``neighbor``: the fetched feature rows; the ids
  and labels that travel with them stay int64 and are listed apart);
* test accuracy after the last epoch (evaluation always exchanges fp32) minus the fp32 run of the
  same mode and seed, in points (mean ± sd over seeds);
* ``cached`` rows also against exact ``p2p`` fp32 bytes (Sancus^q's "communication avoided");
* the training epoch's CPU seconds ÷ fp32 (encoding cost; loopback, so no transfer saving).

Writes ``benchmarks/results/codec.json`` and ``codec.md``.
"""

# ruff: noqa: E402  (the environment must be set before torch is imported)
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import argparse
import datetime
import json
import math
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from lightning_gnn_dist.comm import CommCounter, make_exchange
from lightning_gnn_dist.comm.codec import CodecPolicy
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.data.local import build_local_partitions
from lightning_gnn_dist.data.vertex_cut import build_vertex_cut_parts
from lightning_gnn_dist.loaders.graph_store import PartitionedGraphStore
from lightning_gnn_dist.loaders.neighbor import NeighborLoader
from lightning_gnn_dist.nn import distribute, use_graph_context
from lightning_gnn_dist.nn.context import make_graph_context
from lightning_gnn_dist.nn.models import build_model
from lightning_gnn_dist.partition import get_partitioner

RESULTS = REPO / "benchmarks" / "results"
HIDDEN, LR, WEIGHT_DECAY, DROPOUT, WORLD = 64, 0.01, 5e-4, 0.5, 2
GRAPHS = {
    "digits": "digits",
    "sbm": "sbm?num_nodes=4000&num_classes=5&avg_degree=8&features=64&p_ratio=4&seed=0",
    "rmat": "rmat?scale=12&edge_factor=8&features=64&classes=8&seed=0",
}
CODECS = ["fp32", "fp16", "bf16", "int8", "int4", "adaptive"]
MODES = {
    "p2p": ("p2p", {}),
    "broadcast": ("broadcast", {}),
    "cached": ("cached", {"staleness": "variation-gap", "staleness_bound": 0.1}),
    "cd-0": ("cd-0", {}),
    "neighbor": ("neighbor", {}),
}
CONFIGS = {
    "default": {"graphs": list(GRAPHS), "seeds": [0, 1, 2], "epochs": 100, "nb_epochs": 10},
    "quick": {"graphs": ["digits"], "seeds": [0], "epochs": 20, "nb_epochs": 2},
}
FANOUT, BATCH = [10, 10], 256


def _rank(fn, rank, world, init_file, queue, args):
    torch.set_num_threads(1)
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{init_file}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=600),
        )
        queue.put((rank, "ok", fn(rank, world, *args)))
    except BaseException:  # noqa: BLE001 - reported to the parent
        queue.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_ranks(fn, world, *args):
    """Fork ``world`` gloo ranks running ``fn(rank, world, *args)``; results in rank order."""
    context = mp.get_context("fork")
    queue = context.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        init = os.path.join(tmp, "pg")
        procs = [
            context.Process(target=_rank, args=(fn, r, world, init, queue, args), daemon=True)
            for r in range(world)
        ]
        for p in procs:
            p.start()
        results = {}
        try:
            for _ in range(world):
                rank, status, value = queue.get(timeout=3600)
                if status != "ok":
                    raise RuntimeError(f"rank {rank} failed:\n{value}")
                results[rank] = value
        finally:
            for p in procs:
                p.join(timeout=10)
                if p.is_alive():
                    p.kill()
    return [results[r] for r in range(world)]


def _sum(values):
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor)
    return tensor.tolist()


def _step(model, optimizer):
    """Sum (full-batch) or average (mini-batch: caller scales the loss) gradients over ranks."""
    params = [p for p in model.parameters() if p.requires_grad]
    flat = torch.cat(
        [(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in params]
    )
    dist.all_reduce(flat)
    offset = 0
    for p in params:
        p.grad = flat[offset : offset + p.numel()].view_as(p).clone()
        offset += p.numel()
    optimizer.step()


def _test_accuracy(model, part, exchange):
    """Exact (fp32) layer-wise inference over every rank's part; test accuracy of the graph."""
    exchange.counter = CommCounter()
    exchange.begin_round(None)
    model.eval()
    with torch.no_grad(), use_graph_context(make_graph_context(part, exchange)):
        out = model(part.x, part.edge_index)
    mask = part.test_mask
    correct, total = _sum([float((out[mask].argmax(-1) == part.y[mask]).sum()), float(mask.sum())])
    return correct / total


def _model(seed, features, classes):
    torch.manual_seed(seed)
    return distribute(build_model("sage", features, HIDDEN, classes, dropout=DROPOUT))


def _full_batch(rank, world, mode, options, parts, classes, runs, epochs):
    """Every (codec, seed) run of a full-batch mode on this rank."""
    part, out = parts[rank], []
    train = part.train_mask
    (global_train,) = _sum([float(train.sum())])
    for codec, seed in runs:
        model = _model(seed, part.x.size(1), classes)
        policy = CodecPolicy(codec, seed=seed)
        exchange = make_exchange(mode, part, codec=policy, **options)
        context = make_graph_context(part, exchange)
        optimizer = torch.optim.Adam(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
        seconds = []
        for epoch in range(epochs):
            start = time.process_time()
            exchange.begin_round(epoch)
            model.train()
            optimizer.zero_grad()
            with use_graph_context(context):
                logits = model(part.x, part.edge_index)
            loss = F.cross_entropy(logits[train], part.y[train], reduction="sum") / global_train
            loss.backward()
            _step(model, optimizer)
            seconds.append(time.process_time() - start)
        traffic = {d: 0 for d in ("forward", "backward", "control")}
        for _, direction, t in exchange.counter.items():
            traffic[direction] += t.bytes_sent
        avoided = sum(s.bytes_avoided for s in getattr(exchange, "statistics", {}).values())
        exchange.close()
        out.append(
            {
                "codec": codec,
                "seed": seed,
                "bytes": _sum([traffic["forward"] + traffic["backward"]])[0],
                "control_bytes": _sum([traffic["control"]])[0],
                "cache_avoided_bytes": _sum([avoided])[0],
                "epoch_cpu_s": statistics.median(seconds[1:]),
                "choices": [list(h) for h in policy.history[-1:]],
                "test_acc": _test_accuracy(model, part, exchange),
            }
        )
    return out


def _neighbor(rank, world, mode, options, parts, classes, runs, epochs):
    """Every (codec, seed) run of owner-compute mini-batches with the codec on the fetch."""
    part, out = parts[rank], []
    steps = math.ceil(max(_max(int(part.train_mask.sum())), 1) / BATCH)
    for codec, seed in runs:
        model = _model(seed, part.x.size(1), classes)
        store = PartitionedGraphStore(part, codec=codec)
        loader = NeighborLoader(
            store,
            FANOUT,
            part.train_mask,
            batch_size=BATCH,
            shuffle=True,
            seed=seed,
            num_steps=steps,
        )
        optimizer = torch.optim.Adam(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
        seconds = []
        for _ in range(epochs):
            start = time.process_time()
            model.train()
            for batch in loader:
                optimizer.zero_grad()
                logits = model(batch.x, batch.edge_index)[: batch.batch_size]
                loss = F.cross_entropy(logits, batch.y[: batch.batch_size]) / world
                loss.backward()
                _step(model, optimizer)
            seconds.append(time.process_time() - start)
        x_record = next(
            t for lay, d, t in store.counter.items() if (lay, d) == ("features", "response")
        )
        rows = x_record.rows_sent // 2  # one x row and one (id, label) row per fetched vertex
        feature_bytes = x_record.bytes_sent - rows * 16
        out.append(
            {
                "codec": codec,
                "seed": seed,
                "bytes": _sum([feature_bytes])[0],
                "id_label_bytes": _sum([rows * 16])[0],
                "control_bytes": 0.0,
                "cache_avoided_bytes": 0.0,
                "epoch_cpu_s": statistics.median(seconds[1:] or seconds),
                "choices": [],
                "test_acc": _test_accuracy(model, part, make_exchange("p2p", part)),
            }
        )
    return out


def _max(value):
    tensor = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor)


def run_graph(name, config):
    data = load_dataset(GRAPHS[name])
    classes = int(data.y.max()) + 1
    assignment = get_partitioner("metis", seed=0).partition(data, WORLD)
    vertex_parts = list(build_local_partitions(data, assignment, WORLD))
    edge_parts = get_partitioner("vertex-cut", seed=0).partition(data, WORLD)
    cut_parts = list(build_vertex_cut_parts(data, edge_parts, WORLD, seed=0))
    results = {}
    for label, (mode, options) in MODES.items():
        codecs = [c for c in CODECS if not (label == "neighbor" and c == "adaptive")]
        # interleaved: all codecs of one seed, then the next seed
        runs = [(codec, seed) for seed in config["seeds"] for codec in codecs]
        if label == "neighbor":
            fn, parts, epochs = _neighbor, vertex_parts, config["nb_epochs"]
        else:
            fn, parts, epochs = (
                _full_batch,
                cut_parts if mode == "cd-0" else vertex_parts,
                config["epochs"],
            )
        start, load = time.perf_counter(), os.getloadavg()[0]
        results[label] = run_ranks(fn, WORLD, mode, options, parts, classes, runs, epochs)[0]
        print(f"{name} {label}: {time.perf_counter() - start:.0f} s, load {load:.1f}", flush=True)
    return {"nodes": data.num_nodes, "edges": int(data.edge_index.size(1)), "runs": results}


def summarise(graph):
    """Per mode and codec: ratios and accuracy deltas against fp32 of the same mode and seed."""
    rows = []
    p2p_fp32 = {r["seed"]: r for r in graph["runs"]["p2p"] if r["codec"] == "fp32"}
    for mode, runs in graph["runs"].items():
        fp32 = {r["seed"]: r for r in runs if r["codec"] == "fp32"}
        for codec in dict.fromkeys(r["codec"] for r in runs):
            mine = [r for r in runs if r["codec"] == codec]
            delta = [100 * (r["test_acc"] - fp32[r["seed"]]["test_acc"]) for r in mine]
            row = {
                "mode": mode,
                "codec": codec,
                "bytes_ratio": float(
                    np.mean([r["bytes"] / fp32[r["seed"]]["bytes"] for r in mine])
                ),
                "acc": float(np.mean([r["test_acc"] for r in mine])),
                "delta_mean": float(np.mean(delta)),
                "delta_sd": float(np.std(delta)),
                "cpu_ratio": float(
                    np.median([r["epoch_cpu_s"] / fp32[r["seed"]]["epoch_cpu_s"] for r in mine])
                ),
                "choices": mine[0]["choices"],
            }
            if mode == "cached":  # Sancus^q: against exact p2p fp32
                exact = [p2p_fp32[r["seed"]] for r in mine]
                row["avoided_vs_p2p_fp32"] = float(
                    np.mean([1 - r["bytes"] / e["bytes"] for r, e in zip(mine, exact, strict=True)])
                )
                row["delta_vs_p2p_fp32"] = float(
                    np.mean(
                        [
                            100 * (r["test_acc"] - e["test_acc"])
                            for r, e in zip(mine, exact, strict=True)
                        ]
                    )
                )
            if mode == "neighbor":
                total = [
                    (r["bytes"] + r["id_label_bytes"])
                    / (fp32[r["seed"]]["bytes"] + fp32[r["seed"]]["id_label_bytes"])
                    for r in mine
                ]
                row["fetch_total_ratio"] = float(np.mean(total))
            rows.append(row)
    return rows


def render(report):
    lines = [
        "# Codec benchmark (issue 22)",
        "",
        f"`python benchmarks/codec.py{' --quick' if report['config_name'] == 'quick' else ''}` — "
        f"{report['started']}, {report['minutes']:.1f} min, load average {report['load_start']:.1f} → "
        f"{report['load_end']:.1f} (shared 2-core machine), {WORLD} ranks (gloo, forked), GraphSAGE 2 layers "
        f"hidden {HIDDEN}, dropout {DROPOUT}, Adam lr {LR}, METIS parts (vertex cut: Libra), "
        f"{report['config']['epochs']} full-batch epochs / {report['config']['nb_epochs']} mini-batch epochs "
        f"(fan-out {FANOUT}, batch {BATCH}), seeds {report['config']['seeds']}. Ratios and Δ accuracy "
        "against the fp32 run of the same mode and seed; accuracy = test accuracy after the last "
        "epoch with an fp32 evaluation exchange.",
        "",
    ]
    for name, graph in report["graphs"].items():
        lines += [
            f"## {name} ({graph['nodes']:,} vertices, {graph['edges']:,} edges)",
            "",
            "| mode | codec | bytes ÷ fp32 | test acc | Δ acc (points, mean ± sd) | epoch CPU ÷ fp32 | notes |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in graph["summary"]:
            notes = []
            if "avoided_vs_p2p_fp32" in r:
                notes.append(
                    f"avoids {100 * r['avoided_vs_p2p_fp32']:.1f} % of p2p fp32 bytes, Δ {r['delta_vs_p2p_fp32']:+.2f} vs p2p fp32"
                )
            if "fetch_total_ratio" in r:
                notes.append(f"with ids/labels {r['fetch_total_ratio']:.3f}")
            if r["choices"]:
                notes.append(
                    "last choice "
                    + ", ".join(f"{k.split('.')[-1]}: {v}" for k, v in r["choices"][0][1].items())
                )
            lines.append(
                f"| {r['mode']} | {r['codec']} | {r['bytes_ratio']:.3f} | {r['acc']:.3f} | "
                f"{r['delta_mean']:+.2f} ± {r['delta_sd']:.2f} | {r['cpu_ratio']:.2f} | {'; '.join(notes)} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="digits, one seed, few epochs")
    parser.add_argument("--out", default="codec", help="file stem in benchmarks/results")
    args = parser.parse_args(argv)
    name = "quick" if args.quick else "default"
    config = CONFIGS[name]
    start, load_start = time.perf_counter(), os.getloadavg()[0]
    report = {
        "config_name": name,
        "config": config,
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load_start": load_start,
        "graphs": {},
    }
    for graph in config["graphs"]:
        report["graphs"][graph] = run_graph(graph, config)
        report["graphs"][graph]["summary"] = summarise(report["graphs"][graph])
    report["minutes"] = (time.perf_counter() - start) / 60
    report["load_end"] = os.getloadavg()[0]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(report, indent=1))
    (RESULTS / f"{args.out}.md").write_text(render(report) + "\n")
    print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Message codecs (issue 22): bytes and accuracy of every codec in every exchange mode.

    python -m benchmarks.codec            # 3 graphs x 5 modes x 6 codecs x 3 seeds (~1-1.5 h)
    python -m benchmarks.codec --quick    # digits, 1 seed, 20 epochs (~1-2 min)

For each graph (``digits``: the scikit-learn digits kNN graph; ``sbm``: a stochastic block model;
``rmat``: a directed power-law R-MAT graph; 64 features each), each mode (``p2p``, ``broadcast``,
``cached`` with the variation-gap bound, ``cd-0`` on a Libra vertex cut, and ``neighbor``:
owner-compute mini-batches whose remote feature rows are fetched with the codec) and each codec
(``fp32``, ``fp16``, ``bf16``, ``int8``, ``int4``, ``adaptive``; the fetch takes no
``adaptive``), it trains a 2-layer GraphSAGE (hidden 64: the first layer exchanges 64-wide rows
forward, the second ``classes``-wide rows both ways, transform-first; int8 moves (64 + 2)/256 =
0.258x the fp32 bytes on 64-wide rows, (8 + 2)/32 on 8-wide ones; no dropout, so that rows
change slowly enough for the variation-gap cache to skip rounds) for a fixed number of epochs on 2 forked gloo ranks, with the
package's layers, graph contexts and exchanges (``GNNStrategy``'s arithmetic: loss over the global
training count, gradients summed; mini-batches average them). One round per seed runs every codec
of a (graph, mode), interleaved. Reported against the fp32 run of the same mode and seed:

* bytes on the wire ÷ fp32 (counters; int8/int4 row headers included; ``neighbor``: the fetched
  feature rows, with the ids and labels that travel beside them as a second figure);
* test accuracy after the last epoch (fp32 evaluation exchange), Δ in points (mean ± sd over
  seeds), and the same for the mean test accuracy of the last 10 epochs (less sensitive to the
  epoch-to-epoch wobble of a still-moving model);
* ``cached`` also against exact ``p2p`` fp32 of the same seed (Sancus^q's "communication
  avoided");
* training-epoch CPU seconds ÷ fp32 (the encoding's cost; over loopback no transfer time is
  saved; pooled medians, range over seeds).
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from benchmarks.common.processes import run_ranks
from benchmarks.harness import Benchmark, Run, log, ratio, ratio_cell, run_rounds
from lightning_gnn_dist.comm import CommCounter, make_exchange
from lightning_gnn_dist.comm.codec_policy import CodecPolicy
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.data.local import build_local_partitions
from lightning_gnn_dist.data.vertex_cut import build_vertex_cut_parts
from lightning_gnn_dist.loaders.graph_store import PartitionedGraphStore
from lightning_gnn_dist.loaders.neighbor import NeighborLoader
from lightning_gnn_dist.nn import distribute, use_graph_context
from lightning_gnn_dist.nn.context import make_graph_context
from lightning_gnn_dist.nn.models import build_model
from lightning_gnn_dist.partition import get_partitioner

MODEL = {"hidden": 64, "lr": 0.01, "weight_decay": 5e-4, "dropout": 0.0, "world": 2}
GRAPHS = {
    "digits": "digits",
    "sbm": "sbm?num_nodes=8000&num_classes=5&avg_degree=8&features=64&p_ratio=4&seed=0",
    "rmat": "rmat?scale=13&edge_factor=8&features=64&classes=8&seed=0",
}
CODECS = ["fp32", "fp16", "bf16", "int8", "int4", "adaptive"]
MODES = {
    "p2p": ("p2p", {}),
    "broadcast": ("broadcast", {}),
    "cached": ("cached", {"staleness": "variation-gap", "staleness_bound": 0.05}),
    "cd-0": ("cd-0", {}),
    "neighbor": ("neighbor", {}),
}
CONFIGS = {
    "default": {"graphs": list(GRAPHS), "seeds": [0, 1, 2], "epochs": 100, "nb_epochs": 10},
    "quick": {"graphs": ["digits"], "seeds": [0], "epochs": 20, "nb_epochs": 2},
}
NEIGHBOR = {"fanout": [10, 10], "batch": 256}
LAST = 10  # epochs whose test accuracy is averaged for the second accuracy figure


def _sum(values: list[float]) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor)
    return tensor.tolist()


def _step(model, optimizer, scale: float = 1.0) -> None:
    """Sum the gradients over ranks (times ``scale``), then take the optimiser step."""
    params = [p for p in model.parameters() if p.requires_grad]
    flat = torch.cat([p.grad.flatten() for p in params])
    dist.all_reduce(flat)
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset : offset + p.numel()].view_as(p)).mul_(scale)
        offset += p.numel()
    optimizer.step()


def _test_accuracy(model, part, exchange) -> float:
    """Exact (fp32) layer-wise inference over every part; the graph's test accuracy."""
    counter, exchange.counter = exchange.counter, CommCounter()
    exchange.begin_round(None)
    model.eval()
    with torch.no_grad(), use_graph_context(make_graph_context(part, exchange)):
        out = model(part.x, part.edge_index)
    exchange.counter = counter
    model.train()
    mask = part.test_mask
    correct, total = _sum([float((out[mask].argmax(-1) == part.y[mask]).sum()), float(mask.sum())])
    return correct / total


def _model(seed: int, features: int, classes: int):
    torch.manual_seed(seed)
    return distribute(
        build_model("sage", features, MODEL["hidden"], classes, dropout=MODEL["dropout"])
    )


def _optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=MODEL["lr"], weight_decay=MODEL["weight_decay"])


def _full_batch(rank, world, mode, options, parts, classes, codec, seed, epochs) -> dict:
    """One full-batch run: bytes, test accuracies and epoch CPU seconds (rank 0's)."""
    part = parts[rank]
    train = part.train_mask
    (global_train,) = _sum([float(train.sum())])
    model, policy = _model(seed, part.x.size(1), classes), CodecPolicy(codec, seed=seed)
    exchange = make_exchange(mode, part, codec=policy, **options)
    context, optimizer = make_graph_context(part, exchange), _optimizer(model)
    seconds, accuracies = [], []
    for epoch in range(epochs):
        start = time.process_time()
        exchange.begin_round(epoch)
        optimizer.zero_grad()
        with use_graph_context(context):
            logits = model(part.x, part.edge_index)
        loss = F.cross_entropy(logits[train], part.y[train], reduction="sum") / global_train
        loss.backward()
        _step(model, optimizer)
        seconds.append(time.process_time() - start)
        if epoch >= epochs - LAST:
            accuracies.append(_test_accuracy(model, part, exchange))
    traffic = {"forward": 0, "backward": 0, "control": 0}
    for _, direction, t in exchange.counter.items():
        traffic[direction] += t.bytes_sent
    exchange.close()
    return {
        "bytes": _sum([traffic["forward"] + traffic["backward"]])[0],
        "control_bytes": _sum([traffic["control"]])[0],
        "test_acc": accuracies[-1],
        "test_acc_last": float(np.mean(accuracies)),
        "epoch_cpu_s": seconds[1:],
        "choices": policy.history[-1][1] if policy.history else {},
    }


def _neighbor(rank, world, mode, options, parts, classes, codec, seed, epochs) -> dict:
    """One owner-compute mini-batch run with the codec on the remote feature fetch."""
    part = parts[rank]
    count = torch.tensor([int(part.train_mask.sum())])
    dist.all_reduce(count, op=dist.ReduceOp.MAX)  # the largest part sets the steps
    model, store = _model(seed, part.x.size(1), classes), PartitionedGraphStore(part, codec=codec)
    loader = NeighborLoader(
        store,
        NEIGHBOR["fanout"],
        part.train_mask,
        batch_size=NEIGHBOR["batch"],
        shuffle=True,
        seed=seed,
        num_steps=max(1, math.ceil(int(count) / NEIGHBOR["batch"])),
    )
    optimizer, exact = _optimizer(model), make_exchange("p2p", part)
    seconds, accuracies = [], []
    for epoch in range(epochs):
        start = time.process_time()
        for batch in loader:
            optimizer.zero_grad()
            logits = model(batch.x, batch.edge_index)[: batch.batch_size]
            F.cross_entropy(logits, batch.y[: batch.batch_size]).backward()
            _step(model, optimizer, 1 / world)
        seconds.append(time.process_time() - start)
        if epoch >= epochs - LAST:
            accuracies.append(_test_accuracy(model, part, exact))
    records = {(lay, d): t for lay, d, t in store.counter.items()}
    features = records[("features", "response")]  # the x rows, encoded
    ids = records.get(("features.ids", "response"))  # ids, labels and degrees beside them
    return {
        "bytes": _sum([features.bytes_sent])[0],
        "id_label_bytes": _sum([0 if ids is None else ids.bytes_sent])[0],
        "control_bytes": 0.0,
        "test_acc": accuracies[-1],
        "test_acc_last": float(np.mean(accuracies)),
        "epoch_cpu_s": seconds[1:] or seconds,
        "choices": {},
    }


def _graph_runs(r: Run, name: str, config: dict, seeds: list[int]) -> dict:
    data = load_dataset(GRAPHS[name])
    classes, world = int(data.y.max()) + 1, MODEL["world"]
    vertex_parts = list(
        build_local_partitions(data, get_partitioner("metis", seed=0).partition(data, world), world)
    )
    edge_parts = get_partitioner("vertex-cut", seed=0).partition(data, world)
    cut_parts = list(build_vertex_cut_parts(data, edge_parts, world, seed=0))
    graph = {"nodes": data.num_nodes, "edges": int(data.edge_index.size(1)), "runs": {}}
    r.report["graphs"][name] = graph
    for label in config.get("modes", list(MODES)):
        mode, options = MODES[label]
        fn, parts, epochs = _full_batch, vertex_parts, config["epochs"]
        if label == "neighbor":
            fn, epochs = _neighbor, config["nb_epochs"]
        elif mode == "cd-0":
            parts = cut_parts
        codecs = [
            c for c in config.get("codecs", CODECS) if not (label == "neighbor" and c == "adaptive")
        ]

        def variant(codec, fn=fn, mode=mode, options=options, parts=parts, epochs=epochs):
            def measure(i: int) -> dict:
                args = (mode, options, parts, classes, codec, seeds[i], epochs)
                return run_ranks(fn, world, *args)[0]

            return measure

        start = time.perf_counter()
        graph["runs"][label] = run_rounds({c: variant(c) for c in codecs}, len(seeds))
        log(f"{name} {label}: {time.perf_counter() - start:.0f} s")
        r.save()
    return graph


def summarise(graph: dict, seeds: list[int]) -> list[dict]:
    """Per mode and codec, against fp32 of the same mode and seed (lists in seed order)."""
    rows = []
    p2p_fp32 = graph["runs"].get("p2p", {}).get("fp32")
    for mode, by_codec in graph["runs"].items():
        fp32 = by_codec["fp32"]
        for codec, runs in by_codec.items():
            pairs = list(zip(runs, fp32, strict=True))
            delta = [100 * (x["test_acc"] - e["test_acc"]) for x, e in pairs]
            last = [100 * (x["test_acc_last"] - e["test_acc_last"]) for x, e in pairs]
            cpu = ratio([x["epoch_cpu_s"] for x in runs], [e["epoch_cpu_s"] for e in fp32])
            row = {
                "mode": mode,
                "codec": codec,
                "bytes_ratio": float(np.mean([x["bytes"] / e["bytes"] for x, e in pairs])),
                "acc": float(np.mean([x["test_acc"] for x in runs])),
                "delta": [float(np.mean(delta)), float(np.std(delta))],
                "delta_last": [float(np.mean(last)), float(np.std(last))],
                "cpu_ratio": [cpu.value, list(cpu.per_round)],
                "choices": runs[0]["choices"],
            }
            if mode == "cached" and p2p_fp32 is not None:  # Sancus^q: against exact p2p fp32
                exact = list(zip(runs, p2p_fp32, strict=True))
                row["avoided_vs_p2p"] = float(
                    np.mean([1 - x["bytes"] / e["bytes"] for x, e in exact])
                )
                row["delta_vs_p2p"] = float(
                    np.mean([100 * (x["test_acc"] - e["test_acc"]) for x, e in exact])
                )
            if mode == "neighbor":
                total = [
                    (x["bytes"] + x["id_label_bytes"]) / (e["bytes"] + e["id_label_bytes"])
                    for x, e in pairs
                ]
                row["fetch_total_ratio"] = float(np.mean(total))
            rows.append(row)
    return rows


def add_arguments(parser) -> None:
    """A subset of the grid (e.g. more seeds for one graph): ``--out`` keeps it apart."""

    def names(choices):
        def parse(text: str) -> list[str]:
            chosen = text.split(",")
            unknown = sorted(set(chosen) - set(choices))
            if unknown:
                raise ValueError(f"unknown {unknown}; choose from {', '.join(choices)}")
            return chosen

        return parse

    parser.add_argument("--graphs", type=names(list(GRAPHS)), help="subset of the graphs")
    parser.add_argument("--modes", type=names(list(MODES)), help="subset of the modes (fp32 first)")
    parser.add_argument("--codecs", type=names(CODECS), help="subset of the codecs (with fp32)")
    parser.add_argument(
        "--seeds", type=lambda t: [int(v) for v in t.split(",")], help="seeds instead of 0,1,2"
    )


def run(r: Run) -> None:
    config = dict(CONFIGS["quick" if r.quick else "default"])
    for key in ("graphs", "modes", "codecs", "seeds"):
        if getattr(r.args, key, None):
            config[key] = getattr(r.args, key)
    if "fp32" not in config.get("codecs", CODECS):
        raise SystemExit("--codecs must include fp32 (every ratio is against it)")
    seeds = config["seeds"][: r.repeats] if r.args.repeats else config["seeds"]
    r.report.update(
        model=MODEL, graphs={}, specs={g: GRAPHS[g] for g in config["graphs"]},
        config={**config, "seeds": seeds}, neighbor=NEIGHBOR, modes={k: v[1] for k, v in MODES.items()},
        last_epochs=LAST,
    )  # fmt: skip
    for name in config["graphs"]:
        graph = _graph_runs(r, name, config, seeds)
        graph["summary"] = summarise(graph, seeds)
        r.save()


def _notes(row: dict) -> str:
    notes = []
    if "avoided_vs_p2p" in row:
        notes.append(
            f"avoids {100 * row['avoided_vs_p2p']:.1f} % of p2p fp32 bytes (Δ {row['delta_vs_p2p']:+.2f})"
        )
    if "fetch_total_ratio" in row:
        notes.append(f"{row['fetch_total_ratio']:.3f} with ids and labels")
    if row["choices"]:
        notes.append("chose " + ", ".join(f"{k}: {v}" for k, v in row["choices"].items()))
    return "; ".join(notes)


def render(report: dict) -> str:
    model, config = report["model"], report["config"]
    lines = [
        "# Message codecs: bytes and accuracy per exchange mode (issue 22)",
        "",
        f"{model['world']} ranks (gloo, forked), GraphSAGE 2 layers hidden {model['hidden']}, dropout "
        f"{model['dropout']}, Adam lr {model['lr']}, weight decay {model['weight_decay']}; METIS parts "
        f"(``cd-0``: Libra vertex cut); {config['epochs']} full-batch epochs, {config['nb_epochs']} "
        f"mini-batch epochs (fan-out {report['neighbor']['fanout']}, batch {report['neighbor']['batch']}); "
        f"seeds {config['seeds']} (one round each, codecs interleaved); ``cached``: "
        f"{report['modes']['cached']}. Ratios and Δ accuracy against the fp32 run of the same mode and "
        f"seed. Δ acc: test accuracy after the last epoch; Δ last {report['last_epochs']}: mean test "
        "accuracy of the last epochs (both evaluated with fp32 exchanges; points, mean ± sd over seeds).",
        "",
    ]
    for name, graph in report["graphs"].items():
        if "summary" not in graph:
            continue
        lines += [
            f"## {name}: `{report['specs'][name]}` ({graph['nodes']:,} vertices, {graph['edges']:,} edges)",
            "",
            f"| mode | codec | bytes ÷ fp32 | test acc | Δ acc | Δ last {report['last_epochs']} | epoch CPU ÷ fp32 | notes |",
            "|---|---|---:|---:|---:|---:|---:|---|",
        ]
        for row in graph["summary"]:
            (d, sd), (dl, sdl) = row["delta"], row["delta_last"]
            lines.append(
                f"| {row['mode']} | {row['codec']} | {row['bytes_ratio']:.3f} | {row['acc']:.3f} | "
                f"{d:+.2f} ± {sd:.2f} | {dl:+.2f} ± {sdl:.2f} | {ratio_cell(*row['cpu_ratio'])} | {_notes(row)} |"
            )
        lines.append("")
    return "\n".join(lines)


BENCHMARK = Benchmark(
    "codec", __doc__, run, render, add_arguments=add_arguments, repeats=3, quick_repeats=1
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())

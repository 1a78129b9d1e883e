"""Message codecs on the emulated cluster (issues 22 and 20): epoch time at shaped link rates.

    python -m benchmarks.codec_cluster            # 2 nodes x 1 rank, 2 link rates, 3 rounds
    python -m benchmarks.codec_cluster --quick    # one rate, one round (smoke run)

Two emulated nodes (network namespaces joined by ``tbf``-shaped links, one core each; needs root,
see :mod:`lightning_gnn_dist.testing.cluster`) train the ``codec`` benchmark's model (2-layer
GraphSAGE, hidden 64, every exchanged row 64 wide) full-batch with ``p2p`` on an R-MAT graph.
Inside one pair of node processes, every round trains every codec for a few timed epochs after
warm-up ones (codecs interleaved: forwards in even rounds, backwards in odd ones). Reported per
link rate: bytes per epoch (rank 0), the median epoch (wall seconds on rank 0) and its ratio to
fp32 (pooled medians, range over rounds), and the exchange's wait as a share of the epoch.

Link rates: a cluster node computes this model ~N× faster than one core here (N ≈ 16–64 cores),
so a 10–100 Gbit/s fabric corresponds to ≈ 0.15–6 Gbit/s per emulated node; the rates are chosen
so that the fp32 exchange is most of the epoch (communication-bound) and a smaller share of it.
Without the emulated cluster (no root, or issue 20's ``lightning_gnn_dist.testing`` absent) the
run records why and measures nothing.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from benchmarks.common.cluster import run_on_emulated_nodes
from benchmarks.harness import (
    Benchmark,
    Run,
    interleaved,
    log,
    pooled_median,
    ratio,
    ratio_cell,
)
from lightning_gnn_dist.testing import emulation_unavailable_reason

DATASET = "rmat?scale=14&edge_factor=8&features=64&classes=8&seed=0"
CODECS = ["fp32", "bf16", "int8", "int4"]
CONFIGS = {
    "default": {"rates": ["50mbit", "200mbit"], "warmup": 2, "epochs": 6},
    "quick": {"rates": ["200mbit"], "warmup": 1, "epochs": 2},
}
NODE_FLAG = "--node"


def node_main(config: dict, out: Path) -> None:
    """One node = one rank: every round trains every codec and times its epochs."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from benchmarks.codec import MODEL, _model, _optimizer, _step
    from lightning_gnn_dist.comm import make_exchange
    from lightning_gnn_dist.data import load_dataset
    from lightning_gnn_dist.data.local import build_local_partitions
    from lightning_gnn_dist.nn import use_graph_context
    from lightning_gnn_dist.nn.context import make_graph_context
    from lightning_gnn_dist.partition import get_partitioner

    torch.set_num_threads(1)
    rank, world = int(os.environ["LGD_EMULATED_NODE"]), int(os.environ["LGD_EMULATED_NODES"])
    master = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    dist.init_process_group("gloo", init_method=master, rank=rank, world_size=world)
    data = load_dataset(DATASET)
    assignment = get_partitioner("metis", seed=0).partition(data, world)
    part, classes = (
        list(build_local_partitions(data, assignment, world))[rank],
        int(data.y.max()) + 1,
    )
    del data
    train = part.train_mask
    count = torch.tensor([float(train.sum())])
    dist.all_reduce(count)
    samples = {c: [[] for _ in range(config["rounds"])] for c in CODECS}
    traffic = {}
    for round_index, codec in interleaved(CODECS, config["rounds"]):
        model = _model(0, part.x.size(1), classes)
        exchange = make_exchange("p2p", part, codec=codec)
        context, optimizer = make_graph_context(part, exchange), _optimizer(model)
        for epoch in range(config["warmup"] + config["epochs"]):
            if epoch == config["warmup"]:
                exchange.counter.reset()
            dist.barrier()
            start = time.perf_counter()
            exchange.begin_round(epoch)
            optimizer.zero_grad()
            with use_graph_context(context):
                logits = model(part.x, part.edge_index)
            (F.cross_entropy(logits[train], part.y[train], reduction="sum") / count).backward()
            _step(model, optimizer)
            if epoch >= config["warmup"]:
                samples[codec][round_index].append(time.perf_counter() - start)
        traffic.setdefault(codec, []).append(
            {
                "bytes": exchange.counter.total("bytes_sent") / config["epochs"],
                "wait": exchange.counter.total("seconds") / config["epochs"],
            }
        )
    if rank == 0:
        out.write_text(json.dumps({"samples": samples, "traffic": traffic, "model": MODEL}))
    dist.destroy_process_group()


def run(r: Run) -> None:
    config = {**CONFIGS["quick" if r.quick else "default"], "rounds": r.repeats}
    r.report.update(
        config=config, dataset=DATASET, rates={}, skipped=emulation_unavailable_reason()
    )
    if r.report["skipped"]:
        log(f"skipped: {r.report['skipped']}")
        return
    for rate in config["rates"]:
        result = run_on_emulated_nodes(
            2, rate, "benchmarks.codec_cluster", [NODE_FLAG, json.dumps(config)], 29511
        )
        samples, fp32 = result["samples"], result["samples"]["fp32"]
        rows = []
        for codec in CODECS:
            over = ratio(samples[codec], fp32)
            moved = [t["bytes"] for t in result["traffic"][codec]]
            wait = sum(t["wait"] for t in result["traffic"][codec]) / len(moved)
            epoch = pooled_median(samples[codec])
            rows.append(
                {
                    "codec": codec,
                    "bytes": moved[0],
                    "bytes_ratio": moved[0] / result["traffic"]["fp32"][0]["bytes"],
                    "epoch_s": epoch,
                    "ratio": over.value,
                    "per_round": list(over.per_round),
                    "wait_share": wait / epoch,
                }
            )
        r.report["rates"][rate] = rows
        r.report["model"] = result["model"]
        log(f"{rate}: " + ", ".join(f"{x['codec']} {x['ratio']:.2f}" for x in rows))
        r.save()


def render(report: dict) -> str:
    lines = ["# Message codecs on the emulated cluster: epoch time per link rate (issue 22)", ""]
    if report.get("skipped"):
        return "\n".join(lines + [f"Not measured: {report['skipped']}.", ""])
    config = report["config"]
    lines += [
        f"2 emulated nodes x 1 rank, one core each, `{report['dataset']}` (METIS), GraphSAGE hidden "
        f"{report['model']['hidden']}, p2p; {config['epochs']} timed epochs after {config['warmup']} "
        f"warm-up per codec and round, {config['rounds']} rounds (codecs interleaved). Epoch ÷ fp32: "
        "pooled medians (range over rounds); wait share: exchange wait ÷ epoch (rank 0).",
        "",
        "| link | codec | bytes / epoch (rank 0) | bytes ÷ fp32 | epoch s | epoch ÷ fp32 | wait share |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for rate, rows in report["rates"].items():
        for x in rows:
            cell = ratio_cell(x["ratio"], x["per_round"])
            lines.append(
                f"| {rate} | {x['codec']} | {x['bytes']:,.0f} | {x['bytes_ratio']:.3f} | "
                f"{x['epoch_s']:.3f} | {cell} | {x['wait_share']:.2f} |"
            )
    return "\n".join(lines) + "\n"


BENCHMARK = Benchmark("codec_cluster", __doc__, run, render, repeats=3, quick_repeats=1)

if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == NODE_FLAG:
        node_main(json.loads(sys.argv[2]), Path(sys.argv[3]))
        raise SystemExit(0)
    raise SystemExit(BENCHMARK.main())

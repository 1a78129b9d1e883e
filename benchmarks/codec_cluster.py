"""Codec epoch time on the emulated cluster (issue 22 on issue 20's cluster).

    python benchmarks/codec_cluster.py            # 2 nodes x 1 rank, two link rates
    python benchmarks/codec_cluster.py --quick    # one rate, one round (smoke run)

Two emulated nodes (network namespaces, ``tbf``-shaped links, one core each; needs root, see
:mod:`lightning_gnn_dist.testing.cluster`) train the ``codec.py`` model (2-layer GraphSAGE,
hidden 64, every exchanged row 64 wide) full-batch with ``p2p`` on an R-MAT graph, once per codec
in every round (codec order rotated per round), and report per link rate: the median training
epoch (wall seconds on rank 0, after warm-up epochs) and its ratio to fp32 (median of the
per-round ratios), the bytes each epoch moved, and the exchange's share of the fp32 epoch (wait
seconds ÷ epoch seconds). Writes ``benchmarks/results/codec_cluster.{json,md}``.

Link rates: a cluster node computes this model ~N× faster than one core of this machine (N ≈ 16
to 64 cores per node), so a 10–100 Gbit/s fabric corresponds to ≈ 0.15–6 Gbit/s per emulated
node; the rates below are chosen so that the fp32 exchange is a large share of the epoch (the
communication-bound case the codecs address) and a moderate one.
"""

# ruff: noqa: E402
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import datetime
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DATASET = "rmat?scale=14&edge_factor=8&features=64&classes=8&seed=0"
CODECS = ["fp32", "bf16", "int8", "int4"]
CONFIGS = {
    "default": {"rates": ["50mbit", "200mbit"], "rounds": 3, "warmup": 2, "epochs": 6},
    "quick": {"rates": ["200mbit"], "rounds": 1, "warmup": 1, "epochs": 2},
}
RESULTS = REPO / "benchmarks" / "results"


def node_main(config: dict, out: Path) -> None:
    """One node = one rank: every round trains every codec a few epochs and times them."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from benchmarks.codec import HIDDEN, LR, WEIGHT_DECAY
    from lightning_gnn_dist.comm import make_exchange
    from lightning_gnn_dist.data import load_dataset
    from lightning_gnn_dist.data.local import build_local_partitions
    from lightning_gnn_dist.nn import distribute, use_graph_context
    from lightning_gnn_dist.nn.context import make_graph_context
    from lightning_gnn_dist.nn.models import build_model
    from lightning_gnn_dist.partition import get_partitioner

    torch.set_num_threads(1)
    rank, world = int(os.environ["LGD_EMULATED_NODE"]), int(os.environ["LGD_EMULATED_NODES"])
    master = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    dist.init_process_group("gloo", init_method=master, rank=rank, world_size=world)
    data = load_dataset(DATASET)
    assignment = get_partitioner("metis", seed=0).partition(data, world)
    part = list(build_local_partitions(data, assignment, world))[rank]
    classes = int(data.y.max()) + 1
    del data
    train = part.train_mask
    count = torch.tensor([float(train.sum())])
    dist.all_reduce(count)
    rows = []
    for round_ in range(config["rounds"]):
        order = CODECS[round_ % len(CODECS) :] + CODECS[: round_ % len(CODECS)]
        for codec in order:
            torch.manual_seed(0)
            model = distribute(build_model("sage", part.x.size(1), HIDDEN, classes, dropout=0.5))
            exchange = make_exchange("p2p", part, codec=codec)
            context = make_graph_context(part, exchange)
            optimizer = torch.optim.Adam(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
            for epoch in range(config["warmup"] + config["epochs"]):
                if epoch == config["warmup"]:
                    exchange.counter.reset()
                dist.barrier()
                start = time.perf_counter()
                exchange.begin_round(epoch)
                optimizer.zero_grad()
                with use_graph_context(context):
                    logits = model(part.x, part.edge_index)
                loss = F.cross_entropy(logits[train], part.y[train], reduction="sum") / count
                loss.backward()
                grads = torch.cat([p.grad.flatten() for p in model.parameters()])
                dist.all_reduce(grads)
                offset = 0
                for p in model.parameters():
                    p.grad.copy_(grads[offset : offset + p.numel()].view_as(p))
                    offset += p.numel()
                optimizer.step()
                seconds = time.perf_counter() - start
                if epoch >= config["warmup"]:
                    rows.append({"round": round_, "codec": codec, "seconds": seconds})
            traffic = exchange.counter
            rows.append(
                {
                    "round": round_,
                    "codec": codec,
                    "bytes_per_epoch": traffic.total("bytes_sent") / config["epochs"],
                    "wait_per_epoch": traffic.total("seconds") / config["epochs"],
                }
            )
    if rank == 0:
        out.write_text(json.dumps(rows))
    dist.destroy_process_group()


def run_rate(rate: str, config: dict) -> list[dict]:
    from lightning_gnn_dist.testing import EmulatedCluster, run_nodes

    with tempfile.TemporaryDirectory() as tmp, EmulatedCluster(2, rate, cpus_per_node=1) as cluster:
        out = Path(tmp) / "rows.json"
        command = [sys.executable, __file__, "--node", json.dumps(config), str(out)]
        envs = []
        for i in range(cluster.nodes):
            env = cluster.node_environment(i)
            env.update(MASTER_ADDR=cluster.master_address, MASTER_PORT="29511")
            env["PYTHONPATH"] = str(REPO)
            envs.append(env)
        codes = run_nodes(cluster, [cluster.exec_prefix(i) + command for i in range(2)], envs)
        if any(codes):
            raise RuntimeError(f"a node failed at {rate}: exit codes {codes}")
        return json.loads(out.read_text())


def summarise(rows: list[dict]) -> dict:
    out = {}
    rounds = sorted({r["round"] for r in rows})
    for codec in CODECS:
        per_round = {
            k: statistics.median(
                r["seconds"]
                for r in rows
                if "seconds" in r and r["codec"] == codec and r["round"] == k
            )
            for k in rounds
        }
        fp32 = {
            k: statistics.median(
                r["seconds"]
                for r in rows
                if "seconds" in r and r["codec"] == "fp32" and r["round"] == k
            )
            for k in rounds
        }
        ratios = [per_round[k] / fp32[k] for k in rounds]
        totals = [r for r in rows if "bytes_per_epoch" in r and r["codec"] == codec]
        out[codec] = {
            "epoch_s": statistics.median(per_round.values()),
            "ratio": statistics.median(ratios),
            "ratio_range": [min(ratios), max(ratios)],
            "bytes_per_epoch": totals[0]["bytes_per_epoch"],
            "wait_share": statistics.median(t["wait_per_epoch"] for t in totals)
            / statistics.median(per_round.values()),
        }
    return out


def render(report: dict) -> str:
    lines = [
        "# Codec epoch time on the emulated cluster (issue 22)",
        "",
        f"`python benchmarks/codec_cluster.py` — {report['started']}, {report['minutes']:.1f} min, load "
        f"average {report['load_start']:.1f} → {report['load_end']:.1f} (shared 2-core machine). 2 nodes x 1 rank, "
        f"one core each, `{DATASET}` (METIS), GraphSAGE hidden 64, p2p; {report['config']['epochs']} timed "
        f"epochs after {report['config']['warmup']} warm-up, {report['config']['rounds']} rounds (codec order "
        "rotated). Ratio = median over rounds of (codec epoch ÷ fp32 epoch).",
        "",
        "| link | codec | bytes / epoch (rank 0) | bytes ÷ fp32 | epoch s | epoch ÷ fp32 (range) | exchange wait ÷ epoch |",
        "|---|---|---|---|---|---|---|",
    ]
    for rate, summary in report["rates"].items():
        fp32 = summary["fp32"]["bytes_per_epoch"]
        for codec, s in summary.items():
            low, high = s["ratio_range"]
            lines.append(
                f"| {rate} | {codec} | {s['bytes_per_epoch']:,.0f} | {s['bytes_per_epoch'] / fp32:.3f} | "
                f"{s['epoch_s']:.3f} | {s['ratio']:.2f} ({low:.2f}–{high:.2f}) | {s['wait_share']:.2f} |"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--node", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="codec_cluster")
    args = parser.parse_args(argv)
    if args.node:
        node_main(json.loads(args.node[0]), Path(args.node[1]))
        return 0
    try:
        from lightning_gnn_dist.testing import emulation_unavailable_reason
    except ImportError:
        print("error: the emulated cluster (lightning_gnn_dist.testing, issue 20) is not installed")
        return 1
    reason = emulation_unavailable_reason()
    if reason:
        print(f"error: {reason}")
        return 1
    config = CONFIGS["quick" if args.quick else "default"]
    start, report = time.perf_counter(), {"config": config, "rates": {}}
    report["started"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    report["load_start"] = os.getloadavg()[0]
    for rate in config["rates"]:
        report["rates"][rate] = summarise(run_rate(rate, config))
        print(f"{rate}: done, load {os.getloadavg()[0]:.1f}", flush=True)
    report["minutes"] = (time.perf_counter() - start) / 60
    report["load_end"] = os.getloadavg()[0]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(report, indent=1))
    (RESULTS / f"{args.out}.md").write_text(render(report) + "\n")
    print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Topology-aware placement on the emulated cluster (issue 23): inter-node bytes and epoch time.

    python -m benchmarks.placement            # 2 nodes x 2 ranks, 2 link rates, 5 rounds
    python -m benchmarks.placement --quick    # one rate, one round (smoke run)

Four ranks on two emulated nodes (network namespaces joined by ``tbf``-shaped links, one core per
node, so a node's two ranks share it; needs root, see :mod:`lightning_gnn_dist.testing.cluster`)
train the ``codec`` benchmark's model (2-layer GraphSAGE, hidden 64) full-batch on an R-MAT graph
partitioned 4 ways with the hypergraph partitioner. Variants, interleaved in every round inside
the same node processes:

* ``naive``: part ``p`` on rank ``p`` (ranks 0, 1 on node 0), ``p2p`` exchange (the baseline);
* ``mapped``: the same parts renumbered by ``map_parts_to_nodes`` (pairwise swaps on the 4 × 4
  traffic matrix), ``p2p``;
* ``two-level``: partitioned into 2 nodes first, then each node into 2 ranks, ``p2p``;
* ``naive+hier`` / ``two-level+hier``: those partitions with ``exchange="hierarchical"`` (each
  halo row crosses to a remote node once, to a gateway rank that forwards it inside its node).

Reported per link rate: the halo bytes per epoch that crossed nodes and that stayed inside one
(counted by the exchange, per receiving rank) and whether they equal the partition's prediction
(``peer_rows`` or ``hierarchical_peer_rows``, split by ``node_traffic``); the bytes node 0's
interface sent per epoch (the veth counter: halo, all-reduce, barriers and TCP/IP headers); the
median epoch (wall seconds on rank 0) and its ratio to ``naive`` (pooled medians, range over
rounds). Without the emulated cluster (no root) the run records why and measures the bytes only.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

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
NODES, RANKS_PER_NODE = 2, 2
VARIANTS = {  # name: (partition, exchange)
    "naive": ("naive", "p2p"),
    "mapped": ("mapped", "p2p"),
    "two-level": ("two-level", "p2p"),
    "naive+hier": ("naive", "hierarchical"),
    "two-level+hier": ("two-level", "hierarchical"),
}
CONFIGS = {
    "default": {"rates": ["25mbit", "50mbit", "100mbit"], "warmup": 2, "epochs": 8},
    "quick": {"rates": ["50mbit"], "warmup": 1, "epochs": 4},
}
NODE_FLAG = "--node"


def _partitions() -> tuple[dict, dict]:
    """Assignments per partition kind, and per variant the predicted forward ``[P, P]`` rows."""
    from lightning_gnn_dist.data import load_dataset
    from lightning_gnn_dist.partition import get_partitioner
    from lightning_gnn_dist.partition.metrics import partition_metrics
    from lightning_gnn_dist.partition.placement import (
        Topology,
        map_parts_to_nodes,
        renumber_by_node,
        two_level_assignment,
    )

    data, topology = load_dataset(DATASET), Topology(NODES, RANKS_PER_NODE)
    partitioner = get_partitioner("hypergraph", seed=0)
    naive = partitioner.partition(data, topology.world_size)
    peer = partition_metrics(data, naive, topology.world_size).peer_rows
    mapped = renumber_by_node(map_parts_to_nodes(peer, topology), topology)[naive]
    two_level = two_level_assignment(partitioner.hypergraph(data), partitioner, topology)
    assignments = {"naive": naive, "mapped": mapped, "two-level": two_level}
    predicted = {}
    for name, (kind, exchange) in VARIANTS.items():
        metrics = partition_metrics(data, assignments[kind], topology.world_size, RANKS_PER_NODE)
        rows = metrics.hierarchical_peer_rows if exchange == "hierarchical" else metrics.peer_rows
        predicted[name] = {"rows": rows.tolist(), "imbalance": metrics.imbalance}
    return assignments, predicted


def _tx_bytes() -> int:
    """Bytes this node's interface has sent (inside the node's namespace)."""
    path = Path("/sys/class/net/eth0/statistics/tx_bytes")
    return int(path.read_text()) if path.is_file() else 0


def _rank_main(local: int, config: dict, assignments_file: str, out: str) -> None:
    """One rank: every round trains every variant for a few timed epochs after warm-up ones."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from benchmarks.codec import MODEL, _model, _optimizer, _step
    from lightning_gnn_dist.comm import make_exchange
    from lightning_gnn_dist.data import load_dataset
    from lightning_gnn_dist.data.local import build_local_partitions
    from lightning_gnn_dist.nn import use_graph_context
    from lightning_gnn_dist.nn.context import make_graph_context

    torch.set_num_threads(1)
    node = int(os.environ["LGD_EMULATED_NODE"])
    rank, world = node * RANKS_PER_NODE + local, NODES * RANKS_PER_NODE
    master = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    dist.init_process_group("gloo", init_method=master, rank=rank, world_size=world)
    data = load_dataset(DATASET)
    stored = np.load(assignments_file)
    parts = {k: list(build_local_partitions(data, stored[k], world))[rank] for k in stored.files}
    classes = int(data.y.max()) + 1
    del data
    samples = {v: [[] for _ in range(config["rounds"])] for v in VARIANTS}
    traffic: dict[str, list] = {v: [] for v in VARIANTS}
    for round_index, variant in interleaved(list(VARIANTS), config["rounds"]):
        kind, mode = VARIANTS[variant]
        part = parts[kind]
        train = part.train_mask
        count = torch.tensor([float(train.sum())])
        dist.all_reduce(count)
        model = _model(0, part.x.size(1), classes)
        options = {"ranks_per_node": RANKS_PER_NODE} if mode == "hierarchical" else {}
        exchange = make_exchange(mode, part, **options)
        context, optimizer = make_graph_context(part, exchange), _optimizer(model)
        for epoch in range(config["warmup"] + config["epochs"]):
            if epoch == config["warmup"]:
                exchange.counter.reset()
                dist.barrier()
                tx = _tx_bytes()
            dist.barrier()
            start = time.perf_counter()
            exchange.begin_round(epoch)
            optimizer.zero_grad()
            with use_graph_context(context):
                logits = model(part.x, part.edge_index)
            (F.cross_entropy(logits[train], part.y[train], reduction="sum") / count).backward()
            _step(model, optimizer)
            if epoch >= config["warmup"]:
                samples[variant][round_index].append(time.perf_counter() - start)
        dist.barrier()
        tx = _tx_bytes() - tx
        sent_to = np.zeros(world)
        records = []
        for layer, direction, t in exchange.counter.items():
            sent_to += np.asarray(t.bytes_sent_to)
            per_epoch = config["epochs"]
            records.append([layer, direction, t.width, t.calls / per_epoch, t.seconds / per_epoch])
        matrix = torch.zeros(world, world, dtype=torch.float64)
        matrix[rank] = torch.from_numpy(sent_to)
        dist.all_reduce(matrix)
        waits = torch.zeros(world, len(records), dtype=torch.float64)
        waits[rank] = torch.tensor([r[4] for r in records], dtype=torch.float64)
        dist.all_reduce(waits)  # seconds per epoch each rank waited, per record
        traffic[variant].append(
            {
                "peer_bytes": (matrix / config["epochs"]).tolist(),
                "records": records,
                "rank_waits": waits.tolist(),
                "wait": exchange.counter.total("seconds") / config["epochs"],
                "node0_tx_bytes": tx / config["epochs"],
            }
        )
    if rank == 0:
        Path(out).write_text(json.dumps({"samples": samples, "traffic": traffic, "model": MODEL}))
    dist.destroy_process_group()


def node_main(config: dict, assignments_file: str, out: str) -> None:
    """One node: fork its ranks (local rank 0 is the one that reads the interface counter)."""
    ctx = mp.get_context("fork")
    procs = [
        ctx.Process(target=_rank_main, args=(local, config, assignments_file, out))
        for local in range(RANKS_PER_NODE)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    raise SystemExit(max(abs(p.exitcode or 0) for p in procs))


def _levels(peer: np.ndarray) -> tuple[float, float]:
    """(inter-node, intra-node) totals of a ``[P, P]`` matrix on the 2 × 2 topology."""
    node = np.arange(NODES * RANKS_PER_NODE) // RANKS_PER_NODE
    cross = node[:, None] != node[None, :]
    return float(peer[cross].sum()), float(peer[~cross].sum())


def _predicted_bytes(rows: np.ndarray, records: list) -> np.ndarray:
    """``[P, P]`` bytes per epoch the recorded exchanges (``[layer, direction, width, calls per
    epoch]``) should move: forward rows, backward their transpose, 4 bytes per element."""
    total = np.zeros_like(rows, dtype=float)
    for _, direction, width, calls, _ in records:
        total += (rows if direction == "forward" else rows.T) * width * 4 * calls
    return total


def run(r: Run) -> None:
    config = {**CONFIGS["quick" if r.quick else "default"], "rounds": r.repeats}
    r.report.update(
        config=config, dataset=DATASET, rates={}, skipped=emulation_unavailable_reason()
    )
    assignments, predicted = _partitions()
    counted = {}
    for name, values in predicted.items():
        inter, intra = _levels(np.asarray(values["rows"]))
        counted[name] = {"inter_rows": inter, "intra_rows": intra, "imbalance": values["imbalance"]}
    r.report["counted"] = counted  # rows per SpMM, from the partitions alone
    log(
        "inter-node rows per SpMM: "
        + ", ".join(f"{k} {v['inter_rows']:.0f}" for k, v in counted.items())
    )
    if r.report["skipped"]:
        log(f"skipped: {r.report['skipped']}")
        r.save()
        return
    with tempfile.TemporaryDirectory() as tmp:
        assignments_file = str(Path(tmp) / "assignments.npz")
        np.savez(assignments_file, **assignments)
        for rate in config["rates"]:
            args = [NODE_FLAG, json.dumps(config), assignments_file]
            result = run_on_emulated_nodes(NODES, rate, "benchmarks.placement", args, 29512)
            base = result["samples"]["naive"]
            rows = []
            for variant in VARIANTS:
                traffic = result["traffic"][variant]
                measured = np.asarray(traffic[0]["peer_bytes"])
                expected = _predicted_bytes(
                    np.asarray(predicted[variant]["rows"]), traffic[0]["records"]
                )
                inter, intra = _levels(measured)
                over = ratio(result["samples"][variant], base)
                epoch = pooled_median(result["samples"][variant])
                rows.append(
                    {
                        "variant": variant,
                        "inter_bytes": inter,
                        "intra_bytes": intra,
                        "predicted_exactly": bool(np.array_equal(measured, expected)),
                        "node0_tx_bytes": float(np.median([t["node0_tx_bytes"] for t in traffic])),
                        "epoch_s": epoch,
                        "ratio": over.value,
                        "per_round": list(over.per_round),
                        "wait_share": float(np.mean([t["wait"] for t in traffic])) / epoch,
                        # seconds per epoch each rank waited per (layer, direction), round 0
                        "records": [rec[:2] for rec in traffic[0]["records"]],
                        "rank_waits": traffic[0]["rank_waits"],
                    }
                )
            naive_inter = rows[0]["inter_bytes"]
            for row in rows:
                row["inter_ratio"] = row["inter_bytes"] / naive_inter
            r.report["rates"][rate] = rows
            r.report["model"] = result["model"]
            log(f"{rate}: " + ", ".join(f"{x['variant']} {x['ratio']:.2f}" for x in rows))
            r.save()


def render(report: dict) -> str:
    lines = ["# Topology-aware placement and the hierarchical exchange (issue 23)", ""]
    counted = report.get("counted", {})
    lines += [
        f"`{report['dataset']}`, hypergraph partition into 4 parts, 2 nodes x 2 ranks. Rows per "
        "SpMM counted from the partitions (no training):",
        "",
        "| variant | inter-node rows | ÷ naive | intra-node rows | nnz imbalance |",
        "|---|---:|---:|---:|---:|",
    ]
    naive = counted.get("naive", {}).get("inter_rows", 1.0)
    for name, c in counted.items():
        lines.append(
            f"| {name} | {c['inter_rows']:,.0f} | {c['inter_rows'] / naive:.3f} | "
            f"{c['intra_rows']:,.0f} | {c['imbalance']:.3f} |"
        )
    lines.append("")
    if report.get("skipped"):
        return "\n".join(lines + [f"Epochs not measured: {report['skipped']}.", ""])
    config = report["config"]
    lines += [
        f"Training: GraphSAGE hidden {report['model']['hidden']}, full batch, fp32; one core per "
        f"emulated node (its 2 ranks share it); {config['epochs']} timed epochs after "
        f"{config['warmup']} warm-up per variant and round, {config['rounds']} rounds (variants "
        "interleaved). Bytes per epoch, summed over ranks, as the exchange counted them "
        "(= predicted: every rank-pair entry equals the partition's prediction); node 0 tx: what "
        "node 0's interface sent per epoch (all traffic, headers included). Epoch ÷ naive: "
        "pooled medians (range over rounds); wait share: exchange wait ÷ epoch (rank 0).",
        "",
        "| link | variant | inter-node bytes | ÷ naive | intra-node bytes | = predicted | "
        "node 0 tx bytes | epoch s | epoch ÷ naive | wait share |",
        "|---|---|---:|---:|---:|:-:|---:|---:|---:|---:|",
    ]
    for rate, rows in report["rates"].items():
        for x in rows:
            cell = ratio_cell(x["ratio"], x["per_round"])
            lines.append(
                f"| {rate} | {x['variant']} | {x['inter_bytes']:,.0f} | {x['inter_ratio']:.3f} | "
                f"{x['intra_bytes']:,.0f} | {'yes' if x['predicted_exactly'] else 'NO'} | "
                f"{x['node0_tx_bytes']:,.0f} | {x['epoch_s']:.3f} | {cell} | "
                f"{x['wait_share']:.2f} |"
            )
    return "\n".join(lines) + "\n"


BENCHMARK = Benchmark("placement", __doc__, run, render, repeats=5, quick_repeats=1)

if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == NODE_FLAG:
        node_main(json.loads(sys.argv[2]), sys.argv[3], sys.argv[4])
    raise SystemExit(BENCHMARK.main())

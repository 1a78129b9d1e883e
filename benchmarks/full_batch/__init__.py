"""Full-batch training: overhead, exchange modes, partitioners, memory per rank.

    python -m benchmarks.full_batch                  # full configuration (< 12 min on 2 cores)
    python -m benchmarks.full_batch --quick          # smoke configuration (< 1 min)
    python -m benchmarks.full_batch --sections c     # rerun (c) only, keep the other sections

Every figure is a ratio against a baseline measured in the same invocation, and every time is a
median over the epochs (after one warm-up epoch per fit) of the fits compared, which run in
``--repeats`` interleaved rounds. Sections:

(a) ``GNNStrategy`` with one process against a hand-written single-process PyG loop (same
    GCNConv x2 model, same initial weights, same graph, same Adam);
(b) ``p2p`` against ``broadcast`` halo exchange at 2 and 4 ranks (hypergraph partition): bytes
    per epoch (measured by ``CommunicationMonitor`` and predicted from the partition) and epoch
    time;
(c) hypergraph, metis and random partitions at 4 ranks, each balanced by the vertex weights
    of ``lightning_gnn_dist.partition.weights`` (``nnz``, ``work``, ``nnz+rows``): epoch time
    and bytes normalised to random and to METIS, and per rank the owned rows and non-zeros, the
    compute and exchange-wait seconds (``CommunicationMonitor``), the CPU seconds of the training
    step, and the cost model's prediction;
(d) peak RSS per rank at 2 and 4 ranks against one process training on the whole graph, each in
    fresh interpreters (:mod:`benchmarks.full_batch.worker`; multi-rank runs through Lightning's
    subprocess launcher).

Timing fits (a)-(c) use the ``gnn_ddp_fork`` launcher (cheap start-up; the fork happens after
partitioning, so partitioning is never part of an epoch). Partition stores are cached under
``--cache-dir``.
"""

from __future__ import annotations

import argparse

from benchmarks.full_batch.render import render
from benchmarks.harness import Benchmark, Run, log

#: Section (c): ``method`` or ``method:vertex_weight`` (the partitioner's ``vertex_weight=``).
SECTION_C_METHODS = [
    "hypergraph:nnz",
    "hypergraph:work",
    "metis:nnz",
    "metis:work",
    "metis:nnz+rows",
    "random",
]

CONFIGS = {
    "full": {
        # 131,072 vertices, 1,239,664 directed edges after canonicalisation (edge_factor=8 gives
        # 999,342, just under 1M)
        "dataset": "rmat?scale=17&edge_factor=10&features=64&classes=8",
        "epochs": 9,  # per fit: 1 warm-up + 8 measured
        "memory_epochs": 3,
        "world_sizes": [2, 4],
        "methods": SECTION_C_METHODS,
        "methods_world_size": 4,
        "memory_world_sizes": [2, 4],
        "memory_parallel": False,
    },
    "quick": {
        "dataset": "sbm?num_nodes=3000&num_classes=4&avg_degree=10&features=64&seed=0",
        "epochs": 4,
        "memory_epochs": 2,
        "world_sizes": [2, 4],
        "methods": SECTION_C_METHODS,
        "methods_world_size": 4,
        "memory_world_sizes": [2],
        "memory_parallel": True,  # keeps the smoke run under a minute
    },
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", help="override the dataset spec")
    parser.add_argument("--epochs", type=int, help="override epochs per fit (first is warm-up)")


def _stores_needed(cfg: dict, r: Run) -> set[tuple[str, int]]:
    needed = {(m, cfg["methods_world_size"]) for m in cfg["methods"]} if r.wants("c") else set()
    if r.wants("a"):
        needed.add(("random", 1))
    if r.wants("b"):
        needed |= {("hypergraph", p) for p in cfg["world_sizes"]}
    if r.wants("d"):
        needed |= {("hypergraph", p) for p in cfg["memory_world_sizes"]}
    return needed


def run(r: Run) -> None:
    from benchmarks.common.fits import quiet  # torch and Lightning: not for --render
    from benchmarks.full_batch.fits import build_stores
    from benchmarks.full_batch.memory import section_d
    from benchmarks.full_batch.model import HIDDEN, MODEL, exchange_widths
    from benchmarks.full_batch.sections import section_a, section_b, section_c
    from lightning_gnn_dist.data import load_dataset

    quiet()
    mode = "quick" if r.quick else "full"
    cfg = dict(CONFIGS[mode], repeats=r.repeats)
    cfg.update({k: getattr(r.args, k) for k in ("dataset", "epochs") if getattr(r.args, k)})
    root = r.cache_dir
    log(f"[{mode}] loading {cfg['dataset']}")
    data = load_dataset(cfg["dataset"])
    num_features, num_classes = data.x.size(1), int(data.y.max()) + 1
    widths = exchange_widths(num_features, num_classes)
    graph = {
        "spec": cfg["dataset"],
        "num_nodes": int(data.num_nodes),
        "num_edges": int(data.edge_index.size(1)),
        "num_features": num_features,
        "num_classes": num_classes,
        "train_vertices": int(data.train_mask.sum()),
    }
    r.report.update(mode=mode, config=cfg, model=MODEL, graph=graph, widths=widths)
    with r.section("partition"):
        partitions = build_stores(cfg, data, root, _stores_needed(cfg, r))
    r.report.setdefault("partitions", {}).update(partitions)
    if r.wants("a"):
        with r.section("a"):
            r.report["a"] = section_a(cfg, data, root)
    del data  # the whole graph is not needed any more
    if r.wants("b"):
        with r.section("b"):
            r.report["b"] = section_b(cfg, root, widths)
    if r.wants("c"):
        with r.section("c"):
            r.report["c"] = section_c(cfg, root, widths, [num_features, HIDDEN, num_classes])
    if r.wants("d"):
        with r.section("d"):
            r.report["d"] = section_d(cfg, root, r.report["partitions"])


BENCHMARK = Benchmark(
    "full_batch",
    __doc__,
    run,
    render,
    add_arguments,
    sections=("a", "b", "c", "d"),
    repeats=3,
    packages=("pymetis", "mtkahypar"),
)

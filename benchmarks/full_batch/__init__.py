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
from benchmarks.harness import Benchmark, Run

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


def run(r: Run) -> None:
    from benchmarks.full_batch.sections import run as run_sections  # torch: not for --render

    run_sections(r)


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

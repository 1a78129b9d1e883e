"""Every communication claim measured where communication costs time: the emulated cluster.

    python -m benchmarks.emulated_cluster                     # full configuration (root)
    python -m benchmarks.emulated_cluster --quick             # smoke configuration (~3 min)
    python -m benchmarks.emulated_cluster --sections 4nodes   # rerun 4 nodes, keep 2 nodes

Nodes are network namespaces of one machine on a virtual switch, each link shaped with ``tbf``
and each node pinned to its own core (``python -m lightning_gnn_dist emulate``; needs root).
For each topology (nodes × 1 rank) one emulated cluster runs the whole plan
(:mod:`.worker`): the link rate changes between blocks, so every variant at every bandwidth is
measured in the same processes, interleaved (``--repeats`` rounds alternate the order of
bandwidths and of variants: A B C, C B A), and every number is a ratio of runs made in the same
invocation. Without root (or ``ip``/``tc``/``taskset``) it records why and measures nothing.

Variants (:data:`VARIANTS`; adding one is one line): the ``p2p`` and ``broadcast`` halo
exchanges on hypergraph, METIS and random partitions, ``cached`` (SANCUS) with each staleness
bound, the vertex-cut modes ``cd-0``, ``cd-5`` and ``0c``, and the neighbour mini-batch loader.
An unshaped block (veth at memory speed) gives each variant's epoch without a network cost.

**Scaling argument.** A cluster node computes about N× faster than one core of this machine
(N ≈ 32–64 cores of a CPU node, more for a GPU), and compute here is one core per node, so a
link of B Gbit/s between real nodes corresponds to about B/N Gbit/s between emulated ones: a
100 Gbit/s fabric is 1.5–3 Gbit/s here, 10–25 Gbit/s Ethernet 150–800 Mbit/s. The default
rates (1 Gbit/s, 250 Mbit/s, 50 Mbit/s) span that range and go below it: on this shared
machine other people's work holds each node's core much of the time, which stretches the
compute of an epoch several-fold (the report gives every rank's CPU seconds next to the wall
time), so the share the exchange takes is reached at a lower rate than on a quiet machine.

**Oversubscription.** The machine has 2 cores. At 2 nodes each node has a core of its own; at
4 nodes two nodes share each core (``--cpus-per-node 1`` deals cores round-robin), so each node
computes at about half a core and a given link rate stands for twice the cluster bandwidth; the
cost model scales compute by P / cores there. Other work on the shared machine slows both
sides of every ratio alike (interleaved); the load average is recorded with every fit.

The cost model (:mod:`lightning_gnn_dist.costmodel`) predicts every exact full-batch
configuration from the partition's metrics, compute costs calibrated on each node's core at the
start, and the network the probe measured on the emulated link at that bandwidth (the same
probe a user runs on a real cluster: ``python -m lightning_gnn_dist probe``).
"""

from __future__ import annotations

from benchmarks.emulated_cluster.driver import CONFIGS, VARIANTS, add_arguments, run
from benchmarks.emulated_cluster.render import render
from benchmarks.harness import Benchmark

BENCHMARK = Benchmark(
    "emulated_cluster",
    __doc__ or "",
    run,
    render,
    add_arguments=add_arguments,
    sections=("2nodes", "4nodes"),
    repeats=2,
    quick_repeats=1,
)

__all__ = ["BENCHMARK", "CONFIGS", "VARIANTS"]

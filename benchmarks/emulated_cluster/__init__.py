"""Every communication claim measured where communication costs time: the emulated cluster.

    sudo python -m benchmarks.emulated_cluster            # full configuration
    sudo python -m benchmarks.emulated_cluster --quick    # smoke configuration (~3 min)

Nodes are network namespaces of one machine on a virtual switch, each link shaped with ``tbf``
and each node pinned to its own core (``python -m lightning_gnn_dist emulate``; needs root).
For each topology (nodes × 1 rank) one emulated cluster runs the whole plan
(:mod:`.worker`): the link rate changes between blocks, so every variant at every bandwidth is
measured in the same processes, interleaved (rounds alternate the order of bandwidths and of
variants: A B C, C B A), and every number is a ratio of runs made in the same invocation.

Variants (:data:`VARIANTS`; adding one is one line): the ``p2p`` and ``broadcast`` halo
exchanges on hypergraph, METIS and random partitions, ``cached`` (SANCUS) with each staleness
bound, the vertex-cut modes ``cd-0``, ``cd-5`` and ``0c``, and the neighbour mini-batch loader.
An unshaped block (veth at memory speed) gives each variant's epoch without a network cost.

**Scaling argument.** A cluster node computes about N× faster than one core of this machine
(N ≈ 32–64 cores of a CPU node, more for a GPU), and compute here is one core per node, so a
link of B Gbit/s between real nodes corresponds to about B/N Gbit/s between emulated ones: a
100 Gbit/s fabric is 1.5–3 Gbit/s here, 10–25 Gbit/s Ethernet 150–800 Mbit/s. The default
rates (2 Gbit/s, 500 Mbit/s, 125 Mbit/s) span that range.

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

from benchmarks.emulated_cluster.driver import CONFIGS, VARIANTS, main

__all__ = ["CONFIGS", "VARIANTS", "main"]

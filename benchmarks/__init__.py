"""Benchmarks of lightning-gnn-dist: ``python -m benchmarks.<name>``; see ``README.md``.

Importing this package sets the environment every benchmark needs before torch is imported: one
OpenMP thread per process (ranks share the machine's cores), gloo on loopback, no progress bars.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
os.environ.setdefault("LGD_PROGRESS", "0")

#: Every benchmark, by module name (``benchmarks.<name>`` defines ``BENCHMARK``).
NAMES = (
    "partition_quality",
    "partition_speed",
    "store_integrity",
    "full_batch",
    "cost_model",
    "cached",
    "vertex_cut",
    "subgraph_minibatch",
    "mini_batch",
    "codec",
    "codec_cluster",
    "emulated_cluster",
    "rdm",
    "peer_dgl",
    "auto_plan",
    "gpu_check",
    "attribute_memory",
    "link_prediction",
    "scaling",
    "hetero",
)

"""Random partitioning (RP), the baseline of paper 000 §5."""

from __future__ import annotations

import numpy as np
from torch_geometric.data import Data

from lightning_gnn_dist.partition.base import Partitioner, register_partitioner


@register_partitioner("random")
class RandomPartitioner(Partitioner):
    """Uniformly random assignment with balanced part sizes.

    Vertex ``i`` goes to part ``perm[i] % num_parts`` for a random permutation ``perm`` drawn
    from ``numpy.random.default_rng(seed)``, so part sizes differ by at most one vertex and
    equal seeds give equal assignments. Vertex weights and ``epsilon`` play no role.

    Args:
        seed (int): seed of the random generator. (default: ``0``)
        epsilon (float): accepted for a uniform interface; unused. (default: ``0.03``)
    """

    def _partition(self, data: Data, num_parts: int) -> np.ndarray:
        rng = np.random.default_rng(self.seed % 2**63)
        parts = np.arange(data.num_nodes, dtype=np.int64) % num_parts
        return rng.permutation(parts)

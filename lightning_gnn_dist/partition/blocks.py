"""GNN-aware block partitioning (ByteGNN, paper 004 §4.2, Algorithm 2): ``gnn-blocks``.

Step 1 grows a ``K``-hop block around every training, validation and test vertex (its *center*):
a level-synchronous breadth-first search over in-edges (the direction a neighbour sampler
expands) from all centers at once, where every vertex keeps the first block id it receives
(ties within a level go to the center with the smaller random priority) and centers keep their
own. Vertices no search reaches form singleton blocks.

Step 2 assigns whole blocks to parts, in descending order of their largest train/val/test
count (then size; remaining ties in seeded random order): block ``B`` goes to ``argmax_j CE[j] · BS[j]`` with

* ``CE[j] = (cross edges between B and part j + 1) / (|P_j| + 1)`` — the paper's
  ``|Cross_Edge(P_j, B)| / |P_j|`` with add-one smoothing, so that empty parts and blocks with no
  assigned neighbour are scored by balance alone instead of dividing by zero;
* ``BS[j] = 1 − α·|P_j(train)|/C(train) − β·|P_j(val)|/C(val) − γ·|P_j(test)|/C(test)``,
  with ``α + β + γ = 1`` (the weights are normalised), so ``BS[j]`` stays positive until part
  ``j`` holds its share of the labelled vertices; with a negative ``BS`` the product would favour
  the parts with the *fewest* cross edges.

Parts whose vertex count would exceed ``(1 + epsilon) · N / P`` are skipped while any other part
has room. The assignment loop runs over blocks (the paper's greedy is sequential); the scores
of one block are vectorised over parts, and block construction is vectorised over edges.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch_geometric.data import Data

from lightning_gnn_dist.data.graph import sorted_unique
from lightning_gnn_dist.partition.base import Partitioner, register_partitioner
from lightning_gnn_dist.utils.checks import check_int, check_number

_SETS = ("train_mask", "val_mask", "test_mask")


@register_partitioner("gnn-blocks")
class GNNBlocksPartitioner(Partitioner):
    """ByteGNN's block partitioner for mini-batch (neighbour sampling) training.

    Args:
        seed (int): seed of the tie-breaking priorities. (default: ``0``)
        epsilon (float): a part may hold up to ``(1 + epsilon) · N / P`` vertices.
            (default: ``0.03``)
        num_hops (int): ``K``, the block radius; use the model's number of layers.
            (default: ``2``)
        alpha, beta, gamma (float): relative weights of the train/val/test balance, normalised
            to sum 1. (default: ``0.6``, ``0.2``, ``0.2``)
    """

    def __init__(
        self,
        seed: int = 0,
        epsilon: float = 0.03,
        num_hops: int = 2,
        alpha: float = 0.6,
        beta: float = 0.2,
        gamma: float = 0.2,
    ) -> None:
        super().__init__(seed=seed, epsilon=epsilon)
        num_hops = check_int("num_hops", num_hops, 1, 64)
        alpha, beta, gamma = (
            check_number(n, v, 0)
            for n, v in zip(("alpha", "beta", "gamma"), (alpha, beta, gamma), strict=True)
        )
        if alpha + beta + gamma <= 0:
            raise ValueError(
                f"alpha, beta, gamma must be >= 0 with a positive sum (got {alpha}, {beta}, {gamma})"
            )
        self.num_hops, self.alpha, self.beta, self.gamma = num_hops, alpha, beta, gamma

    def settings(self) -> dict[str, Any]:
        return {
            **super().settings(),
            "num_hops": self.num_hops,
            "alpha": self.alpha,
            "beta": self.beta,
            "gamma": self.gamma,
        }

    def _partition(self, data: Data, num_parts: int) -> np.ndarray:
        masks = [_mask(data, key) for key in _SETS]
        block = build_blocks(data, masks[0] | masks[1] | masks[2], self.num_hops, self.seed)
        return self._assign(data, block, masks, num_parts)

    def _assign(self, data: Data, block: np.ndarray, masks: list, num_parts: int) -> np.ndarray:
        num_blocks = int(block.max()) + 1
        sizes = np.bincount(block, minlength=num_blocks)
        counts = np.stack([np.bincount(block[m], minlength=num_blocks) for m in masks], 1)
        expected = np.maximum(counts.sum(0) / num_parts, 1e-9)
        weights = np.array([self.alpha, self.beta, self.gamma])
        weights = weights / weights.sum()
        indptr, neighbours, edge_counts = _block_adjacency(data, block, num_blocks)
        ties = np.random.default_rng(self.seed % 2**63).permutation(num_blocks)
        order = np.lexsort((ties, -sizes, -counts.max(1)))
        capacity = (1 + self.epsilon) * data.num_nodes / num_parts
        part_of = np.full(num_blocks, -1, dtype=np.int64)
        part_size = np.zeros(num_parts)
        part_counts = np.zeros((num_parts, 3))
        for b in order:  # sequential greedy (Algorithm 2)
            nb = slice(indptr[b], indptr[b + 1])
            assigned = part_of[neighbours[nb]]
            known = assigned >= 0
            cross = np.bincount(assigned[known], edge_counts[nb][known], minlength=num_parts)
            balance = 1.0 - (part_counts / expected) @ weights
            score = (cross + 1.0) / (part_size + 1.0) * balance
            if (score <= 0).all():  # every part holds its share: the one with most room
                score = balance
            full = part_size + sizes[b] > capacity
            if not full.all():
                score[full] = -np.inf
            else:
                score = -part_size
            j = int(np.argmax(score))
            part_of[b] = j
            part_size[j] += sizes[b]
            part_counts[j] += counts[b]
        return part_of[block]


def _mask(data: Data, key: str) -> np.ndarray:
    mask = getattr(data, key, None)
    return np.zeros(data.num_nodes, dtype=bool) if mask is None else mask.numpy().astype(bool)


def build_blocks(data: Data, centers: np.ndarray, num_hops: int, seed: int = 0) -> np.ndarray:
    """Block id of every vertex: ``[num_nodes] int64`` in ``[0, num_blocks)``.

    Args:
        data: the graph (``edge_index`` sources → targets).
        centers: ``[num_nodes] bool``, the block centers (labelled vertices).
        num_hops: search radius ``K`` over in-edges.
        seed: seed of the tie-breaking priorities.
    """
    num_nodes = data.num_nodes
    src, dst = data.edge_index.numpy()
    priority = np.random.default_rng(seed % 2**63).permutation(num_nodes)
    owner = np.full(num_nodes, -1, dtype=np.int64)  # the center whose block a vertex joined
    owner[centers] = np.flatnonzero(centers)
    frontier = centers.copy()
    for _ in range(num_hops):
        reach = frontier[dst] & (owner[src] < 0)
        if not reach.any():
            break
        candidate, center = src[reach], owner[dst[reach]]
        best = np.full(num_nodes, np.iinfo(np.int64).max)
        np.minimum.at(best, candidate, priority[center])
        reached = sorted_unique(candidate)
        owner[reached] = np.argsort(priority)[best[reached]]
        frontier = np.zeros(num_nodes, dtype=bool)
        frontier[reached] = True
    alone = owner < 0
    owner[alone] = np.flatnonzero(alone)
    return np.searchsorted(sorted_unique(owner), owner).astype(np.int64)


def _block_adjacency(data: Data, block: np.ndarray, num_blocks: int):
    """CSR of cross-block edge counts (both directions): ``(indptr, neighbours, counts)``."""
    src, dst = data.edge_index.numpy()
    a, b = block[src], block[dst]
    cross = a != b
    pairs = np.concatenate([a[cross] * num_blocks + b[cross], b[cross] * num_blocks + a[cross]])
    pairs.sort()
    keys, counts = _run_lengths(pairs)
    rows, neighbours = keys // num_blocks, keys % num_blocks
    indptr = np.searchsorted(rows, np.arange(num_blocks + 1))
    return indptr, neighbours, counts.astype(np.float64)


def _run_lengths(sorted_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if sorted_values.size == 0:
        return sorted_values, sorted_values
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    return sorted_values[starts], np.diff(np.r_[starts, sorted_values.size])

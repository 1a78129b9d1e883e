"""Communication of one sampled mini-batch, and its expectation over batches (paper 000 §4.3.3).

In ``loader="subgraph"`` training every rank computes its vertices of the same induced subgraph
``G[B]``; the halo exchange of one SpMM moves exactly the connectivity−1 cut of ``G[B]``'s
column-net hypergraph under the partition. :func:`batch_metrics` gives those numbers per rank
(what the counters of a batch must measure); :func:`expected_batch_volume` estimates their mean
over fresh batches of a sampler, with a confidence interval.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from lightning_gnn_dist.data.graph import sorted_unique
from lightning_gnn_dist.data.subgraph_sampler import SubgraphSampler, induced_subgraph
from lightning_gnn_dist.partition.metrics import PartitionMetrics, partition_metrics


def batch_metrics(
    data: Data, assignment: np.ndarray, num_parts: int, batch: Tensor
) -> PartitionMetrics:
    """Exact :class:`PartitionMetrics` of the batch ``B`` (sorted original ids): rows each part
    sends and receives per SpMM of ``G[B]``, batch vertices and non-zeros per part."""
    sub = Data(edge_index=induced_subgraph(data.edge_index, data.num_nodes, batch))
    sub.num_nodes = int(batch.numel())
    return partition_metrics(sub, np.asarray(assignment)[batch.numpy()], num_parts)


def batch_volume_rows(edge_index: Tensor, assignment: np.ndarray, batch: Tensor) -> int:
    """Connectivity−1 cut of ``G[B]``'s column-net hypergraph: rows moved per SpMM of the batch
    (the total of :func:`batch_metrics`, without its per-part detail; vectorised)."""
    num_nodes = assignment.shape[0]
    in_batch = np.zeros(num_nodes, dtype=bool)
    in_batch[batch.numpy()] = True
    src, dst = edge_index.numpy()
    keep = in_batch[src] & in_batch[dst]
    src, dst = src[keep], dst[keep]
    num_parts = int(assignment.max()) + 1
    # Net j spans its owner's part plus the parts of its kept out-neighbours.
    remote = assignment[dst] != assignment[src]
    pairs = sorted_unique(src[remote] * num_parts + assignment[dst[remote]])
    return int(pairs.size)


@dataclass(frozen=True)
class ExpectedVolume:
    """Mean rows moved per SpMM of a batch, estimated on ``num_samples`` fresh batches.

    Attributes:
        mean_rows: sample mean of the batch volume (rows per SpMM).
        std_rows: sample standard deviation.
        ci_low, ci_high: ``confidence`` interval of the mean (normal approximation,
            ``mean ± z · std / √n``).
        confidence: level of the interval.
        num_samples: batches drawn.
    """

    mean_rows: float
    std_rows: float
    ci_low: float
    ci_high: float
    confidence: float
    num_samples: int

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def expected_batch_volume(
    data: Data,
    assignment: np.ndarray,
    sampler: SubgraphSampler,
    num_samples: int = 100,
    first_step: int = 0,
    confidence: float = 0.95,
) -> ExpectedVolume:
    """Estimate the expected rows moved per SpMM of a batch drawn by ``sampler``.

    Args:
        data: the whole (canonical) graph.
        assignment: ``[num_nodes] int64`` part of each vertex.
        sampler: draws the batches; use a seed other than the one the partition was made with,
            so the estimate is on fresh samples.
        num_samples: batches to draw (steps ``first_step ...``). (default: ``100``)
        first_step: first step of the sampler to use. (default: ``0``)
        confidence: level of the interval. (default: ``0.95``)
    """
    if num_samples < 2:
        raise ValueError(f"num_samples must be >= 2 for an interval (got {num_samples})")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1) (got {confidence})")
    assignment = np.asarray(assignment, dtype=np.int64)
    rows = np.array(
        [
            batch_volume_rows(data.edge_index, assignment, sampler.sample(first_step + i))
            for i in range(num_samples)
        ],
        dtype=np.float64,
    )
    z = float(torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(0.5 + confidence / 2)))
    mean, std = float(rows.mean()), float(rows.std(ddof=1))
    half = z * std / math.sqrt(num_samples)
    return ExpectedVolume(mean, std, mean - half, mean + half, confidence, num_samples)

r"""The stochastic hypergraph model (SHP, paper 000 §4.3.3, Algorithm 3) and its partitioner.

In ``loader="subgraph"`` training a batch ``B`` moves the connectivity−1 cut of the column-net
hypergraph of ``G[B]`` (net ``j`` for each ``j ∈ B`` with pins ``{j} ∪ {i ∈ B : j → i}``). SHP
draws ``b`` batches with the training sampler, merges their column-net hypergraphs over the whole
vertex set and partitions the result, so its connectivity−1 cut is ``b`` times an estimate of the
*expected* volume of a batch. Identical nets (same pin set, from different batches) are merged
into one net whose weight counts them, which keeps the size bounded; nets of one pin are dropped
(they can never be cut). Vertex weights are the full graph's row non-zeros, as in HP: with
uniform vertex sampling every vertex is equally likely in a batch, so this balances the expected
work too.

How many batches: a net's connectivity ``λ`` lies in ``[1, p]``; by Hoeffding's inequality the
mean ``λ'`` of ``|N|`` sampled nets is within ``θ`` of the expected ``λ`` with probability at least
``1 − δ`` when (eq. 12–14)

.. math:: |N| \ge \frac{(p - 1)^2}{2 \theta^2} \ln \frac{2}{\delta}.

Batches are drawn until their nets (one per batch vertex) reach that count, and also until every
edge of the graph is expected in ``edge_coverage`` of them. The Hoeffding count alone is not
enough to *optimise* the expectation: it bounds the error of ``λ`` estimated for one fixed
partition, but an edge ``j → i`` enters a batch only when both ends do (probability ``≈ f²`` for a
batch of a fraction ``f`` of the vertices), so with the Hoeffding count most edges never appear in
the merged hypergraph and the partitioner cannot see them. Measured on R-MAT (4,096 vertices,
P = 16, f = 10 %): 100 batches gave 0.995× HP's expected volume, 400 batches 0.946×, 1,600
batches 0.924× (the Hoeffding count was 39 batches). ``max_batches`` caps the work.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from lightning_gnn_dist.data.graph import row_nnz
from lightning_gnn_dist.data.subgraph_sampler import (
    SubgraphSampler,
    check_sampler_name,
    check_subgraph_size,
    make_sampler,
    subgraph_vertices,
)
from lightning_gnn_dist.partition.backends import backend_settings, check_backend, get_backend
from lightning_gnn_dist.partition.base import Partitioner, register_partitioner
from lightning_gnn_dist.partition.column_net import ColumnNetHypergraph
from lightning_gnn_dist.utils.checks import check_int, check_number

#: offset of the partitioner's sampling seed, so its batches are not the training batches
SAMPLER_SEED_OFFSET = 7919


def hoeffding_nets(num_parts: int, theta: float, delta: float) -> int:
    r"""Smallest ``|N|`` with ``|N| ≥ (p − 1)² / (2θ²) · ln(2/δ)`` (paper 000 eq. 14).

    Args:
        num_parts: p.
        theta: allowed error of the estimated mean connectivity (in parts), ``> 0``.
        delta: allowed failure probability, in ``(0, 1)``.
    """
    if not isinstance(theta, int | float) or not 0 < theta < math.inf:
        raise ValueError(f"theta must be > 0 (got {theta}); the paper uses 0.1")
    if not isinstance(delta, int | float) or not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1) (got {delta}); the paper uses 0.5")
    return math.ceil((num_parts - 1) ** 2 / (2 * theta**2) * math.log(2 / delta))


def coverage_batches(sampler: SubgraphSampler, edge_coverage: float) -> int:
    """Batches after which every edge is expected in ``edge_coverage`` of them: an edge is in a
    uniform batch of ``k`` of ``N`` vertices with probability ``k (k − 1) / (N (N − 1))``."""
    k, n = sampler.size, sampler.num_nodes
    both_ends = k * (k - 1) / (n * (n - 1)) if n > 1 else 1.0
    return math.ceil(edge_coverage / max(both_ends, 1e-12))


def stochastic_hypergraph(
    data: Data, sampler: SubgraphSampler, num_nets: int, min_batches: int, max_batches: int
) -> tuple[ColumnNetHypergraph, dict[str, int]]:
    """Merge the column-net hypergraphs of sampled batches (Algorithm 3, lines 1–3).

    Args:
        data: the whole canonical graph.
        sampler: draws batch ``i`` as ``sampler.sample(i)``.
        num_nets: stop once the batches' nets (one per batch vertex) reach this many ...
        min_batches: ... and at least this many batches were drawn ...
        max_batches: ... but never more than this many.

    Returns:
        ``(hypergraph, stats)``: the merged hypergraph over all ``num_nodes`` vertices (weighted
        nets, vertex weights = row non-zeros of ``Â``) and ``{"batches", "sampled_nets",
        "merged_nets", "merged_pins"}``.
    """
    num_nodes = data.num_nodes
    src, dst = data.edge_index
    keep = src != dst
    src, dst = src[keep], dst[keep]
    order = torch.argsort(src, stable=True)
    out_targets = dst[order]
    out_degree = torch.bincount(src, minlength=num_nodes)
    out_start = torch.cumsum(out_degree, 0) - out_degree

    net_ids, net_pins, sampled, batches = [], [], 0, 0
    in_batch = torch.zeros(num_nodes, dtype=torch.bool)
    while batches < max_batches and (batches < min_batches or sampled < num_nets):
        batch = sampler.sample(batches)
        in_batch[batch] = True
        # Out-edges of the batch's vertices through the CSR, kept when the target is in B.
        degree = out_degree[batch]
        owner = torch.repeat_interleave(batch, degree)
        first = torch.repeat_interleave(out_start[batch] - torch.cumsum(degree, 0) + degree, degree)
        targets = out_targets[first + torch.arange(owner.numel())]
        inside = in_batch[targets]
        owner, targets = owner[inside], targets[inside]
        in_batch[batch] = False
        # Net j of batch k gets id k * N + j: nets of different batches stay apart until merged.
        # Only nets with a kept edge are stored (a net of one pin, the diagonal, is never cut).
        cut_able = torch.unique(owner)
        net_ids.append(torch.cat([cut_able, owner]).numpy() + batches * num_nodes)
        net_pins.append(torch.cat([cut_able, targets]).numpy())  # the diagonal pin, then edges
        sampled += batch.numel()
        batches += 1
    if sampled < num_nets:
        warnings.warn(
            f"stochastic hypergraph: {batches} batches gave {sampled} nets, fewer than the "
            f"{num_nets} the Hoeffding bound asks for; raise max_batches, theta or delta",
            stacklevel=3,
        )
    empty = np.zeros(0, dtype=np.int64)
    hypergraph, merged = _merge_nets(
        np.concatenate([empty, *net_ids]),
        np.concatenate([empty, *net_pins]),
        num_nodes,
        data.edge_index,
    )
    stats = {
        "batches": batches,
        "sampled_nets": sampled,
        "merged_nets": merged,
        "merged_pins": hypergraph.num_pins,
    }
    return hypergraph, stats


def _merge_nets(
    nets: np.ndarray, pins: np.ndarray, num_nodes: int, edge_index
) -> tuple[ColumnNetHypergraph, int]:
    """One weighted net per distinct pin set of two or more pins (vectorised)."""
    vertex_weights = row_nnz(edge_index, num_nodes)
    if nets.size == 0:  # no batch kept an edge: nothing can be cut
        return ColumnNetHypergraph(num_nodes, np.zeros(1, np.int64), nets, vertex_weights, nets), 0
    order = np.lexsort((pins, nets))
    nets, pins = nets[order], pins[order]
    starts = np.flatnonzero(np.r_[True, nets[1:] != nets[:-1]])
    sizes = np.diff(np.r_[starts, nets.size])
    # A pin set's key: its size and two sums of random 63-bit labels of its pins (a collision of
    # two different sets has probability about 2^-120).
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2**62, size=(2, num_nodes), dtype=np.int64)
    with np.errstate(over="ignore"):
        key_a = np.add.reduceat(labels[0][pins], starts)
        key_b = np.add.reduceat(labels[1][pins], starts)
    multi = sizes >= 2
    net_index = np.flatnonzero(multi)
    key_order = np.lexsort((key_b[multi], key_a[multi], sizes[multi]))
    net_index = net_index[key_order]
    ka, kb, ks = key_a[net_index], key_b[net_index], sizes[net_index]
    new_group = np.r_[True, (ka[1:] != ka[:-1]) | (kb[1:] != kb[:-1]) | (ks[1:] != ks[:-1])]
    group_start = np.flatnonzero(new_group)
    weights = np.diff(np.r_[group_start, net_index.size]).astype(np.int64)
    representative = net_index[group_start]
    rep_sizes = sizes[representative]
    offsets = np.zeros(representative.size + 1, dtype=np.int64)
    np.cumsum(rep_sizes, out=offsets[1:])
    pin_index = np.repeat(starts[representative] - offsets[:-1], rep_sizes) + np.arange(offsets[-1])
    hypergraph = ColumnNetHypergraph(
        num_nodes,
        offsets,
        pins[pin_index].astype(np.int64),
        row_nnz(edge_index, num_nodes),
        weights,
    )
    return hypergraph, int(representative.size)


@register_partitioner("stochastic-hypergraph")
class StochasticHypergraphPartitioner(Partitioner):
    """Stochastic hypergraph partitioning (SHP, paper 000 Algorithm 3) for ``loader="subgraph"``.

    Args:
        seed (int): seed of the partitioner and of its batch sampling (the batches use
            ``seed + 7919``, a stream other than the training batches'). (default: ``0``)
        epsilon (float): allowed imbalance of the part weights (row non-zeros). (default: ``0.03``)
        sampler (str): the training sampler (``uniform``, ``edge``, ``random-walk``).
            (default: ``"uniform"``)
        subgraph_size (int or float): the training batch size, in vertices or as a fraction of
            them (below 1). (default: ``0.05``)
        theta (float): Hoeffding error θ of the mean connectivity. (default: ``0.1``, the paper's)
        delta (float): Hoeffding failure probability δ. (default: ``0.5``, the paper's)
        edge_coverage (float): draw batches until every edge is expected in this many of them
            (see the module docstring); ``0`` keeps the paper's Hoeffding count only.
            (default: ``8``)
        min_batches (int): batches drawn at least. (default: ``1``)
        max_batches (int): batches drawn at most; fewer nets than the Hoeffding bound then
            warn. (default: ``20000``)
        backend (str): ``"mtkahypar"`` or ``"kahypar"``. (default: ``"mtkahypar"``)
        timeout (float, optional): seconds the backend may run. (default: ``None``)

    After :meth:`partition`, :attr:`last_stats` holds the number of batches, sampled nets, merged
    nets and pins.
    """

    def __init__(
        self,
        seed: int = 0,
        epsilon: float = 0.03,
        sampler: str = "uniform",
        subgraph_size: int | float = 0.05,
        theta: float = 0.1,
        delta: float = 0.5,
        edge_coverage: float = 8.0,
        min_batches: int = 1,
        max_batches: int = 20000,
        backend: str = "mtkahypar",
        timeout: float | None = None,
        walk_length: int = 2,
    ) -> None:
        super().__init__(seed=seed, epsilon=epsilon)
        hoeffding_nets(2, theta, delta)  # validates theta and delta
        if subgraph_size is None:
            raise ValueError("stochastic-hypergraph needs subgraph_size (the training batch size)")
        check_subgraph_size(subgraph_size)
        check_int("min_batches", min_batches, 1)
        check_int("max_batches", max_batches, min_batches)
        check_int("walk_length", walk_length, 1)
        self.sampler, self.subgraph_size = check_sampler_name(sampler), subgraph_size
        check_number("edge_coverage", edge_coverage, 0)
        if timeout is not None:
            check_number("timeout", timeout, 0, low_open=True)
        self.theta, self.delta = float(theta), float(delta)
        self.edge_coverage = float(edge_coverage)
        self.min_batches, self.max_batches = int(min_batches), int(max_batches)
        self.walk_length = int(walk_length)
        self.backend = check_backend(backend)
        self.timeout = timeout
        self.last_stats: dict[str, int] = {}

    def make_sampler(self, data: Data) -> SubgraphSampler:
        """The sampler this partitioner draws its batches with."""
        options = {"walk_length": self.walk_length} if self.sampler == "random-walk" else {}
        size = subgraph_vertices(self.subgraph_size, data.num_nodes)
        return make_sampler(
            self.sampler,
            data.num_nodes,
            size,
            self.seed + SAMPLER_SEED_OFFSET,
            edge_index=data.edge_index,
            **options,
        )

    def _partition(self, data: Data, num_parts: int) -> np.ndarray:
        sampler = self.make_sampler(data)
        min_batches = max(self.min_batches, coverage_batches(sampler, self.edge_coverage))
        hypergraph, self.last_stats = stochastic_hypergraph(
            data,
            sampler,
            hoeffding_nets(num_parts, self.theta, self.delta),
            min(min_batches, self.max_batches),
            self.max_batches,
        )
        return get_backend(self.backend)(
            hypergraph, num_parts, self.epsilon, self.seed, timeout=self.timeout
        )

    def settings(self) -> dict[str, Any]:
        """Method, seed, epsilon, the sampler and its settings, θ, δ, the batch limits and the
        backend's settings (all part of a store's fingerprint)."""
        sampler = {"sampler": self.sampler, "subgraph_size": self.subgraph_size}
        if self.sampler == "random-walk":
            sampler["walk_length"] = self.walk_length
        return {
            **super().settings(),
            **sampler,
            "theta": self.theta,
            "delta": self.delta,
            "edge_coverage": self.edge_coverage,
            "min_batches": self.min_batches,
            "max_batches": self.max_batches,
            "backend": self.backend,
            **backend_settings(self.backend),
        }

"""A vectorised uniform neighbour sampler with PyG ``NeighborLoader``'s batch layout.

Randomness is counter-based: every random number is a hash of the stream (seed, epoch, step,
rank) and *dataset* ids, so which neighbours a vertex gets never depends on how the graph is
partitioned or on which rank samples it. Each vertex's in-edges are kept sorted by source id.

* Without replacement, a vertex of in-degree ``d`` keeps a uniform ``fanout``-subset: all
  in-edges when ``d <= fanout``; the ``fanout`` smallest keys ``hash(stream, id(i), id(j))`` when
  ``d <= 4 · fanout``; otherwise the first ``fanout`` distinct of ``2 · fanout`` uniform draws
  (the first distinct values of an i.i.d. uniform sequence are a uniform subset; the rare vertex
  with too few distinct draws takes the key path), so high-degree vertices cost ``O(fanout)``.
* With replacement, draw ``t`` takes in-edge ``floor(u(stream, id(i), t) · d)``.

No Python loop runs over vertices or edges: a few sorts of the frontier's sampled candidates per
hop.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

_MASK32 = 0xFFFFFFFF
HopSampler = Callable[[Tensor, int, int], tuple[Tensor, Tensor]]


def _lowbias32(x: Tensor) -> Tensor:
    """A 32-bit integer hash (C. Wellons' ``lowbias32``) on ``int64`` lanes holding 32 bits."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


def hash_keys(*values: Tensor | int) -> Tensor:
    """32-bit hash of ``int64`` tensors (broadcast) and ints, as ``int64`` in ``[0, 2^32)``."""
    h = torch.tensor(0x9E3779B9, dtype=torch.long)
    for value in values:
        value = torch.as_tensor(value, dtype=torch.long)
        folded = (value ^ (((value >> 32) * 0x9E3779B1) & _MASK32)) & _MASK32
        h = _lowbias32(h ^ folded)
    return h


def stream_key(seed: int, epoch: int, step: int, rank: int) -> int:
    """The random stream of one step of one rank: a 32-bit int."""
    return int(hash_keys(seed, epoch, step, rank))


@dataclass
class InEdges:
    """In-edges of a contiguous range of target vertices in compressed (CSC) form.

    Attributes:
        start: first target id; targets are ``start .. start + num_targets - 1`` (routing ids).
        colptr: ``[num_targets + 1] int64`` edge offsets per target.
        src: ``[E] int64`` routing ids of the sources, per target sorted by dataset id.
        src_key: ``[E] int64`` dataset ids of the sources (hashed for the draw).
        dst_key: ``[num_targets] int64`` dataset ids of the targets.
    """

    start: int
    colptr: Tensor
    src: Tensor
    src_key: Tensor
    dst_key: Tensor

    @classmethod
    def build(
        cls, src: Tensor, dst: Tensor, src_key: Tensor, dst_key: Tensor, start: int = 0
    ) -> InEdges:
        """From edge lists: ``src``/``dst`` routing ids (``dst`` in ``[start, start + T)``),
        ``src_key [E]`` their dataset ids and ``dst_key [T]`` the targets' dataset ids."""
        local = dst - start
        order = torch.argsort(src_key, stable=True)
        order = order[torch.argsort(local[order], stable=True)]
        colptr = torch.zeros(dst_key.numel() + 1, dtype=torch.long)
        torch.cumsum(torch.bincount(local, minlength=dst_key.numel()), 0, out=colptr[1:])
        return cls(start, colptr, src[order], src_key[order], dst_key)

    @classmethod
    def from_edge_index(cls, edge_index: Tensor, num_nodes: int) -> InEdges:
        """A whole graph; routing ids are dataset ids."""
        ids = torch.arange(num_nodes)
        return cls.build(edge_index[0], edge_index[1], edge_index[0], ids)

    @property
    def num_targets(self) -> int:
        return int(self.dst_key.numel())

    def sample(
        self, targets: Tensor, fanout: int, stream: Tensor | int, replace: bool = False
    ) -> tuple[Tensor, Tensor]:
        """Sample in-neighbours of ``targets`` (routing ids within this range).

        Args:
            targets: ``[T] int64`` routing ids.
            fanout: neighbours per target; ``-1`` takes all in-neighbours.
            stream: random stream, an int or ``[T] int64`` (one per target).
            replace: draw with replacement (exactly ``fanout`` draws per target of degree > 0).

        Returns:
            ``(counts [T] int64, src [Σ counts] int64)``: sampled source routing ids grouped by
            target, in target order.
        """
        local = targets - self.start
        first, degree = self.colptr[local], self.colptr[local + 1] - self.colptr[local]
        stream = torch.as_tensor(stream, dtype=torch.long).expand(local.numel())
        dst_key = self.dst_key[local]
        if fanout < 0:
            _, edge = _segment_edges(first, degree, torch.arange(local.numel()))
            return degree, self.src[edge]
        if replace:
            return self._with_replacement(first, degree, stream, dst_key, fanout)
        pieces = [_segment_edges(first, degree, (degree <= fanout).nonzero().view(-1))]
        # High degree: the first `fanout` distinct of 2·fanout uniform draws (a uniform subset),
        # so the work per target is O(fanout) whatever its degree; the rare target with too few
        # distinct draws falls back to the key sort below, which is uniform too.
        sparse = (degree > _SPARSE * fanout).nonzero().view(-1)
        picked, missing = self._distinct_draws(first, degree, stream, dst_key, fanout, sparse)
        pieces.append(picked)
        dense = torch.cat(
            [((degree > fanout) & (degree <= _SPARSE * fanout)).nonzero().view(-1), missing]
        )
        target, edge = _segment_edges(first, degree, dense)
        key = hash_keys(stream[target], dst_key[target], self.src_key[edge])
        order = torch.argsort((target << 32) | key)
        target, edge = target[order], edge[order]
        start = torch.searchsorted(target, target)
        keep = torch.arange(target.numel()) - start < fanout
        pieces.append((target[keep], edge[keep]))
        target = torch.cat([t for t, _ in pieces])
        edge = torch.cat([e for _, e in pieces])
        order = torch.argsort(target, stable=True)
        return torch.bincount(target, minlength=local.numel()), self.src[edge[order]]

    def _with_replacement(self, first, degree, stream, dst_key, fanout):
        counts = torch.where(degree > 0, fanout, 0)
        target, offset, _ = _uniform_offsets(stream, dst_key, degree, counts)
        return counts, self.src[first[target] + offset]

    def _distinct_draws(self, first, degree, stream, dst_key, fanout, which):
        """``((target, edge), missing)``: for each target in ``which`` the first ``fanout``
        distinct in-edges of ``2 · fanout`` uniform draws; ``missing`` the targets with fewer."""
        counts = torch.zeros_like(degree)
        counts[which] = 2 * fanout
        target, offset, draw = _uniform_offsets(stream, dst_key, degree, counts)
        order = torch.argsort((target << 32) | offset, stable=True)  # draw order within ties
        target, offset, draw = target[order], offset[order], draw[order]
        first_seen = torch.ones_like(target, dtype=torch.bool)
        first_seen[1:] = (target[1:] != target[:-1]) | (offset[1:] != offset[:-1])
        target, offset, draw = target[first_seen], offset[first_seen], draw[first_seen]
        order = torch.argsort((target << 32) | draw)
        target, offset = target[order], offset[order]
        keep = torch.arange(target.numel()) - torch.searchsorted(target, target) < fanout
        target, offset = target[keep], offset[keep]
        found = torch.bincount(target, minlength=degree.numel())[which]
        complete = torch.isin(target, which[found >= fanout])
        return (target[complete], first[target[complete]] + offset[complete]), which[found < fanout]


_SPARSE = 4


def _segment_edges(first: Tensor, degree: Tensor, which: Tensor) -> tuple[Tensor, Tensor]:
    """``(target, edge)`` for every in-edge of the targets ``which`` (positions)."""
    counts = degree[which]
    target = torch.repeat_interleave(which, counts)
    offset = torch.arange(target.numel()) - torch.repeat_interleave(
        torch.cumsum(counts, 0) - counts, counts
    )
    return target, first[target] + offset


def _uniform_offsets(stream: Tensor, dst_key: Tensor, degree: Tensor, counts: Tensor):
    """``counts[t]`` uniform in-edge offsets of each target ``t``: ``(target, offset, draw)``."""
    target = torch.repeat_interleave(torch.arange(counts.numel()), counts)
    draw = torch.arange(target.numel()) - (torch.cumsum(counts, 0) - counts)[target]
    u = hash_keys(stream[target], dst_key[target], draw).double() / 2.0**32
    return target, (u * degree[target]).long(), draw


@dataclass
class SampledSubgraph:
    """The computation graph of one batch (PyG ``NeighborLoader`` layout, homogeneous).

    Attributes:
        n_id: ``[num_nodes] int64`` routing ids; the seeds first, then each hop's new vertices.
        edge_index: ``[2, num_edges] int64`` local ``(source, target)`` indices into ``n_id``,
            grouped by hop (the first hop's edges end at seeds).
        num_sampled_nodes: vertices added per hop, ``[batch_size, hop 1, ..., hop L]``.
        num_sampled_edges: edges added per hop, ``[hop 1, ..., hop L]``.
    """

    n_id: Tensor
    edge_index: Tensor
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]


def check_fanouts(name: str, fanouts: Sequence[int]) -> list[int]:
    """``fanouts`` as a list of ints, one per hop, each ``-1`` (all in-neighbours) or ``>= 1``.

    Raises:
        ValueError: not a non-empty list (e.g. a bare ``5``), or a fan-out that is ``0``, below
            ``-1`` or not an integer (``1.5``).
    """
    valid = isinstance(fanouts, Sequence) and not isinstance(fanouts, str) and len(fanouts) > 0
    if valid:
        valid = all(
            isinstance(k, numbers.Integral) and not isinstance(k, bool) and (k == -1 or k >= 1)
            for k in fanouts
        )
    if not valid:
        raise ValueError(
            f"{name} must be a non-empty list of fan-outs per hop, each an integer >= 1 or -1 "
            f"for all in-neighbours, e.g. [25, 10] (got {fanouts!r})"
        )
    return [int(k) for k in fanouts]


class NeighborSampler:
    """Multi-hop uniform neighbour sampling (GraphSAGE), one vectorised step per hop.

    Hop ``k`` samples in-neighbours of the vertices first reached at hop ``k − 1`` (the seeds for
    ``k = 1``), as PyG does; a vertex reached again keeps its first local index. New vertices of
    a hop are ordered by routing id (PyG orders them by first appearance; nothing depends on it).
    With fan-out ``−1`` at every hop the seeds' ``L``-layer computation graph is exact.

    Args:
        num_neighbors (list[int]): fan-out per hop, ``-1`` for all in-neighbours.
        replace (bool): sample with replacement. (default: ``False``)
    """

    def __init__(self, num_neighbors: list[int], replace: bool = False) -> None:
        self.num_neighbors = check_fanouts("num_neighbors", num_neighbors)
        self.replace = replace

    def sample(self, seeds: Tensor, stream: int, sample_hop: HopSampler) -> SampledSubgraph:
        """Expand ``seeds`` (``[B] int64`` distinct routing ids) hop by hop.

        Args:
            seeds: the batch's seed vertices.
            stream: the batch's random stream (see :func:`stream_key`).
            sample_hop: ``(frontier [F], fanout, stream) -> (counts [F], src [Σ counts])``, e.g.
                a bound :meth:`InEdges.sample` or a distributed request/response.
        """
        n_id, frontier_local = seeds, torch.arange(seeds.numel())
        sorted_ids, sort_perm = torch.sort(seeds)
        edges, num_nodes, num_edges = [], [int(seeds.numel())], []
        for fanout in self.num_neighbors:
            counts, src = sample_hop(n_id[frontier_local], fanout, stream)
            dst = torch.repeat_interleave(frontier_local, counts)
            candidates = torch.unique(src)
            new = candidates[~_contains(sorted_ids, candidates)]
            frontier_local = torch.arange(n_id.numel(), n_id.numel() + new.numel())
            n_id = torch.cat([n_id, new])
            sorted_ids, sort_perm = torch.sort(n_id)
            src_local = sort_perm[torch.searchsorted(sorted_ids, src)]
            edges.append(torch.stack([src_local, dst]))
            num_nodes.append(int(new.numel()))
            num_edges.append(int(src.numel()))
        return SampledSubgraph(n_id, torch.cat(edges, dim=1), num_nodes, num_edges)

    def __repr__(self) -> str:
        return f"NeighborSampler(num_neighbors={self.num_neighbors}, replace={self.replace})"


def _contains(sorted_values: Tensor, queries: Tensor) -> Tensor:
    """``[Q] bool``: which ``queries`` occur in ``sorted_values`` (ascending)."""
    if sorted_values.numel() == 0:
        return torch.zeros(queries.numel(), dtype=torch.bool)
    pos = torch.searchsorted(sorted_values, queries).clamp(max=sorted_values.numel() - 1)
    return sorted_values[pos] == queries

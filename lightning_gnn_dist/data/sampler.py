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

No Python loop runs over vertices or edges: a few row-wise operations per hop, or, with ``numba``
installed, one compiled loop per hop that gives the same samples
(:mod:`lightning_gnn_dist.data._kernels`, ~10× faster).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from lightning_gnn_dist.data import _kernels

_COMPILED = {"enabled": True}


def use_compiled(enabled: bool | None = None) -> bool:
    """Whether the sampler runs its compiled kernels (``numba`` installed and not switched off);
    ``use_compiled(False)`` switches them off (the ``torch`` path gives the same samples)."""
    if enabled is not None:
        _COMPILED["enabled"] = bool(enabled)
    return _COMPILED["enabled"] and _kernels.AVAILABLE


_MASK32 = 0xFFFFFFFF
_TABLE_IDS = 2**24  # position table of NeighborSampler: at most 128 MiB of int64
HopSampler = Callable[
    [Tensor, int, int], tuple[Tensor, Tensor] | tuple[Tensor, Tensor, dict[str, Tensor]]
]


def _lowbias32(x: Tensor) -> Tensor:
    """A 32-bit integer hash (C. Wellons' ``lowbias32``) on ``int64`` lanes holding 32 bits."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


def hash_keys(*values: Tensor | int) -> Tensor:
    """32-bit hash of ``int64`` tensors (broadcast) and ints, as ``int64`` in ``[0, 2^32)``.

    Leading int values are hashed in Python (no tensor operation); a tensor whose values all lie
    in ``[0, 2^32)`` is used as it is (its fold to 32 bits is the identity)."""
    state: Tensor | int = 0x9E3779B9
    for value in values:
        if isinstance(value, int) and isinstance(state, int):
            state = _lowbias32_int(state ^ _fold_int(value))
            continue
        value = torch.as_tensor(value, dtype=torch.long)
        if value.numel() > 64 and 0 <= int(value.min()) and int(value.max()) <= _MASK32:
            folded = value
        else:
            folded = (value ^ (((value >> 32) * 0x9E3779B1) & _MASK32)) & _MASK32
        state = _lowbias32(folded ^ state)
    return torch.tensor(state) if isinstance(state, int) else state


def _fold_int(value: int) -> int:
    value = ((value + 2**63) % 2**64) - 2**63  # as an int64 lane holds it
    return (value ^ (((value >> 32) * 0x9E3779B1) & _MASK32)) & _MASK32


def _lowbias32_int(x: int) -> int:
    x ^= x >> 16
    x = (x * 0x7FEB352D) & _MASK32
    x ^= x >> 15
    x = (x * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


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
        edge: ``[E] int64`` position of each in-edge in the edge lists it was built from (how a
            sampled edge finds its attributes and dataset edge id); ``None``: not kept.
    """

    start: int
    colptr: Tensor
    src: Tensor
    src_key: Tensor
    dst_key: Tensor
    edge: Tensor | None = None

    @classmethod
    def build(
        cls, src: Tensor, dst: Tensor, src_key: Tensor, dst_key: Tensor, start: int = 0
    ) -> InEdges:
        """From edge lists: ``src``/``dst`` routing ids (``dst`` in ``[start, start + T)``),
        ``src_key [E]`` their dataset ids and ``dst_key [T]`` the targets' dataset ids; each
        in-edge keeps its position in the lists (:attr:`edge`)."""
        local = dst - start
        order = torch.argsort(src_key, stable=True)
        order = order[torch.argsort(local[order], stable=True)]
        colptr = torch.zeros(dst_key.numel() + 1, dtype=torch.long)
        torch.cumsum(torch.bincount(local, minlength=dst_key.numel()), 0, out=colptr[1:])
        return cls(start, colptr, src[order], src_key[order], dst_key, order)

    @classmethod
    def from_edge_index(cls, edge_index: Tensor, num_nodes: int) -> InEdges:
        """A whole graph; routing ids are dataset ids."""
        ids = torch.arange(num_nodes)
        return cls.build(edge_index[0], edge_index[1], edge_index[0], ids)

    @property
    def num_targets(self) -> int:
        return int(self.dst_key.numel())

    @staticmethod
    def draw_counts(degree: Tensor, fanout: int, replace: bool = False) -> Tensor:
        """How many in-edges a draw takes from each target of in-edge count ``degree [T]``:
        all with fan-out ``-1``, ``fanout`` (of a target with any) with replacement, else
        ``min(degree, fanout)``."""
        if fanout < 0:
            return degree
        if replace:
            return torch.where(degree > 0, fanout, 0)
        return degree.clamp(max=fanout)

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
        return self._select(targets, fanout, stream, replace, self.src)

    def sample_edges(
        self, targets: Tensor, fanout: int, stream: Tensor | int, replace: bool = False
    ) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`sample` (the same draw) with each sampled in-edge's position in the edge lists
        the structure was built from: ``(counts [T], src [Σ counts], edge [Σ counts])``."""
        if self.edge is None:
            raise ValueError("these in-edges keep no edge positions (edge=None)")
        if self._compiled_draw(fanout, replace):  # sources and positions read in one pass
            return _kernels.sample_without_replacement(
                self.colptr, self.src, self.src_key, self.dst_key, self.start,
                targets, stream, fanout, _SPARSE, self.edge,
            )  # fmt: skip
        positions = getattr(self, "_positions", None)  # kept: built once per structure
        if positions is None or positions.numel() != self.src.numel():
            positions = self._positions = torch.arange(self.src.numel(), device=self.src.device)
        counts, chosen = self._select(targets, fanout, stream, replace, positions)
        return counts, self.src[chosen], self.edge[chosen]

    def _compiled_draw(self, fanout: int, replace: bool) -> bool:
        """Whether the draw runs the compiled kernel (the same samples as the ``torch`` path)."""
        return fanout > 0 and not replace and use_compiled() and not self.src.is_cuda

    def _select(
        self, targets: Tensor, fanout: int, stream: Tensor | int, replace: bool, values: Tensor
    ) -> tuple[Tensor, Tensor]:
        """:meth:`sample`, returning ``values`` (one per in-edge, in :attr:`src`'s order) of the
        chosen in-edges instead of their sources."""
        if self._compiled_draw(fanout, replace):
            counts, chosen, _ = _kernels.sample_without_replacement(
                self.colptr, values, self.src_key, self.dst_key, self.start,
                targets, stream, fanout, _SPARSE,
            )  # fmt: skip
            return counts, chosen
        local = targets - self.start
        first = self.colptr[local]
        degree = self.colptr[local + 1] - first
        if not isinstance(stream, int):
            stream = torch.as_tensor(stream, dtype=torch.long).expand(local.numel())
        dst_key = self.dst_key[local]
        if fanout < 0:
            _, edge = _segment_edges(first, degree, torch.arange(local.numel()))
            return degree, values[edge]
        if replace:
            stream = torch.as_tensor(stream, dtype=torch.long).expand(local.numel())
            counts, chosen = self._with_replacement(first, degree, stream, dst_key, fanout)
            return counts, values[chosen]
        # One [T, fanout] matrix of chosen in-edges, row t valid up to min(degree, fanout):
        # read row by row it is the output (targets in order, each in selection order).
        counts = self.draw_counts(degree, fanout)
        chosen = first.unsqueeze(1) + torch.arange(fanout)  # degree <= fanout: every in-edge
        # High degree: the first `fanout` distinct of 2·fanout uniform draws (a uniform subset),
        # so the work per target is O(fanout) whatever its degree; the rare target with too few
        # distinct draws takes the key path below, which is uniform too.
        sparse = (degree > _SPARSE * fanout).nonzero().view(-1)
        picked, edges, missing = self._distinct_draws(
            first, degree, stream, dst_key, fanout, sparse
        )
        chosen[picked] = edges
        middle = ((degree > fanout) & (degree <= _SPARSE * fanout)).nonzero().view(-1)
        for which in (middle, missing):
            if which.numel():
                chosen[which] = self._smallest_keys(first, degree, stream, dst_key, fanout, which)
        valid = torch.arange(fanout) < counts.unsqueeze(1)
        return counts, values[chosen[valid]]

    def _smallest_keys(self, first, degree, stream, dst_key, fanout, which):
        """``[len(which), fanout]`` in-edges of each target in ``which``: those with the
        smallest keys ``hash(stream, id(i), id(j))``, ascending (one row-wise top-k)."""
        if which.numel() == 0:
            return first.new_empty(0, fanout)
        width = int(degree[which].max())
        column = torch.arange(width)
        edge = first[which].unsqueeze(1) + column
        valid = column < degree[which].unsqueeze(1)
        edge = torch.where(valid, edge, 0)
        key = hash_keys(_rows(stream, which), dst_key[which].unsqueeze(1), self.src_key[edge])
        key.masked_fill_(~valid, _NO_KEY)
        position = torch.topk(key, fanout, dim=1, largest=False, sorted=True).indices
        return edge.gather(1, position)

    def _with_replacement(self, first, degree, stream, dst_key, fanout):
        """``(counts, in-edge positions)`` of ``fanout`` uniform draws per target."""
        counts = self.draw_counts(degree, fanout, replace=True)
        target, offset, _ = _uniform_offsets(stream, dst_key, degree, counts)
        return counts, first[target] + offset

    def _distinct_draws(self, first, degree, stream, dst_key, fanout, which):
        """``(complete, edges [len(complete), fanout], missing)``: for each target in ``which``
        the first ``fanout`` distinct in-edges of ``2 · fanout`` uniform draws, in draw order;
        ``missing`` the targets with fewer distinct draws. Row-wise, one row per target."""
        if which.numel() == 0:
            return which, first.new_empty(0, fanout), which
        draws = 2 * fanout
        u = hash_keys(_rows(stream, which), dst_key[which].unsqueeze(1), torch.arange(draws))
        u = u.double().div_(2.0**32)
        offset = (u * degree[which].unsqueeze(1)).long()
        offset, draw = torch.sort(offset, dim=1, stable=True)  # repeats: earliest draw first
        repeat = torch.zeros_like(offset, dtype=torch.bool)
        repeat[:, 1:] = offset[:, 1:] == offset[:, :-1]
        complete = (~repeat).sum(1) >= fanout
        order = draw.masked_fill_(repeat, draws)[complete]
        position = torch.topk(order, fanout, dim=1, largest=False, sorted=True).indices
        edges = first[which[complete]].unsqueeze(1) + offset[complete].gather(1, position)
        return which[complete], edges, which[~complete]


def _rows(stream: Tensor | int, which: Tensor) -> Tensor | int:
    """The stream of each target in ``which`` as a column, or the common int."""
    return stream if isinstance(stream, int) else stream[which].unsqueeze(1)


_NO_KEY = 2**62
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
        edge_data: what the hop sampler returned per sampled edge (e.g. ``e_id`` and the edge
            attributes), ``[num_edges, ...]`` in ``edge_index`` order; ``{}`` when it returns
            none.
    """

    n_id: Tensor
    edge_index: Tensor
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]
    edge_data: dict[str, Tensor] = field(default_factory=dict)


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
        self._table: Tensor | None = None

    def sample(
        self, seeds: Tensor, stream: int, sample_hop: HopSampler, num_ids: int | None = None
    ) -> SampledSubgraph:
        """Expand ``seeds`` (``[B] int64`` distinct routing ids) hop by hop.

        Args:
            seeds: the batch's seed vertices.
            stream: the batch's random stream (see :func:`stream_key`).
            sample_hop: ``(frontier [F], fanout, stream) -> (counts [F], src [Σ counts])``, e.g.
                a bound :meth:`InEdges.sample` or a distributed request/response, or
                ``(counts, src, edge_data)`` with ``edge_data`` a dict of ``[Σ counts, ...]``
                tensors per sampled edge (gathered into :attr:`SampledSubgraph.edge_data`).
            num_ids: size of the routing id space, if known: up to 2**24 ids, vertices are
                relabelled through a kept ``[num_ids]`` position table (no sort per hop); the
                result is the same either way.
        """
        if num_ids is not None and num_ids <= _TABLE_IDS:
            return self._sample_with_table(seeds, stream, sample_hop, num_ids)
        n_id, frontier_local = seeds, torch.arange(seeds.numel())
        sorted_ids, sort_perm = torch.sort(seeds)
        edges, num_nodes, num_edges = [], [int(seeds.numel())], []
        per_edge: list[dict[str, Tensor]] = []
        for fanout in self.num_neighbors:
            counts, src, *data = sample_hop(n_id[frontier_local], fanout, stream)
            per_edge.append(data[0] if data else {})
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
        return SampledSubgraph(
            n_id, torch.cat(edges, dim=1), num_nodes, num_edges, _concat_hops(per_edge)
        )

    def _sample_with_table(
        self, seeds: Tensor, stream: int, sample_hop: HopSampler, num_ids: int
    ) -> SampledSubgraph:
        """:meth:`sample` with a position table: ``table[id]`` is the local index of a vertex
        already in the batch, else −1 (reset after the batch)."""
        table = self._table
        if table is None or table.numel() < num_ids:
            table = self._table = torch.full((num_ids,), -1, dtype=torch.long)
        pieces, frontier = [seeds], torch.arange(seeds.numel())
        num_local = seeds.numel()
        table[seeds] = frontier
        edges, num_nodes, num_edges = [], [int(seeds.numel())], []
        per_edge: list[dict[str, Tensor]] = []
        try:
            for fanout in self.num_neighbors:
                counts, src, *data = sample_hop(pieces[-1], fanout, stream)
                per_edge.append(data[0] if data else {})
                dst = torch.repeat_interleave(frontier, counts)
                if use_compiled():
                    new, src_local = _kernels.relabel(table, src, num_local)
                else:
                    unseen = src[table[src] < 0]
                    if unseen.numel() * 16 >= num_ids:  # a flag per id beats sorting
                        flags = torch.zeros(num_ids, dtype=torch.bool)
                        flags[unseen] = True
                        new = flags.nonzero().view(-1)
                    else:
                        new = torch.unique(unseen)
                    table[new] = torch.arange(num_local, num_local + new.numel())
                    src_local = table[src]
                frontier = torch.arange(num_local, num_local + new.numel())
                num_local += new.numel()
                edges.append(torch.stack([src_local, dst]))
                pieces.append(new)
                num_nodes.append(int(new.numel()))
                num_edges.append(int(src.numel()))
            n_id = torch.cat(pieces)
        finally:
            for piece in pieces:
                table[piece] = -1
        return SampledSubgraph(
            n_id, torch.cat(edges, dim=1), num_nodes, num_edges, _concat_hops(per_edge)
        )

    def __repr__(self) -> str:
        return f"NeighborSampler(num_neighbors={self.num_neighbors}, replace={self.replace})"


def _concat_hops(per_edge: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """The per-edge tensors of every hop, concatenated in hop order (``{}`` if none)."""
    if not per_edge or not per_edge[0]:
        return {}
    return {key: torch.cat([hop[key] for hop in per_edge]) for key in per_edge[0]}


def _contains(sorted_values: Tensor, queries: Tensor) -> Tensor:
    """``[Q] bool``: which ``queries`` occur in ``sorted_values`` (ascending)."""
    if sorted_values.numel() == 0:
        return torch.zeros(queries.numel(), dtype=torch.bool)
    pos = torch.searchsorted(sorted_values, queries).clamp(max=sorted_values.numel() - 1)
    return sorted_values[pos] == queries

"""Where a neighbour loader gets structure and features: the whole graph, or one rank's part.

Both stores answer the same two questions, so one loader serves single-process and
owner-compute (DistDGL, paper 004 §4.1) training:

* ``sample_hop(frontier, fanout, stream)`` — sampled in-neighbours of the frontier;
* ``fetch(n_id)`` — feature rows, labels and dataset ids of the batch's vertices.

:class:`PartitionedGraphStore` holds only the in-edges and rows of the owned vertices
(:class:`~lightning_gnn_dist.data.local.LocalPartition`). Frontier vertices owned elsewhere are
sampled by their owners in one batched request/response ``all_to_all`` per hop; remote feature
rows come from their owners in one batched exchange per step. Every payload and size vector is
counted in a :class:`~lightning_gnn_dist.comm.counters.CommCounter` (layers ``"sampling"`` and
``"features"``, directions ``"request"``/``"response"``; ``"control"`` for the per-peer size
vectors; ``"features.ids"`` for the ids, labels and degrees sent with the feature rows, so each
row is counted once under ``"features"``). Cached rows a fetch did not request are counted in
:attr:`PartitionedGraphStore.cache_hit_rows`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor
from torch_geometric.data import Data

from lightning_gnn_dist.comm import CommCounter, make_exchange
from lightning_gnn_dist.comm.codec import ADAPTIVE, CodecPolicy, all_to_all_rows
from lightning_gnn_dist.comm.messages import all_to_all
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.data.sampler import InEdges


@dataclass
class FetchedRows:
    """Rows of a batch's vertices: ``x [n, d]``, ``y [n]`` (or ``None``), ``ids [n]`` dataset ids;
    with ``degrees=True`` also ``in_degree [n]`` (global, self loops excluded) and
    ``num_self_loops [n]`` (in the whole graph)."""

    x: Tensor
    y: Tensor | None
    ids: Tensor
    in_degree: Tensor | None = None
    num_self_loops: Tensor | None = None


class LocalGraphStore:
    """A whole graph in one process; routing ids are dataset ids.

    Args:
        data: a PyG ``Data`` with ``edge_index`` and ``x`` (``y`` optional).
    """

    rank, world_size = 0, 1

    def __init__(self, data: Data) -> None:
        self.data = data
        self.num_routing_ids = int(data.num_nodes)
        self.in_edges = InEdges.from_edge_index(data.edge_index, data.num_nodes)
        self.counter = CommCounter()

    def sample_hop(
        self, frontier: Tensor, fanout: int, stream: int, replace: bool = False, owned: bool = False
    ):
        return self.in_edges.sample(frontier, fanout, stream, replace)

    def fetch(self, n_id: Tensor, degrees: bool = False) -> FetchedRows:
        y = self.data.y
        y = None if y is None else y.index_select(0, n_id)
        rows = FetchedRows(self.data.x.index_select(0, n_id), y, n_id)
        if degrees:
            src, dst = self.data.edge_index
            loop = src == dst
            num_nodes = self.data.num_nodes
            rows.in_degree = torch.bincount(dst[~loop], minlength=num_nodes)[n_id]
            rows.num_self_loops = torch.bincount(dst[loop], minlength=num_nodes)[n_id]
        return rows

    def to_routing(self, ids: Tensor) -> Tensor:
        """Dataset ids → routing ids (the identity here)."""
        return ids

    def dataset_ids(self, mask: Tensor) -> Tensor:
        """Dataset ids of the vertices a ``[num_nodes] bool`` mask selects."""
        return mask.nonzero().view(-1)


class PartitionedGraphStore:
    """One rank's part; remote structure and rows come from their owners.

    Args:
        partition: this rank's :class:`LocalPartition` (with ``x``).
        group: process group whose ranks are the parts; give the loader its own group when it
            samples in a background thread. (default: the world group)
        cache_size: remote rows kept locally, chosen as the halo vertices with the most local
            in-edges (the likeliest to be sampled from this part), fetched once at construction.
            (default: ``0``)
        codec: how remote feature rows travel: a fixed codec of
            :mod:`~lightning_gnn_dist.comm.codec` (``"fp32"``, ``"fp16"``, ``"bf16"``,
            ``"int8"``, ``"int4"``) or a :class:`~lightning_gnn_dist.comm.codec.CodecPolicy`
            (looked up as layer ``"features"``, direction ``"forward"``). It applies to every
            fetch made while it is set (training and evaluation batches; the hot-row cache when
            given here); the counters record the encoded bytes. ``GNNStrategy(codec=...)`` sets
            it in ``loader="neighbor"`` mode. (default: ``"fp32"``)

    Construction is collective (every rank must build its store).
    """

    def __init__(
        self, partition: LocalPartition, group=None, cache_size: int = 0, codec="fp32"
    ) -> None:
        if partition.x is None:
            raise ValueError(
                "the partition has no feature rows (x); the neighbour loader needs them"
            )
        _check_host_group(group, partition.x.device)
        self.partition, self.group = partition, group
        self.rank, self.world_size = partition.part_id, partition.num_parts
        self.num_routing_ids = int(partition.num_nodes_global)
        self.start, self.end = partition.owned_range
        self.counter = CommCounter()
        self.codec = codec
        self.cache_hit_rows = 0
        halo_keys = self._halo_dataset_ids()
        num_owned = partition.num_owned
        src_local, dst_local = partition.edge_index
        is_owned = src_local < num_owned
        halo_pos = src_local[~is_owned] - num_owned
        src, src_key = (
            src_local + self.start,
            partition.global_ids[src_local.clamp(max=num_owned - 1)],
        )
        src[~is_owned], src_key[~is_owned] = partition.halo_ids[halo_pos], halo_keys[halo_pos]
        self.in_edges = InEdges.build(
            src, dst_local + self.start, src_key, partition.global_ids, start=self.start
        )
        empty_y = None if partition.y is None else partition.y.new_empty(0)
        self._cache_routing = torch.empty(0, dtype=torch.long)
        self._cache = FetchedRows(
            partition.x.new_empty(0, partition.x.size(1)),
            empty_y,
            self._cache_routing,
            self._cache_routing,
            self._cache_routing,
        )
        if cache_size > 0:  # collective: every rank is given the same cache_size
            references = torch.bincount(halo_pos, minlength=partition.num_halo)
            hot = torch.argsort(references, descending=True, stable=True)[:cache_size]
            self._cache_routing = torch.sort(partition.halo_ids[hot]).values
            self._cache = self._fetch_remote(self._cache_routing)

    @property
    def codec(self) -> CodecPolicy:
        """The :class:`~lightning_gnn_dist.comm.codec.CodecPolicy` of the feature fetch."""
        return self._codec

    @codec.setter
    def codec(self, codec) -> None:
        policy = CodecPolicy.coerce(codec)
        if policy.name("features", "forward") == ADAPTIVE:
            raise ValueError(
                "the feature fetch takes a fixed codec (fp32, fp16, bf16, int8, int4), not "
                "'adaptive' (its bit-widths need an agreement the fetch does not make)"
            )
        self._codec = policy

    # -- helpers ----------------------------------------------------------------------------
    def owner(self, ids: Tensor) -> Tensor:
        """Part owning each routing id: ``[n] int64``."""
        return torch.searchsorted(self.partition.part_offsets, ids, right=True) - 1

    def _halo_dataset_ids(self) -> Tensor:
        """Dataset ids of the halo vertices: the partition's ``halo_global_ids``, or (a part
        written without them) from their owners in one p2p halo exchange."""
        if self.partition.halo_global_ids is not None:
            return self.partition.halo_global_ids
        exchange = make_exchange("p2p", self.partition, CommCounter(), self.group)
        ids = self.partition.global_ids.view(-1, 1)
        return exchange(ids, "setup").view(-1)

    def _all_to_all(
        self,
        send: Tensor,
        send_counts: Tensor,
        layer: str,
        direction: str,
        recv_counts=None,
        codec=None,
    ) -> tuple[Tensor, Tensor]:
        """Send ``send`` (rows grouped by peer, ``send_counts [P]``); returns ``(recv, recv_counts)``.

        ``recv_counts`` is exchanged first (counted as ``control``) unless given. A single part
        has nothing to exchange and needs no process group. With a
        :class:`~lightning_gnn_dist.comm.codec.Codec`, ``send`` are float rows that travel
        encoded (:func:`~lightning_gnn_dist.comm.codec.all_to_all_rows`) and are returned decoded.
        """
        if self.world_size == 1:
            return send[:0], torch.zeros_like(send_counts)
        if recv_counts is None:
            recv_counts = torch.empty_like(send_counts)
            all_to_all(recv_counts, send_counts, group=self.group)
            ones = torch.ones_like(send_counts)
            self._record("control", direction, ones, ones, 1, 8)
        width = math.prod(send.shape[1:])
        if codec is not None and not codec.lossless:
            wire = self.codec.encode(codec, send, "features", "forward", self.rank)
            counts = (send_counts.tolist(), recv_counts.tolist())
            recv = all_to_all_rows(wire, *counts, codec, width, send.dtype, self.group)
            row_bytes = codec.row_bytes(width, send.element_size())
            size = send.element_size()
            self._record(layer, direction, send_counts, recv_counts, width, size, row_bytes, codec)
            return recv, recv_counts
        recv = send.new_empty((int(recv_counts.sum()), *send.shape[1:]))
        all_to_all(recv, send, recv_counts.tolist(), send_counts.tolist(), group=self.group)
        self._record(
            layer, direction, send_counts, recv_counts, width, send.element_size(), codec=codec
        )
        return recv, recv_counts

    def _record(
        self,
        layer,
        direction,
        sent: Tensor,
        received: Tensor,
        width,
        element_size,
        row_bytes=None,
        codec=None,
    ) -> None:
        peers = torch.arange(self.world_size) != self.rank
        sent, received = sent * peers, received * peers
        self.counter.record(
            layer,
            direction,
            rows_sent=int(sent.sum()),
            rows_received=int(received.sum()),
            width=width,
            element_size=element_size,
            messages_sent=int((sent > 0).sum()),
            messages_received=int((received > 0).sum()),
            row_bytes=row_bytes,
            codec="" if codec is None else codec.name,
            rows_sent_to=sent.tolist(),
        )

    # -- sampling -------------------------------------------------------------------------------
    def sample_hop(
        self,
        frontier: Tensor,
        fanout: int,
        stream: int,
        replace: bool = False,
        owned: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """Sampled in-neighbours of ``frontier`` (routing ids, any owner); collective unless
        ``owned``: every rank's frontier is its own vertices (the seeds' hop), so no rank has
        requests to send and the hop runs without messages. Every rank passes the same
        ``owned``."""
        if owned and bool(((frontier < self.start) | (frontier >= self.end)).any()):
            raise ValueError(
                f"rank {self.rank}: sample_hop(owned=True) got vertices outside its routing "
                f"range [{self.start}, {self.end})"
            )
        if owned or self.world_size == 1:  # every vertex is owned here: no requests to route
            return self.in_edges.sample(frontier, fanout, stream, replace)
        owner = self.owner(frontier)
        order = torch.argsort(owner, stable=True)
        remote = order[owner[order] != self.rank]
        local = order[owner[order] == self.rank]
        counts = torch.bincount(owner[remote], minlength=self.world_size)
        # Request: per peer [stream, target ids...]; the owner samples with the requester's stream.
        has = (counts > 0).long()
        request = torch.full((int(counts.sum() + has.sum()),), stream, dtype=torch.long)
        request[torch.arange(remote.numel()) + torch.cumsum(has, 0)[owner[remote]]] = frontier[
            remote
        ]
        received, received_counts = self._all_to_all(request, counts + has, "sampling", "request")
        peer = torch.repeat_interleave(torch.arange(self.world_size), received_counts)
        first = torch.cumsum(received_counts, 0) - received_counts
        is_header = torch.arange(received.numel()) == first[peer]
        targets, target_peer = received[~is_header], peer[~is_header]
        answer_counts, answer_src = self.in_edges.sample(
            targets, fanout, received[first[target_peer]], replace
        )
        # Response: per peer [counts of its targets..., sampled sources...].
        edge_peer = torch.repeat_interleave(target_peer, answer_counts)
        payload = torch.cat([answer_counts, answer_src])
        kind = torch.cat([torch.zeros_like(target_peer), torch.ones_like(edge_peer)])
        by_peer = torch.argsort(torch.cat([target_peer, edge_peer]) * 2 + kind, stable=True)
        sizes = torch.bincount(target_peer, minlength=self.world_size)
        sizes += torch.bincount(edge_peer, minlength=self.world_size)
        response, response_counts = self._all_to_all(
            payload[by_peer], sizes, "sampling", "response"
        )
        peer = torch.repeat_interleave(torch.arange(self.world_size), response_counts)
        position = (
            torch.arange(response.numel())
            - (torch.cumsum(response_counts, 0) - response_counts)[peer]
        )
        is_count = position < counts[peer]
        local_counts, local_src = self.in_edges.sample(frontier[local], fanout, stream, replace)
        return _segments_in_order(
            torch.cat([local_counts, response[is_count]]),
            torch.cat([local_src, response[~is_count]]),
            torch.cat([local, remote]),
        )

    # -- features -------------------------------------------------------------------------------
    def fetch(self, n_id: Tensor, degrees: bool = False) -> FetchedRows:
        """Rows of ``n_id`` (routing ids): owned rows locally, cached rows from the cache, the
        rest from their owners in one batched exchange; collective (every rank must pass the
        same ``degrees``). ``degrees=True`` adds the global in-degrees and self loops, which
        the owners send with the ids."""
        part = self.partition
        if self.world_size == 1:
            rows = n_id - self.start
            y = None if part.y is None else part.y.index_select(0, rows)
            fetched = FetchedRows(
                part.x.index_select(0, rows), y, part.global_ids.index_select(0, rows)
            )
            if degrees:
                own_degree, own_loops = self._owned_degrees()
                fetched.in_degree = own_degree.index_select(0, rows)
                fetched.num_self_loops = own_loops.index_select(0, rows)
            return fetched
        owner = self.owner(n_id)
        cached = _position_in(self._cache_routing, n_id)
        in_cache = (cached >= 0) & (owner != self.rank)
        wanted = (owner != self.rank) & ~in_cache
        self.cache_hit_rows += int(in_cache.sum())
        x = part.x.new_empty(n_id.numel(), part.x.size(1))
        ids = torch.empty_like(n_id)
        y = None if part.y is None else part.y.new_empty(n_id.numel())
        mine = (owner == self.rank).nonzero().view(-1)
        x[mine], ids[mine] = (
            part.x[n_id[mine] - self.start],
            part.global_ids[n_id[mine] - self.start],
        )
        hits = in_cache.nonzero().view(-1)
        x[hits], ids[hits] = self._cache.x[cached[hits]], self._cache.ids[cached[hits]]
        if y is not None:
            y[mine], y[hits] = part.y[n_id[mine] - self.start], self._cache.y[cached[hits]]
        want = wanted.nonzero().view(-1)
        want = want[torch.argsort(owner[want], stable=True)]
        rows = self._fetch_remote(n_id[want], degrees)
        x[want], ids[want] = rows.x, rows.ids
        if y is not None:
            y[want] = rows.y
        fetched = FetchedRows(x, y, ids)
        if degrees:
            in_degree, loops = torch.empty_like(n_id), torch.empty_like(n_id)
            own_degree, own_loops = self._owned_degrees()
            in_degree[mine], loops[mine] = (
                own_degree[n_id[mine] - self.start],
                own_loops[n_id[mine] - self.start],
            )
            in_degree[hits] = self._cache.in_degree[cached[hits]]
            loops[hits] = self._cache.num_self_loops[cached[hits]]
            in_degree[want], loops[want] = rows.in_degree, rows.num_self_loops
            fetched.in_degree, fetched.num_self_loops = in_degree, loops
        return fetched

    def _owned_degrees(self) -> tuple[Tensor, Tensor]:
        """``(in_degree, num_self_loops)`` of the owned vertices (global, ``[num_owned]``)."""
        part = self.partition
        loops = part.num_self_loops if part.num_self_loops is not None else part.has_self_loop
        return part.in_degree[: part.num_owned], loops[: part.num_owned].long()

    def _fetch_remote(self, ids: Tensor, degrees: bool = True) -> FetchedRows:
        """Rows of remote routing ``ids`` (sorted by owner); collective."""
        part = self.partition
        counts = torch.bincount(self.owner(ids), minlength=self.world_size)
        requested, requested_counts = self._all_to_all(ids, counts, "features", "request")
        rows = requested - self.start
        codec = self.codec.codec("features", "forward")
        meta = [part.global_ids[rows]] + ([] if part.y is None else [part.y[rows].long()])
        if degrees:
            meta += [degree[rows] for degree in self._owned_degrees()]
        meta = torch.stack(meta, 1)
        if codec is None or codec.lossless:
            x, meta = self._rows_with_meta(part.x[rows], meta, requested_counts, counts, codec)
        else:
            x, _ = self._all_to_all(
                part.x[rows], requested_counts, "features", "response", counts, codec
            )
            # The same rows' ids (and labels, degrees): counted as a line of their own, so the
            # feature rows are counted once.
            meta, _ = self._all_to_all(meta, requested_counts, "features.ids", "response", counts)
        y = None if part.y is None else meta[:, 1].to(part.y.dtype)
        fetched = FetchedRows(x, y, meta[:, 0])
        if degrees:
            fetched.in_degree, fetched.num_self_loops = meta[:, -2], meta[:, -1]
        return fetched

    def _rows_with_meta(
        self, x: Tensor, meta: Tensor, send_counts: Tensor, recv_counts: Tensor, codec
    ) -> tuple[Tensor, Tensor]:
        """Send feature rows ``x [n, d]`` and their ``meta [n, m] int64`` (ids, labels,
        degrees) as one message per peer, each row's bytes side by side; returns the received
        ``(x, meta)``. Counted as two lines, ``features`` and ``features.ids``, so each feature
        row is counted once and its ids apart: a packed row is ``d · x.element_size() + 8 m``
        bytes, exactly the two lines' bytes (no padding travels)."""
        if self.world_size == 1:
            return x[:0], meta[:0]
        width_x = x.size(1) * x.element_size()
        packed = torch.cat([x.contiguous().view(torch.uint8), meta.view(torch.uint8)], 1)
        received = packed.new_empty(int(recv_counts.sum()), packed.size(1))
        all_to_all(received, packed, recv_counts.tolist(), send_counts.tolist(), group=self.group)
        self._record(
            "features", "response", send_counts, recv_counts, x.size(1), x.element_size(),
            codec=codec,
        )  # fmt: skip
        self._record("features.ids", "response", send_counts, recv_counts, meta.size(1), 8)
        return _columns_as(received, 0, width_x, x.dtype), _columns_as(
            received, width_x, packed.size(1), torch.int64
        )

    def dataset_ids(self, mask: Tensor) -> Tensor:
        """Dataset ids of the owned vertices a ``[num_owned] bool`` mask selects."""
        return self.partition.global_ids[mask]

    def to_routing(self, ids: Tensor) -> Tensor:
        """Dataset ids of owned vertices → routing ids."""
        values, perm = torch.sort(self.partition.global_ids)
        position = _position_in(values, ids, perm)
        if bool((position < 0).any()):
            raise ValueError("only vertices owned by this rank can be seeds")
        return position + self.start

    def __repr__(self) -> str:
        return f"PartitionedGraphStore(rank={self.rank}/{self.world_size}, owned={self.end - self.start}, cache={self._cache_routing.numel()})"


def _check_host_group(group, device: torch.device) -> None:
    """Refuse a process group that cannot carry the store's tensors (NCCL and a CPU part)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or device.type != "cpu":
        return
    if dist.get_backend(group) == "nccl":
        raise ValueError(
            "PartitionedGraphStore samples and fetches on the CPU, but its process group is "
            "NCCL (CUDA tensors only); pass a gloo group, e.g. group="
            "lightning_gnn_dist.comm.messages.host_group()"
        )


def _columns_as(packed: Tensor, start: int, stop: int, dtype: torch.dtype) -> Tensor:
    """The bytes ``packed[:, start:stop]`` (``[n, w] uint8``) as a new ``[n, w / size] dtype``
    tensor. Not a view: a column slice keeps its storage offset ``start`` even where it is
    contiguous (one row), and viewing bytes as a wider type needs an offset divisible by its
    size (``4·d`` for the ids after ``d`` float32 columns is not, for odd ``d``)."""
    columns = (stop - start) // dtype.itemsize
    out = torch.empty(packed.size(0), columns, dtype=dtype, device=packed.device)
    out.view(torch.uint8).copy_(packed[:, start:stop])
    return out


def _position_in(sorted_values: Tensor, queries: Tensor, perm: Tensor | None = None) -> Tensor:
    """Index of each query in ``sorted_values`` (mapped through ``perm`` when given), ``-1`` if absent."""
    if sorted_values.numel() == 0:
        return torch.full_like(queries, -1)
    pos = torch.searchsorted(sorted_values, queries).clamp(max=sorted_values.numel() - 1)
    found = sorted_values[pos] == queries
    if perm is not None:
        pos = perm[pos]
    return torch.where(found, pos, -1)


def _segments_in_order(counts: Tensor, values: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
    """Reorder variable-length segments: segment ``k`` (``counts[k]`` values) belongs at
    ``positions[k]``; returns ``(counts, values)`` in position order."""
    inverse = torch.argsort(positions)
    starts = (torch.cumsum(counts, 0) - counts)[inverse]
    new_counts = counts[inverse]
    new_starts = torch.cumsum(new_counts, 0) - new_counts
    index = torch.repeat_interleave(starts - new_starts, new_counts) + torch.arange(values.numel())
    return new_counts, values[index]

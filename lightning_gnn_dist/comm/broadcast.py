"""``broadcast``: CAGNET's 1D baseline, every rank broadcasts its whole block (design §4)."""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from lightning_gnn_dist.comm.base import HaloExchange, Transfer
from lightning_gnn_dist.comm.codec import Codec
from lightning_gnn_dist.comm.messages import start_messages
from lightning_gnn_dist.partition.metrics import PartitionMetrics


class BroadcastExchange(HaloExchange):
    """CAGNET 1D baseline: every rank broadcasts its whole block; receivers keep the halo rows.

    Moves ``(P − 1) · N · d`` elements per layer and direction (backward: one reduce per block;
    with a lossy codec the same rows travel encoded to the root, which sums them). Blocks are
    processed one root at a time, so no rank holds the whole layer input.

    NCCL rule: forward, one ``broadcast`` per root in rank order of the root's whole block
    (its rows from ``part_offsets``, which every rank holds); backward, one ``reduce`` per root
    in rank order, or with a lossy codec one
    :func:`~lightning_gnn_dist.comm.messages.start_messages` batch in which every rank sends
    each root its encoded partial block and each root receives one from every peer (the root's
    block size on both sides). A root whose block has no rows is skipped by every rank alike (no
    zero-size collective or message); ``cached`` skips the roots its agreed flags leave out,
    the same list on every rank.
    """

    mode = "broadcast"

    @staticmethod
    def predicted_rows_sent(metrics: PartitionMetrics, direction: str) -> np.ndarray:
        if direction == "forward":
            return (metrics.num_parts - 1) * metrics.part_sizes
        return metrics.num_nodes - metrics.part_sizes

    @staticmethod
    def predicted_peer_rows(metrics: PartitionMetrics, direction: str) -> np.ndarray:
        # Forward: root p's block goes to every peer; backward: every peer returns a partial
        # gradient of root q's block to q.
        sizes = metrics.part_sizes
        block = sizes[:, None] if direction == "forward" else sizes[None, :]
        rows = np.broadcast_to(block, (metrics.num_parts, metrics.num_parts)).copy()
        np.fill_diagonal(rows, 0)
        return rows

    def _blocks(self) -> list[Tensor]:
        """Per root ``q``: local row indices (within ``q``'s block) of this rank's halo rows."""
        if not hasattr(self, "_halo_blocks"):
            offsets = self.partition.part_offsets
            bounds = [0]
            for count in self._recv_counts:
                bounds.append(bounds[-1] + count)
            self._halo_blocks = [
                self.partition.halo_ids[bounds[q] : bounds[q + 1]] - offsets[q]
                for q in range(self.world_size)
            ]
        return self._halo_blocks

    def _block_sizes(self) -> list[int]:
        """Rows of every rank's block (host integers, read once: no device round trip per
        exchange)."""
        if not hasattr(self, "_sizes"):
            self._sizes = torch.diff(self.partition.part_offsets).tolist()  # host: once
        return self._sizes

    def _record(self, layer: str, direction: str, like: Tensor, codec: Codec) -> None:
        # Forward: this root's block goes to every peer. Backward (reduce): this rank sends a
        # partial gradient for every other block and receives one per peer for its own.
        sizes, peers = self._block_sizes(), self.world_size - 1
        own, others = sizes[self.rank] * peers, sum(sizes) - sizes[self.rank]
        sent, received = (own, others) if direction == "forward" else (others, own)
        sent_to = [sizes[self.rank]] * len(sizes) if direction == "forward" else list(sizes)
        sent_to[self.rank] = 0
        self.counter.record(
            layer,
            direction,
            rows_sent=sent,
            rows_received=received,
            width=like.size(1),
            element_size=like.element_size(),
            messages_sent=peers,
            messages_received=peers,
            rows_sent_to=sent_to,
            row_bytes=codec.row_bytes(like.size(1), like.element_size()),
            codec=codec.name,
        )

    # The collectives block, so they run inside Transfer.wait: the exchange time is measured like
    # p2p's, and no local work could overlap them anyway.
    def _post_forward(self, h_owned: Tensor, layer: str) -> Transfer:
        codec = self._codec(layer, "forward")
        self._record(layer, "forward", h_owned, codec)
        return Transfer([], h_owned, lambda h: self._broadcast_blocks(h, layer, codec))

    def _post_backward(self, grad_halo: Tensor, layer: str) -> Transfer:
        codec = self._codec(layer, "backward")
        self._record(layer, "backward", grad_halo, codec)
        return Transfer([], grad_halo, lambda g: self._reduce_blocks(g, layer, codec))

    def _halo_bounds(self) -> list[int]:
        bounds = [0]
        for count in self._recv_counts:
            bounds.append(bounds[-1] + count)
        return bounds

    def _broadcast_blocks(
        self,
        h_owned: Tensor,
        layer: str,
        codec: Codec,
        roots: list[bool] | None = None,
        halo: Tensor | None = None,
    ) -> Tensor:
        """``[num_owned, d]`` → ``[num_halo, d]``: one broadcast per root (those ``roots``
        flags, default all), halo rows kept; the halo rows of other roots keep ``halo``'s
        values. A lossy codec encodes the root's block once; receivers decode their rows only."""
        width = h_owned.size(1)
        halo = h_owned.new_empty(self.partition.num_halo, width) if halo is None else halo
        if self.world_size == 1:
            return halo
        bounds = self._halo_bounds()
        for root, (size, rows) in enumerate(zip(self._block_sizes(), self._blocks(), strict=True)):
            if (roots is not None and not roots[root]) or size == 0:
                continue  # the same skip on every rank: roots and sizes are shared
            if root == self.rank:
                block = self._encode(codec, h_owned, layer, "forward")
            else:
                block = codec.empty(size, width, h_owned)
            dist.broadcast(block, src=self._peer(root), group=self.group)
            if root != self.rank:
                kept = block.index_select(0, rows.to(block.device))
                halo[bounds[root] : bounds[root + 1]] = codec.decode(kept, width, h_owned.dtype)
        return halo

    def _reduce_blocks(
        self, grad_halo: Tensor, layer: str, codec: Codec, roots: list[bool] | None = None
    ) -> Tensor:
        """``[num_halo, d]`` → ``[num_owned, d]``: per root (those ``roots`` flags, default
        all) the sum of every peer's partial gradient of its block. Lossless: one sum-reduce of
        a dense block per root. A lossy codec cannot be summed in flight: each peer sends its
        encoded partial block to the root (the same rows as the reduce), which decodes and sums
        them in rank order."""
        width = grad_halo.size(1)
        grad_owned = grad_halo.new_zeros(self.partition.num_owned, width)
        if self.world_size == 1:
            return grad_owned
        bounds, sizes, blocks = self._halo_bounds(), self._block_sizes(), self._blocks()
        # A root without rows is skipped by every rank alike (no zero-size message).
        active = [(roots is None or roots[q]) and sizes[q] > 0 for q in range(self.world_size)]
        ops, received = [], []
        for root in range(self.world_size):
            if not active[root]:
                continue
            if root == self.rank:
                block = grad_owned
            else:
                block = grad_halo.new_zeros(sizes[root], width)
                block.index_add_(
                    0, blocks[root].to(block.device), grad_halo[bounds[root] : bounds[root + 1]]
                )
            if codec.lossless:
                dist.reduce(block, dst=self._peer(root), group=self.group)
            elif root != self.rank:
                wire = self._encode(codec, block, layer, "backward")
                ops.append(dist.P2POp(dist.isend, wire, self._peer(root), self.group))
        if not codec.lossless and active[self.rank]:
            for peer in range(self.world_size):
                if peer != self.rank:
                    received.append(codec.empty(sizes[self.rank], width, grad_halo))
                    ops.append(dist.P2POp(dist.irecv, received[-1], self._peer(peer), self.group))
        for request in start_messages(ops):
            request.wait()
        for wire in received:
            grad_owned += codec.decode(wire, width, grad_halo.dtype)
        return grad_owned

"""``broadcast``: CAGNET's 1D baseline, every rank broadcasts its whole block (design §4)."""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from lightning_gnn_dist.comm.base import HaloExchange, Transfer
from lightning_gnn_dist.partition.metrics import PartitionMetrics


class BroadcastExchange(HaloExchange):
    """CAGNET 1D baseline: every rank broadcasts its whole block; receivers keep the halo rows.

    Moves ``(P − 1) · N · d`` elements per layer and direction (backward: one reduce per block).
    Blocks are processed one root at a time, so no rank holds the whole layer input.
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
        return torch.diff(self.partition.part_offsets).tolist()

    def _record(self, layer: str, direction: str, like: Tensor) -> None:
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
        )

    # The collectives block, so they run inside Transfer.wait: the exchange time is measured like
    # p2p's, and no local work could overlap them anyway.
    def _post_forward(self, h_owned: Tensor, layer: str) -> Transfer:
        self._record(layer, "forward", h_owned)
        return Transfer([], h_owned, self._broadcast_blocks)

    def _post_backward(self, grad_halo: Tensor, layer: str) -> Transfer:
        self._record(layer, "backward", grad_halo)
        return Transfer([], grad_halo, self._reduce_blocks)

    def _broadcast_blocks(self, h_owned: Tensor) -> Tensor:
        """``[num_owned, d]`` → ``[num_halo, d]``: one broadcast per root, halo rows kept."""
        halo = [h_owned.new_empty(0, h_owned.size(1))]
        if self.world_size == 1:
            return halo[0]
        for root, (size, rows) in enumerate(zip(self._block_sizes(), self._blocks(), strict=True)):
            block = h_owned if root == self.rank else h_owned.new_empty(size, h_owned.size(1))
            dist.broadcast(block, src=self._peer(root), group=self.group)
            if root != self.rank:
                halo.append(block.index_select(0, rows.to(block.device)))
        return torch.cat(halo)

    def _reduce_blocks(self, grad_halo: Tensor) -> Tensor:
        """``[num_halo, d]`` → ``[num_owned, d]``: one sum-reduce of a dense block per root."""
        grad_owned = grad_halo.new_zeros(self.partition.num_owned, grad_halo.size(1))
        if self.world_size == 1:
            return grad_owned
        offset = 0
        for root, (size, rows) in enumerate(zip(self._block_sizes(), self._blocks(), strict=True)):
            block = (
                grad_owned if root == self.rank else grad_halo.new_zeros(size, grad_halo.size(1))
            )
            if root != self.rank:
                block.index_add_(
                    0, rows.to(block.device), grad_halo[offset : offset + rows.numel()]
                )
                offset += rows.numel()
            dist.reduce(block, dst=self._peer(root), group=self.group)
        return grad_owned

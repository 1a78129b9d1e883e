"""``p2p``: point-to-point exchange of exactly the planned rows (paper 000 Alg. 1–2)."""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from lightning_gnn_dist.comm.base import HaloExchange, Transfer
from lightning_gnn_dist.comm.codec import Codec
from lightning_gnn_dist.comm.messages import start_messages
from lightning_gnn_dist.partition.metrics import PartitionMetrics


class P2PExchange(HaloExchange):
    """Point-to-point exchange of exactly the planned rows (paper 000 Alg. 1–2).

    Per exchange a rank sends ``Σ send_counts`` rows in one message per peer that needs any and
    receives ``num_halo`` rows; backward moves the same rows the other way. Rows travel encoded
    by the exchange's codec (:meth:`_move`), which the vertex-cut modes and ``cached`` reuse.

    NCCL rule: each exchange is one :func:`~lightning_gnn_dist.comm.messages.start_messages`
    batch per rank holding, for every peer ``q``, one send of ``send_counts[q]`` rows and one
    receive of ``recv_counts[q]`` rows (backward: the same batch mirrored). A zero count posts
    nothing, on both sides alike: ``send_counts[q]`` on rank ``p`` equals ``recv_counts[p]`` on
    rank ``q`` (the partition's plan, which both hold), and a message's wire size is a function
    of its row count and width only, the same on both sides. No collective, except with
    ``codec="adaptive"``: at an epoch's first training round every rank joins one
    ``all_gather`` and one ``all_reduce`` (the bit-width agreement, in ``begin_round``).
    """

    mode = "p2p"

    @staticmethod
    def predicted_rows_sent(metrics: PartitionMetrics, direction: str) -> np.ndarray:
        return metrics.send_rows if direction == "forward" else metrics.recv_rows

    @staticmethod
    def predicted_peer_rows(metrics: PartitionMetrics, direction: str) -> np.ndarray:
        return metrics.peer_rows if direction == "forward" else metrics.peer_rows.T

    def _post(
        self,
        send: Tensor,
        send_counts: list[int],
        recv: Tensor,
        recv_counts: list[int],
        send_to: list[bool] | None = None,
        recv_from: list[bool] | None = None,
    ) -> list:
        """Post one message per peer with rows; ``send_to``/``recv_from`` (``[P]`` bools) skip
        peers while keeping the buffers' per-peer layout (the ``cached`` mode uses them)."""
        ops, offset = [], 0
        for peer, count in enumerate(send_counts):
            if count and (send_to is None or send_to[peer]):
                ops.append(
                    dist.P2POp(
                        dist.isend, send[offset : offset + count], self._peer(peer), self.group
                    )
                )
            offset += count
        offset = 0
        for peer, count in enumerate(recv_counts):
            if count and (recv_from is None or recv_from[peer]):
                ops.append(
                    dist.P2POp(
                        dist.irecv, recv[offset : offset + count], self._peer(peer), self.group
                    )
                )
            offset += count
        return start_messages(ops)

    def _move(
        self,
        rows: Tensor,
        send_counts: list[int],
        recv_counts: list[int],
        layer: str,
        direction: str,
        codec: Codec,
        send_to: list[bool] | None = None,
        recv_from: list[bool] | None = None,
        into: Tensor | None = None,
    ) -> Transfer:
        """Post ``rows`` (``[Σ send_counts, d]``, grouped by peer) encoded by ``codec``; the
        transfer's result is the ``[Σ recv_counts, d]`` decoded rows received, grouped by peer.
        Peers left out by ``recv_from`` keep ``into``'s rows (default: uninitialised). With the
        lossless codec the rows are posted as they are, straight into the result buffer."""
        width, total = rows.size(1), sum(recv_counts)
        if codec.lossless:
            recv = rows.new_empty(total, width) if into is None else into
            requests = self._post(rows, send_counts, recv, recv_counts, send_to, recv_from)
            return Transfer(requests, recv)
        # Encode only when something goes out (a skipped peer's slice is never read).
        sending = any(c and (send_to is None or send_to[q]) for q, c in enumerate(send_counts))
        wire = self._encode(codec, rows, layer, direction) if sending else rows.new_empty(0)
        recv = codec.empty(total, width, rows)
        requests = self._post(wire, send_counts, recv, recv_counts, send_to, recv_from)
        dtype = rows.dtype

        def decode(received: Tensor) -> Tensor:
            if recv_from is None:
                return codec.decode(received, width, dtype)
            out = rows.new_empty(total, width) if into is None else into
            flags = torch.tensor(recv_from, device=rows.device)
            counts = torch.tensor(recv_counts, device=rows.device)
            index = torch.repeat_interleave(flags, counts).nonzero().view(-1)
            out[index] = codec.decode(received[index], width, dtype)
            return out

        return Transfer(requests, recv, decode)

    def _record(
        self,
        layer: str,
        direction: str,
        sent: list[int],
        received: list[int],
        like: Tensor,
        codec: Codec | None = None,
    ) -> None:
        codec = self._codec(layer, direction) if codec is None else codec
        self.counter.record_rows(
            layer,
            direction,
            sent,
            received,
            width=like.size(1),
            element_size=like.element_size(),
            row_bytes=codec.row_bytes(like.size(1), like.element_size()),
            codec=codec.name,
        )

    def _post_forward(self, h_owned: Tensor, layer: str) -> Transfer:
        send = h_owned.index_select(0, self.partition.send_index.to(h_owned.device))
        codec = self._codec(layer, "forward")
        self._record(layer, "forward", self._send_counts, self._recv_counts, h_owned, codec)
        return self._move(send, self._send_counts, self._recv_counts, layer, "forward", codec)

    def _post_backward(self, grad_halo: Tensor, layer: str) -> Transfer:
        codec = self._codec(layer, "backward")
        self._record(layer, "backward", self._recv_counts, self._send_counts, grad_halo, codec)
        transfer = self._move(
            grad_halo, self._recv_counts, self._send_counts, layer, "backward", codec
        )
        return self._scatter_to_owned(transfer, grad_halo)

    def _scatter_to_owned(self, transfer: Transfer, like: Tensor) -> Transfer:
        """Sum the returned gradients ``[Σ send_counts, d]`` into ``[num_owned, d]`` rows."""
        index = self.partition.send_index.to(like.device)
        num_owned = self.partition.num_owned

        def scatter(rows: Tensor) -> Tensor | None:
            if index.numel() == 0:  # nothing sent forward, nothing comes back: a zero gradient
                return None
            return rows.new_zeros(num_owned, rows.size(1)).index_add_(0, index, rows)

        return transfer.then(scatter)

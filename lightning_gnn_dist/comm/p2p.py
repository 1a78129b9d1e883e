"""``p2p``: point-to-point exchange of exactly the planned rows (paper 000 Alg. 1–2)."""

from __future__ import annotations

import numpy as np
import torch.distributed as dist
from torch import Tensor

from lightning_gnn_dist.comm.base import HaloExchange, Transfer
from lightning_gnn_dist.partition.metrics import PartitionMetrics


class P2PExchange(HaloExchange):
    """Point-to-point exchange of exactly the planned rows (paper 000 Alg. 1–2).

    Per exchange a rank sends ``Σ send_counts`` rows in one message per peer that needs any and
    receives ``num_halo`` rows; backward moves the same rows the other way.
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
        return dist.batch_isend_irecv(ops) if ops else []

    def _record(
        self, layer: str, direction: str, sent: list[int], received: list[int], like: Tensor
    ) -> None:
        self.counter.record(
            layer,
            direction,
            rows_sent=sum(sent),
            rows_received=sum(received),
            width=like.size(1),
            element_size=like.element_size(),
            messages_sent=sum(1 for c in sent if c),
            messages_received=sum(1 for c in received if c),
            rows_sent_to=sent,
        )

    def _post_forward(self, h_owned: Tensor, layer: str) -> Transfer:
        send = h_owned.index_select(0, self.partition.send_index.to(h_owned.device))
        recv = h_owned.new_empty(self.partition.num_halo, h_owned.size(1))
        self._record(layer, "forward", self._send_counts, self._recv_counts, h_owned)
        return Transfer(self._post(send, self._send_counts, recv, self._recv_counts), recv)

    def _post_backward(self, grad_halo: Tensor, layer: str) -> Transfer:
        recv = grad_halo.new_empty(int(self.partition.send_index.numel()), grad_halo.size(1))
        self._record(layer, "backward", self._recv_counts, self._send_counts, grad_halo)
        requests = self._post(grad_halo, self._recv_counts, recv, self._send_counts)
        index = self.partition.send_index.to(grad_halo.device)
        num_owned = self.partition.num_owned

        def scatter(rows: Tensor) -> Tensor | None:
            if index.numel() == 0:  # nothing sent forward, nothing comes back: a zero gradient
                return None
            return rows.new_zeros(num_owned, rows.size(1)).index_add_(0, index, rows)

        return Transfer(requests, recv, scatter)

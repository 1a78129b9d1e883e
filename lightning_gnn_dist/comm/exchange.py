"""Halo exchange modes behind one autograd-aware interface (design §4).

Forward: a rank gives its owned rows ``[num_owned, d]`` and gets its halo rows
``[num_halo, d]`` (ordered like ``LocalPartition.halo_ids``). Backward: the gradients of the halo
rows go back to their owners and are summed into the owners' rows.

The exchange is split into :meth:`HaloExchange.start` (post sends/receives) and
:meth:`PendingHalo.wait`, so a layer computes its local product while messages are in flight
(paper 000 Alg. 1). Two autograd functions carry the split into backward: the halo gradients are
posted as soon as they are known and collected only when the owned rows' gradient is needed
(Alg. 2), so local backward work overlaps them too.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch.autograd import Function

from lightning_gnn_dist.comm.counters import CommCounter
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.partition.metrics import PartitionMetrics

EXCHANGE_MODES: dict[str, type[HaloExchange]] = {}


class Transfer:
    """Requests in flight and the buffer they fill; :meth:`wait` completes them, applies
    ``on_done`` (a final local step, or a blocking collective) and returns the result."""

    def __init__(self, requests: list, result: Tensor, on_done=None) -> None:
        self.requests, self.result, self._on_done = requests, result, on_done

    def wait(self) -> Tensor:
        for request in self.requests:
            request.wait()
        self.requests = []
        if self._on_done is not None:
            self.result, self._on_done = self._on_done(self.result), None
        return self.result


@dataclass
class PendingHalo:
    """A forward exchange in flight; :meth:`wait` returns the halo rows (autograd-connected)."""

    exchange: HaloExchange
    layer: str
    token: Tensor | None = None
    forward: Transfer | None = None
    backward: Transfer | None = field(default=None, repr=False)

    def wait(self) -> Tensor:
        """``[num_halo, d]`` halo rows of the layer input."""
        return _FinishExchange.apply(self.token, self)


class HaloExchange(ABC):
    """Base class of exchange modes; subclasses move data, this class does autograd and counting.

    Args:
        partition: this rank's :class:`LocalPartition`.
        counter: where bytes and messages are recorded. (default: a new :class:`CommCounter`)
        group: process group whose ranks are the parts. (default: the world group)
    """

    mode: ClassVar[str] = ""
    exact: ClassVar[bool] = True
    partition_kind: ClassVar[str] = "vertex"
    """The partition kind the mode runs on (``"vertex"`` or ``"vertex-cut"``)."""

    def __init__(
        self, partition: LocalPartition, counter: CommCounter | None = None, group=None
    ) -> None:
        kind = getattr(partition, "kind", "vertex")
        if kind != self.partition_kind:
            raise ValueError(
                f"exchange {self.mode!r} runs on a {self.partition_kind} partition but got a {kind} "
                f"one; use {_modes_for(kind)} with this partition, or partition with "
                f"{'method=vertex-cut' if self.partition_kind == 'vertex-cut' else 'a vertex method (hypergraph, metis, random)'}"
            )
        self.partition = partition
        self.counter = counter if counter is not None else CommCounter()
        self.group = group
        self.rank = partition.part_id
        self.world_size = partition.num_parts
        self._send_counts = partition.send_counts.tolist()
        self._recv_counts = partition.recv_counts.tolist()
        if dist.is_available() and dist.is_initialized():
            actual = dist.get_world_size(group)
            if actual != self.world_size:
                raise ValueError(
                    f"the partition has {self.world_size} parts but the process group has {actual} ranks; "
                    f"partition into {actual} parts or launch {self.world_size} processes"
                )

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.mode:
            EXCHANGE_MODES[cls.mode] = cls

    @classmethod
    def parse_mode(cls, mode: str) -> dict | None:
        """Constructor options if ``mode`` names a parametrised form of this mode (e.g.
        ``cd-5``), else ``None``."""
        return None

    def close(self) -> None:
        """Complete every transfer still in flight (none by default; delayed modes keep some
        across steps). Call on every rank before the process group goes away."""
        return None

    def start(self, h_owned: Tensor, layer: str) -> PendingHalo:
        """Post the forward exchange of ``h_owned`` (``[num_owned, d]``) and return at once."""
        pending = PendingHalo(self, layer)
        pending.token = _StartExchange.apply(h_owned, pending)
        return pending

    def __call__(self, h_owned: Tensor, layer: str) -> Tensor:
        """Blocking exchange: ``[num_owned, d]`` owned rows → ``[num_halo, d]`` halo rows."""
        return self.start(h_owned, layer).wait()

    def begin_round(self, epoch: int | None) -> None:
        """Called by the strategy before every step: ``epoch`` in training, ``None`` in
        validation/test/predict. Exact modes ignore it; approximate ones (``cached``) use it as
        the version stamp and exchange exactly when it is ``None``."""
        return None

    def state_dict(self) -> dict:
        """This rank's exchange state that a resumed run needs to continue exactly where it
        stopped (a cache, rows in flight); stateless modes have none. The strategy stores every
        rank's dict in the checkpoint and hands each rank its own back."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned on this rank in the interrupted run."""
        del state  # stateless by default

    def _peer(self, rank: int) -> int:
        return rank if self.group is None else dist.get_global_rank(self.group, rank)

    @staticmethod
    @abstractmethod
    def predicted_rows_sent(metrics: PartitionMetrics, direction: str) -> np.ndarray:
        """``[P]`` rows each rank sends per exchange in ``direction``, from the partition metrics
        alone (what the counters must measure)."""

    @staticmethod
    def predicted_peer_rows(metrics: PartitionMetrics, direction: str) -> np.ndarray | None:
        """``[P, P]`` rows rank ``p`` sends to rank ``q`` per exchange in ``direction``, from the
        partition metrics (``None``: this mode makes no per-pair prediction)."""
        return None

    @abstractmethod
    def _post_forward(self, h_owned: Tensor, layer: str) -> Transfer:
        """Start moving owned rows; the transfer's result is ``[num_halo, d]``."""

    @abstractmethod
    def _post_backward(self, grad_halo: Tensor, layer: str) -> Transfer:
        """Start returning halo gradients; the transfer's result is ``[num_owned, d]``."""

    def _timed_wait(self, transfer: Transfer, layer: str, direction: str) -> Tensor:
        start = time.perf_counter()
        result = transfer.wait()
        self.counter.add_seconds(layer, direction, time.perf_counter() - start)
        return result

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, world_size={self.world_size})"


class _StartExchange(Function):
    @staticmethod
    def forward(ctx, h_owned: Tensor, pending: PendingHalo) -> Tensor:
        pending.forward = pending.exchange._post_forward(
            h_owned.detach().contiguous(), pending.layer
        )
        ctx.pending = pending
        return h_owned.new_empty(0)

    @staticmethod
    def backward(ctx, _grad_token: Tensor):
        pending = ctx.pending
        grad_owned = pending.exchange._timed_wait(pending.backward, pending.layer, "backward")
        return grad_owned, None


class _FinishExchange(Function):
    @staticmethod
    def forward(ctx, token: Tensor, pending: PendingHalo) -> Tensor:
        ctx.pending = pending
        return pending.exchange._timed_wait(pending.forward, pending.layer, "forward")

    @staticmethod
    def backward(ctx, grad_halo: Tensor):
        pending = ctx.pending
        pending.backward = pending.exchange._post_backward(grad_halo.contiguous(), pending.layer)
        return grad_halo.new_empty(0), None


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

        def scatter(rows: Tensor) -> Tensor:
            return rows.new_zeros(num_owned, rows.size(1)).index_add_(0, index, rows)

        return Transfer(requests, recv, scatter)


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


def _modes_for(kind: str) -> str:
    return ", ".join(sorted(m for m, c in EXCHANGE_MODES.items() if c.partition_kind == kind))


def resolve_exchange_mode(mode: str) -> tuple[type[HaloExchange], dict]:
    """The class and constructor options of exchange ``mode`` (a registered name such as
    ``p2p``, or a parametrised form such as ``cd-5``).

    Raises:
        ValueError: unknown mode (the message lists the known ones).
    """
    if mode in EXCHANGE_MODES:
        return EXCHANGE_MODES[mode], {}
    for cls in EXCHANGE_MODES.values():
        options = cls.parse_mode(mode)
        if options is not None:
            return cls, options
    raise ValueError(
        f"unknown exchange mode {mode!r}; choose one of: {', '.join(sorted(EXCHANGE_MODES))} "
        "(cd-<r> for any delay r >= 1)"
    )


def make_exchange(
    mode: str,
    partition: LocalPartition,
    counter: CommCounter | None = None,
    group=None,
    **options,
) -> HaloExchange:
    """Build the exchange ``mode`` (``p2p``, ``broadcast``, ``cached``; on a vertex cut
    ``cd-0``, ``cd-<r>``, ``0c``); ``options`` go to its constructor (e.g. the ``cached`` mode's
    staleness settings)."""
    cls, parsed = resolve_exchange_mode(mode)
    return cls(partition, counter=counter, group=group, **parsed, **options)


# The modes built on the classes above register themselves on import: the approximate
# ``cached`` mode (SANCUS) and the vertex-cut modes (cd-0, cd-<r>, 0c).
from lightning_gnn_dist.comm import cached as _cached  # noqa: E402, F401
from lightning_gnn_dist.comm import vertex_cut as _vertex_cut  # noqa: E402, F401

"""The halo exchange interface every mode implements (design §4), and the mode registry.

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
import torch.distributed as dist
from torch import Tensor
from torch.autograd import Function

from lightning_gnn_dist.comm.codec import CONTROL_LAYER, IDENTITY, Codec, all_to_all_rows, row_bytes
from lightning_gnn_dist.comm.codec_policy import CodecPolicy
from lightning_gnn_dist.comm.counters import CommCounter, Traffic
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

    def then(self, step) -> Transfer:
        """This transfer with ``step`` applied to its result after its own ``on_done``."""
        first = self._on_done
        self._on_done = step if first is None else (lambda result: step(first(result)))
        return self


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
        token, self.token = self.token, None  # no cycle pending → token → its node → pending
        return _FinishExchange.apply(token, self)


class HaloExchange(ABC):
    """Base class of exchange modes; subclasses move data, this class does autograd and counting.

    Args:
        partition: this rank's :class:`LocalPartition`.
        counter: where bytes and messages are recorded. (default: a new :class:`CommCounter`)
        group: process group whose ranks are the parts. (default: the world group)
        codec: how rows travel in training rounds: a
            :class:`~lightning_gnn_dist.comm.codec_policy.CodecPolicy` or its spec (``"fp32"``,
            ``"fp16"``, ``"bf16"``, ``"int8"``, ``"int4"``, ``"adaptive"``, or a mapping per
            direction or layer). Evaluation rounds (``begin_round(None)``) always send ``fp32``.
            (default: ``"fp32"``, rows as they are)
    """

    mode: ClassVar[str] = ""
    exact: ClassVar[bool] = True
    partition_kind: ClassVar[str] = "vertex"
    """The partition kind the mode runs on (``"vertex"`` or ``"vertex-cut"``)."""

    def __init__(
        self,
        partition: LocalPartition,
        counter: CommCounter | None = None,
        group=None,
        codec: CodecPolicy | str | dict | None = None,
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
        self.codec_policy = CodecPolicy.coerce("fp32" if codec is None else codec)
        self._training = True  # evaluation rounds send fp32 whatever the codec
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
    def check_options(cls, **options) -> dict:
        """Check the constructor options a user gave for this mode (before any partition
        exists); returns them. Raises ``ValueError`` naming a bad one."""
        return options

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
        validation/test/predict. The codec applies to training rounds only (and the adaptive
        codec re-chooses its bit-widths at the first round of an epoch); approximate modes
        (``cached``) also use it as the version stamp and exchange exactly when it is ``None``.
        Collective when the codec is adaptive."""
        self._training = epoch is not None
        self.codec_policy.begin_round(epoch, self.group, self.counter)

    def _codec(self, layer: str, direction: str) -> Codec:
        """The codec of this round's ``(layer, direction)`` messages (``fp32`` outside training)."""
        return self.codec_policy.codec(layer, direction) if self._training else IDENTITY

    def _encode(self, codec: Codec, rows: Tensor, layer: str, direction: str) -> Tensor:
        """``[n, d]`` rows → their wire form under ``codec`` (this rank's random stream)."""
        return self.codec_policy.encode(codec, rows, layer, direction, self.rank)

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

    def _all_to_all_rows(
        self,
        rows: Tensor,
        send_counts: list[int],
        recv_counts: list[int],
        layer: str,
        direction: str,
    ) -> Tensor:
        """One ``all_to_all_single`` of ``rows`` (``[Σ send_counts, d]``, grouped by receiving
        rank) encoded by this round's codec of ``(layer, direction)``; returns the ``[Σ
        recv_counts, d]`` decoded rows grouped by sending rank and records the bytes that leave
        this rank (its own block stays local). For modes that move rows with collectives (RDM's
        redistributions)."""
        if self.world_size == 1:  # everything stays local: no process group needed
            return rows
        codec = self._codec(layer, direction)
        width = rows.size(1)
        wire = self._encode(codec, rows.contiguous(), layer, direction)
        out = all_to_all_rows(wire, send_counts, recv_counts, codec, width, rows.dtype, self.group)
        self.counter.record_rows(
            layer,
            direction,
            send_counts,
            recv_counts,
            width=width,
            element_size=rows.element_size(),
            own=self.rank,
            row_bytes=codec.row_bytes(width, rows.element_size()),
            codec=codec.name,
        )
        return out

    def predicted_bytes_sent(
        self, metrics: PartitionMetrics, layer: str, direction: str, traffic: Traffic
    ) -> np.ndarray:
        """``[P]`` bytes each rank sends in ``traffic.calls`` exchanges of ``(layer,
        direction)``: the predicted rows times the bytes per row of the codec ``traffic``
        records (what :class:`~lightning_gnn_dist.lightning.callbacks.CommunicationMonitor`
        compares with the counters). The adaptive codec's agreement (layer
        :data:`~lightning_gnn_dist.comm.codec.CONTROL_LAYER`) is one row of float64 per rank."""
        if layer == CONTROL_LAYER:
            return np.full(metrics.num_parts, traffic.width * 8 * traffic.calls)
        rows = self.predicted_rows_sent(metrics, direction)  # cd-r: a mean over the calls
        return np.rint(rows * traffic_row_bytes(traffic) * traffic.calls).astype(np.int64)

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
        pending, ctx.pending = ctx.pending, None
        grad_owned = pending.exchange._timed_wait(pending.backward, pending.layer, "backward")
        pending.backward = None
        return grad_owned, None


class _FinishExchange(Function):
    @staticmethod
    def forward(ctx, token: Tensor, pending: PendingHalo) -> Tensor:
        ctx.pending = pending
        halo = pending.exchange._timed_wait(pending.forward, pending.layer, "forward")
        pending.forward = None  # the node keeps `pending`; `pending` keeps no tensor: no cycle
        return halo

    @staticmethod
    def backward(ctx, grad_halo: Tensor):
        pending, ctx.pending = ctx.pending, None
        pending.backward = pending.exchange._post_backward(grad_halo.contiguous(), pending.layer)
        return grad_halo.new_empty(0), None


def traffic_row_bytes(traffic: Traffic) -> int:
    """Bytes per row of ``traffic``'s width under the codec it records (``fp32`` by default)."""
    return row_bytes(traffic.codec or "fp32", traffic.width)


def _modes_for(kind: str) -> str:
    return ", ".join(sorted(m for m, c in EXCHANGE_MODES.items() if c.partition_kind == kind))


def resolve_exchange_mode(mode: str) -> tuple[type[HaloExchange], dict]:
    """The class and constructor options of exchange ``mode`` (a registered name such as
    ``p2p``, or a parametrised form such as ``cd-5``).

    Raises:
        ValueError: unknown mode (the message lists the known ones).
    """
    if not isinstance(mode, str):
        raise ValueError(
            f"exchange must be a mode name (got {mode!r}); choose one of: "
            f"{', '.join(sorted(EXCHANGE_MODES))} (cd-<r> for a delay r >= 1)"
        )
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
    codec: CodecPolicy | str | dict | None = None,
    **options,
) -> HaloExchange:
    """Build the exchange ``mode`` (``p2p``, ``broadcast``, ``cached``; on a vertex cut
    ``cd-0``, ``cd-<r>``, ``0c``) with ``codec`` (see :class:`HaloExchange`); ``options`` go to
    its constructor (e.g. the ``cached`` mode's staleness settings)."""
    cls, parsed = resolve_exchange_mode(mode)
    return cls(partition, counter=counter, group=group, codec=codec, **parsed, **options)

"""``cached`` exchange: SANCUS's staleness-aware historical-embedding cache (paper 004 §4.3).

Each rank keeps, per layer, the last received version of every halo row with the epoch it was
computed in (its *version*). A sender skips a round while its staleness bound holds; the
receivers then reuse their cached rows, and no feature byte moves for that sender. Ranks agree
on who sends with one all-reduce of ``P`` int32 flags per layer and round, counted as direction
``"control"`` (bounds whose decision every rank can compute alone need none).

Bounds (``staleness``, with bound ``ε = staleness_bound``):

* ``epoch-fixed`` ε_E (Alg. 4): a rank re-sends when ``epoch − version > ε_E``, i.e. every
  ``ε_E + 1`` epochs. Every rank knows every version, so no flags are exchanged.
* ``epoch-adaptive`` ε_A (Alg. 5): each *receiver* checks the age of each source's cached rows
  and requests a refresh when ``epoch − version > ε_A``; a rank sends when any receiver asked.
  In a bulk-synchronous run (all ranks at the same epoch, as under Lightning) it sends on the
  same epochs as ``epoch-fixed`` with the same bound; it differs in who decides.
* ``variation-gap`` ε_H (Alg. 6): a sender re-sends when its rows changed by more than ε_H since
  the last send, measured as the relative Frobenius norm
  ``‖H_new − H_sent‖_F / ‖H_sent‖_F`` over the rows it sends (p2p: its send plan; broadcast: its
  whole block).

Versions are the epochs the strategy passes to :meth:`begin_round` (full-batch training: one
step per epoch). With bound 0, ``epoch-fixed`` and ``epoch-adaptive`` send every round and the mode equals its
exact base (values and feature bytes). Only training steps use the cache: validation, test and
predict (``begin_round(None)``) run the exact base exchange and leave the cache untouched.

Backward (``cache_backward``): ``"fresh"`` returns the gradients of every halo row to its owner,
as the exact mode does (the parameters keep their full gradient; only forward bytes are saved);
``"drop"`` returns only the gradients of rows received fresh this round (saves both directions).
``grad_clip`` clips the halo gradients a rank returns to L2 norm ``√P · grad_clip`` (paper 004
§4.3.2: local threshold scaled by ``P^{1/2}``).
"""

from __future__ import annotations

import inspect
import math
import time
from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from lightning_gnn_dist.comm.base import HaloExchange, Transfer
from lightning_gnn_dist.comm.broadcast import BroadcastExchange
from lightning_gnn_dist.comm.codec import IDENTITY, Codec
from lightning_gnn_dist.comm.counters import CommCounter
from lightning_gnn_dist.comm.p2p import P2PExchange
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.partition.metrics import PartitionMetrics

STALENESS_BOUNDS = ("epoch-fixed", "epoch-adaptive", "variation-gap")
CACHE_BASES = {"p2p": P2PExchange, "broadcast": BroadcastExchange}
CACHE_BACKWARD = ("fresh", "drop")
CACHE_OPTIONS = ("cache_base", "staleness", "staleness_bound", "cache_backward", "grad_clip")
_NEVER = -(2**62)  # version of a row never received: older than any bound


@dataclass
class CacheTraffic:
    """Cache statistics of one rank for one ``(layer, direction)`` since the last reset.

    ``rounds_*`` count the training rounds in which this rank had rows to send in that direction
    and sent or skipped them; ``rows_avoided``/``bytes_avoided`` what the exact base would have
    sent on top; ``age_*`` the age in epochs (``epoch − version``) of the rows this rank used,
    per source peer and round (``0`` when fresh).
    """

    rounds_sent: int = 0
    rounds_skipped: int = 0
    rows_avoided: int = 0
    bytes_avoided: int = 0
    age_max: int = 0
    age_sum: int = 0
    age_count: int = 0

    @property
    def age_mean(self) -> float:
        return self.age_sum / self.age_count if self.age_count else 0.0


STATISTIC_FIELDS = tuple(CacheTraffic.__dataclass_fields__)


class CachedExchange(HaloExchange):
    """Halo exchange that skips rounds while a staleness bound holds (SANCUS, paper 004 §4.3).

    Args:
        partition: this rank's :class:`LocalPartition`.
        counter: where bytes and messages are recorded. (default: a new :class:`CommCounter`)
        group: process group whose ranks are the parts. (default: the world group)
        cache_base (str): exact pattern underneath, ``"p2p"`` (halo rows only) or
            ``"broadcast"`` (CAGNET blocks). (default: ``"p2p"``)
        staleness (str): ``"epoch-fixed"``, ``"epoch-adaptive"`` or ``"variation-gap"``.
            (default: ``"epoch-fixed"``)
        staleness_bound (float): ε_E or ε_A in epochs, or ε_H as a relative Frobenius norm;
            ``0`` sends every round. (default: ``1``)
        cache_backward (str): ``"drop"`` or ``"fresh"`` (see the module docs; ``"drop"`` saves
            twice the bytes at the same accuracy in ``python -m benchmarks.cached``).
            (default: ``"drop"``)
        grad_clip (float, optional): clip the returned halo gradients to L2 norm
            ``√P · grad_clip``; ``None`` disables it. (default: ``None``)
        codec: how the rows that are sent travel (see
            :class:`~lightning_gnn_dist.comm.base.HaloExchange`); the cache keeps the decoded
            rows and ``bytes_avoided`` counts encoded bytes. (default: ``"fp32"``)

    NCCL rule: the messages of the base (``p2p`` or ``broadcast``) restricted by the round's
    senders, a ``[P]`` list of flags that is the same on every rank: ``epoch-fixed`` computes it
    from versions every rank stamps alike (no message); ``epoch-adaptive`` and
    ``variation-gap`` agree on it by one ``all_reduce`` (MAX) of ``P`` int32 flags on the rank's
    device per layer and training round, before that layer's messages. On ``p2p``, forward:
    rank ``p`` sends ``q`` its planned rows iff ``flags[p]`` and ``send_counts[q] > 0``, and
    ``q`` receives them iff ``flags[p]`` and ``recv_counts[p] > 0``, the same condition on
    both sides; ``cache_backward="drop"`` mirrors it (gradients only to the flagged owners);
    ``"fresh"`` and evaluation rounds post the base's exact messages. A skipped message is
    skipped on both sides (no zero-size message).
    """

    mode = "cached"
    exact: ClassVar[bool] = False

    @classmethod
    def check_options(cls, **options) -> dict:
        defaults = inspect.signature(cls.__init__).parameters
        merged = {k: defaults[k].default for k in CACHE_OPTIONS} | options
        check_cache_options(*(merged[k] for k in CACHE_OPTIONS))
        return options

    def __init__(
        self,
        partition: LocalPartition,
        counter: CommCounter | None = None,
        group=None,
        cache_base: str = "p2p",
        staleness: str = "epoch-fixed",
        staleness_bound: float = 1.0,
        cache_backward: str = "drop",
        grad_clip: float | None = None,
        codec=None,
    ) -> None:
        check_cache_options(cache_base, staleness, staleness_bound, cache_backward, grad_clip)
        self.base: HaloExchange | None = None
        super().__init__(partition, counter, group, codec=codec)
        self.base = CACHE_BASES[cache_base](partition, self.counter, group, codec=self.codec_policy)
        self.cache_base, self.staleness, self.cache_backward = cache_base, staleness, cache_backward
        self.staleness_bound = float(staleness_bound)
        self.grad_clip = grad_clip
        self._epoch: int | None = None
        # Receiver side, per layer: cached halo rows [num_halo, d] (on the rank's device) and
        # every rank's version [P] (host integers: deciding who sends needs no device).
        self._cache: dict[str, Tensor] = {}
        self._versions: dict[str, np.ndarray] = {}
        # Sender side (variation gap), per layer: the rows as last sent.
        self._sent: dict[str, Tensor] = {}
        self._flags: dict[str, list[bool]] = {}  # senders of this round, for backward
        self._sources = [c > 0 for c in self._recv_counts]
        if cache_base == "broadcast":  # every peer's block is broadcast to this rank
            self._sources = [q != self.rank for q in range(self.world_size)]
        self._ages: dict[str, list[int]] = {}  # per layer: this round's age of each source
        self.statistics: dict[tuple[str, str], CacheTraffic] = {}
        #: ``(epoch, layer, senders)`` per training round, identical on every rank (Figure 24).
        self.send_log: list[tuple[int, str, list[int]]] = []

    # The strategy swaps the counter per stage; the base exchange must record into the same one.
    @property
    def counter(self) -> CommCounter:
        return self._counter

    @counter.setter
    def counter(self, counter: CommCounter) -> None:
        self._counter = counter
        if getattr(self, "base", None) is not None:
            self.base.counter = counter

    def begin_round(self, epoch: int | None) -> None:
        super().begin_round(epoch)
        self.base._training = self._training
        self._epoch = epoch

    def predicted_rows_sent(self, metrics: PartitionMetrics, direction: str) -> np.ndarray:
        """Rows the exact base would send (what the cache is measured against); ``control``:
        one row of ``P`` int32 flags per rank and round when the bound needs agreement."""
        if direction == "control":
            return np.ones(metrics.num_parts, dtype=np.int64)
        return self.base.predicted_rows_sent(metrics, direction)

    # -- forward ------------------------------------------------------------------------------
    def _post_forward(self, h_owned: Tensor, layer: str) -> Transfer:
        if self._epoch is None:
            return self.base._post_forward(h_owned, layer)
        if self.cache_base == "p2p":
            own_rows = h_owned.index_select(0, self.partition.send_index.to(h_owned.device))
        else:
            own_rows = h_owned
        flags = self._agree(layer, own_rows)
        self._flags[layer] = flags
        self.send_log.append((self._epoch, layer, [q for q, f in enumerate(flags) if f]))
        if flags[self.rank] and self.staleness == "variation-gap":
            self._sent[layer] = own_rows.detach().clone()
        halo = self._cache.get(layer)
        halo = h_owned.new_empty(self.partition.num_halo, h_owned.size(1)) if halo is None else halo
        halo = halo.clone()
        codec = self._codec(layer, "forward")
        if self.cache_base == "p2p":
            self._record_p2p(layer, "forward", flags[self.rank], flags, h_owned, codec)
            transfer = self.base._move(
                own_rows,
                self._send_counts,
                self._recv_counts,
                layer,
                "forward",
                codec,
                send_to=[flags[self.rank]] * self.world_size,
                recv_from=flags,
                into=halo,
            )
            return transfer.then(lambda rows: self._store(layer, rows, flags))

        def broadcast(rows: Tensor) -> Tensor:
            rows = self.base._broadcast_blocks(h_owned, layer, codec, roots=flags, halo=rows)
            return self._store(layer, rows, flags)

        self._record_broadcast(layer, "forward", flags, h_owned, codec)
        return Transfer([], halo, broadcast)

    def _agree(self, layer: str, own_rows: Tensor) -> list[bool]:
        """``[P]`` who sends this round; one all-reduce of flags unless every rank can tell.

        Host round trips: none with ``epoch-fixed`` (versions are host integers); otherwise the
        agreed flags are read back once (the host posts the messages they select), and
        ``variation-gap`` reads its two norms."""
        versions = self._versions.get(layer)
        if versions is None:
            versions = np.full(self.world_size, _NEVER, dtype=np.int64)
            self._versions[layer] = versions
        too_old = (self._epoch - versions) > self.staleness_bound
        if self.staleness == "epoch-fixed":
            return too_old.tolist()
        wants = np.zeros(self.world_size, dtype=np.int32)
        sources = np.array(self._sources, dtype=bool)
        if self.staleness == "epoch-adaptive":
            wants[sources & too_old] = 1
        else:
            # A receiver without a copy must get one; otherwise the sender's variation decides.
            wants[sources & (versions == _NEVER)] = 1
            sent = self._sent.get(layer)
            wants[self.rank] = int(
                sent is None or _relative_change(own_rows, sent) > self.staleness_bound
            )
        if self.world_size > 1:
            start = time.perf_counter()
            flags = torch.from_numpy(wants).to(own_rows.device)  # NCCL reduces device tensors
            dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self.group)
            wants = flags.cpu().numpy()  # host: the flags select the messages to post
            self.counter.add_seconds(layer, "control", time.perf_counter() - start)
            self.counter.record(
                layer,
                "control",
                rows_sent=1,
                rows_received=1,
                width=self.world_size,
                element_size=flags.element_size(),
                messages_sent=1,
                messages_received=1,
            )
        return (wants > 0).tolist()

    def _store(self, layer: str, halo: Tensor, flags: list[bool]) -> Tensor:
        """Keep the round's halo rows and stamp the senders' versions; record the ages."""
        self._cache[layer] = halo.detach()  # never keep the autograd graph across rounds
        versions = self._versions[layer]
        versions[np.array(flags, dtype=bool)] = self._epoch
        ages = [self._epoch - int(versions[q]) for q in range(self.world_size) if self._sources[q]]
        self._ages[layer] = ages
        self._note_ages(layer, "forward", ages)
        return halo

    # -- backward -----------------------------------------------------------------------------
    def _post_backward(self, grad_halo: Tensor, layer: str) -> Transfer:
        if self._epoch is None:
            return self.base._post_backward(grad_halo, layer)
        if self.grad_clip is not None:
            # min(1, limit / norm) as a tensor: no host round trip (a norm of 0 gives inf → 1)
            limit = math.sqrt(self.world_size) * self.grad_clip
            grad_halo = grad_halo * (limit / grad_halo.norm()).clamp(max=1.0)
        flags = self._flags[layer]
        if self.cache_backward == "fresh":
            full = (
                sum(self._recv_counts)
                if self.cache_base == "p2p"
                else self._broadcast_full("backward")
            )
            self._note_round(layer, "backward", full, 0, grad_halo)
            self._note_ages(layer, "backward", self._ages.get(layer, []))
            return self.base._post_backward(grad_halo, layer)
        # drop: gradients go back only to the owners that sent fresh rows this round.
        returning = [f and s for f, s in zip(flags, self._sources, strict=True)]
        self._note_ages(layer, "backward", [0] * sum(returning))
        codec = self._codec(layer, "backward")
        if self.cache_base == "p2p":
            recv = grad_halo.new_zeros(int(self.partition.send_index.numel()), grad_halo.size(1))
            self._record_p2p(layer, "backward", None, flags, grad_halo, codec)
            transfer = self.base._move(
                grad_halo,
                self._recv_counts,
                self._send_counts,
                layer,
                "backward",
                codec,
                send_to=flags,
                recv_from=[flags[self.rank]] * self.world_size,
                into=recv,
            )
            return self.base._scatter_to_owned(transfer, grad_halo)
        self._record_broadcast(layer, "backward", flags, grad_halo, codec)
        return Transfer(
            [], grad_halo, lambda g: self.base._reduce_blocks(g, layer, codec, roots=flags)
        )

    # -- counting -----------------------------------------------------------------------------
    def _record_p2p(
        self,
        layer: str,
        direction: str,
        sending: bool | None,
        flags: list[bool],
        like: Tensor,
        codec: Codec,
    ) -> None:
        """Bytes of a partial p2p round. Forward: send all planned rows iff ``sending``, receive
        from flagged sources. Backward (drop): return to flagged owners, receive iff this rank
        was flagged."""
        send_counts, recv_counts = self._send_counts, self._recv_counts
        if direction == "backward":
            send_counts, recv_counts = recv_counts, send_counts
            sending = None
        sent = [
            c if (flags[q] if sending is None else sending) else 0
            for q, c in enumerate(send_counts)
        ]
        own = flags[self.rank]
        received = [
            c if (own if direction == "backward" else flags[q]) else 0
            for q, c in enumerate(recv_counts)
        ]
        self.base._record(layer, direction, sent, received, like, codec)
        avoided = sum(send_counts) - sum(sent)
        self._note_round(layer, direction, sum(send_counts), avoided, like, codec)

    def _record_broadcast(
        self, layer: str, direction: str, flags: list[bool], like: Tensor, codec: Codec
    ) -> None:
        sizes, peers = self.base._block_sizes(), self.world_size - 1
        own = sizes[self.rank] * peers if flags[self.rank] else 0
        others = sum(s for q, s in enumerate(sizes) if flags[q] and q != self.rank)
        sent, received = (own, others) if direction == "forward" else (others, own)
        active_peers = sum(1 for q in range(self.world_size) if flags[q] and q != self.rank)
        messages_sent = peers if flags[self.rank] else 0
        messages = (
            (messages_sent, active_peers)
            if direction == "forward"
            else (active_peers, messages_sent)
        )
        self.counter.record(
            layer,
            direction,
            rows_sent=sent,
            rows_received=received,
            width=like.size(1),
            element_size=like.element_size(),
            messages_sent=messages[0],
            messages_received=messages[1],
            row_bytes=codec.row_bytes(like.size(1), like.element_size()),
            codec=codec.name,
        )
        full = self._broadcast_full(direction)
        self._note_round(layer, direction, full, full - sent, like, codec)

    def _broadcast_full(self, direction: str) -> int:
        """Rows this rank sends in an exact broadcast round in ``direction``."""
        sizes = self.base._block_sizes()
        if direction == "forward":
            return sizes[self.rank] * (self.world_size - 1)
        return sum(sizes) - sizes[self.rank]

    def _traffic(self, layer: str, direction: str) -> CacheTraffic:
        return self.statistics.setdefault((layer, direction), CacheTraffic())

    def _note_round(
        self,
        layer: str,
        direction: str,
        full_rows: int,
        rows_avoided: int,
        like: Tensor,
        codec: Codec = IDENTITY,
    ) -> None:
        """Count a round as sent or skipped (only when the exact base would send rows)."""
        stats = self._traffic(layer, direction)
        if full_rows == 0:
            return
        stats.rounds_sent += int(rows_avoided < full_rows)
        stats.rounds_skipped += int(rows_avoided == full_rows)
        stats.rows_avoided += rows_avoided
        stats.bytes_avoided += rows_avoided * codec.row_bytes(like.size(1), like.element_size())

    def _note_ages(self, layer: str, direction: str, ages: list[int]) -> None:
        stats = self._traffic(layer, direction)
        if ages:
            stats.age_max = max(stats.age_max, max(ages))
            stats.age_sum += sum(ages)
            stats.age_count += len(ages)

    def statistics_rows(self) -> list[dict]:
        """``[{"layer", "direction", **CacheTraffic fields, "age_mean"}]`` sorted by key."""
        return [
            {"layer": layer, "direction": d, **asdict(t), "age_mean": t.age_mean}
            for (layer, d), t in sorted(self.statistics.items())
        ]

    def reset_statistics(self) -> None:
        self.statistics.clear()

    # -- checkpoint ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The cache, the version stamps, the rows last sent and the send log of this rank."""
        return {
            "cache": {k: v.detach().cpu().clone() for k, v in self._cache.items()},
            "versions": {k: torch.from_numpy(v.copy()) for k, v in self._versions.items()},
            "sent": {k: v.detach().cpu().clone() for k, v in self._sent.items()},
            "send_log": [list(entry) for entry in self.send_log],
        }

    def load_state_dict(self, state: dict) -> None:
        device = self.partition.edge_index.device
        self._cache = {k: v.to(device) for k, v in state["cache"].items()}
        self._versions = {
            k: np.asarray(v, dtype=np.int64).copy() for k, v in state["versions"].items()
        }
        self._sent = {k: v.to(device) for k, v in state["sent"].items()}
        self.send_log = [(int(e), str(layer), list(s)) for e, layer, s in state["send_log"]]

    def __repr__(self) -> str:
        return (
            f"CachedExchange(rank={self.rank}, world_size={self.world_size}, "
            f"cache_base={self.cache_base!r}, staleness={self.staleness!r}, "
            f"staleness_bound={self.staleness_bound}, cache_backward={self.cache_backward!r}, "
            f"grad_clip={self.grad_clip})"
        )


def _relative_change(new: Tensor, old: Tensor) -> float:
    """``‖new − old‖_F / ‖old‖_F`` (``inf`` when the shapes differ, ``0`` when both are 0)."""
    if new.shape != old.shape:
        return math.inf
    scale = float(old.norm())  # host: the sender's decision (variation-gap)
    change = float((new.detach() - old).norm())
    if scale == 0.0:
        return 0.0 if change == 0.0 else math.inf
    return change / scale


def check_cache_options(
    cache_base: str,
    staleness: str,
    staleness_bound: float,
    cache_backward: str,
    grad_clip: float | None,
) -> None:
    """Raise ``ValueError`` naming the bad option and the choices."""
    if cache_base not in CACHE_BASES:
        raise ValueError(f"cache_base must be one of {sorted(CACHE_BASES)} (got {cache_base!r})")
    if staleness not in STALENESS_BOUNDS:
        raise ValueError(f"staleness must be one of {list(STALENESS_BOUNDS)} (got {staleness!r})")
    finite = isinstance(staleness_bound, int | float) and not isinstance(staleness_bound, bool)
    if not finite or not 0 <= staleness_bound < math.inf:
        raise ValueError(
            f"staleness_bound must be a finite number >= 0 (epochs for epoch bounds, a relative "
            f"norm for variation-gap); got {staleness_bound!r}"
        )
    if cache_backward not in CACHE_BACKWARD:
        raise ValueError(
            f"cache_backward must be one of {list(CACHE_BACKWARD)} (got {cache_backward!r})"
        )
    valid_clip = isinstance(grad_clip, int | float) and not isinstance(grad_clip, bool)
    if grad_clip is not None and (not valid_clip or not 0 < grad_clip < math.inf):
        raise ValueError(f"grad_clip must be a positive norm or None (got {grad_clip!r})")

"""Synchronisation of split vertices' partial aggregates (DistGNN DRPA, paper 002 §5.3, Alg. 4).

On a vertex cut (:class:`~lightning_gnn_dist.data.vertex_cut.VertexCutPart`) every rank
aggregates over its own edges; a split vertex then holds a *partial* aggregate on each of its
copies. The modes differ in what happens next:

* ``cd-0`` (:class:`PartialAggregateSync`, exact): leaves send their partials to the root, the
  root reduces them with its own and sends the total back. Backward is the same leaf → root →
  leaf pattern on the gradients (the synchronisation is symmetric), so training equals
  single-process training. Rows per synchronisation and rank: ``VertexCutMetrics.send_rows``.
* ``cd-<r>`` (:class:`DelayedPartialAggregateSync`, approximate): split vertices are binned by
  ``dataset id % r``; each training forward starts the exchange of one bin and applies what
  arrived for it ``r`` epochs later. Each copy uses its fresh local partial plus the latest
  stale remote contribution of every bin (zero until the first one arrives: roots get their
  first after ``r`` epochs, leaves after ``2r``). No gradient communication (as DistGNN).
* ``0c`` (:class:`NoSync`): partials are used as they are; nothing moves.

The vertex cut has no halo: the :class:`~lightning_gnn_dist.comm.base.HaloExchange`
interface the layers call returns zero rows, and the synchronisation runs where the graph
context asks for it (after aggregation, :mod:`lightning_gnn_dist.nn.vertex_cut`).
"""

from __future__ import annotations

import re
from typing import ClassVar

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch.autograd import Function

from lightning_gnn_dist.comm.base import Transfer
from lightning_gnn_dist.comm.codec import IDENTITY, Codec
from lightning_gnn_dist.comm.p2p import P2PExchange

REDUCTIONS = ("sum", "max")
MAX_DELAY = 999_999_999
"""Largest delay ``r`` of ``cd-<r>`` (nine digits; a delay beyond the epochs run is pointless)."""


class PartialAggregateSync(P2PExchange):
    """``cd-0``: exact leaf → root → leaf synchronisation of partial aggregates.

    Args:
        partition: this rank's :class:`~lightning_gnn_dist.data.vertex_cut.VertexCutPart`.
        counter: where rows, bytes and messages are recorded, one record per synchronisation
            and direction (both phases together).
        group: process group whose ranks are the parts. (default: the world group)
        codec: how partial aggregates and totals travel in training (see
            :class:`~lightning_gnn_dist.comm.base.HaloExchange`). Both phases are encoded: the
            root sums decoded partials, the leaves take the decoded total (so copies of a split
            vertex then differ by rounding). ``max`` synchronisations always travel as ``fp32``
            (a rounded maximum would match no copy, and the gradient would reach none).
            (default: ``"fp32"``)

    NCCL rule: each synchronisation (forward, and backward for ``sum`` and ``max`` alike) is two
    :func:`~lightning_gnn_dist.comm.messages.start_messages` batches in order: leaves → roots
    (rank ``p`` sends ``q`` ``leaf_counts[q]`` rows, ``q`` receives ``root_counts[p]`` from
    ``p``: one plan of the split vertices' copies, built for both sides) and roots → leaves
    (its mirror). Zero counts are skipped on both sides. The codec (or ``fp32`` for ``max`` and
    tie-carrying backwards, decided from arguments every rank passes alike) fixes the wire size
    from the row count and width. The layers' halo requests post nothing.
    """

    mode = "cd-0"
    partition_kind: ClassVar[str] = "vertex-cut"
    reductions: ClassVar[tuple[str, ...]] = REDUCTIONS
    """What :meth:`synchronise` reduces (a ``max`` aggregation needs ``"max"``)."""

    def __init__(self, partition, counter=None, group=None, codec=None) -> None:
        super().__init__(partition, counter=counter, group=group, codec=codec)
        self._leaf_counts = partition.leaf_counts.tolist()
        self._root_counts = partition.root_counts.tolist()

    @staticmethod
    def predicted_rows_sent(metrics, direction: str) -> np.ndarray:
        return metrics.send_rows

    # The layers' halo requests: a vertex cut has no halo rows, so nothing is posted or timed.
    def start(self, h_owned: Tensor, layer: str) -> Transfer:
        return Transfer([], h_owned.new_empty(0, h_owned.size(1)))

    def _post_forward(self, h_owned: Tensor, layer: str) -> Transfer:
        return self.start(h_owned, layer)

    def _post_backward(self, grad_halo: Tensor, layer: str) -> Transfer:
        return Transfer([], grad_halo.new_zeros(self.partition.num_owned, grad_halo.size(1)))

    def synchronise(
        self, partial: Tensor, layer: str, reduce: str = "sum", ties: Tensor | None = None
    ) -> Tensor:
        """``[num_local, d]`` partial aggregates → the same rows with every split vertex's copies
        holding the reduction over all copies (autograd-aware).

        Args:
            partial: this rank's aggregates over its own edges. For ``reduce="max"`` a copy with
                no local in-edge must hold ``-inf``.
            layer: counter key.
            reduce: ``"sum"`` or ``"max"`` (element-wise).
            ties: for ``reduce="max"``, ``[num_local, d]`` how many local edges reach the local
                maximum (element-wise). Torch (hence PyG) splits a maximum's gradient evenly
                between all tied inputs; with ``ties`` the backward gives each winning copy its
                share ``ties_c / Σ ties`` (the counts travel with the gradients, so the backward
                rows are ``2d`` wide). Without it every winning copy gets the whole gradient,
                exact only when no maximum is tied across parts. (default: ``None``)
        """
        if reduce not in REDUCTIONS:
            raise ValueError(f"reduce must be one of {REDUCTIONS} (got {reduce!r})")
        return _Synchronise.apply(partial, self, layer, reduce, ties)

    def _record_phases(
        self,
        layer: str,
        direction: str,
        leaf_counts: list[int],
        root_counts: list[int],
        like,
        codec: Codec,
    ) -> None:
        """Count leaf partials out + totals back (sent), and their mirror (received); one
        message per peer and phase."""
        nonzero = sum(1 for c in leaf_counts if c) + sum(1 for c in root_counts if c)
        rows = sum(leaf_counts) + sum(root_counts)
        self.counter.record(
            layer,
            direction,
            rows_sent=rows,
            rows_received=rows,
            width=like.size(1),
            element_size=like.element_size(),
            messages_sent=nonzero,
            messages_received=nonzero,
            row_bytes=codec.row_bytes(like.size(1), like.element_size()),
            codec=codec.name,
        )

    def _exchange(
        self, x: Tensor, layer: str, direction: str, reduce: str, lossless: bool = False
    ) -> Tensor:
        """Blocking two-phase synchronisation of ``x`` (counted as one record). ``max``
        synchronisations, and ``lossless`` sums (a ``max`` layer's backward, whose tie counts
        travel beside the gradients: rounding them would misplace the gradient), travel as
        ``fp32`` whatever the codec."""
        part = self.partition
        leaf_index = part.leaf_index.to(x.device)
        root_index = part.root_index.to(x.device)
        x = x.contiguous()
        codec = self._codec(layer, direction) if reduce == "sum" and not lossless else IDENTITY
        self._record_phases(layer, direction, self._leaf_counts, self._root_counts, x, codec)
        transfer = self._move(
            x.index_select(0, leaf_index),
            self._leaf_counts,
            self._root_counts,
            layer,
            direction,
            codec,
        )
        from_leaves = self._timed_wait(transfer, layer, direction)
        total = x.clone()
        if reduce == "sum":
            total.index_add_(0, root_index, from_leaves)
        else:
            total.index_reduce_(0, root_index, from_leaves, "amax", include_self=True)
        transfer = self._move(
            total.index_select(0, root_index),
            self._root_counts,
            self._leaf_counts,
            layer,
            direction,
            codec,
        )
        total.index_copy_(0, leaf_index, self._timed_wait(transfer, layer, direction))
        return total


class _Synchronise(Function):
    @staticmethod
    def forward(ctx, partial: Tensor, sync: PartialAggregateSync, layer: str, reduce: str, ties):
        total = sync._exchange(partial.detach(), layer, "forward", reduce)
        ctx.sync, ctx.layer, ctx.reduce = sync, layer, reduce
        if reduce == "max":
            winner = (partial.detach() == total).to(partial.dtype)
            ctx.save_for_backward(winner if ties is None else winner * ties.to(partial.dtype))
        return total

    @staticmethod
    def backward(ctx, grad_total: Tensor):
        # y_c = ⊕_{c'} x_{c'} over the copies of one vertex: for a sum the Jacobian is symmetric,
        # so the gradient takes the same route; for a max it then goes to the maximising copies,
        # split between them as torch splits it between tied inputs (share = ties_c / Σ ties).
        if ctx.reduce != "max":
            return (
                ctx.sync._exchange(grad_total, ctx.layer, "backward", "sum"),
                None,
                None,
                None,
                None,
            )
        (share,) = ctx.saved_tensors
        width = grad_total.size(1)
        packed = torch.cat([grad_total, share], dim=1)
        total = ctx.sync._exchange(packed, ctx.layer, "backward", "sum", lossless=True)
        grad, ties = total[:, :width], total[:, width:]
        return grad * share / ties.clamp(min=1), None, None, None, None


class NoSync(PartialAggregateSync):
    """``0c``: every copy keeps its local partial aggregate; nothing is sent.

    NCCL rule: posts no message and no collective.
    """

    mode = "0c"
    exact = False

    @staticmethod
    def predicted_rows_sent(metrics, direction: str) -> np.ndarray:
        return np.zeros(metrics.num_parts, dtype=np.int64)

    def synchronise(
        self, partial: Tensor, layer: str, reduce: str = "sum", ties: Tensor | None = None
    ) -> Tensor:
        if reduce not in REDUCTIONS:
            raise ValueError(f"reduce must be one of {REDUCTIONS} (got {reduce!r})")
        return partial


class DelayedPartialAggregateSync(PartialAggregateSync):
    """``cd-<r>``: delayed remote partial aggregates, one bin of split vertices per epoch.

    A split vertex is in bin ``dataset id % r``. Training forward number ``e`` of a layer (the
    ``e``-th call with gradients enabled) handles bin ``b = e % r``: it applies the root totals
    that arrived for ``b`` (posted at ``e − r``), receives the leaf partials posted at ``e − r``
    and answers with the root totals, and posts this epoch's leaf partials of ``b``. Every
    transfer is waited for ``r`` epochs after it was posted, so it overlaps the epochs between.
    Calls without gradients (validation, prediction) use the latest remote contributions and
    move nothing. The bins in flight are part of :meth:`state_dict`.

    Args:
        partition, counter, group: as :class:`PartialAggregateSync`.
        delay (int): r ≥ 1. (default: ``5``, the paper's choice)
        codec: as :class:`PartialAggregateSync` (both phases of every bin are encoded).

    NCCL rule: construction is one ``all_gather`` of ``[r, 2]`` int64 on every rank. Training
    forward number ``e`` of a layer (the same ``e`` on every rank) posts, for bin ``e % r``,
    the roots' answers (from ``e = r`` on) then the leaves' partials, each one
    :func:`~lightning_gnn_dist.comm.messages.start_messages` batch over that bin's counts (a
    split vertex's bin comes from its dataset id, which every copy knows, so both sides count
    alike); zero counts are skipped on both sides. Batches stay in flight up to ``r`` forwards
    (:meth:`close` waits for them); backward and evaluation post nothing.
    """

    mode = "cd-r"
    exact = False
    reductions: ClassVar[tuple[str, ...]] = ("sum",)

    def __init__(self, partition, counter=None, group=None, delay: int = 5, codec=None) -> None:
        super().__init__(partition, counter=counter, group=group, codec=codec)
        if not isinstance(delay, int) or isinstance(delay, bool) or not 1 <= delay <= MAX_DELAY:
            raise ValueError(
                f"the delay r of cd-r must be an integer in [1, {MAX_DELAY}] (got {delay!r}); "
                "cd-0 is exact"
            )
        self.delay = int(delay)
        peers = torch.arange(self.world_size)
        leaf_peer = peers.repeat_interleave(partition.leaf_counts)
        root_peer = peers.repeat_interleave(partition.root_counts)
        leaf_bin = partition.global_ids[partition.leaf_index] % self.delay
        root_bin = partition.global_ids[partition.root_index] % self.delay
        self._bins = []
        for b in range(self.delay):
            leaf_pos = torch.nonzero(leaf_bin == b).flatten()
            root_pos = torch.nonzero(root_bin == b).flatten()
            self._bins.append(
                (
                    leaf_pos,
                    root_pos,
                    torch.bincount(leaf_peer[leaf_pos], minlength=self.world_size).tolist(),
                    torch.bincount(root_peer[root_pos], minlength=self.world_size).tolist(),
                )
            )
        self._layers: dict[str, dict] = {}
        self._bin_rows = self._gather_bin_rows(partition.global_ids.device)

    def _gather_bin_rows(self, device) -> np.ndarray:
        """``[P, r, 2]`` leaf and root rows of every rank's bins (one small all-gather, so the
        prediction of every rank's traffic needs no further communication)."""
        mine = torch.tensor(
            [[leaf.numel(), root.numel()] for leaf, root, _, _ in self._bins],
            dtype=torch.int64,
            device=device,
        )
        if self.world_size > 1:
            gathered = [torch.empty_like(mine) for _ in range(self.world_size)]
            dist.all_gather(gathered, mine, group=self.group)
            mine = torch.stack(gathered)
        return mine.reshape(self.world_size, self.delay, 2).cpu().numpy()

    @classmethod
    def parse_mode(cls, mode: str) -> dict | None:
        if not mode.startswith("cd-") or mode == "cd-0":
            return None
        match = re.fullmatch(r"cd-([1-9][0-9]{0,8})", mode, re.ASCII)
        if match is None:
            raise ValueError(
                f"exchange {mode!r}: the delay r of cd-<r> must be an integer from 1 to "
                f"{MAX_DELAY:,} written in ASCII digits without leading zeros (cd-0 is the exact mode)"
            )
        return {"delay": int(match.group(1))}

    def predicted_rows_sent(self, metrics, direction: str) -> np.ndarray:  # type: ignore[override]
        """``[P]`` rows per training forward, averaged over the forwards since the counter was
        last reset (what :class:`~lightning_gnn_dist.lightning.callbacks.CommunicationMonitor` multiplies by
        the calls): exactly the bins each rank sent, from the binning of every rank's plans.
        Nothing moves backward."""
        if direction == "backward" or not self._layers:
            return np.zeros(metrics.num_parts)
        end = max(state["step"] for state in self._layers.values())
        counter = getattr(self, "_training_counter", self.counter)  # where the forwards counted
        calls = max((t.calls for _, d, t in counter.items() if d == "forward"), default=0)
        steps = range(max(0, end - calls), end)
        rows = sum(self._all_planned_rows(step) for step in steps)
        return rows / max(1, len(steps))

    def planned_rows_sent(self, step: int) -> int:
        """Rows this rank sends in training forward number ``step`` of one layer: the leaf
        partials of bin ``step % r`` plus, from step ``r`` on, the root totals of that bin."""
        return int(self._all_planned_rows(step)[self.rank])

    def _all_planned_rows(self, step: int) -> np.ndarray:
        """``[P]`` rows every rank sends in training forward ``step``."""
        leaf, root = self._bin_rows[:, step % self.delay].T
        return leaf + (root if step >= self.delay else 0)

    def synchronise(
        self, partial: Tensor, layer: str, reduce: str = "sum", ties: Tensor | None = None
    ) -> Tensor:
        if reduce != "sum":
            raise NotImplementedError(
                f"{self.mode} with delay {self.delay} supports sum and mean aggregation; a {reduce} "
                "aggregation needs exact synchronisation: use exchange='cd-0'"
            )
        state = self._state(layer, partial)
        if torch.is_grad_enabled():
            self._advance(state, partial.detach(), layer)
        remote = partial.new_zeros(partial.shape)
        remote.index_add_(0, self.partition.root_index.to(partial.device), state["root_remote"])
        remote.index_add_(0, self.partition.leaf_index.to(partial.device), state["leaf_remote"])
        return partial + remote

    def _state(self, layer: str, like: Tensor) -> dict:
        if layer not in self._layers:
            width = like.size(1)
            self._layers[layer] = {
                "step": 0,
                "leaf_remote": like.new_zeros(self.partition.leaf_index.numel(), width),
                "root_remote": like.new_zeros(self.partition.root_index.numel(), width),
                "phase_a": [None] * self.delay,  # (transfer of leaf partials, rows sent)
                "phase_b": [None] * self.delay,  # (transfer of root totals, leaf rows they include)
            }
        return self._layers[layer]

    def _advance(self, state: dict, x: Tensor, layer: str) -> None:
        b = state["step"] % self.delay
        leaf_pos, root_pos, leaf_counts, root_counts = self._bins[b]
        leaf_index = self.partition.leaf_index.to(x.device)[leaf_pos.to(x.device)]
        root_index = self.partition.root_index.to(x.device)[root_pos.to(x.device)]
        answering = state["phase_a"][b] is not None  # roots answer from step r on
        codec = self._codec(layer, "forward")
        if state["phase_b"][b] is not None:  # leaves: totals for what they sent 2r epochs ago
            transfer, included = state["phase_b"][b]
            totals = self._timed_wait(transfer, layer, "forward")
            state["leaf_remote"][leaf_pos.to(x.device)] = totals - included
            state["phase_b"][b] = None
        if state["phase_a"][b] is not None:  # roots: partials the leaves sent r epochs ago
            transfer, leaf_sent = state["phase_a"][b]
            from_leaves = self._timed_wait(transfer, layer, "forward")
            state["root_remote"][root_pos.to(x.device)] = from_leaves
            total = x.clone().index_add_(0, root_index, from_leaves)
            transfer = self._move(
                total.index_select(0, root_index).contiguous(),
                root_counts,
                leaf_counts,
                layer,
                "forward",
                codec,
            )
            state["phase_b"][b] = (transfer, leaf_sent)
        leaf_rows = x.index_select(0, leaf_index).contiguous()
        transfer = self._move(leaf_rows, leaf_counts, root_counts, layer, "forward", codec)
        state["phase_a"][b] = (transfer, leaf_rows)
        self._record_delayed(layer, leaf_counts, root_counts, answering, x, codec)
        state["step"] += 1

    def _record_delayed(
        self, layer, leaf_counts, root_counts, answering: bool, like, codec: Codec
    ) -> None:
        # Sent: this epoch's leaf partials (+ the roots' answers from step r on); received: the
        # partials posted to this rank's roots (+ the answers to its leaves). Counted when posted.
        self._training_counter = self.counter
        zeros = [0] * self.world_size
        sent = (leaf_counts, root_counts if answering else zeros)
        received = (root_counts, leaf_counts if answering else zeros)
        self.counter.record(
            layer,
            "forward",
            rows_sent=sum(map(sum, sent)),
            rows_received=sum(map(sum, received)),
            width=like.size(1),
            element_size=like.element_size(),
            messages_sent=sum(1 for counts in sent for c in counts if c),
            messages_received=sum(1 for counts in received for c in counts if c),
            row_bytes=codec.row_bytes(like.size(1), like.element_size()),
            codec=codec.name,
        )

    def close(self) -> None:
        """Wait for every bin in flight (their data stays available to :meth:`state_dict`)."""
        for state in self._layers.values():
            for phase in ("phase_a", "phase_b"):
                for item in state[phase]:
                    if item is not None:
                        item[0].wait()

    def state_dict(self) -> dict:
        """Per layer: the epoch counter, the remote contributions in use and the bins in flight
        (waited for, so the checkpoint holds their data)."""
        out = {}
        for layer, state in self._layers.items():
            flights = {}
            for phase in ("phase_a", "phase_b"):
                flights[phase] = [
                    None if item is None else (item[0].wait().cpu(), item[1].cpu())
                    for item in state[phase]
                ]
                state[phase] = [
                    None if item is None else (Transfer([], item[0].result), item[1])
                    for item in state[phase]
                ]
            out[layer] = {
                "step": state["step"],
                "leaf_remote": state["leaf_remote"].cpu(),
                "root_remote": state["root_remote"].cpu(),
                **flights,
            }
        return {"delay": self.delay, "layers": out}

    def load_state_dict(self, state: dict) -> None:
        if state.get("delay") != self.delay:
            raise ValueError(
                f"the checkpoint was written with cd-{state.get('delay')}, this run uses "
                f"cd-{self.delay}; resume with the same exchange mode"
            )
        self._layers = {}
        for layer, saved in state["layers"].items():
            self._layers[layer] = {
                "step": int(saved["step"]),
                "leaf_remote": saved["leaf_remote"].clone(),
                "root_remote": saved["root_remote"].clone(),
                **{
                    phase: [
                        None if item is None else (Transfer([], item[0].clone()), item[1].clone())
                        for item in saved[phase]
                    ]
                    for phase in ("phase_a", "phase_b")
                },
            }

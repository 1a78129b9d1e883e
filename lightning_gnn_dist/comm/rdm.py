"""``rdm``: redistribution of dense matrices between row and column slices (paper 003).

``Â`` is replicated on every rank (or held as row panels, ``replication = R_A < P``), so an SpMM
needs no communication on column slices and a GEMM none on row slices; between them one
``all_to_all_single`` switches the layout (:meth:`RDMExchange.to_columns`,
:meth:`RDMExchange.to_rows`; uneven rows and columns, any number of ranks, gloo and NCCL). With
``R_A < P`` an SpMM first exchanges the column block between panels
(:meth:`RDMExchange.gather_panels`). The layers themselves run in
:class:`~lightning_gnn_dist.nn.rdm.RDMContext`; this module moves, counts and predicts.

Counting: every redistribution is recorded under its layer and ``"forward"``/``"backward"``,
every panel exchange under ``"forward-panel"``/``"backward-panel"``. ``rows_*`` of these records
count **elements** (``width`` 1), so ``bytes_*`` are exact. The prediction from the plan
(:mod:`.rdm_plan`) is recorded beside them (:meth:`CommCounter.add_predicted`) as each pass runs;
the counters must equal it to the byte. One-off set-up traffic (the graph structure every rank
gathers, the column slices of the static features, the order tuning's timings) goes to
:attr:`RDMExchange.setup_counter`.

Order choice (``order``): an explicit string (``"dsds"``), ``"model"`` (the cheapest Pareto
order by :func:`~.rdm_plan.order_costs`' scalar model, no timing) or ``"auto"`` (the paper's
§IV-B: after one warm-up step, each Pareto order runs ``tuning_steps`` training steps; the one
with the shortest step, slowest rank, is kept). The Pareto set, the model's pick and every
candidate's measured step time are logged (logger ``lightning_gnn_dist.comm.rdm``, rank 0) and
kept in :meth:`RDMExchange.order_report`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch.autograd import Function

from lightning_gnn_dist.comm.base import HaloExchange, Transfer
from lightning_gnn_dist.comm.codec_policy import CodecPolicy
from lightning_gnn_dist.comm.counters import CommCounter
from lightning_gnn_dist.comm.messages import all_to_all
from lightning_gnn_dist.comm.rdm_plan import (
    LayerShape,
    OrderCost,
    PassPlan,
    RDMLayout,
    order_costs,
    pareto,
    parse_order,
)
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.partition.metrics import PartitionMetrics

log = logging.getLogger(__name__)

ORDER_CHOICES = ("auto", "model")


def check_codec_option(policy: CodecPolicy) -> None:
    """Refuse a lossy codec: redistributions move column blocks of varying width, not rows,
    so the row codecs do not apply (sending fp32 silently would misreport the bytes)."""
    if not policy.lossless:
        raise ValueError(
            f"exchange='rdm' sends fp32 only (got codec={policy.spec!r}); use codec='fp32', or "
            "a lossy codec with a halo mode (p2p, broadcast, cached)"
        )


def check_order_option(order: str) -> None:
    """Raise ``ValueError`` unless ``order`` is ``"auto"``, ``"model"`` or an even number of
    letters ``s``/``d`` (checked against the model's layers when it is bound)."""
    if not isinstance(order, str) or (
        order not in ORDER_CHOICES
        and (len(order) == 0 or len(order) % 2 or set(order.lower()) - {"s", "d"})
    ):
        raise ValueError(
            f"rdm_order={order!r}: use 'auto' (time the Pareto orders), 'model' (the cost "
            "model's pick) or 2L letters s/d (forward layers 1..L, backward L..1), e.g. 'dsds'"
        )


class RDMExchange(HaloExchange):
    """Redistribution between row slices (``H``, a rank's owned rows) and column slices (``V``).

    Args:
        partition: this rank's :class:`LocalPartition` (its ``part_offsets`` are the row split).
        counter: per-step traffic. (default: a new :class:`CommCounter`)
        group: process group of the parts. (default: the world group)
        rdm_order: ``"auto"``, ``"model"`` or an order string, see the module docstring (the
            name of :class:`~lightning_gnn_dist.lightning.GNNStrategy`'s option). (default:
            ``"auto"``)
        replication: ranks per row panel of ``Â`` (``R_A``, a divisor of ``P``; ``P`` = the
            whole ``Â`` on every rank, ``1`` = CAGNET 1D). (default: ``P``)
        tuning_steps: timed training steps per Pareto order with ``rdm_order="auto"``.
            (default: 3)
        element_seconds, sparse_op_seconds, latency_seconds: the scalar model of
            :func:`~.rdm_plan.order_costs` (``"model"`` and the order of the ``"auto"``
            candidates): seconds per element sent, per SpMM multiply-add, per collective.
            (default: ``None``, measured once by :meth:`calibrate` when the model is bound)

    NCCL rule: no point-to-point message. Every move is one ``all_to_all_single``
    (:func:`~lightning_gnn_dist.comm.messages.all_to_all`, NCCL's own on NCCL) whose splits each
    rank computes from data every rank holds: the layout (``part_offsets``, the panel groups)
    and the matrix's width, so what ``p`` sends ``q`` is what ``q`` expects from ``p``. Ranks
    outside one's panel group get zero splits, on both sides alike; an all-to-all over
    one-rank groups is skipped by every rank. :meth:`send_rows` (set-up) exchanges its counts
    first (an all-to-all of ``P`` int64). :meth:`calibrate` and the order tuning add
    ``all_reduce`` (MAX) calls of float64 on the rank's device, the same on every rank.
    """

    mode = "rdm"
    graph_context: ClassVar[str] = "rdm"

    @classmethod
    def check_options(cls, **options) -> dict:
        check_order_option(options.get("rdm_order", "auto"))
        replication = options.get("replication")
        if replication is not None and (
            not isinstance(replication, int) or isinstance(replication, bool) or replication < 1
        ):
            raise ValueError(
                f"replication must be a positive number of ranks per panel (got {replication!r})"
            )
        return options

    def __init__(
        self,
        partition: LocalPartition,
        counter: CommCounter | None = None,
        group=None,
        rdm_order: str = "auto",
        replication: int | None = None,
        tuning_steps: int = 3,
        element_seconds: float | None = None,
        sparse_op_seconds: float | None = None,
        latency_seconds: float | None = None,
        codec: CodecPolicy | str | dict | None = None,
    ) -> None:
        super().__init__(partition, counter, group, codec=codec)
        check_codec_option(self.codec_policy)
        self.check_options(rdm_order=rdm_order, replication=replication)
        order = rdm_order
        if tuning_steps < 1:
            raise ValueError(f"tuning_steps must be >= 1 (got {tuning_steps})")
        offsets = tuple(int(v) for v in partition.part_offsets)
        self.layout = RDMLayout(offsets, self.world_size if replication is None else replication)
        self.order_option = order
        self.tuning_steps = tuning_steps
        given = (element_seconds, sparse_op_seconds, latency_seconds)
        self.model_seconds: tuple[float, float, float] | None = (
            None if any(v is None for v in given) else given  # type: ignore[assignment]
        )
        self.setup_counter = CommCounter()
        self.order: str | None = None if order in ORDER_CHOICES else order.lower()
        self.candidates: list[OrderCost] = []
        self.measured: dict[str, list[float]] = {}
        self._schedule: list[tuple[str, bool]] = []  # (order, timed) of the next training steps
        self._current: tuple[str, bool] | None = None  # the training step in progress
        self._step_start: float | None = None
        self.last_backward_end: float | None = None

    # -- the order -------------------------------------------------------------------------
    def calibrate(self, sparse_op_seconds: float, repeats: int = 3) -> tuple[float, float, float]:
        """Measure the scalar model's constants on this machine and network, once: the latency
        of an ``all_to_all_single`` of one element per peer and the seconds per element of a
        redistribution (medians of ``repeats``), with ``sparse_op_seconds`` measured by the
        caller on the real ``Â``. All three are max-reduced, so every rank gets the same model
        (and the same order). Counted in :attr:`setup_counter` as ``("calibration", ...)``."""
        width = 32
        probe = torch.ones(int(self.layout.sizes[self.rank]), width, device=self.device)

        def median_seconds(step) -> float:
            times = []
            for _ in range(repeats + 1):
                start = time.perf_counter()
                step()
                times.append(time.perf_counter() - start)
            return sorted(times[1:])[len(times[1:]) // 2]  # the first one warms up

        P = self.world_size
        tiny = torch.ones(P, device=self.device)
        ones = [1] * P

        def tiny_exchange() -> None:
            self._all_to_all(tiny, ones, ones, "calibration", "setup", P, self.setup_counter)

        latency = median_seconds(tiny_exchange) if P > 1 else 0.0
        moved = median_seconds(
            lambda: self.to_columns(probe, "calibration", "setup", self.setup_counter)
        )
        sent = int(self.layout.elements_sent("V", width).sum(axis=1).max())
        element = max(moved - latency, 0.0) / sent if sent else 0.0
        reduced = torch.tensor(
            [element, sparse_op_seconds, latency], dtype=torch.float64, device=self.device
        )
        if P > 1:
            dist.all_reduce(reduced, op=dist.ReduceOp.MAX, group=self.group)
        self.model_seconds = tuple(float(v) for v in reduced.cpu())  # type: ignore[assignment]
        return self.model_seconds  # type: ignore[return-value]

    def configure(self, shapes: Sequence[LayerShape], nnz: int, static_input: bool) -> None:
        """Fix the model's layers (first to last) and choose the order (or start tuning).

        Args:
            shapes: the RDM layers in call order.
            nnz: non-zeros of ``Â`` (the SpMM work of one column).
            static_input: the first layer's input is the static feature matrix.
        """
        if self.model_seconds is None:
            raise RuntimeError("RDMExchange.configure: call calibrate() first or pass the model")
        element, sparse, latency = self.model_seconds
        costs = order_costs(
            shapes,
            self.layout,
            nnz,
            static_input=static_input,
            element_seconds=element,
            sparse_op_seconds=sparse,
            latency_seconds=latency,
        )
        self.candidates = pareto(costs)
        self.measured = {}
        self._schedule, self._current = [], None
        if self.order_option in ORDER_CHOICES:
            self.order = self.candidates[0].order
            if self.order_option == "auto" and len(self.candidates) > 1:
                self._schedule = [(self.order, False)] + [
                    (c.order, True) for c in self.candidates for _ in range(self.tuning_steps)
                ]
        else:
            parse_order(self.order, len(shapes))  # raises with the expected length
        if self.rank == 0:
            pareto_text = ", ".join(
                f"{c.order} ({c.comm_elements} elements, {c.sparse_ops} SpMM ops, "
                f"{c.seconds * 1e3:.3g} ms)"
                for c in self.candidates
            )
            log.info(
                "rdm: model %.3g s per element sent, %.3g s per SpMM multiply-add, %.3g s per "
                "collective; Pareto orders %s; model pick %s; %s",
                element,
                sparse,
                latency,
                pareto_text,
                self.candidates[0].order,
                f"using {self.order}" if not self._schedule else "timing each",
            )

    def begin_round(self, epoch: int | None) -> None:
        """Before every step: with ``rdm_order="auto"``, close the timing of the last training step
        and set the order of the next one (the same on every rank: step times are
        max-reduced)."""
        if epoch is None or (not self._schedule and self._current is None):
            return
        if self._current is not None:
            order, timed = self._current
            if timed:
                self._record_step(order)
            self._current = None
        if self._schedule:
            self._current = self._schedule.pop(0)
            self.order = self._current[0]
            self._step_start = time.perf_counter()
            self.last_backward_end = None
        else:
            self._finish_tuning()

    def _record_step(self, order: str) -> None:
        end = self.last_backward_end
        seconds = (
            float("nan") if end is None or self._step_start is None else end - self._step_start
        )
        reduced = torch.tensor([seconds], dtype=torch.float64, device=self.device)
        if self.world_size > 1:
            dist.all_reduce(reduced, op=dist.ReduceOp.MAX, group=self.group)
            self.setup_counter.record(
                "order tuning",
                "control",
                rows_sent=1,
                rows_received=1,
                width=1,
                element_size=8,
                messages_sent=1,
                messages_received=1,
            )
        self.measured.setdefault(order, []).append(float(reduced.cpu()))

    def _finish_tuning(self) -> None:
        def best(order: str) -> float:
            times = [t for t in self.measured.get(order, []) if t == t]
            return min(times) if times else float("inf")

        self.order = min((c.order for c in self.candidates), key=best)
        self._schedule, self._current = [], None
        if self.rank == 0:
            times = ", ".join(f"{c.order}: {best(c.order) * 1e3:.3g} ms" for c in self.candidates)
            log.info(
                "rdm: order %s chosen (fastest step of %d per Pareto order: %s)",
                self.order,
                self.tuning_steps,
                times,
            )

    @property
    def device(self) -> torch.device:
        """Where this rank computes (the partition's device): collectives use its tensors (NCCL
        needs CUDA ones)."""
        return self.partition.edge_index.device

    @property
    def tuning(self) -> bool:
        """Whether ``rdm_order="auto"`` is still timing candidates."""
        return bool(self._schedule) or self._current is not None

    def order_report(self) -> dict:
        """The order in use, the Pareto set with the model's costs, the model's pick and each
        candidate's measured step seconds (``rdm_order="auto"``)."""
        return {
            "order": self.order,
            "option": self.order_option,
            "model_pick": self.candidates[0].order if self.candidates else None,
            "pareto": [
                {
                    "order": c.order,
                    "comm_elements": c.comm_elements,
                    "sparse_ops": c.sparse_ops,
                    "model_seconds": c.seconds,
                    "measured_seconds": list(self.measured.get(c.order, [])),
                }
                for c in self.candidates
            ],
            "tuning": self.tuning,
        }

    def state_dict(self) -> dict:
        return {"order": self.order, "measured": self.measured, "tuning": self.tuning}

    def load_state_dict(self, state: dict) -> None:
        if state.get("order") and not state.get("tuning"):
            self.order, self.measured = state["order"], state["measured"]
            self._schedule, self._current = [], None

    # -- moving ----------------------------------------------------------------------------
    def to_columns(
        self, h: Tensor, layer: str, direction: str, counter: CommCounter | None = None
    ) -> Tensor:
        """``H`` → ``V``: ``[n_p, f]`` owned rows → ``[n_panel, f_j]`` this rank's column block
        of its panel's rows (one ``all_to_all_single``)."""
        layout, rank = self.layout, self.rank
        width = h.size(1)
        split = layout.column_split(width)
        group = layout.group(rank)
        sizes = layout.sizes
        send_splits, recv_splits, chunks = [0] * self.world_size, [0] * self.world_size, []
        for q in group:
            start, end = layout.column_range(width, layout.block(q))
            chunks.append(h[:, start:end].reshape(-1))
            send_splits[q] = int(sizes[rank]) * split[layout.block(q)]
            recv_splits[q] = int(sizes[q]) * split[layout.block(rank)]
        send = torch.cat(chunks) if chunks else h.new_empty(0)
        out = self._all_to_all(
            send, send_splits, recv_splits, layer, direction, layout.replication, counter
        )
        rows = sum(int(sizes[q]) for q in group)
        return out.view(rows, split[layout.block(rank)])

    def to_rows(self, v: Tensor, layer: str, direction: str, width: int) -> Tensor:
        """``V`` → ``H``: ``[n_panel, f_j]`` → ``[n_p, f]`` (``width`` = ``f``)."""
        layout, rank = self.layout, self.rank
        split = layout.column_split(width)
        group = layout.group(rank)
        sizes = layout.sizes
        send_splits, recv_splits = [0] * self.world_size, [0] * self.world_size
        for q in group:
            send_splits[q] = int(sizes[q]) * split[layout.block(rank)]
            recv_splits[q] = int(sizes[rank]) * split[layout.block(q)]
        out = self._all_to_all(
            v.contiguous().reshape(-1),
            send_splits,
            recv_splits,
            layer,
            direction,
            layout.replication,
        )
        pieces = out.split([recv_splits[q] for q in group])
        n = int(sizes[rank])
        return torch.cat(
            [p.view(n, split[layout.block(q)]) for p, q in zip(pieces, group, strict=True)], dim=1
        )

    def gather_panels(self, v: Tensor, layer: str, direction: str) -> Tensor:
        """``[n_panel, f_j]`` → ``[N, f_j]``: this rank's column block over all panels (the
        panel exchange before an SpMM with ``R_A < P``; identity with ``R_A = P``)."""
        layout, rank = self.layout, self.rank
        if layout.num_panels == 1:
            return v
        send_splits, recv_splits = [0] * self.world_size, [0] * self.world_size
        peers = range(layout.block(rank), self.world_size, layout.replication)
        for q in peers:
            start, end = layout.panel_rows(layout.panel(q))
            send_splits[q] = v.numel()
            recv_splits[q] = (end - start) * v.size(1)
        send = v.contiguous().reshape(-1).repeat(len(peers))
        out = self._all_to_all(
            send, send_splits, recv_splits, layer, f"{direction}-panel", layout.num_panels
        )
        return out.view(layout.num_nodes, v.size(1))

    def _all_to_all(
        self,
        send: Tensor,
        send_splits: list[int],
        recv_splits: list[int],
        layer: str,
        direction: str,
        peers: int,
        counter: CommCounter | None = None,
    ) -> Tensor:
        """One ``all_to_all_single`` (skipped when ``peers == 1``: nothing leaves a rank),
        counted in elements without the rank's own chunk."""
        start = time.perf_counter()
        out = send.new_empty(sum(recv_splits))
        if self.world_size > 1 and peers > 1:
            all_to_all(out, send, recv_splits, send_splits, group=self.group)
        else:
            out.copy_(send)
        counter = self.counter if counter is None else counter
        counter.record_rows(
            layer,
            direction,
            send_splits,
            recv_splits,
            width=1,
            element_size=send.element_size(),
            own=self.rank,
        )
        counter.add_seconds(layer, direction, time.perf_counter() - start)
        return out

    def send_rows(self, rows: Tensor, targets: Sequence[Tensor], what: str) -> Tensor:
        """Set-up exchange: ``rows[targets[q]]`` to every rank ``q``; returns the rows received,
        in rank order (this rank's own selection included). Counted in :attr:`setup_counter`
        under ``(what, "setup")``."""
        width = math.prod(rows.shape[1:])
        flat = rows.reshape(rows.size(0), width).to(self.device)
        chunks = [flat.index_select(0, t.to(flat.device)) for t in targets]
        counts = torch.tensor([c.size(0) for c in chunks], dtype=torch.int64, device=self.device)
        received = counts.clone()
        if self.world_size > 1:
            all_to_all(received, counts, group=self.group)
        send_splits = [int(c) * width for c in counts.tolist()]
        recv_splits = [int(c) * width for c in received.tolist()]
        out = self._all_to_all(
            torch.cat(chunks).reshape(-1),
            send_splits,
            recv_splits,
            what,
            "setup",
            self.world_size,
            counter=self.setup_counter,
        )
        return out.view(-1, *rows.shape[1:])

    # -- prediction --------------------------------------------------------------------------
    def predict_pass(self, layer: str, direction: str, plan: PassPlan, element_size: int) -> None:
        """Record what ``plan`` moves (``[P, P]`` bytes) beside the counters."""
        moved, gathered = self.layout.pass_elements(plan)
        self.counter.add_predicted(layer, direction, moved * element_size)
        if self.layout.num_panels > 1 and plan.spmm_widths:
            self.counter.add_predicted(layer, f"{direction}-panel", gathered * element_size)

    def redistribute(self, x: Tensor, to: str, layer: str, width: int | None = None) -> Tensor:
        """Autograd-aware layout switch: ``to="V"`` (row → column slices) or ``"H"`` (then
        ``width`` is the matrix's full number of columns); the backward pass applies the inverse
        redistribution to the gradient (counted as ``"backward"``)."""
        if to == "V":
            return Redistribute.apply(x, self, to, layer, x.size(1))
        if to != "H" or width is None:
            raise ValueError(
                f"redistribute(to={to!r}, width={width!r}): to is 'V' (row → column slices) or "
                "'H' with width = the matrix's number of columns"
            )
        return Redistribute.apply(x, self, to, layer, width)

    # -- the halo interface, which rdm does not use -----------------------------------------
    @staticmethod
    def predicted_rows_sent(metrics: PartitionMetrics, direction: str) -> np.ndarray:
        # Independent of the partition's halo: the counters carry the plan's prediction.
        return np.zeros(metrics.num_parts, dtype=np.int64)

    def _post_forward(self, h_owned: Tensor, layer: str) -> Transfer:
        raise NotImplementedError(
            f"layer {layer} asked for halo rows, but exchange='rdm' has none: it computes "
            "GCNConv, SAGEConv (mean/sum) and GraphConv layers, without edge weights, in its "
            "graph context; use exchange='p2p' for other layers or edge weights"
        )

    def _post_backward(self, grad_halo: Tensor, layer: str) -> Transfer:
        return self._post_forward(grad_halo, layer)

    def __repr__(self) -> str:
        return (
            f"RDMExchange(rank={self.rank}, world_size={self.world_size}, "
            f"replication={self.layout.replication}, order={self.order!r}, "
            f"option={self.order_option!r})"
        )


class Redistribute(Function):
    """Layout switch whose backward is the inverse switch (see :meth:`RDMExchange.redistribute`)."""

    @staticmethod
    def forward(ctx, x: Tensor, exchange: RDMExchange, to: str, layer: str, width: int | None):
        ctx.exchange, ctx.to, ctx.layer, ctx.width = exchange, to, layer, width
        if to == "V":
            return exchange.to_columns(x.detach(), layer, "forward")
        return exchange.to_rows(x.detach(), layer, "forward", width)

    @staticmethod
    def backward(ctx, grad: Tensor):
        exchange = ctx.exchange
        if ctx.to == "V":
            back = exchange.to_rows(grad.contiguous(), ctx.layer, "backward", ctx.width)
        else:
            back = exchange.to_columns(grad.contiguous(), ctx.layer, "backward")
        return back, None, None, None, None

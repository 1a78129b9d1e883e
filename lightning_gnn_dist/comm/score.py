"""The score exchange of link prediction: the far endpoints' embedding rows.

A rank scores the pairs whose source it owns (their supervision pairs live with the source,
:mod:`~lightning_gnn_dist.data.links`). A pair's other endpoint may be owned elsewhere; its
embedding row comes from its owner by a second exchange after the model's forward, planned from
the pairs like a halo: the rank asks each owner once for the distinct rows it needs (8-byte
ids), the owners answer with the rows, and in the backward the rows' gradients go home and are
summed into the owners' embeddings, so the parameters' gradients are those of a single process.

Per step, recorded in the exchange's counter (layer ``"score"``; the monitor's rows):

============================ =========================================== =====================
record                       what                                        bytes
============================ =========================================== =====================
``score``/``control``        every rank's request counts (``[P]`` int64,  ``8·P`` to each peer
                             one ``all_gather``): the plan every rank
                             predicts from
``score.ids``/``request``    the distinct far ids a rank needs per owner ``8`` per row
``score``/``forward``        the rows, from their owners                 ``4·d`` per row
``score``/``backward``       their gradients, back to the owners          ``4·d`` per row
============================ =========================================== =====================

Each record's prediction (``[P, P]`` bytes, :meth:`CommCounter.add_predicted`) is computed from
the pairs alone — rows per peer = distinct far endpoints per owner — so the monitor compares the
bytes that moved with the bytes the pairs call for, as it does for every halo.

NCCL rules (:mod:`.messages`): one ``all_gather`` of equal sizes, then ``all_to_all``\\ s whose
splits both sides derive from the same gathered matrix; every rank calls every collective of a
step, with pairs or without.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch.autograd import Function

from lightning_gnn_dist.comm.counters import CommCounter
from lightning_gnn_dist.comm.messages import all_to_all

LAYER = "score"


@dataclass
class VertexDirectory:
    """Where every vertex's embedding row lives: dataset id → routing id, owned by the part
    whose ``offsets`` range holds it (a part's routing ids list its owned vertices by ascending
    dataset id: a vertex partition's relabelled ids, or a vertex cut's root copies).

    Attributes:
        old_to_new: ``[N] int64`` routing id of each dataset id (8 bytes per vertex on every
            rank: the price of global negatives, whose targets may be any vertex).
        offsets: ``[P + 1] int64`` routing id range of each part.
    """

    old_to_new: Tensor
    offsets: Tensor

    @classmethod
    def from_owner(cls, owner: np.ndarray, num_parts: int) -> VertexDirectory:
        """From the part owning each vertex (a vertex partition's ``assignment``, no
        communication)."""
        owner = np.asarray(owner, dtype=np.int64)
        new_to_old = np.argsort(owner, kind="stable")
        old_to_new = np.empty_like(new_to_old)
        old_to_new[new_to_old] = np.arange(new_to_old.size)
        offsets = np.zeros(num_parts + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner, minlength=num_parts), out=offsets[1:])
        return cls(torch.from_numpy(old_to_new), torch.from_numpy(offsets))

    @classmethod
    def gather(cls, owned_ids: Tensor, num_nodes: int, group=None) -> VertexDirectory:
        """From every rank's owned dataset ids (ascending), by one ``all_gather`` (collective;
        a single process needs none)."""
        owned_ids = owned_ids.cpu().long()
        if not (dist.is_available() and dist.is_initialized()):
            owner = np.zeros(num_nodes, dtype=np.int64)
            return cls.from_owner(owner, 1)
        world = dist.get_world_size(group)
        size = torch.tensor([owned_ids.numel()])
        sizes = [torch.zeros_like(size) for _ in range(world)]
        dist.all_gather(sizes, size, group=group)
        longest = max(int(s) for s in sizes)
        padded = torch.full((longest,), -1, dtype=torch.long)
        padded[: owned_ids.numel()] = owned_ids
        blocks = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(blocks, padded, group=group)
        owner = np.full(num_nodes, -1, dtype=np.int64)
        for part, (block, count) in enumerate(zip(blocks, sizes, strict=True)):
            owner[block[: int(count)].numpy()] = part
        if (owner < 0).any():
            raise ValueError(f"vertex {int(np.argmax(owner < 0))} is owned by no rank")
        return cls.from_owner(owner, world)

    @property
    def num_parts(self) -> int:
        return int(self.offsets.numel() - 1)

    def routing(self, ids: Tensor) -> Tensor:
        return self.old_to_new[ids.cpu()]

    def owner(self, routing: Tensor) -> Tensor:
        return torch.searchsorted(self.offsets, routing, right=True) - 1


@dataclass
class EndpointPlan:
    """One step's plan: the rows of ``ids`` from ``[local rows | received rows]``.

    Attributes:
        index: ``[m] int64`` row of each requested id in ``cat([h, received])``.
        send_rows: ``[Σ send_counts] int64`` rows of ``h`` this rank sends, grouped by peer.
        send_counts, recv_counts: ``[P]`` rows sent to / received from each peer.
        requests: ``[P, P]`` ``[p][q]`` rows rank ``p`` receives from ``q`` (every rank's plan).
        remote: ``[m] bool`` which ids are owned elsewhere (``None`` on one rank).
    """

    index: Tensor
    send_rows: Tensor
    send_counts: list[int]
    recv_counts: list[int]
    requests: np.ndarray
    remote: Tensor | None = None


class ScoreExchange:
    """The far endpoints' rows of one rank (module docstring).

    Args:
        directory: the :class:`VertexDirectory` of the partition.
        rank, world_size: this part and ``P``.
        owned_rows: ``[num_owned] int64`` row of the model output holding each owned vertex
            (ascending dataset id); ``None``: rows ``0 .. num_owned − 1`` (a vertex partition:
            the output has the owned rows). A vertex cut's output has every local copy: its
            roots' positions.
        group: the process group of the parts. (default: the world)
        counter: where bytes are recorded (default: a new :class:`CommCounter`).
    """

    def __init__(
        self,
        directory: VertexDirectory,
        rank: int,
        world_size: int,
        owned_rows: Tensor | None = None,
        group=None,
        counter: CommCounter | None = None,
    ) -> None:
        self.directory, self.rank, self.world_size = directory, rank, world_size
        self.owned_rows, self.group = owned_rows, group
        self.counter = counter if counter is not None else CommCounter()
        self.start = int(directory.offsets[rank])

    def _rows_of_owned(self, local: Tensor) -> Tensor:
        return local if self.owned_rows is None else self.owned_rows.cpu()[local]

    def plan(self, ids: Tensor) -> EndpointPlan:
        """Plan fetching the rows of dataset ``ids`` (``[m]``, any owner, repeats allowed);
        collective (every rank calls it once per step)."""
        world, device = self.world_size, ids.device
        routing = self.directory.routing(ids)
        owner = self.directory.owner(routing)
        remote = owner != self.rank
        wanted = torch.unique(routing[remote])  # sorted: grouped by owner
        recv_counts = torch.bincount(self.directory.owner(wanted), minlength=world)
        index = torch.empty_like(routing)
        local = ~remote
        # a local id's row; a remote one's position after the h rows (fixed in rows())
        index[local] = self._rows_of_owned(routing[local] - self.start)
        index[remote] = torch.searchsorted(wanted, routing[remote])
        if world == 1:
            return EndpointPlan(index.to(device), index[:0], [0], [0], np.zeros((1, 1), np.int64))
        requests = self._gather_counts(recv_counts)
        send_counts = requests[:, self.rank].tolist()
        asked = torch.empty(sum(send_counts), dtype=torch.long)
        all_to_all(asked, wanted, send_counts, recv_counts.tolist(), group=self.group)
        self._record("score.ids", "request", recv_counts.tolist(), send_counts, 1, 8)
        self._predict("score.ids", "request", requests * 8)
        send_rows = self._rows_of_owned(asked - self.start)
        return EndpointPlan(
            index.to(device),
            send_rows.to(device),
            send_counts,
            recv_counts.tolist(),
            requests,
            remote.to(device),
        )

    def _gather_counts(self, recv_counts: Tensor) -> np.ndarray:
        """``[P, P]`` every rank's request counts (one ``all_gather``, recorded as control)."""
        world = self.world_size
        rows = [torch.zeros_like(recv_counts) for _ in range(world)]
        dist.all_gather(rows, recv_counts, group=self.group)
        ones = [1] * world
        self._record(LAYER, "control", ones, ones, world, 8)
        control = np.full((world, world), world * 8, dtype=np.int64)
        np.fill_diagonal(control, 0)
        self._predict(LAYER, "control", control)
        return torch.stack(rows).numpy()

    def table(
        self, h: Tensor, ids: Tensor, plan: EndpointPlan | None = None
    ) -> tuple[Tensor, Tensor]:
        """``(table [T, d], index [m])``: the rows of dataset ``ids`` are ``table[index]``,
        ``table`` being the model output ``h`` (owned rows as :attr:`owned_rows` says) followed
        by the far rows received; autograd-connected: the far rows' gradients go back to their
        owners. Collective (plans first when ``plan`` is not given)."""
        if plan is None:
            plan = self.plan(ids)
        if self.world_size == 1:
            return h, plan.index
        received = _FarRows.apply(h, self, plan)
        index = plan.index.clone()
        index[plan.remote] += h.size(0)
        return torch.cat([h, received]), index

    def rows(self, h: Tensor, ids: Tensor, plan: EndpointPlan | None = None) -> Tensor:
        """``[m, d]`` embedding rows of dataset ``ids`` (:meth:`table`, gathered)."""
        table, index = self.table(h, ids, plan)
        return table.index_select(0, index)

    def _record(
        self,
        layer: str,
        direction: str,
        sent: list[int],
        received: list[int],
        width: int,
        element_size: int,
    ) -> None:
        """Record rows of ``width`` elements sent to / received from each peer (the rank's own
        block stays local)."""
        self.counter.record_rows(
            layer, direction, sent, received, width=width, element_size=element_size, own=self.rank
        )

    def _predict(self, layer: str, direction: str, peer_bytes: np.ndarray) -> None:
        """``peer_bytes[p, q]``: bytes rank ``p`` sends ``q`` (recorded on every rank)."""
        self.counter.add_predicted(layer, direction, np.asarray(peer_bytes, dtype=np.float64))


class _FarRows(Function):
    """Forward: owners send the planned rows; backward: their gradients go home."""

    @staticmethod
    def forward(ctx, h: Tensor, exchange: ScoreExchange, plan: EndpointPlan) -> Tensor:
        width = h.size(1)
        send = h.detach().index_select(0, plan.send_rows).contiguous()
        received = h.new_empty(sum(plan.recv_counts), width)
        all_to_all(received, send, plan.recv_counts, plan.send_counts, group=exchange.group)
        row_bytes = width * h.element_size()
        exchange._record(
            LAYER, "forward", plan.send_counts, plan.recv_counts, width, h.element_size()
        )
        exchange._predict(LAYER, "forward", plan.requests.T * row_bytes)
        if ctx.needs_input_grad[0]:  # a backward will send the gradients home
            exchange._predict(LAYER, "backward", plan.requests * row_bytes)
        ctx.exchange, ctx.plan, ctx.num_rows = exchange, plan, h.size(0)
        return received

    @staticmethod
    def backward(ctx, grad: Tensor):
        exchange, plan = ctx.exchange, ctx.plan
        ctx.exchange = ctx.plan = None
        grad = grad.contiguous()
        back = grad.new_empty(sum(plan.send_counts), grad.size(1))
        all_to_all(back, grad, plan.send_counts, plan.recv_counts, group=exchange.group)
        exchange._record(
            LAYER, "backward", plan.recv_counts, plan.send_counts, grad.size(1), grad.element_size()
        )
        grad_h = grad.new_zeros(ctx.num_rows, grad.size(1)).index_add_(0, plan.send_rows, back)
        return grad_h, None, None


__all__ = ["LAYER", "EndpointPlan", "ScoreExchange", "VertexDirectory"]

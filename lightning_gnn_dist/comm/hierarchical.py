"""``hierarchical``: each halo row crosses to a remote node once, then fans out inside it (issue 23).

``p2p`` sends a row once per rank that needs it, so a row needed by two ranks of one remote node
crosses the slow inter-node link twice. Here, per layer input row ``v`` owned by rank ``o``:

1. *stage 1* — ``o`` sends ``v`` directly to every rank of its own node that needs it, and once
   to one **gateway** on every other node that needs it (the ``(v mod c)``-th of the ``c`` ranks
   of that node needing ``v``, ascending; :func:`~lightning_gnn_dist.partition.placement.choose_gateways`);
2. *stage 2* — each gateway forwards the rows it received to the other ranks of its node that need
   them (an intra-node hop).

Backward runs the stages in reverse: every rank returns the gradient of a forwarded row to its
gateway (intra-node), the gateway sums its node's gradients with its own and sends the sum to the
owner once (inter-node), and the owner adds the returned gradients into its rows. Rows are
encoded once by the owner (the gateway forwards the wire rows as they arrived, so a lossy codec
quantises a forward row once); backward sums at the gateway are re-encoded.

A rank's node is ``rank // ranks_per_node`` (Lightning's and torchrun's numbering). The plan needs
the halo ids of the ranks of one's node: they are exchanged once, on the first exchange (point to
point, inside each node only; counted apart, in :attr:`HierarchicalExchange.setup_counter` under
``("node halo ids", "setup")``, as ``rdm`` counts its set-up). Bytes per exchange: :func:`~lightning_gnn_dist.partition.placement.hierarchical_peer_rows`
rows from ``p`` to ``q`` (forward; its transpose backward), times the codec's bytes per row.
"""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from lightning_gnn_dist.comm.base import Transfer
from lightning_gnn_dist.comm.counters import CommCounter
from lightning_gnn_dist.comm.messages import start_messages
from lightning_gnn_dist.comm.p2p import P2PExchange
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.partition.metrics import PartitionMetrics
from lightning_gnn_dist.partition.placement import choose_gateways


class HierarchicalExchange(P2PExchange):
    """Node-aware point-to-point exchange: each halo row crosses to a remote node once.

    Args:
        partition: this rank's :class:`LocalPartition`.
        ranks_per_node: ranks on each node (a divisor of the world size). (default: the
            ``LOCAL_WORLD_SIZE`` environment variable that torchrun and Lightning's launcher
            set; ``GNNStrategy`` passes ``world_size // num_nodes``)
        counter, group, codec: as in :class:`~lightning_gnn_dist.comm.base.HaloExchange`.

    Attributes:
        setup_counter (CommCounter): the one-off exchange of halo ids between the ranks of a
            node that the plan needs (``("node halo ids", "setup")``: int64 sizes and ids, width
            1, 8 bytes each), kept apart from the layers' traffic in ``counter``.

    Raises:
        ValueError: ``ranks_per_node`` missing, below 1, or not a divisor of the world size.

    NCCL rule: set-up (the first exchange, inside each node): one
    :func:`~lightning_gnn_dist.comm.messages.start_messages` batch of one int64 size to and
    from every node mate, then one batch of the halo ids, posted only where the size (now
    known to both sides) is non-zero. Per exchange, two batches in order: stage 1 (owner →
    direct receivers and gateways; the owner's counts come from its send plan and the gateway
    rule, the receiver's from its node mates' halo ids and the same deterministic rule, so they
    agree pairwise) and stage 2 (gateway → node mates), posted once stage 1's receives are
    complete; backward the two reversed. Zero counts are skipped on both sides (as ``p2p``).
    """

    mode = "hierarchical"

    def __init__(
        self,
        partition: LocalPartition,
        counter=None,
        group=None,
        codec=None,
        ranks_per_node: int | None = None,
    ) -> None:
        super().__init__(partition, counter=counter, group=group, codec=codec)
        if ranks_per_node is None:
            local = os.environ.get("LOCAL_WORLD_SIZE")
            if local is None:
                raise ValueError(
                    "exchange 'hierarchical' needs the ranks per node: pass ranks_per_node, "
                    "launch with torchrun (LOCAL_WORLD_SIZE) or use GNNStrategy with num_nodes"
                )
            ranks_per_node = int(local)
        if (
            isinstance(ranks_per_node, bool)
            or not isinstance(ranks_per_node, int)
            or ranks_per_node < 1
            or self.world_size % ranks_per_node
        ):
            raise ValueError(
                f"ranks_per_node must be a positive divisor of the world size {self.world_size} "
                f"(got {ranks_per_node!r})"
            )
        self.ranks_per_node = ranks_per_node
        self._plan: dict | None = None
        self.setup_counter = CommCounter()

    @property
    def node(self) -> int:
        """This rank's node."""
        return self.rank // self.ranks_per_node

    # The prediction depends on which rows ranks of one node share, which the per-pair metrics do
    # not hold: ``metrics.hierarchical_peer_rows`` (recorded with the store's placement) does.
    def predicted_peer_rows(self, metrics: PartitionMetrics, direction: str) -> np.ndarray | None:
        rows = predicted_hierarchical_rows(metrics, self.ranks_per_node)
        if rows is None:
            return None
        return rows if direction == "forward" else rows.T

    def predicted_rows_sent(self, metrics: PartitionMetrics, direction: str) -> np.ndarray:
        rows = self.predicted_peer_rows(metrics, direction)
        return np.full(metrics.num_parts, -1) if rows is None else rows.sum(axis=1)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(rank={self.rank}, world_size={self.world_size}, "
            f"ranks_per_node={self.ranks_per_node})"
        )

    # -- plan ------------------------------------------------------------------------------------
    def _node_halos(self) -> list[np.ndarray]:
        """Halo ids (relabelled, ascending) of every rank of this node, in rank order: one
        point-to-point exchange with the other ranks of the node (sizes, then ids)."""
        first = self.node * self.ranks_per_node
        mates = [q for q in range(first, first + self.ranks_per_node) if q != self.rank]
        own = self.partition.halo_ids.to(torch.int64)  # the rank's device: NCCL posts no CPU tensor
        device = own.device
        halos = {self.rank: own}
        if mates:
            sizes = {q: torch.zeros(1, dtype=torch.int64, device=device) for q in mates}
            mine = torch.tensor([own.numel()], dtype=torch.int64, device=device)
            self._wait_all(
                [dist.P2POp(dist.isend, mine, self._peer(q), self.group) for q in mates]
                + [dist.P2POp(dist.irecv, sizes[q], self._peer(q), self.group) for q in mates]
            )
            halos |= {  # host: set-up, once
                q: torch.empty(int(sizes[q]), dtype=torch.int64, device=device) for q in mates
            }
            ops = [
                dist.P2POp(dist.isend, own, self._peer(q), self.group) for q in mates if own.numel()
            ]
            ops += [
                dist.P2POp(dist.irecv, halos[q], self._peer(q), self.group)
                for q in mates
                if halos[q].numel()
            ]
            self._wait_all(ops)
            self._record_setup(mates, own.numel(), [halos[q].numel() for q in mates])
        return [halos[q].cpu().numpy() for q in range(first, first + self.ranks_per_node)]

    def _record_setup(self, mates: list[int], sent: int, received: list[int]) -> None:
        """Count :meth:`_node_halos`' messages: to every mate one size and ``sent`` ids, from
        each its size and its ids (``received``); int64, one row each."""
        rows_to = [0] * self.world_size
        for q in mates:
            rows_to[q] = 1 + sent
        self.setup_counter.record(
            "node halo ids",
            "setup",
            rows_sent=sum(rows_to),
            rows_received=len(mates) + sum(received),
            width=1,
            element_size=8,
            messages_sent=len(mates) * (2 if sent else 1),
            messages_received=len(mates) + sum(1 for r in received if r),
            rows_sent_to=rows_to,
        )

    @staticmethod
    def _wait_all(ops: list) -> None:
        for request in start_messages(ops):
            request.wait()

    def _build_plan(self) -> dict:
        """Index arrays of both stages (see the module docstring); vectorised over rows."""
        size, per_node, rank, node = self.world_size, self.ranks_per_node, self.rank, self.node
        offsets = self.partition.part_offsets.cpu().numpy()
        halo = self.partition.halo_ids.cpu().numpy()
        # Stage-1 sends (owner side): direct to ranks of this node, once per remote node.
        peer = np.repeat(np.arange(size), self._send_counts)
        local = self.partition.send_index.cpu().numpy().astype(np.int64)
        remote = peer // per_node != node
        gateway = choose_gateways(
            offsets[rank] + local[remote], peer[remote], peer[remote] // per_node
        )
        dest = np.concatenate([peer[~remote], gateway])
        rows = np.concatenate([local[~remote], local[remote]])
        stride = max(self.partition.num_owned, 1)
        key = np.unique(dest * stride + rows)  # sorted by (destination, row)
        send1_dest, send1_index = key // stride, key % stride
        # Receiver side: who of this node needs which remote-node row, and its gateway.
        halos = self._node_halos()
        first = node * per_node
        vertex = np.concatenate(halos)
        needer = np.repeat(np.arange(first, first + per_node), [h.size for h in halos])
        owner = np.searchsorted(offsets, vertex, side="right") - 1
        far = owner // per_node != node
        vertex, needer = vertex[far], needer[far]
        gateway = choose_gateways(vertex, needer, np.full(vertex.size, node))
        mine = needer == rank
        near_halo = halo[(np.searchsorted(offsets, halo, side="right") - 1) // per_node == node]
        stage1 = np.sort(np.concatenate([near_halo, vertex[mine & (gateway == rank)]]))
        # Stage 2: forward (gateway side) and receive (from this node's gateways).
        fwd = (gateway == rank) & (needer != rank)
        order = np.lexsort((vertex[fwd], needer[fwd]))
        send2_dest, send2_vertex = needer[fwd][order], vertex[fwd][order]
        got = mine & (gateway != rank)
        order = np.lexsort((vertex[got], gateway[got]))
        recv2_src, stage2 = gateway[got][order], vertex[got][order]
        owner1 = np.searchsorted(offsets, stage1, side="right") - 1

        def as_list(ranks: np.ndarray) -> list[int]:
            return np.bincount(ranks, minlength=size).tolist()

        plan = {
            "send1_index": send1_index,
            "send1_counts": as_list(send1_dest),
            "recv1_counts": as_list(owner1),
            "send2_index": np.searchsorted(stage1, send2_vertex),
            "send2_counts": as_list(send2_dest),
            "recv2_counts": as_list(recv2_src),
            "halo1": np.searchsorted(halo, stage1),
            "halo2": np.searchsorted(halo, stage2),
        }
        return {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in plan.items()}

    def _get_plan(self, device: torch.device) -> dict:
        if self._plan is None:
            self._plan = self._build_plan()
        if self._plan["halo1"].device != device:
            self._plan = {
                k: v.to(device) if isinstance(v, Tensor) else v for k, v in self._plan.items()
            }
        return self._plan

    # -- forward and backward --------------------------------------------------------------------
    def _record_stages(self, layer: str, direction: str, plan: dict, like: Tensor, codec) -> None:
        s1, r1, s2, r2 = (
            plan[k] for k in ("send1_counts", "recv1_counts", "send2_counts", "recv2_counts")
        )
        if direction == "backward":  # the reverse of each stage
            s1, r1, s2, r2 = r1, s1, r2, s2
        sent = [a + b for a, b in zip(s1, s2, strict=True)]
        received = [a + b for a, b in zip(r1, r2, strict=True)]
        self.counter.record(
            layer,
            direction,
            rows_sent=sum(sent),
            rows_received=sum(received),
            width=like.size(1),
            element_size=like.element_size(),
            messages_sent=sum(1 for c in s1 + s2 if c),
            messages_received=sum(1 for c in r1 + r2 if c),
            rows_sent_to=sent,
            row_bytes=codec.row_bytes(like.size(1), like.element_size()),
            codec=codec.name,
        )

    def _post_split(
        self, send: Tensor, send_counts: list[int], recv: Tensor, recv_counts: list[int]
    ) -> tuple[list, list]:
        """Post like :meth:`_post`; return ``(send requests, receive requests)`` so that a
        gateway forwards what it received without waiting for its own sends to leave (with a
        backend that returns one request for the whole batch, all of it counts as receiving)."""
        requests = self._post(send, send_counts, recv, recv_counts)  # receives first
        receives = sum(1 for c in recv_counts if c)
        if len(requests) != receives + sum(1 for c in send_counts if c):
            return [], requests
        return requests[receives:], requests[:receives]

    def _post_forward(self, h_owned: Tensor, layer: str) -> Transfer:
        plan = self._get_plan(h_owned.device)
        codec = self._codec(layer, "forward")
        self._record_stages(layer, "forward", plan, h_owned, codec)
        width, dtype = h_owned.size(1), h_owned.dtype
        rows = h_owned.index_select(0, plan["send1_index"])
        wire = self._encode(codec, rows, layer, "forward") if rows.numel() else rows
        recv1 = codec.empty(sum(plan["recv1_counts"]), width, h_owned)
        sends, receives = self._post_split(wire, plan["send1_counts"], recv1, plan["recv1_counts"])

        def forward_and_assemble(received: Tensor) -> Tensor:
            onward = received.index_select(0, plan["send2_index"])
            recv2 = codec.empty(sum(plan["recv2_counts"]), width, h_owned)
            posted = self._post(onward, plan["send2_counts"], recv2, plan["recv2_counts"])
            for request in posted + sends:
                request.wait()
            halo = h_owned.new_empty(self.partition.num_halo, width)
            halo[plan["halo1"]] = codec.decode(received, width, dtype)
            halo[plan["halo2"]] = codec.decode(recv2, width, dtype)
            return halo

        return Transfer(receives, recv1, forward_and_assemble)

    def _post_backward(self, grad_halo: Tensor, layer: str) -> Transfer:
        plan = self._get_plan(grad_halo.device)
        codec = self._codec(layer, "backward")
        self._record_stages(layer, "backward", plan, grad_halo, codec)
        width, dtype = grad_halo.size(1), grad_halo.dtype
        # Stage 2 reversed: gradients of forwarded rows go back to their gateway.
        rows = grad_halo.index_select(0, plan["halo2"])
        wire = self._encode(codec, rows, layer, "backward") if rows.numel() else rows
        back2 = codec.empty(sum(plan["send2_counts"]), width, grad_halo)
        sends, receives = self._post_split(wire, plan["recv2_counts"], back2, plan["send2_counts"])

        def sum_and_return(received: Tensor) -> Tensor:
            # The gateway adds its node's gradients to its own, then stage 1 reversed.
            total = grad_halo.index_select(0, plan["halo1"])
            total.index_add_(0, plan["send2_index"], codec.decode(received, width, dtype))
            out = self._encode(codec, total, layer, "backward") if total.numel() else total
            back1 = codec.empty(sum(plan["send1_counts"]), width, grad_halo)
            posted = self._post(out, plan["recv1_counts"], back1, plan["send1_counts"])
            for request in posted + sends:
                request.wait()
            grad_owned = grad_halo.new_zeros(self.partition.num_owned, width)
            return grad_owned.index_add_(0, plan["send1_index"], codec.decode(back1, width, dtype))

        return Transfer(receives, back2, sum_and_return)


def predicted_hierarchical_rows(
    metrics: PartitionMetrics, ranks_per_node: int
) -> np.ndarray | None:
    """Forward ``[P, P]`` rows of the hierarchical exchange from the metrics: the recorded ones
    (``metrics.hierarchical_peer_rows``) for this many ranks per node, or ``peer_rows`` on one
    node (where it is ``p2p``); ``None`` when the metrics hold no placement of that shape."""
    if ranks_per_node == metrics.num_parts:
        return metrics.peer_rows
    recorded = getattr(metrics, "hierarchical_peer_rows", None)
    if recorded is not None and getattr(metrics, "ranks_per_node", None) == ranks_per_node:
        return recorded
    return None

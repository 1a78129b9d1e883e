"""Exact communication and balance metrics of a vertex partition (paper 000 §4.3, Table 2).

Everything is derived from the column-net hypergraph of ``Â``: net ``j`` (the rows that read row
``j`` of a layer input) spans ``λ(n_j)`` parts; its owner ``part[j]`` sends row ``j`` once to each
of the other ``λ(n_j) − 1`` parts. The halo exchange of one SpMM therefore moves exactly
``Σ_j (λ(n_j) − 1)`` rows; these are the numbers training must measure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from torch_geometric.data import Data

from lightning_gnn_dist.data.graph import column_net_pins, sorted_unique
from lightning_gnn_dist.partition.arrays import EdgeView, net_part_masks, row_nnz
from lightning_gnn_dist.partition.placement import Topology, hierarchical_peer_rows

FLOAT32_BYTES = 4


@dataclass(frozen=True)
class PartitionMetrics:
    """Metrics of a ``num_parts``-way vertex partition. Units are rows of a layer input per SpMM
    (one direction) unless stated otherwise.

    Attributes:
        num_parts: P.
        num_nodes: vertices of the graph.
        peer_rows: ``[P, P] int64``; ``peer_rows[p, q]`` rows part ``p`` sends to part ``q``
            (the size of ``S_p``'s block for ``q``, paper 000 eq. 8); zero diagonal.
        part_sizes: ``[P] int64`` owned vertices per part.
        part_nnz: ``[P] int64`` non-zeros of ``Â`` per part (its computational load).
        edge_cut: undirected edges of ``A + Aᵀ`` (no self loops) whose ends lie in different parts.
        ranks_per_node: ranks per node of the placement the metrics were computed for (``None``:
            none given). ``num_parts // ranks_per_node`` nodes, rank ``r`` on node
            ``r // ranks_per_node``.
        hierarchical_peer_rows: ``[P, P] int64`` rows rank ``p`` sends rank ``q`` per SpMM in
            the ``hierarchical`` exchange on that placement
            (:func:`~lightning_gnn_dist.partition.placement.hierarchical_peer_rows`; ``None``
            without a placement).
    """

    num_parts: int
    num_nodes: int
    peer_rows: np.ndarray
    part_sizes: np.ndarray
    part_nnz: np.ndarray
    edge_cut: int
    ranks_per_node: int | None = None
    hierarchical_peer_rows: np.ndarray | None = None

    @property
    def send_rows(self) -> np.ndarray:
        """``[P]`` rows each part sends per SpMM."""
        return self.peer_rows.sum(axis=1)

    @property
    def recv_rows(self) -> np.ndarray:
        """``[P]`` rows each part receives per SpMM: its halo size."""
        return self.peer_rows.sum(axis=0)

    @property
    def halo_rows(self) -> np.ndarray:
        """``[P]`` remote in-neighbours of each part (equal to :attr:`recv_rows`)."""
        return self.recv_rows

    @property
    def send_messages(self) -> np.ndarray:
        """``[P]`` peers each part sends to per SpMM."""
        return (self.peer_rows > 0).sum(axis=1)

    @property
    def recv_messages(self) -> np.ndarray:
        """``[P]`` peers each part receives from per SpMM (``|R_p|``, paper 000 eq. 9)."""
        return (self.peer_rows > 0).sum(axis=0)

    @property
    def total_volume_rows(self) -> int:
        """Connectivity−1 cut ``Σ_j (λ(n_j) − 1)``: rows moved per SpMM over all parts."""
        return int(self.peer_rows.sum())

    @property
    def total_messages(self) -> int:
        return int((self.peer_rows > 0).sum())

    @property
    def imbalance(self) -> float:
        """``max(part_nnz) / mean(part_nnz)``; 1.0 is perfect balance."""
        return float(self.part_nnz.max() / self.part_nnz.mean())

    @property
    def rows_imbalance(self) -> float:
        """``max(part_sizes) / mean(part_sizes)``: the balance of the per-row (dense) work and
        of the feature memory, which :attr:`imbalance` does not show."""
        return float(self.part_sizes.max() / self.part_sizes.mean())

    def summary(self) -> dict[str, float | int]:
        """Flat scalar summary (the ``partition-compare`` JSON keys)."""
        send, msgs = self.send_rows, self.send_messages
        return {
            "num_parts": self.num_parts,
            "num_nodes": self.num_nodes,
            "total_volume_rows": self.total_volume_rows,
            "avg_send_rows": float(send.mean()),
            "max_send_rows": int(send.max()),
            "avg_recv_rows": float(self.recv_rows.mean()),
            "max_recv_rows": int(self.recv_rows.max()),
            "total_messages": self.total_messages,
            "avg_messages": float(msgs.mean()),
            "max_messages": int(msgs.max()),
            "edge_cut": self.edge_cut,
            "imbalance": self.imbalance,
            "rows_imbalance": self.rows_imbalance,
            "max_halo_rows": int(self.halo_rows.max()),
            "min_part_size": int(self.part_sizes.min()),
            "max_part_size": int(self.part_sizes.max()),
        }

    def to_dict(self) -> dict:
        """JSON-serialisable form (inverse: :meth:`from_dict`)."""
        out = asdict(self)
        for key in ("peer_rows", "part_sizes", "part_nnz", "hierarchical_peer_rows"):
            if out[key] is not None:
                out[key] = out[key].tolist()
        if self.ranks_per_node is None:  # metrics without a placement read as before
            del out["ranks_per_node"], out["hierarchical_peer_rows"]
        return out

    @classmethod
    def from_dict(cls, values: dict) -> PartitionMetrics:
        arrays = {
            k: np.asarray(values[k], dtype=np.int64)
            for k in ("peer_rows", "part_sizes", "part_nnz")
        }
        hierarchical = values.get("hierarchical_peer_rows")
        per_node = values.get("ranks_per_node")
        return cls(
            num_parts=int(values["num_parts"]),
            num_nodes=int(values["num_nodes"]),
            edge_cut=int(values["edge_cut"]),
            **arrays,
            ranks_per_node=None if per_node is None else int(per_node),
            hierarchical_peer_rows=None
            if hierarchical is None
            else np.asarray(hierarchical, dtype=np.int64),
        )


def partition_metrics(
    data: Data, assignment: np.ndarray, num_parts: int, ranks_per_node: int | None = None
) -> PartitionMetrics:
    """Compute :class:`PartitionMetrics` exactly and vectorised (``O(nnz log nnz)``).

    Args:
        data: canonical graph (see ``data.graph.canonicalize``).
        assignment: ``[num_nodes] int64`` part of each vertex.
        num_parts: P (parts may be empty).
        ranks_per_node: the placement's ranks per node (a divisor of P): also computes the
            ``hierarchical`` exchange's rows. (default: ``None``, no placement)
    """
    num_nodes = data.num_nodes
    assignment = np.asarray(assignment, dtype=np.int64)
    if assignment.shape != (num_nodes,):
        raise ValueError(f"assignment has shape {assignment.shape}, expected ({num_nodes},)")
    if num_nodes and (assignment.min() < 0 or assignment.max() >= num_parts):
        raise ValueError(f"assignment values must lie in [0, {num_parts})")
    view = EdgeView(data.edge_index, num_nodes)
    peer_rows = _peer_rows(data, view, assignment, num_parts)
    edge_cut = _edge_cut(view, assignment)

    hierarchical = None
    if ranks_per_node is not None:
        if num_parts % ranks_per_node:
            raise ValueError(
                f"ranks_per_node={ranks_per_node} does not divide the {num_parts} parts"
            )
        topology = Topology(num_parts // ranks_per_node, ranks_per_node)
        hierarchical = hierarchical_peer_rows(data, assignment, topology)
    return PartitionMetrics(
        num_parts=num_parts,
        num_nodes=num_nodes,
        ranks_per_node=ranks_per_node,
        hierarchical_peer_rows=hierarchical,
        peer_rows=peer_rows.astype(np.int64),
        part_sizes=np.bincount(assignment, minlength=num_parts).astype(np.int64),
        part_nnz=np.bincount(
            assignment, weights=row_nnz(data.edge_index, num_nodes, view), minlength=num_parts
        ).astype(np.int64),
        edge_cut=edge_cut,
    )


def _peer_rows(data: Data, view: EdgeView, assignment: np.ndarray, num_parts: int) -> np.ndarray:
    """``[P, P]`` rows part ``p`` sends part ``q`` per SpMM: the nets owned by ``p`` that span
    ``q``. Up to 64 parts from one bit mask per net (8 bytes per vertex); above, from the
    distinct ``(net, part)`` pairs (about 40 bytes per edge)."""
    if num_parts <= 64:
        masks = net_part_masks(view, assignment, num_parts)
        peer_rows = np.empty((num_parts, num_parts), dtype=np.int64)
        for q in range(num_parts):
            spans = ((masks >> np.uint64(q)) & np.uint64(1)).astype(bool)
            peer_rows[:, q] = np.bincount(assignment[spans], minlength=num_parts)
        np.fill_diagonal(peer_rows, 0)
        return peer_rows
    nets, pins = column_net_pins(data.edge_index, data.num_nodes)
    # Distinct (net, part) pairs are the connectivity sets Λ(n_j).
    net_part = sorted_unique(nets * num_parts + assignment[pins])
    net, part = net_part // num_parts, net_part % num_parts
    owner = assignment[net]
    remote = part != owner
    return np.bincount(
        owner[remote] * num_parts + part[remote], minlength=num_parts * num_parts
    ).reshape(num_parts, num_parts)


def _edge_cut(view: EdgeView, assignment: np.ndarray) -> int:
    """Undirected edges of ``A + Aᵀ`` (no self loops) whose ends lie in different parts: the
    distinct ``min * N + max`` keys of the cut directed edges (8 bytes per cut edge)."""
    num_nodes = view.num_nodes
    pieces = []
    for src, dst in view.chunks():
        cut = assignment[src] != assignment[dst]
        src, dst = src[cut], dst[cut]
        pieces.append(np.minimum(src, dst) * num_nodes + np.maximum(src, dst))
    if not pieces:
        return 0
    keys = np.concatenate(pieces)
    del pieces
    keys.sort()
    return int(np.count_nonzero(keys[1:] != keys[:-1])) + int(keys.size > 0)


@dataclass(frozen=True)
class LayerBytes:
    """Projected halo-exchange traffic of one layer per training epoch (one full-batch step).

    ``*_total`` is summed over ranks; ``*_max`` is the busiest rank's sent bytes.
    """

    layer: int
    forward_width: int
    backward_width: int
    forward_bytes_total: int
    backward_bytes_total: int
    forward_bytes_max: int
    backward_bytes_max: int


def projected_epoch_bytes(
    metrics: PartitionMetrics,
    exchange_widths: Sequence[int | tuple[int, int]],
    dtype_bytes: int = FLOAT32_BYTES,
) -> list[LayerBytes]:
    """Bytes the halo exchange moves per full-batch epoch, layer by layer.

    Args:
        metrics: the partition's metrics.
        exchange_widths: per layer, the width (columns) of the exchanged rows, either one int
            (same in forward and backward, what an autograd exchange of one tensor does) or a
            ``(forward_width, backward_width)`` pair. Use ``0`` for a direction without exchange
            (e.g. the backward of a first layer whose input needs no gradient).
            :func:`paper_gcn_widths` gives paper 000's convention (eq. 11).
        dtype_bytes: bytes per element. (default: ``4``, float32)
    """
    send = metrics.send_rows
    total, busiest = int(send.sum()), int(send.max())
    layers = []
    for k, width in enumerate(exchange_widths):
        fwd, bwd = (width, width) if isinstance(width, int | np.integer) else width
        layers.append(
            LayerBytes(
                layer=k,
                forward_width=int(fwd),
                backward_width=int(bwd),
                forward_bytes_total=total * int(fwd) * dtype_bytes,
                backward_bytes_total=total * int(bwd) * dtype_bytes,
                forward_bytes_max=busiest * int(fwd) * dtype_bytes,
                backward_bytes_max=busiest * int(bwd) * dtype_bytes,
            )
        )
    return layers


def paper_gcn_widths(dims: Sequence[int]) -> list[tuple[int, int]]:
    """Paper 000 Alg. 1–2 widths for layer dims ``[d_0, ..., d_L]``: layer ``k`` sends rows of
    ``H^{k-1}`` (width ``d_{k-1}``) forward and rows of ``G^k`` (width ``d_k``) backward."""
    if len(dims) < 2:
        raise ValueError(f"need at least input and output widths (got {list(dims)})")
    return [(dims[k - 1], dims[k]) for k in range(1, len(dims))]

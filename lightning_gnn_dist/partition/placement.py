"""Topology-aware rank placement: which parts share a node (issue 23).

Lightning and torchrun number ranks node by node: rank ``r`` runs on node
``r // ranks_per_node``. Part ``p`` trains on rank ``p``, so the part numbering decides which
parts share a node, and with it how many halo rows cross the slow inter-node links. Two ways to
make that number small, both returning an assignment whose part ``p`` belongs on rank ``p``:

* :func:`map_parts_to_nodes` keeps a ``P``-way partition and only renumbers its parts: a small
  graph-mapping problem on the ``P × P`` traffic matrix ``peer_rows`` (greedy growth of each
  node's group, then pairwise swaps while one lowers the inter-node rows).
* :func:`two_level_assignment` partitions twice with the column-net hypergraph model: first into
  nodes (minimising the rows that leave a node), then each node's vertices into its ranks on the
  node's sub-hypergraph.

Every halo row of the point-to-point exchange goes from one rank to another, so the rows crossing
nodes per SpMM are ``Σ_{p, q on different nodes} peer_rows[p, q]`` (:func:`node_traffic`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lightning_gnn_dist.data.graph import column_net_pins, sorted_unique
from lightning_gnn_dist.data.local import relabel_order

PLACEMENTS: tuple[str, ...] = ("naive", "mapped", "two-level")
"""Placement methods: ``"naive"`` (part ``p`` on rank ``p`` as partitioned), ``"mapped"``
(:func:`map_parts_to_nodes`), ``"two-level"`` (:func:`two_level_assignment`)."""


@dataclass(frozen=True)
class Topology:
    """Nodes and ranks per node of a launch (``Trainer(num_nodes=..., devices=...)``).

    Raises:
        ValueError: a count below 1.
    """

    num_nodes: int
    ranks_per_node: int

    def __post_init__(self) -> None:
        for name in ("num_nodes", "ranks_per_node"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1 (got {value!r})")

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.ranks_per_node

    def check_parts(self, num_parts: int) -> None:
        """Refuse a partition into ``num_parts`` parts that is not one part per rank.

        Raises:
            ValueError: ``num_parts`` differs from :attr:`world_size`.
        """
        if self.world_size != num_parts:
            raise ValueError(
                f"a topology of {self.num_nodes} node(s) x {self.ranks_per_node} rank(s) has "
                f"{self.world_size} ranks but num_parts={num_parts}; they must be equal"
            )

    def node_of_rank(self) -> np.ndarray:
        """``[P] int64``: the node each rank runs on (Lightning's and torchrun's numbering)."""
        return np.arange(self.world_size, dtype=np.int64) // self.ranks_per_node


@dataclass(frozen=True)
class NodeTraffic:
    """Halo rows per SpMM split by where they travel (forward direction; backward is the
    transpose, the same totals).

    Attributes:
        inter_rows: ``[P]`` rows each rank sends to ranks on other nodes.
        intra_rows: ``[P]`` rows each rank sends to other ranks on its own node.
    """

    inter_rows: np.ndarray
    intra_rows: np.ndarray

    @property
    def total_inter_rows(self) -> int:
        return int(self.inter_rows.sum())

    @property
    def total_intra_rows(self) -> int:
        return int(self.intra_rows.sum())

    def max_node_inter_rows(self, topology: Topology) -> int:
        """Rows the busiest node sends to other nodes (what its link carries out)."""
        per_node = np.bincount(topology.node_of_rank(), weights=self.inter_rows)
        return int(per_node.max())


def partition_label(method: str, placement: str = "naive") -> str:
    """The name of a placed partition: ``method`` (naive placement) or ``method/placement``
    (``"hypergraph/two-level"``); the keys of the automatic plan's metrics and the method column
    of ``partition-compare --nodes``."""
    return method if placement == "naive" else f"{method}/{placement}"


def places_parts(topology: Topology | None) -> bool:
    """Whether a launch has parts to place: several nodes of several ranks each (with one rank
    per node every placement and ``hierarchical`` move the same rows as naive ``p2p``)."""
    return topology is not None and topology.num_nodes > 1 and topology.ranks_per_node > 1


def node_traffic(peer_rows: np.ndarray, topology: Topology) -> NodeTraffic:
    """Split ``peer_rows`` (``[P, P]``, rows rank ``p`` sends rank ``q`` per SpMM) into the rows
    that cross nodes and those that stay inside one."""
    peer_rows = np.asarray(peer_rows)
    _check_square(peer_rows, topology)
    node = topology.node_of_rank()
    crossing = node[:, None] != node[None, :]
    return NodeTraffic(
        inter_rows=(peer_rows * crossing).sum(axis=1).astype(np.int64),
        intra_rows=(peer_rows * ~crossing).sum(axis=1).astype(np.int64),
    )


def node_rows_summary(
    peer_rows: np.ndarray, hierarchical_rows: np.ndarray, topology: Topology
) -> dict[str, int]:
    """Halo rows per SpMM by level (the ``partition``/``partition-compare`` JSON keys):
    ``inter_node_rows`` and ``intra_node_rows`` of ``p2p`` (``peer_rows``) and
    ``hierarchical_inter_node_rows`` (``hierarchical_rows``, :func:`hierarchical_peer_rows`)."""
    levels = node_traffic(peer_rows, topology)
    return {
        "inter_node_rows": levels.total_inter_rows,
        "intra_node_rows": levels.total_intra_rows,
        "hierarchical_inter_node_rows": node_traffic(hierarchical_rows, topology).total_inter_rows,
    }


def map_parts_to_nodes(peer_rows: np.ndarray, topology: Topology) -> np.ndarray:
    """The node of each part, ``ranks_per_node`` parts per node, with few rows crossing nodes.

    Greedy start: each node in turn takes the unplaced part with the most traffic and then,
    while it has room, the unplaced part with the most traffic to the parts it holds. Then
    Kernighan–Lin style pairwise swaps: the swap of two parts on different nodes that lowers the
    inter-node rows most, until none does. Deterministic; ``O(P²)`` per swap (``P`` parts, not
    vertices).

    Args:
        peer_rows: ``[P, P]`` rows part ``p`` sends part ``q`` per SpMM (``PartitionMetrics``).
        topology: nodes × ranks per node, with ``P`` = its world size.

    Returns:
        ``[P] int64`` node of each part.
    """
    peer_rows = np.asarray(peer_rows, dtype=np.float64)
    _check_square(peer_rows, topology)
    size, capacity = topology.world_size, topology.ranks_per_node
    if topology.num_nodes == 1:
        return np.zeros(size, dtype=np.int64)
    traffic = peer_rows + peer_rows.T
    np.fill_diagonal(traffic, 0.0)
    node = np.full(size, -1, dtype=np.int64)
    for n in range(topology.num_nodes):
        free = node < 0
        first = np.flatnonzero(free)[np.argmax(traffic[free].sum(axis=1))]
        node[first] = n
        for _ in range(capacity - 1):
            free = node < 0
            pull = traffic[:, node == n].sum(axis=1)
            candidates = np.flatnonzero(free)
            node[candidates[np.argmax(pull[candidates])]] = n
    return _swap_refine(traffic, node, topology.num_nodes)


def _swap_refine(traffic: np.ndarray, node: np.ndarray, num_nodes: int) -> np.ndarray:
    """Apply the best improving pairwise swap until none improves (sizes stay as they are)."""
    node = node.copy()
    for _ in range(node.size * node.size):
        # to_node[p, n]: traffic between part p and the parts on node n.
        to_node = np.stack([traffic[:, node == n].sum(axis=1) for n in range(num_nodes)], axis=1)
        own = to_node[np.arange(node.size), node]
        # Gain of swapping p and q (p joins q's node, q joins p's): p's traffic to q's node
        # minus to its own, the same for q, minus their own traffic, which still crosses.
        across = to_node[:, node]  # across[p, q] = traffic of p with q's node
        gain = across - own[:, None] + across.T - own[None, :] - 2 * traffic
        gain[node[:, None] == node[None, :]] = -np.inf
        p, q = np.unravel_index(np.argmax(gain), gain.shape)
        if gain[p, q] <= 1e-9:
            break
        node[p], node[q] = node[q], node[p]
    return node


def mapped_part_to_rank(peer_rows: np.ndarray, topology: Topology) -> np.ndarray:
    """``[P] int64`` rank of each part of a ``P``-way partition placed ``"mapped"``:
    :func:`map_parts_to_nodes` on its traffic ``peer_rows`` (``[P, P]`` rows per SpMM), then
    :func:`renumber_by_node`. The mapped assignment is ``part_to_rank[assignment]``."""
    return renumber_by_node(map_parts_to_nodes(peer_rows, topology), topology)


def renumber_by_node(node_of_part: np.ndarray, topology: Topology) -> np.ndarray:
    """``[P] int64`` new number of each part so that part ``p``'s new number is a rank on node
    ``node_of_part[p]`` (parts keep their relative order within a node)."""
    node_of_part = np.asarray(node_of_part, dtype=np.int64)
    counts = np.bincount(node_of_part, minlength=topology.num_nodes)
    if node_of_part.size != topology.world_size or (counts != topology.ranks_per_node).any():
        raise ValueError(
            f"a placement needs exactly {topology.ranks_per_node} parts on each of "
            f"{topology.num_nodes} nodes (got {counts.tolist()})"
        )
    order = np.argsort(node_of_part, kind="stable")
    new_number = np.empty_like(order)
    new_number[order] = np.arange(order.size)
    return new_number


def two_level_assignment(hypergraph, partitioner, topology: Topology) -> np.ndarray:
    """Partition into nodes, then each node's vertices into its ranks.

    Args:
        hypergraph: the graph's :class:`~lightning_gnn_dist.partition.column_net.ColumnNetHypergraph`
            with the vertex weights to balance.
        partitioner: a :class:`~lightning_gnn_dist.partition.hypergraph.HypergraphPartitioner`
            (its backend, seed, epsilon and refinement are used at both levels).
        topology: nodes × ranks per node.

    Returns:
        ``[num_vertices] int64`` part of each vertex, part ``p`` meant for rank ``p``.
    """
    nodes = partitioner.partition_hypergraph(hypergraph, topology.num_nodes)
    assignment = np.empty(hypergraph.num_vertices, dtype=np.int64)
    for n in range(topology.num_nodes):
        members = np.flatnonzero(nodes == n)
        sub = partitioner.partition_hypergraph(
            hypergraph.restrict(members), topology.ranks_per_node, refine=False
        )
        assignment[members] = n * topology.ranks_per_node + sub
    return assignment


def _check_square(peer_rows: np.ndarray, topology: Topology) -> None:
    size = topology.world_size
    if peer_rows.shape != (size, size):
        raise ValueError(
            f"peer_rows has shape {peer_rows.shape} but the topology has {topology.num_nodes} "
            f"nodes × {topology.ranks_per_node} ranks = {size} ranks; partition into {size} parts"
        )


def choose_gateways(vertex: np.ndarray, rank: np.ndarray, node: np.ndarray) -> np.ndarray:
    """The gateway rank of every ``(vertex, rank)`` pair of the hierarchical exchange.

    The ranks of one node that need one row (pairs with equal ``vertex`` and ``node``) receive it
    once from its owner, through one of them: the ``(vertex mod count)``-th of those ranks in
    ascending order (``count`` of them), a deterministic choice that spreads the forwarding work
    over a node's ranks. Owner and receivers compute it alike from their own halves of the plan.

    Args:
        vertex: ``[n] int64`` relabelled (partition-order) id of the row.
        rank: ``[n] int64`` rank that needs it (each pair once).
        node: ``[n] int64`` that rank's node.

    Returns:
        ``[n] int64`` gateway of each pair, in the input order.
    """
    vertex, rank, node = (np.asarray(a, dtype=np.int64) for a in (vertex, rank, node))
    if vertex.size == 0:
        return np.empty(0, dtype=np.int64)
    order = np.lexsort((rank, vertex, node))
    v, r, n = vertex[order], rank[order], node[order]
    new_group = np.ones(v.size, dtype=bool)
    new_group[1:] = (v[1:] != v[:-1]) | (n[1:] != n[:-1])
    starts = np.flatnonzero(new_group)
    counts = np.diff(np.append(starts, v.size))
    group = np.cumsum(new_group) - 1
    gateway = np.empty_like(vertex)
    gateway[order] = r[starts[group] + v % counts[group]]
    return gateway


def hierarchical_peer_rows(data, assignment: np.ndarray, topology: Topology) -> np.ndarray:
    """``[P, P] int64`` rows rank ``p`` sends rank ``q`` per SpMM (forward) in the hierarchical
    exchange (``exchange="hierarchical"``): each row goes once to every other rank of its
    owner's node that needs it, and once to one gateway (:func:`choose_gateways`) on every other
    node that needs it, which forwards it to the other ranks of its node that need it. Backward
    moves the transpose. Compare ``metrics.peer_rows`` (``p2p``: once per rank that needs it).

    Args:
        data: canonical graph.
        assignment: ``[N] int64`` part of each vertex (part ``p`` on rank ``p``).
        topology: nodes × ranks per node, world size = number of parts.
    """
    size, num_vertices = topology.world_size, data.num_nodes
    assignment = np.asarray(assignment, dtype=np.int64)
    new_to_old, _ = relabel_order(assignment, size)
    new_id = np.empty(num_vertices, dtype=np.int64)
    new_id[new_to_old] = np.arange(num_vertices)
    nets, pins = column_net_pins(data.edge_index, num_vertices)
    pair = sorted_unique(nets * size + assignment[pins])  # (row, rank that needs it)
    row, rank = pair // size, pair % size
    owner = assignment[row]
    keep = rank != owner
    row, rank, owner = row[keep], rank[keep], owner[keep]
    node = topology.node_of_rank()
    local = node[rank] == node[owner]
    rows = np.zeros((size, size), dtype=np.int64)
    np.add.at(rows, (owner[local], rank[local]), 1)
    row, rank, owner = row[~local], rank[~local], owner[~local]
    gateway = choose_gateways(new_id[row], rank, node[rank])
    first = gateway == rank  # one pair per (row, remote node) is the gateway's own
    np.add.at(rows, (owner[first], rank[first]), 1)
    np.add.at(rows, (gateway[~first], rank[~first]), 1)
    return rows

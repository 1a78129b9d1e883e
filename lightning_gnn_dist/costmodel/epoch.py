"""A calibrated cost model of one full-batch GCN training epoch (issue 13).

Per rank ``p`` and epoch (forward + backward, every layer ``k`` with widths ``d_in → d_out``)::

    compute_p = Σ_k  nnz_p · w_k · aggregate_seconds          (SpMM with Â at the exchanged width)
                   + rows_p · d_in · d_out · dense_seconds      (the layer's X·W)
                   + rows_p · d_out · elementwise_seconds       (bias, activation, dropout, loss)
              + step_seconds                                    (fixed work of a training step)
    comm_p    = Σ_k Σ_direction  exchange(sent_p · row_bytes(codec, width), received_p · row_bytes)
                                 + max(messages sent_p, received_p) · latency
    exchange(s, r) = min(s, r) / duplex_bandwidth + (max(s, r) − min(s, r)) / bandwidth
              + gradient all-reduce (ring): 2 (P − 1)/P · parameter bytes / duplex_bandwidth
                                            + 2 (P − 1) · latency
    epoch     = max_p (compute_p · oversubscription + comm_p)

An alpha–beta network (:class:`~lightning_gnn_dist.costmodel.network.Network`): ``latency`` per
message and two bandwidths that ``python -m lightning_gnn_dist probe`` calibrates
(:meth:`Network.from_probe`): ``bandwidth`` of one direction of a link (ping-pong) and
``duplex_bandwidth``, per direction while every link carries data both ways (the probe's
all-to-all) — what an exchange, an all-to-all and a ring see while every rank sends and
receives at once; what one direction has left to move after the other is done goes at the
one-way ``bandwidth`` (:meth:`Network.exchange_seconds`).

``nnz_p``/``rows_p`` are the partition's ``part_nnz``/``part_sizes``; the rows each rank sends
come from the exchange mode's own prediction (``predicted_rows_sent``/``predicted_peer_rows``,
the numbers the counters measure exactly), so every exchange mode that predicts per rank pair is
covered: ``p2p``, and ``cached`` as its default ``p2p`` base (an upper bound: every round
sent). ``broadcast`` runs one collective per root in turn, so every rank waits for all of them,
each priced as gloo runs it (``B_q = rows_q · row_bytes``)::

    forward  (binomial-tree broadcast):  Σ_q ⌈log2 P⌉ · B_q / bandwidth + P ⌈log2 P⌉ · latency
    backward (lossless: ring reduce-scatter, then gather into the root):
             Σ_q (P − 1)/P · B_q · (1 / duplex_bandwidth + 1 / bandwidth) + 2 P (P − 1) · latency
    backward (lossy codec: every peer sends its encoded block to the root):
             Σ_q (P − 1) · B_q / bandwidth + P (P − 1) · latency

(the root's link carries ``⌈log2 P⌉`` blocks of a binomial tree, not the ``P − 1`` of a flat
one: at 4 emulated nodes the flat tree over-predicted broadcast's epoch 1.5×). The vertex-cut
modes (``cd-*``, ``0c``) run on other metrics and are not modelled. Local work is not
overlapped with messages in the model (an upper bound for ``p2p``).

``row_bytes(codec, width)`` is ``width · dtype_bytes`` without a codec, else the codec's bytes
per row (:mod:`lightning_gnn_dist.comm.codec`: payload plus the integer codecs' row header).

With a ``topology`` (nodes × ranks per node) the halo rows of ``p2p``, ``cached`` and
``hierarchical`` are split by where they travel (:func:`~lightning_gnn_dist.partition.placement.node_traffic`)
and priced on a :class:`~lightning_gnn_dist.costmodel.network.TwoLevelNetwork`::

    intra_p = intra.exchange(intra sent_p · row_bytes, intra received_p · row_bytes)
              + max(intra messages sent_p, received_p) · intra.latency
    inter_p = inter.exchange(Σ_{r on p's node} inter sent_r · row_bytes, Σ inter received_r · row_bytes)
              + max(inter messages sent_p, received_p) · inter.latency     (the node's NIC is shared)
    comm_p += max(intra_p, inter_p)   (p2p, cached: both links at once)
              intra_p + inter_p       (hierarchical: the intra-node hop follows the inter-node one)

``broadcast`` runs the same algorithms over the ``P`` ranks, a node's ``R`` ranks adjacent: the
tree's first ``⌈log2 R⌉`` rounds stay in the node and each later one sends ``R`` blocks through a
node's link; the reduce's ring crosses each node's link once each way and its gather brings
``(P − R)/P`` of the block through the root node's link (:func:`_broadcast_two_level`).
``rdm``'s all-to-alls are split like ``p2p``'s rows (``max(intra_p, inter_p)``, the node's NIC
shared by its ranks); its order is picked on the inter-node link. The gradient all-reduce runs
at the inter-node link's rates.

``oversubscription`` is ``P / cores`` when more ranks than cores share one machine (this
repository's 2-core test machine), else 1. Costs that :func:`~.calibrate.calibrate` measured on
every rank at once, as the ranks run, already include that sharing: predict with them without
``cores``.

``rdm`` (paper 003) has no halo: per rank, every SpMM of the order's plan costs
``nnz_panel · f_j · aggregate_seconds / 2`` (one of the two products ``aggregate_seconds``
covers) on its column block ``f_j`` of its row panel's non-zeros, the GEMMs and element-wise work
are those above, and every redistribution or panel exchange costs
``exchange(sent_p · dtype_bytes, received_p · dtype_bytes) + peers · latency`` (one
``all_to_all_single`` at a time). The order is ``rdm_order`` or the cheapest Pareto order under
this same network and SpMM cost (:func:`~lightning_gnn_dist.comm.rdm_plan.order_costs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from lightning_gnn_dist.comm import resolve_exchange_mode
from lightning_gnn_dist.comm.codec import ADAPTIVE, get_codec, row_bytes
from lightning_gnn_dist.comm.codec_policy import CodecPolicy
from lightning_gnn_dist.comm.hierarchical import predicted_hierarchical_rows
from lightning_gnn_dist.comm.rdm import check_codec_option
from lightning_gnn_dist.comm.rdm_plan import (
    LayerShape,
    RDMLayout,
    order_costs,
    pareto,
    plan_network,
)
from lightning_gnn_dist.costmodel.network import NETWORKS, Network, TwoLevelNetwork
from lightning_gnn_dist.partition.metrics import FLOAT32_BYTES, PartitionMetrics
from lightning_gnn_dist.partition.placement import Topology, node_traffic
from lightning_gnn_dist.partition.work import ComputeCosts, gcn_layers


@dataclass(frozen=True)
class EpochEstimate:
    """Predicted seconds of one epoch, per rank.

    Attributes:
        compute_seconds: ``[P]`` local work (after oversubscription).
        comm_seconds: ``[P]`` halo exchange and gradient all-reduce.
        bytes_sent: ``[P]`` halo bytes each rank sends per epoch.
        inter_node_bytes: ``[P]`` of those, the bytes sent to ranks on other nodes (``None``
            without a topology).
    """

    compute_seconds: np.ndarray
    comm_seconds: np.ndarray
    bytes_sent: np.ndarray = field(repr=False)
    inter_node_bytes: np.ndarray | None = field(default=None, repr=False)

    @property
    def rank_seconds(self) -> np.ndarray:
        """``[P]`` compute plus communication per rank."""
        return self.compute_seconds + self.comm_seconds

    @property
    def epoch_seconds(self) -> float:
        """The slowest rank's seconds: the epoch's."""
        return float(self.rank_seconds.max())


def predict_epoch(
    metrics: PartitionMetrics,
    dims: Sequence[int],
    costs: ComputeCosts,
    network: Network | TwoLevelNetwork | str = "infiniband",
    exchange: str = "p2p",
    cores: int | None = None,
    dtype_bytes: int = FLOAT32_BYTES,
    codec: str | dict | CodecPolicy = "fp32",
    rdm_order: str | None = None,
    replication: int | None = None,
    topology: Topology | None = None,
) -> EpochEstimate:
    """Predict one full-batch epoch of a GCN with widths ``dims`` on the partition ``metrics``.

    Args:
        metrics: the partition's exact metrics (``PartitionStore.metrics``, ``partition_metrics``).
        dims: layer widths ``[d_0, ..., d_L]``.
        costs: per-unit compute costs (:func:`calibrate` measures them).
        network: a :class:`Network` or a preset name in :data:`NETWORKS`; with a ``topology``
            also a :class:`TwoLevelNetwork` (a single network serves both levels).
        exchange: exchange mode (``p2p``, ``broadcast``, ``cached``, ``hierarchical``, ``rdm``;
            ``cached`` is predicted as ``p2p`` sending every round; ``hierarchical`` needs
            metrics with its rows for the topology's ranks per node:
            ``partition_metrics(..., ranks_per_node=R)`` or a placed store's).
        cores: cores the ranks share when they run on one machine (scales compute by
            ``P / cores`` when ``P > cores``); ``None``: one core per rank.
        dtype_bytes: bytes per element. (default: ``4``)
        codec: the exchange's codec, as ``GNNStrategy(codec=...)`` (layer ``k`` is
            ``"convs.k"``, as in :class:`~lightning_gnn_dist.lightning.NodeClassifier`); not
            ``"adaptive"``, whose bit-widths are chosen while training (predict its int4 and int8
            bounds instead). (default: ``"fp32"``)
        rdm_order: ``rdm``'s order (``None``: the model's pick). (default: ``None``)
        replication: ``rdm``'s ranks per row panel of ``Â`` (``None``: ``P``).
        topology: nodes × ranks per node: halo rows are priced per level (module docstring).
            (default: ``None``, every rank pair on ``network``)

    Raises:
        ValueError: unknown network preset, or an exchange mode without a per-rank-pair
            prediction on a vertex partition.
    """
    if isinstance(network, str):
        if network not in NETWORKS:
            raise ValueError(
                f"unknown network {network!r}; choose one of {', '.join(sorted(NETWORKS))} "
                "or pass a Network(bandwidth_bytes_per_s=..., latency_s=...)"
            )
        network = NETWORKS[network]
    levels = _levels(network, topology, metrics.num_parts)
    if levels is not None:
        network = levels.inter_node  # the all-reduce's (and rdm's) bottleneck
    cls, _ = resolve_exchange_mode(exchange)
    if exchange == "rdm":
        check_codec_option(CodecPolicy.coerce(codec))
        return _predict_rdm(
            metrics,
            dims,
            costs,
            network,
            cores,
            dtype_bytes,
            rdm_order,
            replication,
            levels,
            topology,
        )
    if cls.partition_kind != "vertex":
        raise ValueError(
            "the cost model covers the vertex-partition modes p2p, broadcast, cached and "
            f"hierarchical, not {exchange!r}; predict {exchange!r} from its measured bytes instead"
        )
    base = "p2p" if exchange == "cached" else exchange  # the cached mode sends at most its base's
    cls, _ = resolve_exchange_mode(base)
    policy = CodecPolicy.coerce(codec)
    layers = gcn_layers(dims)
    P = metrics.num_parts
    rows, nnz = metrics.part_sizes.astype(float), metrics.part_nnz.astype(float)
    compute = sum(
        nnz * layer.aggregate_width * costs.aggregate_seconds
        + rows * layer.d_in * layer.d_out * costs.dense_seconds
        + rows * layer.d_out * costs.elementwise_seconds
        for layer in layers
    )
    compute = compute + costs.step_seconds
    if cores is not None and P > cores:
        compute = compute * (P / cores)
    comm = np.zeros(P)
    bytes_sent = np.zeros(P)
    inter_bytes = np.zeros(P) if topology is not None else None
    for k, layer in enumerate(layers):
        for direction, width in (
            ("forward", layer.forward_width),
            ("backward", layer.backward_width),
        ):
            if width == 0 or P == 1:
                continue
            name = policy.lookup(f"convs.{k}", direction)
            if name == ADAPTIVE:
                raise ValueError(
                    "the cost model cannot predict codec='adaptive' (its bit-widths are chosen "
                    "while training); predict with 'int4' and 'int8' for its bounds"
                )
            element = row_bytes(name, width, dtype_bytes)
            if base == "hierarchical":
                peer = _hierarchical_rows(metrics, topology)
                peer = peer if direction == "forward" else peer.T
                sent = peer.sum(axis=1).astype(float)
            else:
                sent = cls.predicted_rows_sent(metrics, direction).astype(float)
                peer = cls.predicted_peer_rows(metrics, direction)
            bytes_sent += sent * element
            if inter_bytes is not None:
                inter_bytes += node_traffic(peer, topology).inter_rows * element
            if base == "broadcast":  # one root after another: all ranks wait for every block
                lossless = get_codec(name).lossless
                if levels is None:
                    comm += _broadcast_seconds(
                        rows.sum() * element, network, P, direction, lossless
                    )
                else:
                    comm += _broadcast_two_level(
                        rows.sum() * element, levels, topology, direction, lossless
                    )
                continue
            if levels is not None:
                comm += _two_level_seconds(
                    peer, element, levels, topology, sequential=base == "hierarchical"
                )
                continue
            received = peer.sum(axis=0).astype(float)
            comm += network.exchange_seconds(
                sent * element, received * element, _message_counts(peer)
            )
    comm += _allreduce_seconds(layers, network, P, dtype_bytes)
    return EpochEstimate(np.asarray(compute, dtype=float), comm, bytes_sent, inter_bytes)


def _message_counts(rows: np.ndarray) -> np.ndarray:
    """``[P]`` messages each rank waits for in an exchange of the ``[P, P]`` row matrix
    (``rows[p, q]``: rows ``p`` sends ``q``): the larger of the peers it sends to and receives
    from."""
    return np.maximum((rows > 0).sum(axis=1), (rows > 0).sum(axis=0))


def _allreduce_seconds(layers, network: Network, size: int, dtype_bytes: int) -> float:
    """The gradient all-reduce (a ring: every link busy both ways)."""
    if size == 1:
        return 0.0
    parameters = sum(layer.d_in * layer.d_out + layer.d_out for layer in layers)
    return float(
        network.seconds(2 * (size - 1) / size * parameters * dtype_bytes, 2 * (size - 1), True)
    )


def tree_rounds(size: int) -> int:
    """Rounds of a binomial-tree broadcast over ``size`` ranks: ``⌈log2 size⌉`` (the root
    sends its block once per round, so its link carries that many blocks)."""
    return int(size - 1).bit_length()


def _broadcast_seconds(
    block_bytes: float, network: Network, size: int, direction: str, lossless: bool
) -> float:
    """Seconds of one ``broadcast`` direction on one network: every root's block
    (``block_bytes`` summed over roots) in turn, as gloo runs the collectives. Forward, a
    binomial tree: the root's link carries ``⌈log2 P⌉`` blocks. Backward, a lossless reduce:
    a ring reduce-scatter (``(P − 1)/P`` of the block on every link, both ways) then a gather
    into the root (``(P − 1)/P`` more into its link); a lossy codec: every peer sends its encoded
    block to the root, whose link takes ``P − 1`` blocks."""
    if direction == "forward":
        rounds = tree_rounds(size)
        return float(network.seconds(rounds * block_bytes, size * rounds))
    if lossless:
        share = (size - 1) / size * block_bytes
        scatter = network.seconds(share, size * (size - 1), duplex=True)
        return float(scatter + network.seconds(share, size * (size - 1)))
    return float(network.seconds((size - 1) * block_bytes, size * (size - 1)))


def _levels(
    network: Network | TwoLevelNetwork, topology: Topology | None, num_parts: int
) -> TwoLevelNetwork | None:
    """The two levels to price halo rows on (``None``: one network for every pair)."""
    if topology is None:
        if isinstance(network, TwoLevelNetwork):
            raise ValueError(
                "a TwoLevelNetwork needs the topology: pass topology=Topology(num_nodes, "
                "ranks_per_node)"
            )
        return None
    if topology.world_size != num_parts:
        raise ValueError(
            f"the topology has {topology.world_size} ranks ({topology.num_nodes} x "
            f"{topology.ranks_per_node}) but the partition {num_parts} parts"
        )
    return network if isinstance(network, TwoLevelNetwork) else TwoLevelNetwork(network, network)


def _hierarchical_rows(metrics: PartitionMetrics, topology: Topology | None) -> np.ndarray:
    per_node = topology.ranks_per_node if topology is not None else metrics.ranks_per_node
    rows = None if per_node is None else predicted_hierarchical_rows(metrics, per_node)
    if rows is None:
        raise ValueError(
            f"the metrics hold no hierarchical rows for {per_node} ranks per node: compute them "
            "with partition_metrics(data, assignment, P, ranks_per_node=R) or use a store placed "
            "for that topology"
        )
    return rows


def _two_level_seconds(
    peer: np.ndarray,
    element: int,
    levels: TwoLevelNetwork,
    topology: Topology,
    sequential: bool,
) -> np.ndarray:
    """``[P]`` seconds of one exchange of ``peer`` rows (``[P, P]``) of ``element`` bytes each:
    intra-node pairs on ``levels.intra_node``; inter-node pairs on their node's shared link."""
    node = topology.node_of_rank()
    cross = node[:, None] != node[None, :]
    intra, inter = np.where(cross, 0, peer), np.where(cross, peer, 0)

    element = float(element)
    intra_s = levels.intra_node.exchange_seconds(
        intra.sum(axis=1) * element, intra.sum(axis=0) * element, _message_counts(intra)
    )
    out = np.bincount(node, weights=inter.sum(axis=1), minlength=topology.num_nodes)
    into = np.bincount(node, weights=inter.sum(axis=0), minlength=topology.num_nodes)
    inter_s = levels.inter_node.exchange_seconds(
        out[node] * element, into[node] * element, _message_counts(inter)
    )
    return intra_s + inter_s if sequential else np.maximum(intra_s, inter_s)


def _broadcast_two_level(
    block_bytes: float,
    levels: TwoLevelNetwork,
    topology: Topology,
    direction: str,
    lossless: bool,
) -> float:
    """Seconds of one ``broadcast`` direction with ``R`` ranks on each of the nodes (the
    one-level algorithms of :func:`_broadcast_seconds` over all ``P`` ranks, ranks of a node
    adjacent). Forward: the tree's first ``⌈log2 R⌉`` rounds stay in the node, each later
    round has the ``R`` ranks of a sending node send through its link at once. Backward: the
    ring crosses each node's link once each way (in parallel with the node's own hops), the
    gather brings ``(P − R)/P`` of the block through the root node's link and ``(R − 1)/P``
    within it; a lossy codec sends ``P − R`` encoded blocks through that link and ``R − 1``
    within the node. One rank per node: :func:`_broadcast_seconds` on the inter-node link."""
    size, per_node = topology.world_size, topology.ranks_per_node
    inter, intra = levels.inter_node, levels.intra_node
    if per_node == 1:
        return _broadcast_seconds(block_bytes, inter, size, direction, lossless)
    if direction == "forward":
        local = tree_rounds(per_node)
        remote = per_node * (tree_rounds(size) - local)
        return float(
            inter.seconds(remote * block_bytes, size * remote)
            + intra.seconds(local * block_bytes, size * local)
        )
    if lossless:
        share = (size - 1) / size * block_bytes
        ring = max(
            inter.seconds(share, size * (size - 1), duplex=True),
            intra.seconds(share, size * (size - 1), duplex=True),
        )
        gather = max(
            inter.seconds((size - per_node) / size * block_bytes, size * (size - per_node)),
            intra.seconds((per_node - 1) / size * block_bytes, size * (per_node - 1)),
        )
        return float(ring + gather)
    return float(
        max(
            inter.seconds((size - per_node) * block_bytes, size * (size - per_node)),
            intra.seconds((per_node - 1) * block_bytes, size * (per_node - 1)),
        )
    )


def rdm_pick(
    metrics: PartitionMetrics,
    dims: Sequence[int],
    costs: ComputeCosts,
    network: Network,
    replication: int | None = None,
    dtype_bytes: int = FLOAT32_BYTES,
) -> str:
    """``rdm``'s order for a GCN with widths ``dims``: the cheapest Pareto order with this
    network and SpMM cost."""
    layout = _rdm_layout(metrics, replication)
    candidates = order_costs(
        [LayerShape(layer.d_in, layer.d_out) for layer in gcn_layers(dims)],
        layout,
        int(metrics.part_nnz.sum()),
        element_seconds=dtype_bytes / network.duplex_bandwidth,
        sparse_op_seconds=costs.aggregate_seconds / 2,
        latency_seconds=network.latency_s,
    )
    return pareto(candidates)[0].order


def _rdm_layout(metrics: PartitionMetrics, replication: int | None) -> RDMLayout:
    offsets = np.concatenate([[0], np.cumsum(metrics.part_sizes)])
    return RDMLayout(tuple(int(v) for v in offsets), replication or metrics.num_parts)


def _predict_rdm(
    metrics, dims, costs, network, cores, dtype_bytes, order, replication, levels, topology
):
    layers = gcn_layers(dims)
    layout = _rdm_layout(metrics, replication)
    P = metrics.num_parts
    order = order or rdm_pick(metrics, dims, costs, network, replication, dtype_bytes)
    plans = plan_network([LayerShape(layer.d_in, layer.d_out) for layer in layers], order)
    rows = metrics.part_sizes.astype(float)
    panel_nnz = np.array(
        [metrics.part_nnz[list(layout.group(p))].sum() for p in range(P)], dtype=float
    )
    blocks = [layout.block(p) for p in range(P)]
    compute = sum(
        rows * layer.d_in * layer.d_out * costs.dense_seconds
        + rows * layer.d_out * costs.elementwise_seconds
        for layer in layers
    )
    comm, bytes_sent = np.zeros(P), np.zeros(P)
    for plan in plans:
        for pas in (plan.forward, plan.backward):
            for width in pas.spmm_widths:
                split = np.array(layout.column_split(width), dtype=float)[blocks]
                compute = compute + panel_nnz * split * costs.aggregate_seconds / 2
            transfers = [layout.elements_sent(m.to, m.width) for m in pas.moves]
            if layout.num_panels > 1:
                transfers += [layout.gather_elements_sent(w) for w in pas.spmm_widths]
            for sent in transfers:
                out, into = sent.sum(axis=1) * dtype_bytes, sent.sum(axis=0) * dtype_bytes
                if levels is not None:  # one all-to-all: both levels at once
                    comm += _two_level_seconds(sent, dtype_bytes, levels, topology, False)
                else:
                    comm += network.exchange_seconds(out, into, _message_counts(sent))
                bytes_sent += out
    compute = np.asarray(compute, dtype=float) + costs.step_seconds
    if cores is not None and P > cores:
        compute = compute * (P / cores)
    comm += _allreduce_seconds(layers, network, P, dtype_bytes)
    return EpochEstimate(compute, comm, bytes_sent)

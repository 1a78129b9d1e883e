"""A calibrated cost model of one full-batch GCN training epoch (issue 13).

Per rank ``p`` and epoch (forward + backward, every layer ``k`` with widths ``d_in → d_out``)::

    compute_p = Σ_k  nnz_p · w_k · aggregate_seconds          (SpMM with Â at the exchanged width)
                   + rows_p · d_in · d_out · dense_seconds      (the layer's X·W)
                   + rows_p · d_out · elementwise_seconds       (bias, activation, dropout, loss)
              + step_seconds                                    (fixed work of a training step)
    comm_p    = Σ_k Σ_direction  max(sent_p, received_p) · width · dtype_bytes / bandwidth
                                 + max(messages sent_p, received_p) · latency
              + gradient all-reduce (ring): 2 (P − 1)/P · parameter bytes / bandwidth
                                            + 2 (P − 1) · latency
    epoch     = max_p (compute_p · oversubscription + comm_p)

``nnz_p``/``rows_p`` are the partition's ``part_nnz``/``part_sizes``; the rows each rank sends
come from the exchange mode's own prediction (``predicted_rows_sent``/``predicted_peer_rows``,
the numbers the counters measure exactly), so every exchange mode that predicts per rank pair is
covered: ``p2p``, and ``cached`` as its default ``p2p`` base (an upper bound: every round
sent). ``broadcast``
runs one collective per root in turn, so every rank waits for all of them:
``Σ_q (P − 1) · rows_q · width · dtype_bytes / bandwidth + (P − 1) · latency`` per direction
(a flat tree). The vertex-cut modes (``cd-*``, ``0c``) run on other metrics and are not
modelled. Local work is not overlapped with messages in the model (an upper bound for ``p2p``).

``oversubscription`` is ``P / cores`` when more ranks than cores share one machine (this
repository's 2-core test machine), else 1.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from lightning_gnn_dist.comm.exchange import resolve_exchange_mode
from lightning_gnn_dist.partition.metrics import FLOAT32_BYTES, PartitionMetrics


@dataclass(frozen=True)
class ComputeCosts:
    """Seconds per unit of local work, forward and backward together.

    Attributes:
        aggregate_seconds: per non-zero of ``Â`` per aggregated column.
        dense_seconds: per row per ``d_in · d_out`` multiply-add of a layer's weight.
        elementwise_seconds: per row per output column (bias, ReLU, dropout, loss).
        step_seconds: fixed seconds per epoch and rank, whatever the graph's size (the training
            loop's own work, the optimiser step); :func:`calibrate` leaves it 0, measure it with
            a fit on a tiny graph (``benchmarks/cost_model.py`` does).
    """

    aggregate_seconds: float
    dense_seconds: float
    elementwise_seconds: float = 0.0
    step_seconds: float = 0.0


@dataclass(frozen=True)
class Network:
    """Point-to-point network parameters.

    Attributes:
        bandwidth_bytes_per_s: per-rank link bandwidth (bytes/s). (default: ``12.5e9``, a
            100 Gb/s InfiniBand-class link)
        latency_s: seconds per message. (default: ``2e-6``)
    """

    bandwidth_bytes_per_s: float = 12.5e9
    latency_s: float = 2e-6

    def seconds(self, num_bytes: np.ndarray | float, messages: np.ndarray | float) -> np.ndarray:
        """Transfer time of ``num_bytes`` in ``messages`` messages."""
        return np.asarray(num_bytes) / self.bandwidth_bytes_per_s + np.asarray(messages) * float(
            self.latency_s
        )


NETWORKS: dict[str, Network] = {
    "infiniband": Network(),
    # gloo over TCP on the loopback device of one machine: an assumed order of magnitude, not
    # calibrated (on the 2-core machine the halo bytes are small next to compute either way)
    "loopback": Network(bandwidth_bytes_per_s=1.0e9, latency_s=50e-6),
}
"""Network presets by name: ``infiniband`` (default), ``loopback`` (this machine)."""


@dataclass(frozen=True)
class GCNLayer:
    """One ``DistGCNConv``: widths and the columns it exchanges and aggregates."""

    d_in: int
    d_out: int
    forward_width: int
    backward_width: int

    @property
    def aggregate_width(self) -> int:
        """GCN aggregates at the narrower width (X·W first when the layer narrows)."""
        return min(self.d_in, self.d_out)


def gcn_layers(dims: Sequence[int]) -> list[GCNLayer]:
    """Layers of a GCN with widths ``dims = [d_0, ..., d_L]`` (``--widths 64,16,8``).

    ``DistGCNConv`` exchanges ``min(d_in, d_out)`` columns both ways; the first layer has no
    backward exchange when it widens (it then exchanges the raw input, which needs no gradient).

    Raises:
        ValueError: fewer than two widths, or a width below 1.
    """
    dims = [int(d) for d in dims]
    if len(dims) < 2 or min(dims) < 1:
        raise ValueError(
            f"widths must be at least two positive integers [d_in, ..., d_out] (got {dims})"
        )
    layers = []
    for k in range(1, len(dims)):
        d_in, d_out = dims[k - 1], dims[k]
        width = min(d_in, d_out)
        backward = 0 if k == 1 and d_out > d_in else width
        layers.append(GCNLayer(d_in, d_out, width, backward))
    return layers


@dataclass(frozen=True)
class EpochEstimate:
    """Predicted seconds of one epoch, per rank.

    Attributes:
        compute_seconds: ``[P]`` local work (after oversubscription).
        comm_seconds: ``[P]`` halo exchange and gradient all-reduce.
        bytes_sent: ``[P]`` halo bytes each rank sends per epoch.
    """

    compute_seconds: np.ndarray
    comm_seconds: np.ndarray
    bytes_sent: np.ndarray = field(repr=False)

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
    network: Network | str = "infiniband",
    exchange: str = "p2p",
    cores: int | None = None,
    dtype_bytes: int = FLOAT32_BYTES,
) -> EpochEstimate:
    """Predict one full-batch epoch of a GCN with widths ``dims`` on the partition ``metrics``.

    Args:
        metrics: the partition's exact metrics (``PartitionStore.metrics``, ``partition_metrics``).
        dims: layer widths ``[d_0, ..., d_L]``.
        costs: per-unit compute costs (:func:`calibrate` measures them).
        network: a :class:`Network` or a preset name in :data:`NETWORKS`.
        exchange: exchange mode (``p2p``, ``broadcast``, ``cached``; ``cached`` is predicted as
            ``p2p`` sending every round).
        cores: cores the ranks share when they run on one machine (scales compute by
            ``P / cores`` when ``P > cores``); ``None``: one core per rank.
        dtype_bytes: bytes per element. (default: ``4``)

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
    cls, _ = resolve_exchange_mode(exchange)
    if cls.partition_kind != "vertex":
        raise ValueError(
            f"the cost model covers the vertex-partition modes p2p, broadcast and cached, not "
            f"{exchange!r}; predict {exchange!r} from its measured bytes instead"
        )
    base = "p2p" if exchange == "cached" else exchange  # the cached mode sends at most its base's
    cls, _ = resolve_exchange_mode(base)
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
    for layer in layers:
        for direction, width in (
            ("forward", layer.forward_width),
            ("backward", layer.backward_width),
        ):
            if width == 0 or P == 1:
                continue
            element = width * dtype_bytes
            sent = cls.predicted_rows_sent(metrics, direction).astype(float)
            bytes_sent += sent * element
            if base == "broadcast":  # one root after another: all ranks wait for every block
                comm += float(network.seconds((P - 1) * rows.sum() * element, P * (P - 1)))
                continue
            peer = cls.predicted_peer_rows(metrics, direction)
            received = peer.sum(axis=0).astype(float)
            messages = np.maximum((peer > 0).sum(axis=1), (peer > 0).sum(axis=0))
            comm += network.seconds(np.maximum(sent, received) * element, messages)
    if P > 1:
        parameters = sum(layer.d_in * layer.d_out + layer.d_out for layer in layers)
        comm += float(network.seconds(2 * (P - 1) / P * parameters * dtype_bytes, 2 * (P - 1)))
    return EpochEstimate(np.asarray(compute, dtype=float), comm, bytes_sent)


def calibrate(
    dims: Sequence[int],
    num_rows: int = 20_000,
    nnz_per_row: int = 10,
    repeats: int = 5,
    seed: int = 0,
) -> ComputeCosts:
    """Measure :class:`ComputeCosts` on this machine for a GCN with widths ``dims``.

    Times (median of ``repeats``, after one warm-up) the model's own operations, forward and
    backward, on a random graph of ``num_rows`` rows and ``nnz_per_row`` non-zeros per row:
    the aggregation of ``lightning_gnn_dist.nn.context.aggregate`` at each layer's aggregated
    width, each layer's ``Linear``, and bias + ReLU + dropout on its output; each cost is the
    summed time over the layers divided by the summed units. Takes about a second.

    Args:
        dims: layer widths ``[d_0, ..., d_L]``.
        num_rows: rows of the calibration graph.
        nnz_per_row: non-zeros per row of the calibration graph.
        repeats: timed repetitions per operation.
        seed: seed of the calibration graph and features.
    """
    from lightning_gnn_dist.nn.context import aggregate

    layers = gcn_layers(dims)
    generator = torch.Generator().manual_seed(seed)
    nnz = num_rows * nnz_per_row
    edges = torch.randint(0, num_rows, (2, nnz), generator=generator)
    weight = torch.rand(nnz, generator=generator)

    def timed(step) -> float:
        step()
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            step()
            seconds.append(time.perf_counter() - start)
        return float(np.median(seconds))

    agg = dense = elementwise = 0.0
    agg_units = dense_units = elementwise_units = 0
    for layer in layers:
        width = layer.aggregate_width
        h = torch.randn(num_rows, width, generator=generator, requires_grad=True)
        agg += timed(lambda h=h: aggregate(h, edges, weight, num_rows).sum().backward())
        agg_units += nnz * width
        linear = torch.nn.Linear(layer.d_in, layer.d_out, bias=False)
        x = torch.randn(num_rows, layer.d_in, generator=generator, requires_grad=True)
        dense += timed(lambda x=x, linear=linear: linear(x).sum().backward())
        dense_units += num_rows * layer.d_in * layer.d_out
        y = torch.randn(num_rows, layer.d_out, generator=generator, requires_grad=True)
        bias = torch.zeros(layer.d_out, requires_grad=True)
        elementwise += timed(
            lambda y=y, bias=bias: (
                torch.nn.functional.dropout(torch.relu(y + bias), 0.5).sum().backward()
            )
        )
        elementwise_units += num_rows * layer.d_out
    return ComputeCosts(agg / agg_units, dense / dense_units, elementwise / elementwise_units)

"""Measure the network the ranks run on and fit the cost model's :class:`Network` to it.

:func:`probe_network` is collective (every rank of the process group calls it). It times, over
``torch.distributed`` (gloo on CPU, NCCL on GPUs), transfers of growing sizes and fits
``seconds = latency + bytes / bandwidth`` (:func:`~lightning_gnn_dist.costmodel.network.
fit_network`) at two levels and for one collective:

* ``inter_node``: ping-pong between rank 0 and the first rank on another node (one-way time =
  round trip ÷ 2); the link the halo exchange crosses between nodes;
* ``intra_node``: ping-pong between rank 0 and another rank on its own node (shared memory or
  loopback on a real machine);
* ``all_to_all``: every rank sends ``size`` bytes to every other at once
  (:func:`~lightning_gnn_dist.comm.messages.all_to_all`, the pattern of every exchange: on
  gloo one message per peer, receives posted first); the bytes of the fit are what one rank
  sends to the others, ``(P − 1) · size``, so its bandwidth is the per-rank bandwidth when every
  link is busy both ways (the cost model's duplex bandwidth: :meth:`Network.from_probe`), and
  its latency is per collective, not per message. Its sizes stop at ``all_to_all_max_bytes``
  (4 MiB, once the times show the bandwidth), the size of a halo exchange's messages.

A level that the placement of the ranks does not have (one node, one rank per node) is ``None``.
Sizes grow ×4 until the next transfer would take more than ``max_seconds`` (the probe stays
short on slow links) and the last one took ten times the smallest one's time (so the bandwidth
shows); small sizes are repeated more (up to 100 times: enough transfers
for a median that a busy machine's scheduling hiccups do not move).
``python -m lightning_gnn_dist probe`` runs it under ``torchrun`` and writes the JSON that
:meth:`Network.from_json` reads.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from lightning_gnn_dist.comm.messages import all_to_all
from lightning_gnn_dist.costmodel.network import Network, fit_network

#: Bytes per transfer, smallest first (64 B .. 64 MiB, ×4 steps).
DEFAULT_SIZES = tuple(64 * 4**k for k in range(11))
#: Largest all-to-all the probe times by default (bytes one rank sends to the others).
ALL_TO_ALL_MAX_BYTES = 4 * 2**20
LEVELS = ("inter_node", "intra_node", "all_to_all")


@dataclass(frozen=True)
class LevelMeasurement:
    """One level's transfers and the fitted network.

    Attributes:
        ranks: the two ranks of a ping-pong; ``None`` for the all-to-all.
        sizes: ``[n]`` bytes of each measured transfer (one direction; all-to-all: bytes one
            rank sends to the others).
        seconds: ``[n]`` median seconds per transfer (one-way; all-to-all: the slowest rank's).
        network: the fit.
    """

    ranks: tuple[int, int] | None
    sizes: list[int]
    seconds: list[float]
    network: Network

    def to_dict(self) -> dict:
        return {
            **self.network.to_dict(),
            "ranks": list(self.ranks) if self.ranks is not None else None,
            "sizes": self.sizes,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class NetworkProbe:
    """What :func:`probe_network` measured.

    Attributes:
        world_size: ranks.
        node_of_rank: ``[world_size]`` node of each rank.
        levels: ``inter_node``, ``intra_node``, ``all_to_all`` → :class:`LevelMeasurement`
            (``None`` where the placement has no such pair).
        backend: the process group's backend.
    """

    world_size: int
    node_of_rank: list[int]
    levels: dict[str, LevelMeasurement | None] = field(default_factory=dict)
    backend: str = "gloo"

    @property
    def network(self) -> Network | None:
        """The calibrated network between nodes (or, on one node, between its ranks), with the
        all-to-all's bandwidth as its duplex bandwidth where it applies
        (:meth:`Network.from_probe`)."""
        for level in ("inter_node", "intra_node"):
            if self.levels.get(level) is not None:
                return Network.from_probe(self.to_dict(), level)
        return None

    def to_dict(self) -> dict:
        return {
            "world_size": self.world_size,
            "nodes": len(set(self.node_of_rank)),
            "node_of_rank": self.node_of_rank,
            "backend": self.backend,
            "levels": {k: (v.to_dict() if v is not None else None) for k, v in self.levels.items()},
        }


def _pairs(node_of_rank: Sequence[int]) -> dict[str, tuple[int, int] | None]:
    home = node_of_rank[0]
    same = [r for r in range(1, len(node_of_rank)) if node_of_rank[r] == home]
    other = [r for r in range(1, len(node_of_rank)) if node_of_rank[r] != home]
    return {
        "inter_node": (0, other[0]) if other else None,
        "intra_node": (0, same[0]) if same else None,
    }


def _repeats(size: int, repeats: int) -> int:
    """Timed transfers of ``size`` bytes: ``repeats``, more for small sizes (same on every
    rank: no agreement needed)."""
    return max(repeats, min(100, (1 << 20) // size))


def _enough(measured: list[int], seconds: list[float], sizes: list[int], limit: float) -> bool:
    """Whether to stop after the last measured size (the same answer on every rank: the times
    are agreed)."""
    if len(measured) == len(sizes) or len(measured) < 2:
        return len(measured) == len(sizes)
    next_seconds = seconds[-1] * sizes[len(measured)] / sizes[len(measured) - 1]
    return next_seconds > limit and seconds[-1] >= 10 * seconds[0]


def _past_cap(size: int, measured: list[int], seconds: list[float], cap: int) -> bool:
    """Whether the all-to-all stops before ``size``: it is larger than ``cap`` and the sizes
    measured so far show the bandwidth (two at least, the last ten times the first's time). On
    a fast link (loopback, a 100 Gbit/s fabric) sizes go on past ``cap`` until they do."""
    return size > cap and len(measured) >= 2 and seconds[-1] >= 10 * seconds[0]


def _ping_pong(rank: int, pair: tuple[int, int], buffer: torch.Tensor, repeats: int) -> float:
    """Median one-way seconds of ``buffer`` between the two ranks of ``pair`` (others: 0)."""
    a, b = pair
    if rank not in pair:
        return 0.0
    times = []
    for i in range(repeats + 1):  # the first round trip is a warm-up
        start = time.perf_counter()
        if rank == a:
            dist.send(buffer, b)
            dist.recv(buffer, b)
        else:
            dist.recv(buffer, a)
            dist.send(buffer, a)
        if i:
            times.append((time.perf_counter() - start) / 2)
    return statistics.median(times)


def _all_to_all(buffer: torch.Tensor, repeats: int) -> float:
    """Median seconds of one all-to-all of ``buffer`` (this rank's; equal splits)."""
    out = torch.empty_like(buffer)
    times = []
    for i in range(repeats + 1):
        dist.barrier()
        start = time.perf_counter()
        all_to_all(out, buffer)
        if i:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def _agree(value: float, device: torch.device) -> float:
    """The largest ``value`` over all ranks (every rank gets it)."""
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return float(tensor.item())


def probe_network(
    node: int,
    sizes: Sequence[int] = DEFAULT_SIZES,
    repeats: int = 5,
    max_seconds: float = 0.25,
    device: torch.device | str = "cpu",
    all_to_all_max_bytes: int = ALL_TO_ALL_MAX_BYTES,
) -> NetworkProbe:
    """Measure and fit the network between the ranks of the default process group (collective).

    Args:
        node: this rank's node (any integer shared by the ranks of one machine: torchrun's
            ``GROUP_RANK``).
        sizes: bytes per transfer, increasing; a level stops before the first size expected to
            take more than ``max_seconds`` (the last one's time, scaled by size) once the last
            one took ten times the smallest one's time. (default: 64 B to 64 MiB, ×4 steps)
        repeats: timed transfers per size at least (after one warm-up; up to 100 for small
            sizes); the median counts.
        max_seconds: see ``sizes``. (default: ``0.25``)
        device: where the buffers live (``cuda`` for NCCL).
        all_to_all_max_bytes: the all-to-all's sizes stop here once its times show the
            bandwidth (:func:`_past_cap`). (default: 4 MiB)

    Raises:
        RuntimeError: no process group, or fewer than two ranks.
        ValueError: fewer than two sizes, or sizes not increasing.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("probe_network needs a process group: run it under torchrun")
    world, rank = dist.get_world_size(), dist.get_rank()
    if world < 2:
        raise RuntimeError("probe_network needs at least two ranks")
    sizes = [int(s) for s in sizes]
    if (
        len(sizes) < 2
        or any(b <= a for a, b in zip(sizes, sizes[1:], strict=False))
        or sizes[0] < 1
    ):
        raise ValueError(f"sizes {sizes}: give at least two increasing positive byte counts")
    device = torch.device(device)
    node_of_rank: list[int] = [0] * world
    dist.all_gather_object(node_of_rank, int(node))
    levels: dict[str, LevelMeasurement | None] = {}
    for level, pair in _pairs(node_of_rank).items():
        if pair is None:
            levels[level] = None
            continue
        measured, seconds = [], []
        for size in sizes:
            buffer = torch.zeros(size, dtype=torch.uint8, device=device)
            took = _agree(_ping_pong(rank, pair, buffer, _repeats(size, repeats)), device)
            measured.append(size)
            seconds.append(took)
            if _enough(measured, seconds, sizes, max_seconds):
                break
        levels[level] = LevelMeasurement(pair, measured, seconds, fit_network(measured, seconds))
    measured, seconds = [], []
    for size in sizes:
        if _past_cap(size, measured, seconds, all_to_all_max_bytes):
            break
        chunk = max(1, size // (world - 1))  # bytes to each peer: `size` to the others in all
        buffer = torch.zeros(chunk * world, dtype=torch.uint8, device=device)
        took = _agree(_all_to_all(buffer, _repeats(size, repeats)), device)
        measured.append(chunk * (world - 1))
        seconds.append(took)
        if _enough(measured, seconds, sizes, max_seconds):
            break
    levels["all_to_all"] = LevelMeasurement(None, measured, seconds, fit_network(measured, seconds))
    return NetworkProbe(world, node_of_rank, levels, dist.get_backend())

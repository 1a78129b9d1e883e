"""Network parameters of the cost model: bandwidth and latency of a rank's link, and their fit
to measured transfer times (:func:`fit_network`, used by :mod:`.probe`).

An alpha–beta model: ``seconds = messages · latency + bytes / bandwidth``, with two bandwidths
calibrated by the probe. ``bandwidth_bytes_per_s`` is one direction of a link while the other
is idle (the probe's ping-pong); ``duplex_bandwidth_bytes_per_s`` is what a rank gets in each
direction while every link carries data both ways at once, as in a halo exchange, an
all-to-all or a ring (the probe's all-to-all). They differ on real links: on the emulated
cluster's ``tbf`` links the acknowledgements of one direction queue behind the data of the
other, and the probes measured about half the one-way rate in each direction (0.5–0.65 of it
in most of them: ``benchmarks/results/emulated_cluster_costmodel.md``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Network:
    """Point-to-point network parameters.

    Attributes:
        bandwidth_bytes_per_s: per-rank link bandwidth in one direction, the other idle
            (bytes/s). (default: ``12.5e9``, a 100 Gb/s InfiniBand-class link)
        latency_s: seconds per message. (default: ``2e-6``)
        duplex_bandwidth_bytes_per_s: per-rank bandwidth in each direction while every link
            carries data both ways at once (an exchange, all-to-all, ring; bytes/s); ``None``:
            ``bandwidth_bytes_per_s`` (a full-duplex link that loses nothing). (default:
            ``None``)
    """

    bandwidth_bytes_per_s: float = 12.5e9
    latency_s: float = 2e-6
    duplex_bandwidth_bytes_per_s: float | None = None

    @property
    def duplex_bandwidth(self) -> float:
        """Bytes/s per direction while every link is busy both ways."""
        return float(self.duplex_bandwidth_bytes_per_s or self.bandwidth_bytes_per_s)

    def seconds(
        self, num_bytes: np.ndarray | float, messages: np.ndarray | float, duplex: bool = False
    ) -> np.ndarray:
        """Transfer time of ``num_bytes`` in ``messages`` messages; ``duplex``: while every
        link also carries data the other way (at :attr:`duplex_bandwidth`)."""
        bandwidth = self.duplex_bandwidth if duplex else self.bandwidth_bytes_per_s
        return np.asarray(num_bytes) / bandwidth + np.asarray(messages) * float(self.latency_s)

    def exchange_seconds(
        self,
        sent_bytes: np.ndarray | float,
        received_bytes: np.ndarray | float,
        messages: np.ndarray | float,
    ) -> np.ndarray:
        """Time of a rank's part of an exchange where it sends ``sent_bytes`` while receiving
        ``received_bytes``: both directions at :attr:`duplex_bandwidth` until the smaller one is
        done, the rest of the larger one alone at ``bandwidth_bytes_per_s``."""
        sent, received = (
            np.asarray(sent_bytes, dtype=float),
            np.asarray(received_bytes, dtype=float),
        )
        both = np.minimum(sent, received)
        alone = np.maximum(sent, received) - both
        return (
            both / self.duplex_bandwidth
            + alone / self.bandwidth_bytes_per_s
            + np.asarray(messages) * float(self.latency_s)
        )

    def to_dict(self) -> dict[str, float]:
        out = asdict(self)
        if self.duplex_bandwidth_bytes_per_s is None:
            del out["duplex_bandwidth_bytes_per_s"]
        return out

    @classmethod
    def from_dict(cls, content: Mapping[str, Any]) -> Network:
        """The network a ``to_dict`` dictionary describes (``duplex_bandwidth_bytes_per_s``
        optional)."""
        duplex = content.get("duplex_bandwidth_bytes_per_s")
        return cls(
            float(content["bandwidth_bytes_per_s"]),
            float(content["latency_s"]),
            float(duplex) if duplex is not None else None,
        )

    @classmethod
    def from_probe(cls, probe: Mapping[str, Any], level: str = "inter_node") -> Network:
        """The calibrated network of a probe's result (``NetworkProbe.to_dict()``, the JSON of
        ``python -m lightning_gnn_dist probe --json``): ``level``'s fitted latency and one-way
        bandwidth, and, for the level between nodes of a probe with one rank per node, the
        all-to-all's bandwidth as the duplex bandwidth (every link busy both ways, as in an
        exchange). With several ranks per node the all-to-all mixes both levels, so the duplex
        bandwidth stays the one-way one.

        Raises:
            ValueError: the probe has no such level (the message lists those it has).
        """
        levels = probe["levels"]
        if not isinstance(levels.get(level), dict):
            measured = sorted(k for k, v in levels.items() if v)
            raise ValueError(
                f"the probe measured no {level!r} level; it has {measured} "
                "(intra_node needs two ranks on one node, inter_node two nodes)"
            )
        network = cls.from_dict({**levels[level], "duplex_bandwidth_bytes_per_s": None})
        everyone = levels.get("all_to_all")
        alone = probe.get("nodes", probe.get("world_size")) == probe.get("world_size") and (
            levels.get("intra_node") is None  # no rank shares rank 0's node
        )
        if level == "inter_node" and isinstance(everyone, dict) and alone:
            duplex = min(float(everyone["bandwidth_bytes_per_s"]), network.bandwidth_bytes_per_s)
            network = replace(network, duplex_bandwidth_bytes_per_s=duplex)
        return network

    @classmethod
    def from_json(cls, path: str | Path, level: str = "inter_node") -> Network:
        """The network a file describes: a ``Network`` dictionary
        (``{"bandwidth_bytes_per_s": ..., "latency_s": ...}``), or the JSON that
        ``python -m lightning_gnn_dist probe --json FILE`` writes, where ``level`` picks
        ``inter_node`` (default), ``intra_node`` or ``all_to_all`` (:meth:`from_probe`).

        Raises:
            ValueError: the file holds neither, or not the level asked for.
        """
        content = json.loads(Path(path).read_text())
        if isinstance(content, dict) and "levels" in content:
            try:
                return cls.from_probe(content, level)
            except ValueError as error:
                raise ValueError(f"{path}: {error}") from None
        try:
            return cls.from_dict(content)
        except (AttributeError, KeyError, TypeError, ValueError):
            raise ValueError(
                f"{path}: not a network description; expected bandwidth_bytes_per_s and "
                "latency_s, or the JSON of `python -m lightning_gnn_dist probe --json`"
            ) from None


@dataclass(frozen=True)
class TwoLevelNetwork:
    """The links of a cluster: between ranks of one node (shared memory, loopback) and between
    nodes (each node's NIC, shared by its ranks).

    Attributes:
        intra_node: the network between two ranks of one node.
        inter_node: one node's link to the others; its bandwidth is the node's, shared by the
            node's ranks (what ``probe`` measures between two nodes).
    """

    intra_node: Network
    inter_node: Network

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {"intra_node": self.intra_node.to_dict(), "inter_node": self.inter_node.to_dict()}

    @classmethod
    def from_json(cls, path: str | Path) -> TwoLevelNetwork:
        """Both levels of the JSON that ``python -m lightning_gnn_dist probe --json FILE``
        writes (or of a ``{"intra_node": {...}, "inter_node": {...}}`` file).

        Raises:
            ValueError: the file lacks one of the levels (the message says which).
        """
        content = json.loads(Path(path).read_text())
        if isinstance(content, dict) and "levels" not in content and "inter_node" in content:
            levels = {}
            for level in ("intra_node", "inter_node"):
                if not isinstance(content.get(level), dict):
                    raise ValueError(f"{path}: no {level!r} network in {sorted(content)}")
                levels[level] = Network.from_dict(content[level])
            return cls(**levels)
        return cls(
            intra_node=Network.from_json(path, level="intra_node"),
            inter_node=Network.from_json(path, level="inter_node"),
        )


NETWORKS: dict[str, Network] = {
    "infiniband": Network(),
    # gloo over TCP on the loopback device of one machine: an assumed order of magnitude, not
    # calibrated (on the 2-core machine the halo bytes are small next to compute either way)
    "loopback": Network(bandwidth_bytes_per_s=1.0e9, latency_s=50e-6),
}
"""Network presets by name: ``infiniband`` (default), ``loopback`` (this machine)."""


def fit_network(num_bytes: Sequence[float], seconds: Sequence[float]) -> Network:
    """Fit ``seconds ≈ latency + num_bytes / bandwidth`` to measured transfers.

    The bandwidth is the least-squares slope of seconds over bytes (absolute errors, so the
    large, bandwidth-bound transfers decide it). The latency is the smallest intercept that a
    line of that slope has through a latency-bound transfer (one whose bytes take at most half
    its time at that bandwidth; delays on a busy machine only ever add time, so the least
    delayed of them tells the latency best), at least 0. Mid-sized transfers that a link's
    burst allowance speeds up do not pull it below 0. Both are exact when the times are.

    Args:
        num_bytes: ``[n]`` bytes of each transfer (at least two distinct sizes).
        seconds: ``[n]`` its measured seconds (> 0).

    Raises:
        ValueError: fewer than two sizes, non-positive times, or times that do not grow with
            the sizes (no bandwidth to see: probe larger transfers).
    """
    n = np.asarray(num_bytes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if n.shape != t.shape or n.ndim != 1 or np.unique(n).size < 2 or np.any(t <= 0):
        raise ValueError(
            f"fit_network needs at least two distinct sizes and positive times; got sizes "
            f"{n.tolist()} and seconds {t.tolist()}"
        )
    dn = n - n.mean()
    inverse_bandwidth = float(np.sum(dn * (t - t.mean())) / np.sum(dn * dn))
    bound = n * inverse_bandwidth <= t / 2  # latency-bound transfers
    intercepts = (t - n * inverse_bandwidth)[bound]
    latency = max(0.0, float(intercepts.min())) if intercepts.size else 0.0
    if inverse_bandwidth <= 0:
        raise ValueError(
            f"the times {t.tolist()} do not grow with the sizes {n.tolist()}: probe larger "
            "transfers to see the bandwidth"
        )
    return Network(bandwidth_bytes_per_s=1 / inverse_bandwidth, latency_s=float(latency))

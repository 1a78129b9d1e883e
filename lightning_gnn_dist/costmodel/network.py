"""Network parameters of the cost model: bandwidth and latency of a rank's link."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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

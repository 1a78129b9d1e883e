"""Batches sampled on the host, moved to the training device without stopping the step.

The neighbour loader samples and fetches on the CPU (over a gloo group under an NCCL world:
:func:`~lightning_gnn_dist.comm.messages.host_group`). For a CUDA device, :class:`DeviceTransfer`
pins the batch's tensors and copies them on a side stream with ``non_blocking=True``; the step
that consumes the batch waits for that copy on the device (an event), not on the host. With the
loader's ``prefetch`` the copy is issued from the background thread right after the batch is
made, so it overlaps the current step. Other devices get a plain ``.to(device)``; the CPU gets
the batch as it is.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def _tensors(batch: Any) -> list[Tensor]:
    if isinstance(batch, Tensor):
        return [batch]
    if isinstance(batch, dict):  # e.g. a neighbour batch's global_gcn_weight_terms
        return [t for value in batch.values() for t in _tensors(value)]
    if hasattr(batch, "stores"):  # a PyG Data / HeteroData
        return [t for store in batch.stores for value in store.values() for t in _tensors(value)]
    return []


class DeviceTransfer:
    """Moves batches (PyG ``Data`` or tensors) to ``device``: :meth:`start` where the batch is
    made (any thread), :meth:`finish` where it is consumed (the training thread).

    Args:
        device: the training device (``torch.device`` or its name).
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self._stream = None

    @property
    def pins(self) -> bool:
        """Whether batches are pinned and copied asynchronously (a CUDA device)."""
        return self.device.type == "cuda"

    def start(self, batch: Any) -> tuple[Any, Any]:
        """Start moving ``batch``; returns ``(batch on the device, event or None)``."""
        if self.device.type == "cpu":
            return batch, None
        if not self.pins:
            return batch.to(self.device), None
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        pinned = batch.pin_memory()
        with torch.cuda.stream(self._stream):
            moved = pinned.to(self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self._stream)
        return moved, event

    def finish(self, moved: Any, event: Any) -> Any:
        """The batch, usable on the current stream: that stream waits for the copy (on the
        device), and the copied tensors are marked as used by it (the caching allocator keeps
        their memory until its work is done)."""
        if event is None:
            return moved
        stream = torch.cuda.current_stream(self.device)
        stream.wait_event(event)
        for tensor in _tensors(moved):
            tensor.record_stream(stream)
        return moved

    def __call__(self, batch: Any) -> Any:
        """:meth:`start` and :meth:`finish` at once (no prefetch)."""
        return self.finish(*self.start(batch))

    def __repr__(self) -> str:
        return f"DeviceTransfer({str(self.device)!r}, pinned={self.pins})"


__all__ = ["DeviceTransfer"]

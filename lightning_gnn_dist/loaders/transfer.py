"""Batches sampled on the host, moved to the training device without stopping the step.

The neighbour loader samples and fetches on the CPU (over a gloo group under an NCCL world:
:func:`~lightning_gnn_dist.comm.messages.host_group`). For a CUDA device, :class:`DeviceTransfer`
pins the batch's tensors and copies them on a side stream with ``non_blocking=True``; the step
that consumes the batch waits for that copy on the device (an event), not on the host. With the
loader's ``prefetch`` the copy is issued from the background thread right after the batch is
made, so it overlaps the current step. Other devices get a plain ``.to(device)``; the CPU gets
the batch as it is. The CSR matrices the loader built on the host for the batch's edges
(:func:`~lightning_gnn_dist.data.csr.prepare_batch_adjacency`) travel with them
(:func:`carry_caches`), so the step finds them built on the device.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lightning_gnn_dist.data.csr import carry_cache


def _tensors(batch: Any) -> list[Tensor]:
    if isinstance(batch, Tensor):
        return [batch]
    if isinstance(batch, dict):  # e.g. a neighbour batch's global_gcn_weight_terms
        return [t for value in batch.values() for t in _tensors(value)]
    if hasattr(batch, "stores"):  # a PyG Data / HeteroData
        return [t for store in batch.stores for value in store.values() for t in _tensors(value)]
    return []


def caches_of(batch: Any) -> list[tuple[int, str, Tensor]]:
    """``(store index, key, tensor)`` of every tensor of ``batch`` (a PyG ``Data``) holding
    structures built on the host (:func:`~lightning_gnn_dist.data.csr.tensor_cache`). Taken
    before a copy: PyG's ``Data.pin_memory`` and ``Data.to`` replace the tensors in place."""
    if not hasattr(batch, "stores"):
        return []
    return [
        (index, key, value)
        for index, store in enumerate(batch.stores)
        for key, value in store.items()
        if isinstance(value, Tensor) and hasattr(value, "_lgd_cache")
    ]


def carry_caches(cached: list[tuple[int, str, Tensor]], moved: Any, move) -> list[Tensor]:
    """Give every tensor of ``moved`` (the batch copied to a device) the CSR matrices and hop
    prefixes its host tensor held (``cached``, from :func:`caches_of`), each of their tensors
    copied by ``move`` (:func:`~lightning_gnn_dist.data.csr.carry_cache`); returns the tensors
    copied."""
    made: list[Tensor] = []
    for index, key, source in cached:
        target = moved.stores[index].get(key)
        if isinstance(target, Tensor):
            made += carry_cache(source, target, move)
    return made


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
        cached = caches_of(batch)
        if not self.pins:
            moved = batch.to(self.device)
            carry_caches(cached, moved, lambda t: t.to(self.device))
            return moved, None
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        pinned = batch.pin_memory()
        with torch.cuda.stream(self._stream):
            moved = pinned.to(self.device, non_blocking=True)
            carried = carry_caches(
                cached, moved, lambda t: t.pin_memory().to(self.device, non_blocking=True)
            )
            event = torch.cuda.Event()
            event.record(self._stream)
        return moved, (event, carried)

    def finish(self, moved: Any, event: Any) -> Any:
        """The batch, usable on the current stream: that stream waits for the copy (on the
        device), and the copied tensors are marked as used by it (the caching allocator keeps
        their memory until its work is done)."""
        if event is None:
            return moved
        event, carried = event
        stream = torch.cuda.current_stream(self.device)
        stream.wait_event(event)
        for tensor in _tensors(moved) + carried:
            tensor.record_stream(stream)
        return moved

    def __call__(self, batch: Any) -> Any:
        """:meth:`start` and :meth:`finish` at once (no prefetch)."""
        return self.finish(*self.start(batch))

    def __repr__(self) -> str:
        return f"DeviceTransfer({str(self.device)!r}, pinned={self.pins})"


__all__ = ["DeviceTransfer", "caches_of", "carry_caches"]

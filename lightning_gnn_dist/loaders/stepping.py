"""What every mini-batch loader of a rank shares: a fixed number of steps per epoch (the same on
every rank), the epoch's seeded order of its items, Lightning's ``loader.sampler.set_epoch``
hook, and the step pipeline — sample and fetch (optionally in a background thread, one batch
ahead, and the next epoch's first two begun as the last step of an epoch trains) and the copy
to the training device.

A subclass calls :meth:`SteppedLoader._start_stepping` at the end of its ``__init__`` and defines
``make_batch(positions, step, epoch)`` and ``num_items`` (what ``batches`` orders: seeds, pairs).
"""

from __future__ import annotations

import math
import weakref
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait

import torch
from torch import Tensor
from torch_geometric.data import Data

from lightning_gnn_dist.data.sampler import stream_key
from lightning_gnn_dist.loaders.transfer import DeviceTransfer

__all__ = ["SteppedLoader", "add_fetched_rows"]

_IN_FLIGHT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Per store, the batch its prefetching iterator is making: collectives on the store's group.
An iterator left before its end (Lightning's ``limit_train_batches``, validation within an
epoch) leaves one running; every iterator of the store waits for it before sending any, so
every rank sends the two in the same order."""


class SteppedLoader:
    """Base of :class:`~lightning_gnn_dist.loaders.neighbor.NeighborLoader` and
    :class:`~lightning_gnn_dist.loaders.link_neighbor.LinkNeighborLoader` (module docstring).
    Expects ``store`` (its ``rank``), ``seed``, ``shuffle`` and ``num_steps``."""

    num_steps: int

    def _start_stepping(self, prefetch: bool, device: torch.device | str | None) -> None:
        self.prefetch = prefetch
        self.transfer = None if device is None else DeviceTransfer(device)
        self.epoch = 0
        # Lightning's loops call ``loader.sampler.set_epoch(epoch)`` before every epoch, so a
        # resumed run continues with the epoch's own shuffle and random streams.
        self.sampler = _EpochSetter(self)
        self.batch_sampler = None  # read by Lightning's shuffle check next to ``sampler``
        self._early: _Pipeline | None = None  # the next epoch's, begun by start_next_epoch

    @property
    def num_items(self) -> int:
        """How many items (seeds, pairs) ``batches`` splits into steps."""
        raise NotImplementedError

    def make_batch(self, positions: Tensor, step: int, epoch: int | None = None) -> Data:
        raise NotImplementedError

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next iteration (each iteration otherwise advances it by one)."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_steps

    def batches(self) -> list[Tensor]:
        """This epoch's item positions, one tensor per step (items repeat when there are fewer
        items than steps, so every rank runs the same steps)."""
        count = self.num_items
        if self.shuffle:
            generator = torch.Generator().manual_seed(
                stream_key(self.seed, self.epoch, -1, self.store.rank)
            )
            order = torch.randperm(count, generator=generator)
        else:
            order = torch.arange(count)
        if 0 < count < self.num_steps:
            order = order.repeat(math.ceil(self.num_steps / count))[: self.num_steps]
        return list(torch.tensor_split(order, self.num_steps)) if self.num_steps else []

    def made_batches(self, batches: list[Tensor], epoch: int) -> Iterator[Data]:
        """The epoch's batches in step order, ``make_batch`` of each step's positions (a
        subclass may overlap their exchanges)."""
        for step, positions in enumerate(batches):
            yield self.make_batch(positions, step, epoch)

    def _started(self, made: Iterator[Data]) -> tuple[Data, object] | None:
        """The next batch with its copy to ``device`` started: ``(batch, copy event or
        None)``; ``None`` after the last."""
        batch = next(made, None)
        if batch is None:
            return None
        return (batch, None) if self.transfer is None else self.transfer.start(batch)

    def _ready(self, batch: Data, event) -> Data:
        return batch if self.transfer is None else self.transfer.finish(batch, event)

    def __iter__(self) -> Iterator[Data]:
        epoch = self.epoch
        early, self._early = self._early, None
        if early is not None and early.epoch != epoch:  # set_epoch chose another epoch
            early.finish()
            early = None
        batches = None if early is not None else self.batches()
        self.epoch += 1
        if not self.prefetch:
            _wait_for_in_flight(self.store)
            made = self.made_batches(batches, epoch)
            while (started := self._started(made)) is not None:
                yield self._ready(*started)
            return
        pipeline = early or _Pipeline.start(self, batches, epoch, depth=1)
        try:
            while (started := pipeline.next()) is not None:
                yield self._ready(*started)
        finally:
            pipeline.finish()

    def start_next_epoch(self) -> None:
        """Begin the next epoch's first two batches now, in the prefetch thread, so they are
        made while the current epoch's last step trains (Lightning takes two batches before an
        epoch's first step). Only when prefetching; the next iteration takes them, unless
        ``set_epoch`` chose another epoch. Collective: every rank calls it at the same point
        (``GNNStrategy`` does, as an epoch's last training step starts when another follows).
        """
        if not self.prefetch or self._early is not None:
            return
        self._early = _Pipeline.start(self, self.batches(), self.epoch, depth=2)

    def finish_early(self) -> None:
        """Wait for the batches :meth:`start_next_epoch` began and drop them (training ended)."""
        early, self._early = self._early, None
        if early is not None:
            early.finish()


class _Pipeline:
    """One epoch's batches made in a background thread, ``depth`` at most in flight at its
    start and one after; each in flight is the store's ``_IN_FLIGHT`` batch."""

    def __init__(self, loader: SteppedLoader, made: Iterator[Data], epoch: int) -> None:
        self.loader, self.made, self.epoch = loader, made, epoch
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.pending: deque[Future] = deque()

    @classmethod
    def start(cls, loader: SteppedLoader, batches: list[Tensor], epoch: int, depth: int):
        _wait_for_in_flight(loader.store)
        pipeline = cls(loader, loader.made_batches(batches, epoch), epoch)
        for _ in range(depth):
            pipeline._submit()
        return pipeline

    def _submit(self) -> None:
        future = self.pool.submit(self.loader._started, self.made)
        self.pending.append(future)
        _IN_FLIGHT[self.loader.store] = future  # one thread: it ends after the earlier ones

    def next(self) -> tuple[Data, object] | None:
        """The next batch (started on its device), ``None`` after the last."""
        started = self.pending.popleft().result()
        if started is not None and not self.pending:
            self._submit()
        return started

    def finish(self) -> None:
        """Wait for the batches in flight (their collectives are every rank's) and stop."""
        self.pool.shutdown(wait=True)
        self.pending.clear()


def _wait_for_in_flight(store) -> None:
    """Wait until the batch another iterator of ``store`` is making is made (its outcome is
    that iterator's: an error stays there)."""
    future: Future | None = _IN_FLIGHT.pop(store, None)
    if future is not None:
        wait([future])


class _EpochSetter:
    """The ``sampler`` attribute Lightning looks for to pass the epoch number."""

    def __init__(self, loader: SteppedLoader) -> None:
        self.loader = loader

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)


def add_fetched_rows(batch: Data, rows, edge_data: dict[str, Tensor], exact: bool) -> Data:
    """Put a fetch's ``rows`` (:class:`~lightning_gnn_dist.loaders.local_store.FetchedRows`:
    labels, node attributes, and with ``exact`` the global degrees and a weighted GCN's terms)
    and the sampled edges' ``edge_data`` (``e_id``, edge attributes) on ``batch``."""
    if rows.y is not None:
        batch.y = rows.y
    for key, value in {**rows.attrs, **edge_data}.items():
        batch[key] = value
    if exact:
        batch.global_in_degree = rows.in_degree
        batch.global_self_loops = rows.num_self_loops
        if rows.weight_terms:  # a weighted GCN's global degrees (nn.sampled)
            batch.global_gcn_weight_terms = rows.weight_terms
    return batch

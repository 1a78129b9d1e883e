"""The ranks' rendezvous for :class:`~lightning_gnn_dist.lightning.strategy.GNNStrategy`:
every rank must join within ``startup_timeout``; later waits are bounded by the collective
``timeout``."""

from __future__ import annotations

import os
from datetime import timedelta

import torch.distributed as dist

__all__ = ["join_ranks", "seconds_option"]


def join_ranks(environment, startup_timeout: timedelta, timeout: timedelta) -> dist.Store:
    """Rendezvous of all ranks within ``startup_timeout``; returns the store, whose later waits
    are bounded by the collective ``timeout``."""
    os.environ["MASTER_ADDR"] = environment.main_address
    os.environ["MASTER_PORT"] = str(environment.main_port)
    rank, world_size = environment.global_rank(), environment.world_size()
    keys = [f"lightning_gnn_dist/started/{r}" for r in range(world_size)]
    try:
        store, _, _ = next(dist.rendezvous("env://", rank, world_size, timeout=startup_timeout))
        store.set(keys[rank], "1")
        store.wait(keys, startup_timeout)
    except (RuntimeError, dist.DistError) as error:
        if "timed out" not in str(error).lower():
            raise  # e.g. the port is taken: not a start-up delay
        raise TimeoutError(
            f"not all {world_size} processes started within "
            f"startup_timeout={startup_timeout.total_seconds():g} s ({error}); on a loaded "
            "machine pass a larger GNNStrategy(startup_timeout=...)"
        ) from None
    store.set_timeout(timeout)
    return store


def seconds_option(name: str, value: float | timedelta) -> timedelta:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    valid = isinstance(value, int | float) and not isinstance(value, bool)
    if not valid or not 0 < value <= 1e8:  # nan fails too; 1e8 s (3 years) is a typo
        raise ValueError(f"{name} must be positive seconds, at most 1e8 (got {value!r})")
    return timedelta(seconds=value)

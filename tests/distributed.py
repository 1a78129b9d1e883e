"""Run a function on several ranks of a direct gloo process group (forked, not spawned).

Each rank's return value (picklable, no tensors) comes back in rank order; an exception on any
rank, or a hang past ``timeout`` seconds, fails the calling test and kills every child.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any


def _worker(fn, rank, world_size, init_file, queue, args, pg_timeout):
    import torch
    import torch.distributed as dist

    os.environ["GLOO_SOCKET_IFNAME"] = os.environ.get("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{init_file}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=pg_timeout),
        )
        queue.put((rank, "ok", fn(rank, world_size, *args)))
    except BaseException:  # report everything, including assertion errors, to the parent
        queue.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_ranks(
    fn: Callable[..., Any], world_size: int, *args: Any, timeout: float = 60, pg_timeout: float = 30
) -> list[Any]:
    """Fork ``world_size`` processes running ``fn(rank, world_size, *args)``; return results."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "pg_init")
        procs = [
            ctx.Process(
                target=_worker,
                args=(fn, r, world_size, init_file, queue, args, pg_timeout),
                daemon=True,
            )
            for r in range(world_size)
        ]
        for p in procs:
            p.start()
        results: dict[int, Any] = {}
        try:
            for _ in range(world_size):
                rank, status, value = queue.get(timeout=timeout)
                if status == "error":
                    raise AssertionError(f"rank {rank} failed:\n{value}")
                results[rank] = value
        finally:
            for p in procs:
                p.join(timeout=5)
                if p.is_alive():
                    p.kill()
                    p.join()
    return [results[r] for r in range(world_size)]

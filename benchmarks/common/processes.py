"""Forked children with time limits, forked gloo ranks, and memory readings from ``/proc``."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any


@dataclass(frozen=True)
class ChildResult:
    """``status``: ``"ok"``, ``"error"`` or ``"timeout"``; ``value``: the return value, the error
    text or ``None``; ``seconds``: wall time of the child."""

    status: str
    value: Any
    seconds: float


def _child(conn: Any, fn: Callable[..., Any], args: tuple) -> None:
    os.setpgrp()  # helpers the child starts (KaHyPar's worker) join its group: one killpg ends all
    try:
        conn.send(("ok", fn(*args)))
    except BaseException as error:  # noqa: BLE001 - reported as the child's result
        conn.send(("error", f"{type(error).__name__}: {error}"[:2000]))
    finally:
        conn.close()


def _kill_group(process: multiprocessing.process.BaseProcess) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    process.join()


def run_in_child(fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> ChildResult:
    """Run ``fn(*args)`` in a forked child in a process group of its own; past ``timeout``
    seconds the whole group is killed. The return value must be picklable."""
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(sender, fn, args))
    start = time.perf_counter()
    process.start()
    sender.close()
    try:
        if not receiver.poll(timeout):
            _kill_group(process)
            return ChildResult("timeout", None, time.perf_counter() - start)
        try:
            status, value = receiver.recv()
        except EOFError:
            process.join()
            status, value = "error", f"child died (exit status {process.exitcode})"
        process.join()
        return ChildResult(status, value, time.perf_counter() - start)
    finally:
        if process.is_alive():  # interrupted (Ctrl-C): do not leave the child running
            _kill_group(process)
        receiver.close()


def call_in_child(fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
    """:func:`run_in_child`, returning the value and raising ``RuntimeError`` otherwise. A child
    keeps the memory a measurement allocates out of the parent (and its peak RSS its own)."""
    result = run_in_child(fn, *args, timeout=timeout)
    if result.status != "ok":
        raise RuntimeError(
            f"{getattr(fn, '__name__', fn)} in a child: {result.status} {result.value}"
        )
    return result.value


def _rank(fn, rank, world_size, init_file, queue, args, pg_timeout) -> None:
    import torch
    import torch.distributed as dist

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
    except BaseException:  # noqa: BLE001 - everything goes back to the parent
        queue.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_ranks(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = 1800,
    pg_timeout: float = 600,
) -> list[Any]:
    """Fork ``world_size`` ranks of a gloo process group, each running
    ``fn(rank, world_size, *args)``; return their (picklable) results in rank order. A rank's
    exception, or no result within ``timeout`` seconds, raises ``RuntimeError``."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "pg_init")
        procs = [
            context.Process(
                target=_rank,
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
                    raise RuntimeError(f"rank {rank} failed:\n{value}")
                results[rank] = value
        finally:
            for p in procs:
                p.join(timeout=5)
                if p.is_alive():
                    p.kill()
                    p.join()
    return [results[r] for r in range(world_size)]


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def peak_rss_bytes() -> int:
    """``VmHWM``: this process's resident-set high-water mark since ``exec`` (or ``fork``), bytes.

    Not ``ru_maxrss``: Linux folds the pre-``exec`` address space into it, which under ``vfork``
    (what ``subprocess`` uses) is the parent's, so a small child of a big parent reports the
    parent's peak."""
    return _status_bytes("VmHWM:")


def rss_bytes() -> int:
    """``VmRSS``: this process's resident set now, bytes."""
    return _status_bytes("VmRSS:")


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its waited-for children."""
    import resource

    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for ``MASTER_PORT``)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

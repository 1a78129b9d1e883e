"""Running one command in each node of an :class:`~lightning_gnn_dist.testing.cluster.
EmulatedCluster` at once, their output prefixed by node, every node stopped when one fails."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from lightning_gnn_dist.testing.cluster import EmulatedCluster

__all__ = ["exit_code", "run_nodes"]


def exit_code(returncode: int) -> int:
    """A ``Popen.returncode`` as a shell would show it (``-N`` signal → ``128 + N``)."""
    return 128 - returncode if returncode < 0 else returncode


def _stream(proc: subprocess.Popen, prefix: str, out: IO[str], lock: threading.Lock) -> None:
    assert proc.stdout is not None
    for raw in iter(proc.stdout.readline, b""):
        line = raw.decode(errors="replace").rstrip("\r\n")
        with lock:
            out.write(f"{prefix}{line}\n")
            out.flush()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def run_nodes(
    cluster: EmulatedCluster,
    commands: Sequence[Sequence[str]],
    env: Sequence[Mapping[str, str]] | None = None,
    out: IO[str] | None = None,
    grace_s: float = 10.0,
    log: Callable[[str], None] | None = None,
    stop_early: Callable[[], bool] | None = None,
) -> list[int]:
    """Run ``commands[i]`` inside node ``i`` (prefix it with :meth:`EmulatedCluster.exec_prefix`
    yourself); stream each node's stdout and stderr to ``out`` line by line, each line prefixed
    with ``[node i]`` and a space; return every node's exit code (``128 + N`` for signal ``N``).

    When a node fails (non-zero exit) the others get ``grace_s`` seconds to end by themselves
    (they usually fail fast when a peer is gone), then ``SIGTERM`` and 5 s later ``SIGKILL``
    (said in one line: what failed is for the caller to tell). On
    ``KeyboardInterrupt`` (or any exception) every node is ended the same way before it
    propagates. The namespaces stay: the cluster removes them.

    Args:
        cluster: a created cluster.
        commands: one argv per node.
        env: one environment per node (default: :meth:`EmulatedCluster.node_environment`).
        out: where the prefixed lines go. (default: ``sys.stdout``)
        grace_s: seconds the other nodes get after one failed.
        log: where the runner's own messages go. (default: ``out``, each line prefixed ``[emulate]``)
        stop_early: asked once, when the first node fails: ``True`` stops the others at once
            instead of after ``grace_s`` (their peers are unreachable: a cut link), silently
            (the caller tells why).
    """
    if len(commands) != cluster.nodes:
        raise ValueError(f"{len(commands)} commands for {cluster.nodes} nodes: give one per node")
    out = sys.stdout if out is None else out
    lock = threading.Lock()

    def say(message: str) -> None:
        if log is not None:
            log(message)
        else:
            with lock:
                out.write(f"[emulate] {message}\n")
                out.flush()

    envs = env or [cluster.node_environment(i) for i in range(cluster.nodes)]
    procs: list[subprocess.Popen] = []
    threads: list[threading.Thread] = []
    try:
        for i, command in enumerate(commands):
            proc = subprocess.Popen(
                list(command),
                env=dict(envs[i]),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # one process group per node; Ctrl-C reaches us only
            )
            procs.append(proc)
            thread = threading.Thread(
                target=_stream, args=(proc, f"[node {i}] ", out, lock), daemon=True
            )
            thread.start()
            threads.append(thread)
        failed_at = first = None
        while any(p.poll() is None for p in procs):
            codes = [p.poll() for p in procs]
            if failed_at is None and any(c not in (None, 0) for c in codes):
                failed_at = time.monotonic()  # the others usually end by themselves meanwhile
                first = next(i for i, c in enumerate(codes) if c not in (None, 0))
                if stop_early is not None and stop_early():
                    _stop(procs)
                    break
            if failed_at is not None and time.monotonic() - failed_at > grace_s:
                say(
                    f"node {first} exited with code {exit_code(procs[first].returncode)} "
                    f"{grace_s:g} s ago; stopping the remaining nodes"
                )
                _stop(procs)
            time.sleep(0.05)
    finally:
        _stop(procs)
        for thread in threads:
            thread.join(timeout=5)
    return [exit_code(p.returncode) for p in procs]


def _stop(procs: Sequence[subprocess.Popen], timeout_s: float = 5.0) -> None:
    """SIGTERM every running node's process group, SIGKILL after ``timeout_s``, reap."""
    running = [p for p in procs if p.poll() is None]
    for proc in running:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while any(p.poll() is None for p in running) and time.monotonic() < deadline:
        time.sleep(0.05)
    for proc in running:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)

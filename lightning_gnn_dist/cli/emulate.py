"""``emulate``: run a multi-node command on an emulated cluster on this machine.

    python -m lightning_gnn_dist emulate --nodes 2 --bandwidth 1gbit --cpus-per-node 1 -- \\
        fit --config examples/gcn_digits.yaml --trainer.num_nodes 2 --trainer.devices 1

Each node is a network namespace with its own address on a virtual switch, its link shaped to
``--bandwidth`` in each direction, its processes pinned to ``--cpus-per-node`` cores; one
``torchrun`` per node starts ``--nproc-per-node`` ranks, with the rendezvous on node 0 (see
:mod:`lightning_gnn_dist.testing.cluster`). Every node's output is streamed with a ``[node i]``
prefix; the exit code is the worst node's. When the run fails, ``emulate`` speaks for it in one
line (the ranks report to it, each node's ``torchrun`` stays quiet: :mod:`.torchrun`): the first
rank's own error with its traceback, or the link that stopped answering (down, or shaped
otherwise than the cluster made it) and what the ranks saw, e.g. that the collective timed out.
Everything the command made is removed when it ends,
on Ctrl-C, and (by a reaper process, or by the next run) after it was killed. It needs root
(``CAP_NET_ADMIN`` and ``CAP_SYS_ADMIN``), ``ip``, ``tc`` and ``taskset``; without them it stops
with one ``error:`` line saying what is missing.

The command after ``--`` is a command of ``python -m lightning_gnn_dist`` (``fit``, ``probe``,
...), a script (``train.py ARGS``) or a module (``-m pkg.mod ARGS``); ``--launcher none`` runs it
as it is in every node instead (with ``MASTER_ADDR``, ``MASTER_PORT``, ``NNODES``, ``NODE_RANK``
and ``NPROC_PER_NODE`` set), e.g. your own launcher. For the Lightning commands,
``--trainer.num_nodes`` and ``--trainer.devices`` are added with the cluster's shape unless given.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from lightning_gnn_dist.cli.common import OneLineErrorParser
from lightning_gnn_dist.lightning.reports import ENV_JOB_REPORT_DIR, TERMINATED, FailureReport
from lightning_gnn_dist.testing.cluster import (
    MASTER_PORT,
    EmulatedCluster,
    EmulationError,
    missing_requirements,
    parse_rate,
    reap_stale_namespaces,
)
from lightning_gnn_dist.testing.node_runs import run_nodes
from lightning_gnn_dist.utils.tempdirs import make_owned_dir, remove_stale

#: Commands of ``python -m lightning_gnn_dist`` that run on every rank.
PACKAGE_COMMANDS = ("fit", "validate", "test", "predict", "probe")
_LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")
#: Folder the ranks write their failure reports into (:mod:`lightning_gnn_dist.lightning.reports`).
REPORT_PREFIX = "lgd-emulate-"


def _parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="python -m lightning_gnn_dist emulate",
        description="Run a multi-node command on an emulated cluster on this machine: network "
        "namespaces on a virtual switch, shaped links, pinned cores (needs root).",
        usage="%(prog)s --nodes N [options] -- COMMAND [ARGS ...]",
    )
    parser.add_argument("--nodes", "-n", type=int, default=None, help="number of nodes (≥ 1)")
    parser.add_argument(
        "--bandwidth",
        "-b",
        default=None,
        help="every node's link rate in each direction, tc notation: 100mbit, 1gbit, 10gbit "
        "(default: unshaped)",
    )
    parser.add_argument(
        "--cpus-per-node",
        type=int,
        default=None,
        help="cores each node is pinned to (taskset), dealt round-robin; nodes share cores "
        "when there are fewer (default: no pinning)",
    )
    parser.add_argument("--nproc-per-node", type=int, default=1, help="ranks per node (default: 1)")
    parser.add_argument(
        "--launcher",
        choices=["torchrun", "none"],
        default="torchrun",
        help="torchrun: one torchrun per node starts the ranks; none: run COMMAND as it is in "
        "every node (default: torchrun)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=10.0,
        help="seconds the other nodes get to end after one failed; none when a link is down "
        "or shaped otherwise than the cluster made it (default: 10)",
    )
    parser.add_argument(
        "--stats-json",
        metavar="FILE",
        help="write the nodes' exit codes and the bytes each link carried to FILE",
    )
    parser.add_argument(
        "--cleanup",
        action="store_true",
        help="only remove the namespaces of earlier runs whose owner is gone, then exit",
    )
    return parser


def node_command(
    command: Sequence[str], cluster: EmulatedCluster, node: int, nproc: int, launcher: str
) -> list[str]:
    """The argv node ``node`` runs (after the namespace and CPU prefix)."""
    if launcher == "none":
        return list(command)
    if command[0] in PACKAGE_COMMANDS:
        target = ["-m", "lightning_gnn_dist", *command]
    elif command[0] == "-m" or command[0].endswith(".py"):
        target = list(command)
    else:
        raise ValueError(
            f"command {command[0]!r}: give a command of python -m lightning_gnn_dist "
            f"({', '.join(PACKAGE_COMMANDS)}), a script (train.py ...) or a module (-m pkg.mod "
            "...), or use --launcher none to run it as it is"
        )
    if target[0] == "-m" and len(target) < 2:
        raise ValueError("command -m: name the module, e.g. -m mypkg.train")
    return [
        sys.executable,
        "-m",
        "lightning_gnn_dist.cli.torchrun",  # torchrun, quiet about failures: emulate tells them
        f"--nnodes={cluster.nodes}",
        f"--nproc-per-node={nproc}",
        f"--node-rank={node}",
        f"--master-addr={cluster.master_address}",
        f"--master-port={MASTER_PORT}",
        "--max-restarts=0",
        *target,
    ]


def _with_cluster_shape(command: list[str], nodes: int, nproc: int) -> tuple[list[str], str]:
    """A Lightning command with ``--trainer.num_nodes``/``--trainer.devices`` added unless
    given; the note saying what was added (``""``: nothing)."""
    if not command or command[0] not in _LIGHTNING_COMMANDS:
        return command, ""
    given = {arg.split("=", 1)[0] for arg in command}
    added = []
    for option, value in (("--trainer.num_nodes", nodes), ("--trainer.devices", nproc)):
        if option not in given:
            added += [option, str(value)]
    note = f"added {' '.join(added)} (the cluster's shape)" if added else ""
    return command + added, note


class _Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP: stop like Ctrl-C, exit with 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum, frame) -> None:
    raise _Terminated(signum)


def run_emulate_command(argv: Sequence[str]) -> int:
    """Run ``emulate``; returns the exit code (the worst node's; 130 after Ctrl-C)."""
    argv = list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = _parser()
    args = parser.parse_args(argv[:split])
    command = argv[split + 1 :]
    if args.cleanup:
        missing = missing_requirements(shaping=False, pinning=False)
        if missing:
            raise EmulationError(f"removing namespaces needs {'; '.join(missing)}")
        removed = reap_stale_namespaces()
        print(
            f"removed {len(removed)} stale namespace(s){': ' if removed else ''}{' '.join(removed)}"
        )
        return 0
    if args.nodes is None:
        parser.error("--nodes is required")
    if not command:
        parser.error("give the command to run after --, e.g. -- fit --config FILE.yaml")
    if args.nproc_per_node < 1:
        parser.error(f"--nproc-per-node {args.nproc_per_node}: give a positive integer")
    if args.bandwidth is not None:
        parse_rate(args.bandwidth)  # a bad rate is a usage error, before anything is made
    cluster = EmulatedCluster(args.nodes, args.bandwidth, args.cpus_per_node)
    if args.launcher == "torchrun":
        command, note = _with_cluster_shape(command, args.nodes, args.nproc_per_node)
    else:
        note = ""
    commands = [
        cluster.exec_prefix(i)
        + node_command(command, cluster, i, args.nproc_per_node, args.launcher)
        for i in range(args.nodes)
    ]
    say = _say
    remove_stale(tempfile.gettempdir(), REPORT_PREFIX)  # of a killed emulate
    reports = make_owned_dir(tempfile.gettempdir(), REPORT_PREFIX, mode=0o700)
    previous = {s: signal.signal(s, _interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    codes: list[int] = []
    links: list[dict] = []
    start = time.monotonic()
    try:
        cluster.create()
        say(_describe(cluster, args.nproc_per_node))
        if note:
            say(note)
        envs = [_environment(cluster, i, args, reports) for i in range(args.nodes)]
        # A cut link: the other nodes cannot end by themselves in the grace period (a rank
        # whose peer is behind it waits for its collective timeout), so they end at once.
        stop_early = lambda: bool(cluster.link_faults())  # noqa: E731
        codes = run_nodes(cluster, commands, envs, grace_s=args.grace, stop_early=stop_early)
        links = cluster.link_bytes()
        code = max(codes)
        if code:  # before the links go: what they look like tells a cut one
            line, traceback = _failure(FailureReport.read_all(reports), cluster.link_faults())
            if line:
                say(line)
                sys.stdout.write(traceback)
    except KeyboardInterrupt as interruption:
        say("interrupted: nodes stopped")
        code = 128 + getattr(interruption, "signum", signal.SIGINT)
    finally:
        with _ignoring(signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            cluster.destroy()
            shutil.rmtree(reports, ignore_errors=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    seconds = time.monotonic() - start
    if links:
        say(
            "; ".join(
                f"node {i}: exit {c}, sent {link['tx_bytes']:,} B, received {link['rx_bytes']:,} B"
                for i, (c, link) in enumerate(zip(codes, links, strict=True))
            )
            + f" ({seconds:.1f} s)"
        )
    if args.stats_json:
        stats = {
            "nodes": args.nodes,
            "nproc_per_node": args.nproc_per_node,
            "bandwidth": args.bandwidth,
            "bandwidth_bits_per_s": cluster.rate_bits,
            "cpu_sets": cluster.cpu_sets,
            "oversubscribed": cluster.oversubscribed,
            "exit_codes": codes,
            "links": links,
            "seconds": seconds,
        }
        Path(args.stats_json).write_text(json.dumps(stats, indent=1))
    return code


def _failure(reports: list[FailureReport], faults: dict[int, str]) -> tuple[str, str]:
    """What ended a failed run, as one line and a traceback (``""``: none): the first rank
    whose error is its own (``rank R failed: ...`` and its traceback), else the link that
    stopped answering and what the ranks saw, else the ranks' timeouts with every link as made;
    ``("", "")`` when nothing tells (a command that does not use the package's strategy: the
    exit codes do).

    Args:
        reports: the ranks' reports (``torchrun`` ranks under the package's launcher).
        faults: :meth:`EmulatedCluster.link_faults`.
    """
    # A SIGTERM is emulate's own (stopping the nodes after a failure) unless it is all there is.
    reports = [r for r in reports if r.summary != TERMINATED] or reports
    causes = [r for r in reports if not r.peer_failure]
    if causes:
        first = min(causes, key=lambda r: r.time)
        return first.line, first.traceback
    timed_out = sorted(r.rank for r in reports if r.timed_out)
    seconds = next((r.timeout_s for r in reports if r.timed_out and r.timeout_s), None)
    if timed_out:
        ranks = " and ".join(", ".join(map(str, timed_out)).rsplit(", ", 1))
        what = (
            f"the collective timed out{f' after {seconds:g} s' if seconds else ''} on "
            f"rank{'s' * (len(timed_out) > 1)} {ranks}"
        )
    elif reports:
        first = min(reports, key=lambda r: r.time)
        what = f"rank {first.rank} stopped after a peer failed: {first.summary}"
    else:
        what = ""
    if faults:
        where = "; ".join(f"node {i}'s link stopped answering ({f})" for i, f in faults.items())
        return (f"{where}: {what}" if what else where), ""
    if timed_out:
        what += (
            "; every link is as the cluster made it: a rank stopped answering (stopped, or too "
            "slow for the timeout)"
        )
    return what, ""


def _environment(
    cluster: EmulatedCluster, node: int, args: argparse.Namespace, reports: Path
) -> dict:
    env = cluster.node_environment(node)
    env[ENV_JOB_REPORT_DIR] = str(reports)  # the ranks report here; emulate speaks for them
    if args.launcher == "none":
        env.update(
            MASTER_ADDR=cluster.master_address,
            MASTER_PORT=str(MASTER_PORT),
            NNODES=str(cluster.nodes),
            NODE_RANK=str(node),
            NPROC_PER_NODE=str(args.nproc_per_node),
        )
    return env


def _describe(cluster: EmulatedCluster, nproc: int) -> str:
    link = f"{cluster.bandwidth} links" if cluster.bandwidth else "unshaped links"
    cpus = (
        "cores " + " | ".join(",".join(map(str, s)) for s in cluster.cpu_sets)
        if cluster.cpu_sets
        else "no core pinning"
    )
    shared = " (nodes share cores: oversubscribed)" if cluster.oversubscribed else ""
    return (
        f"{cluster.nodes} nodes x {nproc} rank(s), {link}, {cpus}{shared}; namespaces "
        f"{cluster.token}-*, rendezvous on {cluster.master_address}:{MASTER_PORT}"
    )


def _say(message: str) -> None:
    print(f"[emulate] {message}", flush=True)


@contextlib.contextmanager
def _ignoring(*signals: int):
    """Let the cleanup finish even if Ctrl-C is pressed again (the reaper is the backstop)."""
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

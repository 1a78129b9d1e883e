"""An emulated cluster on one Linux machine: nodes as network namespaces, links shaped with ``tbf``.

Layout of one cluster of ``N`` nodes, every object inside namespaces this module creates (the
host's own interfaces, addresses and routes are never touched)::

    namespace <prefix>-sw                 namespace <prefix>-n<i>   (i = 0 .. N-1)
    ┌──────────────────────────┐          ┌──────────────────────────────────┐
    │ bridge br0 ── veth p<i> ─┼──────────┼─ veth eth0  10.77.0.<i+1>/24     │
    │        (tbf: node's      │          │  (tbf: node's upload)            │
    │         download)        │          │  processes: taskset -c <cpus> …  │
    └──────────────────────────┘          └──────────────────────────────────┘

Each node's link to the switch is shaped in both directions with the ``tbf`` queueing discipline
(a full-duplex NIC of the given rate on a non-blocking switch); traffic between two processes of
the same node stays on that node's loopback, unshaped, as shared memory would be on a real one.

Names carry a project prefix, the owner's pid, the owner's start time and a number per cluster
of that owner (``lgd-emu-<pid>-<start>-<k>-n0``): a namespace whose owner is gone is stale, and any later run
removes it (:func:`reap_stale_namespaces`). Every cluster also starts a reaper, a small process in
its own session that removes the cluster's namespaces and ends every process inside them as soon
as its owner dies, however it dies (``SIGKILL`` included).

Nothing here imports torch or the rest of the package: this file also runs as the reaper script.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping

PREFIX = "lgd-emu"
#: Addresses of the nodes, inside the cluster's own namespaces only (every cluster has its own
#: switch, so clusters of different owners never see each other's addresses).
SUBNET = "10.77.0"
INTERFACE = "eth0"
#: Port of the rendezvous on node 0 (free: the namespace is new).
MASTER_PORT = 29500
#: Capabilities that ``ip netns add`` (a mount) and the links need.
_CAPABILITIES = {"CAP_NET_ADMIN": 12, "CAP_SYS_ADMIN": 21}
_RATE_UNITS = {
    "bit": 1.0,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
    "tbit": 1e12,
    "bps": 8.0,
    "kbps": 8e3,
    "mbps": 8e6,
    "gbps": 8e9,
}
#: Environment variables of an outer launcher that must not leak into the nodes' launchers.
_LAUNCHER_VARIABLES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "GROUP_WORLD_SIZE",
)
_LAUNCHER_PREFIXES = ("TORCHELASTIC_", "SLURM_", "OMPI_", "PMI_")


class EmulationError(RuntimeError):
    """The emulated cluster cannot be made here; the message says what is missing."""


# -- owners ------------------------------------------------------------------------------------


def _start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (``/proc/PID/stat`` field 22); ``None``
    when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _owner_token(pid: int) -> str:
    start = _start_time(pid)
    if start is None:
        raise EmulationError(f"no process {pid} to own the emulated cluster")
    return f"{PREFIX}-{pid}-{start}"


def _owner_of(name: str) -> tuple[int, int] | None:
    """``(pid, start time)`` of a namespace name of ours, ``None`` for any other name."""
    match = re.fullmatch(rf"{re.escape(PREFIX)}-(\d+)-(\d+)-\d+-(?:sw|n\d+)", name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _owner_alive(pid: int, start: int) -> bool:
    return _start_time(pid) == start


# -- ip / tc -----------------------------------------------------------------------------------


def _ip(*args: str, check: bool = True) -> str:
    """Run ``ip ARGS``; its stdout. Raises :class:`EmulationError` with ip's message."""
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise EmulationError(f"`ip {' '.join(args)}` failed: {result.stderr.strip()}")
    return result.stdout


def _tc(namespace: str, *args: str, check: bool = True) -> str:
    """Run ``tc`` in the named ``namespace`` (always one of ours: never the host's); its stdout."""
    result = subprocess.run(["tc", "-n", namespace, *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise EmulationError(
            f"`tc -n {namespace} {' '.join(args)}` failed: {result.stderr.strip()}"
        )
    return result.stdout


def format_rate(bits_per_s: float) -> str:
    """A rate in ``tc`` notation: ``1kbit``, ``2.5gbit``."""
    for unit, scale in (("tbit", 1e12), ("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits_per_s >= scale:
            return f"{bits_per_s / scale:g}{unit}"
    return f"{bits_per_s:g}bit"


def _end_faults(namespace: str, device: str, rate_bits: float | None) -> list[str]:
    """How one end of a link differs from what the cluster made: down, or queued differently
    (another rate, ``netem``); ``[]`` when it is as made (or cannot be read)."""
    try:
        (link,) = json.loads(_ip("-j", "-n", namespace, "link", "show", "dev", device))
        qdiscs = json.loads(_tc(namespace, "-j", "qdisc", "show", "dev", device) or "[]")
    except (EmulationError, ValueError):
        return []
    faults = []
    if "UP" not in link.get("flags", []):
        faults.append("down")
    elif link.get("operstate") not in ("UP", "UNKNOWN"):
        faults.append("without carrier")
    root = next((q for q in qdiscs if q.get("root")), {})
    kind, options = root.get("kind"), root.get("options", {})
    if kind == "tbf":
        rate = float(options.get("rate", 0)) * 8  # tc's JSON gives bytes per second
        if rate_bits is None or abs(rate - rate_bits) > 0.01 * rate_bits:
            faults.append(f"shaped to {format_rate(rate)}")
    elif kind == "netem":
        faults.append("netem " + " ".join(f"{k} {v}" for k, v in options.items()))
    elif rate_bits is not None:
        faults.append(f"unshaped ({kind})")
    return faults


def _set_rate(namespace: str, device: str, rate_bits: float | None, burst: int | None) -> None:
    """Shape ``device`` to ``rate_bits`` with ``tbf`` (bucket ``burst`` bytes, default 1 ms at
    the rate and at least 16 KiB); ``None`` removes the shaping."""
    if rate_bits is None:
        _tc(namespace, "qdisc", "del", "dev", device, "root", check=False)
        return
    rate = int(rate_bits)
    burst = burst or max(16 * 1024, int(rate / 8 * 1e-3))
    _tc(
        namespace,
        "qdisc",
        "replace",
        "dev",
        device,
        "root",
        "tbf",
        "rate",
        f"{rate}bit",
        "burst",
        str(burst),
        "latency",
        "200ms",
    )


def shape_own_link(bandwidth: str | None) -> None:
    """From a process inside an emulated node: set this node's link to ``bandwidth`` (``tc``
    notation) in both directions, or remove the shaping (``None``). A benchmark changes the
    rate between measurements this way, without restarting the cluster; do it while the link
    is idle (packets queued in the old shaper are dropped and resent).

    Raises:
        EmulationError: not inside a node of an emulated cluster (``LGD_EMULATED_NODE`` and
            ``LGD_EMULATED_SWITCH`` unset), or ``tc`` failed.
    """
    node = os.environ.get("LGD_EMULATED_NODE", "")
    namespace = os.environ.get("LGD_EMULATED_NAMESPACE", "")
    switch = os.environ.get("LGD_EMULATED_SWITCH", "")
    # Both ends are named namespaces of an emulated cluster: never this process's own namespace
    # by default, so that a stray call outside a node cannot shape the host's interface.
    if not node.isdigit() or _owner_of(namespace) is None or _owner_of(switch) is None:
        raise EmulationError(
            "shape_own_link works inside a node of an emulated cluster (python -m "
            "lightning_gnn_dist emulate): LGD_EMULATED_NODE, LGD_EMULATED_NAMESPACE and "
            "LGD_EMULATED_SWITCH are not set"
        )
    rate = parse_rate(bandwidth) if bandwidth is not None else None
    _set_rate(namespace, INTERFACE, rate, None)  # upload: the node's end
    _set_rate(switch, f"p{int(node)}", rate, None)  # download: the switch's end


def list_namespaces() -> list[str]:
    """Names of every named network namespace (``ip netns list``)."""
    if shutil.which("ip") is None:
        return []
    return [line.split()[0] for line in _ip("netns", "list", check=False).splitlines() if line]


def _namespace_pids(namespace: str) -> list[int]:
    return [int(p) for p in _ip("netns", "pids", namespace, check=False).split() if p.isdigit()]


def _remove_namespace(namespace: str) -> None:
    """End every process inside ``namespace`` (SIGKILL) and delete it."""
    for _ in range(50):  # processes may fork while we kill: repeat until none is left
        pids = [pid for pid in _namespace_pids(namespace) if pid != os.getpid()]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    _ip("netns", "delete", namespace, check=False)


def _remove_owned(token: str) -> list[str]:
    """Delete every namespace of the owner ``token`` (nodes first, then the switch)."""
    names = sorted(
        (n for n in list_namespaces() if n.startswith(token + "-")), key=lambda n: n.endswith("sw")
    )
    for name in names:
        _remove_namespace(name)
    return names


def reap_stale_namespaces() -> list[str]:
    """Remove the namespaces of emulated clusters whose owner process is gone (killed, crashed),
    with every process still inside them; returns their names. Clusters of live owners (another
    user's run) are left alone."""
    stale = []
    for name in list_namespaces():
        owner = _owner_of(name)
        if owner is not None and not _owner_alive(*owner):
            stale.append(name)
    for name in sorted(stale, key=lambda n: n.endswith("sw")):
        _remove_namespace(name)
    return stale


# -- what the machine offers -------------------------------------------------------------------


def _effective_capabilities() -> int:
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def missing_requirements(shaping: bool = True, pinning: bool = True) -> list[str]:
    """What this machine lacks for an emulated cluster, each as a phrase (empty: nothing).

    Args:
        shaping: links are shaped (needs ``tc``).
        pinning: nodes are pinned to cores (needs ``taskset``).
    """
    if not sys.platform.startswith("linux"):
        return [f"Linux network namespaces (this is {sys.platform})"]
    missing = []
    if shutil.which("ip") is None:
        missing.append("the `ip` command (iproute2: apt-get install iproute2)")
    if shaping and shutil.which("tc") is None:
        missing.append("the `tc` command (iproute2: apt-get install iproute2)")
    if pinning and shutil.which("taskset") is None:
        missing.append("the `taskset` command (util-linux)")
    capabilities = _effective_capabilities()
    lacking = [name for name, bit in _CAPABILITIES.items() if not capabilities >> bit & 1]
    if lacking:
        missing.append(
            f"root privileges ({' and '.join(lacking)}; run it as root, e.g. `sudo -E env "
            f'PATH="$PATH" python -m lightning_gnn_dist emulate ...`)'
        )
    return missing


_UNAVAILABLE: list[str | None] = []


def emulation_unavailable_reason() -> str | None:
    """Why no emulated cluster can be made here (``None``: it can). Checks the requirements,
    then makes and removes a two-node cluster with shaped links (once per process)."""
    if not _UNAVAILABLE:
        missing = missing_requirements()
        reason = f"the emulated cluster needs {'; '.join(missing)}" if missing else None
        if reason is None:
            try:
                with EmulatedCluster(2, bandwidth="1gbit", reaper=False):
                    pass
            except (EmulationError, OSError) as err:
                reason = f"an emulated cluster could not be made: {err}"
        _UNAVAILABLE.append(reason)
    return _UNAVAILABLE[0]


def parse_rate(text: str) -> float:
    """A link rate in ``tc`` notation as bits per second: ``100mbit``, ``2.5gbit``, ``1gbit``
    (SI prefixes, bits); ``bps``/``kbps``/``mbps``/``gbps`` are BYTES per second, as in ``tc``.

    Raises:
        ValueError: ``text`` is no rate, or not positive.
    """
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*([a-zA-Z]+)\s*", str(text))
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _RATE_UNITS or float(match.group(1)) <= 0:
        raise ValueError(
            f"bandwidth {text!r}: write a positive number and a unit, e.g. 100mbit, 1gbit, 10gbit "
            f"(units: {', '.join(_RATE_UNITS)}; *bps are bytes per second as in tc)"
        )
    return float(match.group(1)) * _RATE_UNITS[unit]


def _cpu_sets(nodes: int, cpus_per_node: int) -> tuple[list[list[int]], bool]:
    """Cores of each node, dealt round-robin from this process's affinity; whether nodes share."""
    available = sorted(os.sched_getaffinity(0))
    sets = [
        [available[(node * cpus_per_node + k) % len(available)] for k in range(cpus_per_node)]
        for node in range(nodes)
    ]
    return sets, nodes * cpus_per_node > len(available)


# -- the cluster -------------------------------------------------------------------------------


_CLUSTER_NUMBERS = itertools.count()


class EmulatedCluster:
    """``nodes`` emulated machines on this one: network namespaces on a virtual switch.

    Use it as a context manager (everything it made is removed on exit, also after an
    exception or Ctrl-C)::

        with EmulatedCluster(2, bandwidth="1gbit", cpus_per_node=1) as cluster:
            codes = run_nodes(cluster, [cluster.exec_prefix(i) + ["hostname"] for i in range(2)])

    Args:
        nodes: number of nodes (≥ 1).
        bandwidth: rate of every node's link in each direction, ``tc`` notation (``1gbit``;
            see :func:`parse_rate`); ``None``: unshaped veth links. (default: ``None``)
        cpus_per_node: cores each node's processes are pinned to (``taskset``), dealt
            round-robin from this process's CPU affinity; when ``nodes * cpus_per_node`` exceeds
            the cores, nodes share cores (:attr:`oversubscribed`). ``None``: no pinning.
            (default: ``None``)
        burst: ``tbf`` bucket size in bytes (default: 1 ms at the rate, at least 16 KiB).
        reaper: start the reaper that removes the namespaces if this process dies without doing
            so itself. (default: ``True``)

    Raises:
        ValueError: bad ``nodes``, ``bandwidth`` or ``cpus_per_node``.
        EmulationError: (on entry) what the machine lacks, or the ``ip``/``tc`` command that
            failed; nothing is left behind.
    """

    def __init__(
        self,
        nodes: int,
        bandwidth: str | None = None,
        cpus_per_node: int | None = None,
        burst: int | None = None,
        reaper: bool = True,
    ) -> None:
        if not isinstance(nodes, int) or not 1 <= nodes <= 250:
            raise ValueError(f"nodes={nodes!r}: give an integer from 1 to 250")
        self.rate_bits = parse_rate(bandwidth) if bandwidth is not None else None
        if cpus_per_node is not None and (not isinstance(cpus_per_node, int) or cpus_per_node < 1):
            raise ValueError(f"cpus_per_node={cpus_per_node!r}: give a positive integer or None")
        self.nodes, self.bandwidth, self.cpus_per_node = nodes, bandwidth, cpus_per_node
        self.burst = burst
        self.cpu_sets, self.oversubscribed = (
            _cpu_sets(nodes, cpus_per_node) if cpus_per_node else (None, False)
        )
        # owner and a per-process number: two clusters of one process never share a name
        self.token = f"{_owner_token(os.getpid())}-{next(_CLUSTER_NUMBERS)}"
        self.switch = f"{self.token}-sw"
        self.namespaces = [f"{self.token}-n{i}" for i in range(nodes)]
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(nodes)]
        self._use_reaper = reaper
        self._reaper: subprocess.Popen | None = None
        self._created = False

    def __repr__(self) -> str:
        return (
            f"EmulatedCluster(nodes={self.nodes}, bandwidth={self.bandwidth!r}, "
            f"cpus_per_node={self.cpus_per_node}, namespaces={self.token}-*)"
        )

    @property
    def master_address(self) -> str:
        """Node 0's address: where the rendezvous listens."""
        return self.addresses[0]

    # life cycle

    def __enter__(self) -> EmulatedCluster:
        self.create()
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    def create(self) -> None:
        """Make the switch, the nodes and their links; on any failure remove what was made.
        Does nothing when the cluster exists."""
        if self._created:
            return
        missing = missing_requirements(self.rate_bits is not None, self.cpu_sets is not None)
        if missing:
            raise EmulationError(f"the emulated cluster needs {'; '.join(missing)}")
        reap_stale_namespaces()
        if self._use_reaper:
            self._start_reaper()  # before the first namespace: a SIGKILL from now on is covered
        self._created = True
        try:
            _ip("netns", "add", self.switch)
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
            for i, namespace in enumerate(self.namespaces):
                self._add_node(i, namespace)
        except BaseException:
            self.destroy()
            raise

    def _add_node(self, i: int, namespace: str) -> None:
        port = f"p{i}"  # the switch's end of the node's link
        _ip("netns", "add", namespace)
        _ip(
            "-n",
            self.switch,
            "link",
            "add",
            port,
            "type",
            "veth",
            "peer",
            "name",
            INTERFACE,
            "netns",
            namespace,
        )
        _ip("-n", self.switch, "link", "set", port, "master", "br0")
        _ip("-n", self.switch, "link", "set", port, "up")
        _ip("-n", namespace, "addr", "add", f"{self.addresses[i]}/24", "dev", INTERFACE)
        _ip("-n", namespace, "link", "set", INTERFACE, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        if self.rate_bits is not None:
            _set_rate(namespace, INTERFACE, self.rate_bits, self.burst)  # the node's upload
            _set_rate(self.switch, port, self.rate_bits, self.burst)  # the node's download

    def set_bandwidth(self, bandwidth: str | None) -> None:
        """Change every link's rate (``tc`` notation; ``None``: unshaped) on the running
        cluster; do it while the links are idle (queued packets are dropped and resent)."""
        self.rate_bits = parse_rate(bandwidth) if bandwidth is not None else None
        self.bandwidth = bandwidth
        for i, namespace in enumerate(self.namespaces):
            _set_rate(namespace, INTERFACE, self.rate_bits, self.burst)
            _set_rate(self.switch, f"p{i}", self.rate_bits, self.burst)

    def destroy(self) -> None:
        """End every process inside the cluster's namespaces and remove them (idempotent)."""
        if self._created:
            _remove_owned(self.token)
            self._created = False
        if self._reaper is not None:
            with contextlib.suppress(ProcessLookupError):
                self._reaper.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._reaper.wait(timeout=10)
            self._reaper = None

    def _start_reaper(self) -> None:
        self._reaper = subprocess.Popen(
            [
                sys.executable,
                "-I",
                os.path.abspath(__file__),
                "--reap",
                *self.token.split("-")[-3:-1],  # the owner's pid and start time
            ],
            start_new_session=True,  # Ctrl-C in the terminal must not reach it
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )

    # what runs on it

    def exec_prefix(self, node: int) -> list[str]:
        """Command prefix that runs a program inside ``node``'s namespace, on its cores."""
        prefix = ["ip", "netns", "exec", self.namespaces[node]]
        if self.cpu_sets is not None:
            prefix += ["taskset", "-c", ",".join(map(str, self.cpu_sets[node]))]
        return prefix

    def node_environment(self, node: int, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) without an outer launcher's variables,
        with gloo (and NCCL) bound to the node's interface, and ``LGD_EMULATED_NODE`` (this
        node), ``LGD_EMULATED_NODES`` (the count), ``LGD_EMULATED_NAMESPACE`` and
        ``LGD_EMULATED_SWITCH`` (the node's and the switch's namespaces, for
        :func:`shape_own_link`). torch's C++ log level is ``ERROR`` unless ``base`` sets
        ``TORCH_CPP_LOG_LEVEL``: c10d's store warns on every connection that it cannot name the
        client's host (``[c10d] The hostname of the client socket cannot be retrieved``; a
        namespace resolves no names), which is all that level printed on the emulated nodes."""
        env = {
            k: v
            for k, v in (os.environ if base is None else base).items()
            if k not in _LAUNCHER_VARIABLES and not k.startswith(_LAUNCHER_PREFIXES)
        }
        env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
        env.update(
            GLOO_SOCKET_IFNAME=INTERFACE,
            NCCL_SOCKET_IFNAME=INTERFACE,
            TP_SOCKET_IFNAME=INTERFACE,
            LGD_EMULATED_NODE=str(node),
            LGD_EMULATED_NODES=str(self.nodes),
            LGD_EMULATED_NAMESPACE=self.namespaces[node],
            LGD_EMULATED_SWITCH=self.switch,
        )
        return env

    def link_faults(self) -> dict[int, str]:
        """Nodes whose link is not as the cluster made it (down, or shaped or queued
        differently at either end), each with what differs, e.g. ``{1: "down at the switch's
        end"}`` or ``{1: "shaped to 1kbit at both ends"}``; ``{}`` when every link is as made.
        A rate changed by :meth:`set_bandwidth` is as made; one changed by
        :func:`shape_own_link` is not."""
        faults = {}
        for i, namespace in enumerate(self.namespaces):
            ends = {
                "the node's end": _end_faults(namespace, INTERFACE, self.rate_bits),
                "the switch's end": _end_faults(self.switch, f"p{i}", self.rate_bits),
            }
            phrases: dict[str, list[str]] = {}
            for end, found in ends.items():
                for phrase in found:
                    phrases.setdefault(phrase, []).append(end)
            if phrases:
                faults[i] = ", ".join(
                    f"{phrase} at {'both ends' if len(where) == 2 else where[0]}"
                    for phrase, where in phrases.items()
                )
        return faults

    def link_bytes(self) -> list[dict[str, int]]:
        """Per node, bytes its link carried so far: ``{"tx_bytes", "rx_bytes"}`` (the veth
        counters of the node's interface: tx = sent by the node, rx = received)."""
        counters = []
        for namespace in self.namespaces:
            stats = json.loads(_ip("-j", "-s", "-n", namespace, "link", "show", "dev", INTERFACE))
            stats64 = stats[0]["stats64"]
            counters.append(
                {"tx_bytes": int(stats64["tx"]["bytes"]), "rx_bytes": int(stats64["rx"]["bytes"])}
            )
        return counters


# -- the reaper (this file run as a script) ----------------------------------------------------


def _reap_when_gone(pid: int, start: int) -> int:
    """Wait until the owner (``pid`` started at ``start``) ends, then remove its namespaces and
    every process in them. Ends quietly on SIGTERM: the owner removed them itself."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        handle = os.pidfd_open(pid)
    except (OSError, AttributeError):  # already gone, or no pidfd: poll
        handle = None
    if handle is not None and _owner_alive(pid, start):
        select.select([handle], [], [])  # readable once the process has ended
    else:
        while _owner_alive(pid, start):
            time.sleep(0.2)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # from here on, finish the job
    _remove_owned(f"{PREFIX}-{pid}-{start}")  # every cluster of the owner
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--reap":
        sys.exit(_reap_when_gone(int(sys.argv[2]), int(sys.argv[3])))
    sys.exit(f"usage: {sys.argv[0]} --reap PID START_TIME")

"""What a benchmark ran on: hardware, software versions, source commit and load averages."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

#: Packages whose versions every report records (absent ones as ``None``).
PACKAGES = (
    "lightning-gnn-dist",
    "torch",
    "torch-geometric",
    "pytorch-lightning",
    "lightning",
    "numpy",
)


def load_average() -> list[float]:
    """The 1-, 5- and 15-minute load averages (runnable processes, averaged over that time)."""
    return [round(value, 2) for value in os.getloadavg()]


def _proc_field(path: str, key: str) -> str | None:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def git(*args: str) -> str | None:
    """Output of ``git args`` in the repository (``None`` when git or the repository is absent)."""
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _accelerators() -> list[str]:
    """GPU names when torch is already imported and sees CUDA devices (never imports torch)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def machine_info(packages: Iterable[str] = ()) -> dict[str, Any]:
    """The machine, the software and the source a benchmark ran with.

    Args:
        packages: versions to record besides :data:`PACKAGES` (e.g. ``("pymetis", "mtkahypar")``).

    Returns:
        ``cpu`` (model name), ``logical_cores``, ``usable_cores`` (this process's CPU affinity),
        ``memory_gib`` (total RAM, GiB), ``accelerators`` (GPU names), ``platform``, ``python``,
        ``versions`` (package → version), ``threads`` (``OMP_NUM_THREADS``, ``GLOO_SOCKET_IFNAME``),
        ``malloc`` (glibc's ``MALLOC_*`` tunables set in the environment: every process the
        benchmark starts, a peer's too, inherits them), ``git_commit`` and ``git_dirty``
        (uncommitted changes in the work tree).
    """
    memory_kib = _proc_field("/proc/meminfo", "MemTotal")
    status = git("status", "--porcelain")
    affinity = getattr(os, "sched_getaffinity", None)
    return {
        "cpu": _proc_field("/proc/cpuinfo", "model name") or platform.processor() or None,
        "logical_cores": os.cpu_count(),
        "usable_cores": len(affinity(0)) if affinity else os.cpu_count(),
        "memory_gib": round(int(memory_kib.split()[0]) / 2**20, 1) if memory_kib else None,
        "accelerators": _accelerators(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in (*PACKAGES, *packages)},
        "threads": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME")},
        "malloc": {k: v for k, v in sorted(os.environ.items()) if k.startswith("MALLOC_")},
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
    }


def describe_machine(machine: dict[str, Any]) -> str:
    """One sentence naming the machine and the main versions; fields that a report lacks (older
    reports recorded less) are left out."""
    parts = []
    cores = machine.get("logical_cores")
    hardware = ", ".join(
        p
        for p in (
            machine.get("cpu"),
            f"{cores} cores" if cores else None,
            f"{machine['memory_gib']} GiB" if machine.get("memory_gib") else None,
            ", ".join(machine.get("accelerators") or []) or None,
            machine.get("platform"),
        )
        if p
    )
    if hardware:
        parts.append(f"Machine: {hardware}")
    versions = machine.get("versions") or {}
    names = {"torch": "torch", "torch-geometric": "PyG", "pytorch-lightning": "Lightning"}
    software = [f"Python {machine['python']}"] if machine.get("python") else []
    software += [f"{label} {versions[k]}" for k, label in names.items() if versions.get(k)]
    if software:
        parts.append(", ".join(software))
    if machine.get("malloc"):
        tunables = ", ".join(f"{k}={v}" for k, v in machine["malloc"].items())
        parts.append(f"every process with {tunables}")
    if machine.get("git_commit"):
        dirty = " (with uncommitted changes)" if machine.get("git_dirty") else ""
        parts.append(f"commit {machine['git_commit'][:10]}{dirty}")
    return "; ".join(parts) + "." if parts else ""

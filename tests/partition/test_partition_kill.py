"""``SIGKILL`` during partitioning: no orphaned worker, and the next run removes the temporary
folder the killed run could not, then succeeds. The killed ``partition`` runs in a forked process
(a real process to kill, without a second interpreter's import time)."""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import signal
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from lightning_gnn_dist.cli import main
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.partition import RandomPartitioner
from lightning_gnn_dist.partition.backends._child import TEMP_PREFIX
from lightning_gnn_dist.partition.store import PartitionStore, partition_to_store

REPO = Path(__file__).resolve().parents[2]
SPEC = "sbm?num_nodes=60&features=4"


def _wait_for(condition: Callable[[], object], what: str, timeout: float = 60) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _run_quietly(target: Callable[[], object]) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    target()


def _fork(target: Callable[[], object]) -> mp.Process:
    process = mp.get_context("fork").Process(target=_run_quietly, args=(target,), daemon=False)
    process.start()
    return process


def _kill(process: mp.Process) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.join(10)
    assert process.exitcode == -signal.SIGKILL


def _partition_temp_folders() -> list[Path]:
    return sorted(Path(tempfile.gettempdir()).glob(f"{TEMP_PREFIX}*"))


@pytest.fixture
def hanging_mtkahypar(tmp_path) -> Path:
    """A folder with an ``mtkahypar`` module that hangs inside the partition worker only (the
    worker runs with ``LGD_PARTITION_PARENT_PID`` set), so the kill lands while it runs."""
    folder = tmp_path / "fake"
    folder.mkdir()
    (folder / "mtkahypar.py").write_text(
        textwrap.dedent(
            """
            import os, time
            if os.environ.get("LGD_PARTITION_PARENT_PID"):
                time.sleep(600)
            """
        )
    )
    return folder


def test_killed_partition_leaves_no_worker_and_the_next_run_cleans_up(
    tmp_path, capsys, hanging_mtkahypar
):
    out = tmp_path / "store"
    argv = ["partition", "--dataset", SPEC, "-p", "2", "-m", "hypergraph", "--out", str(out)]

    def partition() -> None:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(hanging_mtkahypar), str(REPO)])
        main(argv)

    parent = _fork(partition)
    worker = _wait_for(
        lambda: [
            p
            for p in psutil.Process(parent.pid).children()
            if "_worker.py" in " ".join(p.cmdline())
        ],
        "the partition worker",
    )[0]
    [folder] = _wait_for(_partition_temp_folders, "the worker's temporary folder")
    _kill(parent)

    gone, alive = psutil.wait_procs([worker], timeout=5)
    assert alive == [], "the partition worker outlived its killed parent"
    assert folder.is_dir() and not out.exists()  # what SIGKILL leaves; nobody can clean it up

    assert main([*argv, "--json"]) == 0  # the next run, with the real Mt-KaHyPar
    capsys.readouterr()
    assert not folder.exists() and _partition_temp_folders() == []
    PartitionStore.open(out).verify(full=True)


def _write_until_killed(out: Path) -> None:
    real_save = LocalPartition.save

    def save(self, file):
        real_save(self, file)
        if self.part_id == 0:
            time.sleep(600)  # killed here, with part 0 written and part 1 not

    LocalPartition.save = save
    partition_to_store(load_dataset(SPEC), RandomPartitioner(), 2, out)


def test_killed_store_write_is_removed_by_the_next_run(tmp_path, capsys):
    out = tmp_path / "store"
    writer = _fork(functools.partial(_write_until_killed, out))

    def half_written() -> list[Path]:
        return [p for p in tmp_path.glob(".store.tmp-*") if (p / "part-00000.pt").is_file()]

    [temporary] = _wait_for(half_written, "part 0 in the temporary store")
    _kill(writer)
    assert temporary.is_dir() and not out.exists()

    argv = ["partition", "--dataset", SPEC, "-p", "2", "-m", "random", "--out", str(out)]
    assert main([*argv, "--json"]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]
    PartitionStore.open(out).verify(full=True)

"""The leftover detector behind the autouse ``_nothing_left_behind`` fixture finds what it must
(children, orphans, temporary folders) and nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests import leaks

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_a_child_left_running_is_reported_and_killed():
    child = subprocess.Popen(SLEEP)
    [described] = leaks.lingering_processes(grace=0.2)
    assert f"pid {child.pid}" in described
    assert child.wait(10) != 0  # killed


def test_an_orphan_of_the_session_is_found_by_its_marker():
    spawn = (
        "import subprocess as s, sys; "
        "print(s.Popen(sys.argv[1:], stdout=s.DEVNULL, stderr=s.DEVNULL).pid)"
    )
    parent = subprocess.run(
        [sys.executable, "-c", spawn, *SLEEP], capture_output=True, text=True, check=True
    )
    orphan = int(parent.stdout)  # its parent has exited: it was re-parented
    [described] = leaks.lingering_processes(grace=0.2)
    assert f"pid {orphan}" in described


def test_a_finished_child_is_not_reported():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert leaks.lingering_processes(grace=0) == []


def test_new_temporary_folders_are_reported_and_removed():
    before = leaks.temp_entries()
    ours = Path(tempfile.mkdtemp(prefix="lgd-partition-"))
    full = Path(tempfile.mkdtemp())
    (full / "data.npy").write_bytes(b"x")
    empty = Path(tempfile.mkdtemp())  # e.g. Lightning's spawn hand-over folder: tolerated
    loose = Path(tempfile.mkstemp(suffix=".py")[1])  # e.g. PyG's generated modules: tolerated
    assert leaks.new_temp_entries(before) == sorted([ours.name, full.name])
    assert not any(p.exists() for p in (ours, full, empty, loose))
    assert leaks.temp_entries() == before


def test_store_temporary_folders_are_found_anywhere_below(tmp_path):
    hidden = tmp_path / "a" / ".store.tmp-host-1-abc"
    hidden.mkdir(parents=True)
    (tmp_path / ".keep").mkdir()
    assert leaks.store_temp_folders(tmp_path) == [hidden]
    hidden.rmdir()


def test_the_session_has_its_own_temporary_folder():
    assert tempfile.gettempdir() == os.environ["TMPDIR"] == os.environ["LGD_TEST_TMPDIR"]
    assert Path(tempfile.gettempdir()).name.startswith("lgd-tests-")

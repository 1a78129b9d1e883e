"""Store integrity end to end: every corruption of every file is refused before reuse (CLI and
datamodule) or before a rank trains on its part, ``--force`` rebuilds atomically, stores follow
the umask, stale temporary folders of killed runs are removed, concurrent writers agree."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import lightning_gnn_dist.partition.store as store_module
from lightning_gnn_dist.cli import main
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.lightning.datamodule import GraphPartitionDataModule
from lightning_gnn_dist.partition import RandomPartitioner
from lightning_gnn_dist.partition.store import (
    PartitionStore,
    PartitionStoreError,
    partition_to_store,
)
from lightning_gnn_dist.utils.tempdirs import _host

SPEC = "sbm?num_nodes=40&features=4&num_classes=3"
PARTS = 2
FILES = ("meta.json", "assignment.npy", "part-00000.pt", "part-00001.pt")


def cli(capsys, out: Path, *extra: str) -> tuple[int, list[str]]:
    argv = ["partition", "--dataset", SPEC, "-p", str(PARTS), "-m", "random", "--out", str(out)]
    try:
        code = main([*argv, *extra, "--json"])
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.err.splitlines()


def contents(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def truncate(file: Path) -> None:
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


def flip(file: Path) -> None:
    raw = bytearray(file.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    file.write_bytes(bytes(raw))


def zero_fill(file: Path) -> None:
    file.write_bytes(bytes(file.stat().st_size))


DAMAGE = {
    "truncated": truncate,
    "bit-flipped": flip,
    "zero-filled": zero_fill,
    "deleted": Path.unlink,
}


def edit_meta(key: str, change: Callable[[Any], Any]) -> Callable[[Path], None]:
    def damage(store: Path) -> None:
        meta = json.loads((store / "meta.json").read_text())
        meta[key] = change(meta[key])
        (store / "meta.json").write_text(json.dumps(meta, indent=1))

    return damage


def swap_parts(store: Path) -> None:
    a, b = store / "part-00000.pt", store / "part-00001.pt"
    raw_a, raw_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(raw_b)
    b.write_bytes(raw_a)


CORRUPTIONS = {
    **{
        f"{name}-{how}": (name, lambda store, name=name, fn=fn: fn(store / name))
        for name in FILES
        for how, fn in DAMAGE.items()
    },
    "parts-swapped": ("part-0000", swap_parts),
    "meta-mask_counts": (
        "meta.json",
        edit_meta("mask_counts", lambda c: {**c, "train_mask": [1, 1]}),
    ),
    "meta-num_classes": ("meta.json", edit_meta("num_classes", lambda n: n + 5)),
    "meta-num_features": ("meta.json", edit_meta("num_features", lambda n: n * 2)),
    "meta-files": (
        "meta.json",
        edit_meta("files", lambda f: {**f, "part-00000.pt": "0" * 64}),
    ),
}


@pytest.fixture
def store(tmp_path, capsys) -> Path:
    out = tmp_path / "store"
    assert cli(capsys, out)[0] == 0
    return out


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_partition_refuses_a_corrupt_store_and_force_rebuilds_it(store, capsys, corruption):
    original = contents(store)
    names_file, damage = CORRUPTIONS[corruption]
    damage(store)
    damaged = contents(store)

    code, err = cli(capsys, store)
    assert code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert str(store / names_file) in err[0] and "--force" in err[0], err[0]
    assert contents(store) == damaged, "a refused store is left as it is"

    code, err = cli(capsys, store, "--force")
    assert code == 0, err
    rebuilt = contents(store)
    assert rebuilt.keys() == original.keys()
    for name in FILES[1:]:  # the same partition, bit for bit (meta.json has new timings)
        assert rebuilt[name] == original[name], name
    PartitionStore.open(store).verify(full=True)
    assert sorted(p.name for p in store.parent.iterdir()) == ["store"]


def test_meta_edit_that_would_change_training_is_refused_by_the_datamodule(tmp_path, store):
    """The issue's case: an edited ``mask_counts`` trained with a wrong loss scale."""
    edit_meta("mask_counts", lambda c: {**c, "train_mask": [c["train_mask"][0] * 100, 0]})(store)
    module = GraphPartitionDataModule(SPEC, method="random", num_parts=PARTS, store=str(store))
    with pytest.raises(PartitionStoreError, match="meta.json was modified") as info:
        module.prepare_data()
    assert "force=True" in str(info.value)
    with pytest.raises(PartitionStoreError, match="meta.json was modified"):
        module.setup("fit")


@pytest.mark.parametrize("verify_dataset", [True, False])
@pytest.mark.parametrize("name", ["assignment.npy", "part-00001.pt"])
def test_datamodule_prepare_data_refuses_missing_or_resized_files(store, verify_dataset, name):
    truncate(store / name)
    module = GraphPartitionDataModule(
        SPEC, method="random", num_parts=PARTS, store=str(store), verify_dataset=verify_dataset
    )
    with pytest.raises(PartitionStoreError, match=f"{name} has \\d+ bytes instead of"):
        module.prepare_data()
    (store / name).unlink()
    with pytest.raises(PartitionStoreError, match=f"{name} is missing"):
        module.prepare_data()


@pytest.mark.parametrize("verify_dataset", [True, False])
def test_a_flipped_byte_in_the_assignment_is_refused_before_training(store, verify_dataset):
    """Issue 18, item 17: no rank reads assignment.npy, so prepare_data hashes it (8 bytes per
    vertex); same size, other bytes is caught there."""
    flip(store / "assignment.npy")
    module = GraphPartitionDataModule(
        SPEC, method="random", num_parts=PARTS, store=str(store), verify_dataset=verify_dataset
    )
    with pytest.raises(PartitionStoreError, match="assignment.npy does not match its checksum"):
        module.prepare_data()


def test_a_rank_hashes_the_part_it_loads(store):
    """Same size, other bytes: only the rank that loads the part can (and does) tell."""
    flip(store / "part-00000.pt")
    module = GraphPartitionDataModule(SPEC, method="random", num_parts=PARTS, store=str(store))
    module.prepare_data()  # the cheap check passes: every size is unchanged
    store_obj = PartitionStore.open(store)
    with pytest.raises(PartitionStoreError, match="part-00000.pt does not match its checksum"):
        store_obj.load_part(0)
    assert store_obj.load_part(1).part_id == 1


def test_datamodule_force_rebuilds(store):
    flip(store / "part-00001.pt")
    module = GraphPartitionDataModule(
        SPEC, method="random", num_parts=PARTS, store=str(store), force=True
    )
    assert "force=True" in repr(module)
    module.prepare_data()
    PartitionStore.open(store).verify(full=True)
    assert module.store.load_part(1).part_id == 1


# --------------------------------------------------------------------------------------------
# --force: atomic replacement


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "rename-aside"])
def test_force_replaces_the_old_store_only_when_the_new_one_is_complete(
    tmp_path, monkeypatch, exchange
):
    data = load_dataset(SPEC)
    path = tmp_path / "store"
    partition_to_store(data, RandomPartitioner(seed=1), PARTS, path)
    old_meta = PartitionStore.open(path).meta
    real_save = LocalPartition.save

    def save(self, file):
        # while the new store is written, the old one is still complete and intact
        assert PartitionStore.open(path).meta == old_meta
        PartitionStore.open(path).verify(full=True)
        real_save(self, file)

    monkeypatch.setattr(LocalPartition, "save", save)
    if not exchange:
        monkeypatch.setattr(store_module.ctypes, "CDLL", lambda *a, **k: object())
    new = partition_to_store(data, RandomPartitioner(seed=2), PARTS, path, force=True)
    assert new.meta["settings"]["seed"] == 2
    assert PartitionStore.open(path).meta == new.meta
    PartitionStore.open(path).verify(full=True)
    assert [p.name for p in tmp_path.iterdir()] == ["store"]


def test_a_failed_force_keeps_the_old_store(tmp_path, monkeypatch):
    data = load_dataset(SPEC)
    path = tmp_path / "store"
    old = partition_to_store(data, RandomPartitioner(seed=1), PARTS, path)
    real_rename = os.rename

    def rename(src, dst):
        if Path(dst) == path and ".tmp-" in Path(src).name:
            raise OSError(28, "No space left on device")
        real_rename(src, dst)

    monkeypatch.setattr(store_module.ctypes, "CDLL", lambda *a, **k: object())  # rename-aside
    monkeypatch.setattr(store_module.os, "rename", rename)
    with pytest.raises(OSError, match="No space left"):
        partition_to_store(data, RandomPartitioner(seed=2), PARTS, path, force=True)
    assert PartitionStore.open(path).meta == old.meta
    PartitionStore.open(path).verify(full=True)
    assert [p.name for p in tmp_path.iterdir()] == ["store"]


def test_force_never_replaces_a_folder_that_is_not_a_store(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    code, err = cli(capsys, out, "--force")
    assert code == 2 and len(err) == 1 and "not a partition store" in err[0]
    assert contents(out) == {"notes.txt": b"keep me"}


def test_an_empty_folder_is_filled(tmp_path, capsys):
    out = tmp_path / "store"
    out.mkdir()
    assert cli(capsys, out)[0] == 0
    PartitionStore.open(out).verify(full=True)


# --------------------------------------------------------------------------------------------
# permissions and temporary folders


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_store_follows_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        store = partition_to_store(load_dataset(SPEC), RandomPartitioner(), PARTS, tmp_path / "s")
    finally:
        os.umask(old)
    assert store.path.stat().st_mode & 0o777 == 0o777 & ~umask
    for file in store.path.iterdir():
        assert file.stat().st_mode & 0o777 == 0o666 & ~umask, file.name


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_stale_temporary_folders_of_killed_runs_are_removed(tmp_path):
    dead, host = _dead_pid(), _host()
    stale = [
        tmp_path / f".store.tmp-{host}-{dead}-0badc0de",
        tmp_path / f".store.old-{host}-{dead}-1",
    ]
    kept = [
        tmp_path / f".store.tmp-{host}-{os.getpid()}-2",  # a live writer
        tmp_path / f".store.tmp-otherhost-{dead}-3",  # another host on a shared file system
        tmp_path / f".other.tmp-{host}-{dead}-4",  # another store
    ]
    for folder in stale + kept:
        folder.mkdir()
        (folder / "part-00000.pt").write_bytes(b"half")
    partition_to_store(load_dataset(SPEC), RandomPartitioner(), PARTS, tmp_path / "store")
    assert not any(folder.exists() for folder in stale)
    assert all(folder.exists() for folder in kept)
    for folder in kept:  # not ours to keep
        (folder / "part-00000.pt").unlink()
        folder.rmdir()


# --------------------------------------------------------------------------------------------
# two concurrent writers


class _SlowRandom(RandomPartitioner):
    """Holds every writer inside partitioning until all have started, so they really race."""

    def partition(self, data, num_parts):
        time.sleep(0.5)
        return super().partition(data, num_parts)


def _write(path: str, start) -> None:
    start.wait(30)
    partition_to_store(load_dataset(SPEC), _SlowRandom(), PARTS, path)


def test_two_concurrent_writers_leave_one_complete_store(tmp_path):
    ctx = mp.get_context("fork")
    start = ctx.Event()
    path = tmp_path / "store"
    writers = [ctx.Process(target=_write, args=(str(path), start)) for _ in range(2)]
    for writer in writers:
        writer.start()
    start.set()
    for writer in writers:
        writer.join(60)
    assert [writer.exitcode for writer in writers] == [0, 0]
    PartitionStore.open(path).verify(full=True)
    assert [p.name for p in tmp_path.iterdir()] == ["store"]

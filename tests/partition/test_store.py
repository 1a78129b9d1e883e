"""The on-disk partition store: atomic writes, fingerprinting, reuse, refusal, corruption."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import lightning_gnn_dist.partition.store as store_module
from lightning_gnn_dist.data.graph import graph_fingerprint
from lightning_gnn_dist.data.local import LocalPartition, build_local_partitions
from lightning_gnn_dist.partition import MetisPartitioner, Partitioner, RandomPartitioner
from lightning_gnn_dist.partition.metrics import partition_metrics
from lightning_gnn_dist.partition.store import (
    FORMAT_VERSION,
    PartitionStore,
    PartitionStoreError,
    partition_to_store,
)
from tests.helpers import random_graph

NUM_PARTS = 3


class CountingPartitioner(RandomPartitioner):
    """``random`` (same name and settings) that counts how often it really partitions."""

    calls = 0

    def partition(self, data, num_parts):
        CountingPartitioner.calls += 1
        return super().partition(data, num_parts)


class FailingPartitioner(Partitioner):
    name = "failing"

    def _partition(self, data, num_parts):
        raise RuntimeError("the partitioner crashed")


@pytest.fixture
def data():
    return random_graph(60, 240, seed=0, directed=False, features=4)


@pytest.fixture
def counting():
    CountingPartitioner.calls = 0
    return CountingPartitioner


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Contents and modification times of every file below ``directory``."""
    return {
        str(file.relative_to(directory)): (file.read_bytes(), file.stat().st_mtime_ns)
        for file in sorted(directory.rglob("*"))
        if file.is_file()
    }


def leftovers(parent: Path, name: str = "store") -> list[str]:
    """Temporary siblings ``.NAME.tmp-*`` of a store in ``parent``."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}.tmp-"))


def flip_byte(file: Path, offset: int | None = None) -> None:
    raw = bytearray(file.read_bytes())
    offset = len(raw) // 2 if offset is None else offset
    raw[offset] ^= 0xFF
    file.write_bytes(bytes(raw))


def assert_parts_equal(a: LocalPartition, b: LocalPartition) -> None:
    for key, value in vars(a).items():
        other = getattr(b, key)
        if isinstance(value, torch.Tensor):
            assert isinstance(other, torch.Tensor), key
            assert value.dtype == other.dtype and torch.equal(value, other), key
        else:
            assert value == other, key


# --------------------------------------------------------------------------------------------
# writing


def test_writes_a_complete_store(tmp_path, data):
    path = tmp_path / "store"
    partitioner = RandomPartitioner(seed=5)
    store = partition_to_store(data, partitioner, NUM_PARTS, path, dataset="random-60")

    names = {"meta.json", "assignment.npy", *(f"part-{p:05d}.pt" for p in range(NUM_PARTS))}
    assert {p.name for p in path.iterdir()} == names
    assert [p.name for p in tmp_path.iterdir()] == ["store"]  # no temporary sibling left

    meta = json.loads((path / "meta.json").read_text())
    assert meta == store.meta
    assert meta["format_version"] == FORMAT_VERSION
    assert meta["dataset"] == "random-60"
    assert meta["fingerprint"] == graph_fingerprint(data)
    assert meta["settings"] == {"method": "random", "seed": 5, "epsilon": 0.03, "num_parts": 3}
    assert meta["num_nodes"] == 60 and meta["num_edges"] == data.edge_index.size(1)
    assert meta["num_features"] == 4
    for name, digest in meta["files"].items():
        assert hashlib.sha256((path / name).read_bytes()).hexdigest() == digest
    assert set(meta["files"]) == names - {"meta.json"}

    expected = partitioner.partition(data, NUM_PARTS)
    np.testing.assert_array_equal(store.assignment(), expected)
    assert store.num_parts == NUM_PARTS
    assert store.metrics.to_dict() == partition_metrics(data, expected, NUM_PARTS).to_dict()
    for key in ("train_mask", "val_mask", "test_mask"):
        counts = meta["mask_counts"][key]
        assert len(counts) == NUM_PARTS and sum(counts) == int(data[key].sum())
        assert counts == np.bincount(expected[data[key].numpy()], minlength=NUM_PARTS).tolist()


def test_written_into_a_temporary_sibling_and_renamed(tmp_path, data, monkeypatch):
    path = tmp_path / "store"
    renames = []
    real_rename, real_save = os.rename, LocalPartition.save

    def save(self, file):
        assert not path.exists(), "the store appeared before it was complete"
        real_save(self, file)

    def rename(src, dst):
        src, dst = Path(src), Path(dst)
        assert not dst.exists()
        assert {p.name for p in src.iterdir()} >= {"meta.json", "assignment.npy", "part-00002.pt"}
        renames.append((src, dst))
        real_rename(src, dst)

    monkeypatch.setattr(LocalPartition, "save", save)
    monkeypatch.setattr(store_module.os, "rename", rename)
    partition_to_store(data, RandomPartitioner(), NUM_PARTS, path)

    [(src, dst)] = renames
    assert dst == path
    assert src.parent == path.parent and src.name.startswith(".store.tmp-")
    assert not src.exists() and leftovers(tmp_path) == []


def test_creates_missing_parent_directories(tmp_path, data):
    path = tmp_path / "a" / "b" / "store"
    partition_to_store(data, RandomPartitioner(), 2, path)
    assert PartitionStore.open(path).num_parts == 2


# --------------------------------------------------------------------------------------------
# reuse and refusal


def test_matching_store_is_reused_without_partitioning(tmp_path, data, counting):
    path = tmp_path / "store"
    first = partition_to_store(data, counting(seed=1), NUM_PARTS, path, dataset="g")
    assert counting.calls == 1
    before = snapshot(path)

    again = partition_to_store(data.clone(), counting(seed=1), NUM_PARTS, path, dataset="g")
    assert counting.calls == 1, "a matching store must be reused, not partitioned again"
    assert again.path == path and again.meta == first.meta
    assert snapshot(path) == before
    assert leftovers(tmp_path) == []


def _other_graph(data):
    return random_graph(60, 240, seed=1, directed=False, features=4)


def _other_features(data):
    other = data.clone()
    other.x = other.x + 1.0
    return other


def _other_labels(data):
    other = data.clone()
    other.y = (other.y + 1) % 3
    return other


@pytest.mark.parametrize(
    ("change", "make_data", "make_partitioner", "num_parts", "expected"),
    [
        ("dataset", _other_graph, lambda: RandomPartitioner(), NUM_PARTS, "dataset fingerprint"),
        ("features", _other_features, lambda: RandomPartitioner(), NUM_PARTS, "fingerprint"),
        ("labels", _other_labels, lambda: RandomPartitioner(), NUM_PARTS, "fingerprint"),
        ("num_parts", None, lambda: RandomPartitioner(), 2, "num_parts: stored 3, requested 2"),
        ("method", None, lambda: MetisPartitioner(), NUM_PARTS, "method: stored 'random'"),
        ("seed", None, lambda: RandomPartitioner(seed=7), NUM_PARTS, "seed: stored 0, requested 7"),
        (
            "epsilon",
            None,
            lambda: RandomPartitioner(epsilon=0.1),
            NUM_PARTS,
            "epsilon: stored 0.03",
        ),
    ],
)
def test_store_for_other_data_or_settings_is_refused_and_left_alone(
    tmp_path, data, change, make_data, make_partitioner, num_parts, expected
):
    path = tmp_path / "store"
    partition_to_store(data, RandomPartitioner(), NUM_PARTS, path, dataset="original")
    before = snapshot(path)

    partitioner = make_partitioner()
    calls = []
    real = partitioner.partition
    partitioner.partition = lambda *args: calls.append(args) or real(*args)
    other = data if make_data is None else make_data(data)
    with pytest.raises(PartitionStoreError, match="another dataset or settings") as info:
        partition_to_store(other, partitioner, num_parts, path, dataset="other")
    message = str(info.value)
    assert expected in message
    assert str(path) in message and "delete" in message
    if make_data is not None:
        assert "'original'" in message  # names the dataset the store was made for
    assert calls == [], "nothing is partitioned for a store that cannot be used"
    assert snapshot(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_check_matches_lists_every_difference(tmp_path, data):
    store = partition_to_store(data, RandomPartitioner(), NUM_PARTS, tmp_path / "store")
    settings = {**RandomPartitioner(seed=2, epsilon=0.5).settings(), "num_parts": 2}
    with pytest.raises(PartitionStoreError) as info:
        store.check_matches("0" * 64, settings)
    message = str(info.value)
    for part in ("dataset fingerprint", "num_parts", "seed", "epsilon"):
        assert part in message
    assert "method" not in message
    store.check_matches(graph_fingerprint(data), store.meta["settings"])  # no error


def test_directory_that_is_not_a_store_is_refused_and_left_alone(tmp_path, data, counting):
    path = tmp_path / "store"
    path.mkdir()
    (path / "notes.txt").write_text("mine")
    with pytest.raises(FileNotFoundError, match="not a partition store"):
        partition_to_store(data, counting(), 2, path)
    assert snapshot(path) == {"notes.txt": (b"mine", (path / "notes.txt").stat().st_mtime_ns)}
    assert counting.calls == 0
    with pytest.raises(FileNotFoundError, match="no meta.json"):
        PartitionStore.open(tmp_path / "absent")


# --------------------------------------------------------------------------------------------
# corruption


@pytest.fixture
def store(tmp_path, data):
    return partition_to_store(data, RandomPartitioner(), NUM_PARTS, tmp_path / "store")


def _assert_corrupt_message(message: str, store: PartitionStore, file: str) -> None:
    assert str(store.path / file) in message
    assert f"delete {store.path}" in message and "partition again" in message


def test_flipped_byte_in_a_part_file_is_detected(store, data):
    flip_byte(store.path / "part-00001.pt")
    with pytest.raises(PartitionStoreError, match="corrupt") as info:
        store.load_part(1)
    _assert_corrupt_message(str(info.value), store, "part-00001.pt")
    # reuse hashes every file and refuses the store
    with pytest.raises(PartitionStoreError, match="part-00001.pt does not match its checksum"):
        partition_to_store(data, RandomPartitioner(), NUM_PARTS, store.path)
    # the cheap reuse check (sizes only) passes; the rank that loads the part still catches it
    reopened = partition_to_store(data, RandomPartitioner(), NUM_PARTS, store.path, verify=False)
    with pytest.raises(PartitionStoreError, match="checksum"):
        reopened.load_part(1)
    assert reopened.load_part(0).part_id == 0


def test_flipped_byte_in_the_assignment_is_detected(store):
    flip_byte(store.path / "assignment.npy", offset=-1)
    with pytest.raises(PartitionStoreError, match="corrupt") as info:
        PartitionStore.open(store.path).assignment()
    _assert_corrupt_message(str(info.value), store, "assignment.npy")


def test_deleted_part_file_is_detected(store):
    (store.path / "part-00002.pt").unlink()
    with pytest.raises(PartitionStoreError, match="missing") as info:
        PartitionStore.open(store.path).load_part(2)
    _assert_corrupt_message(str(info.value), store, "part-00002.pt")


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda raw: raw[: len(raw) // 2], id="truncated"),
        pytest.param(lambda raw: b"", id="empty"),
        pytest.param(lambda raw: b"\xff\xfe" + raw[2:], id="not-utf8"),
        pytest.param(lambda raw: b"[1, 2]", id="not-an-object"),
        pytest.param(lambda raw: b'{"files": {}}', id="keys-missing"),
    ],
)
def test_corrupt_meta_json_is_detected(store, data, damage):
    meta = store.path / "meta.json"
    meta.write_bytes(damage(meta.read_bytes()))
    before = snapshot(store.path)
    with pytest.raises(PartitionStoreError, match="corrupt") as info:
        PartitionStore.open(store.path)
    _assert_corrupt_message(str(info.value), store, "meta.json")
    # partition_to_store refuses it too, and does not overwrite it
    with pytest.raises(PartitionStoreError, match="meta.json"):
        partition_to_store(data, RandomPartitioner(), NUM_PARTS, store.path)
    assert snapshot(store.path) == before


def test_other_format_version_is_refused(store):
    meta = json.loads((store.path / "meta.json").read_text())
    meta["format_version"] = FORMAT_VERSION + 1
    (store.path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(PartitionStoreError, match=f"format {FORMAT_VERSION + 1}") as info:
        PartitionStore.open(store.path)
    assert f"delete {store.path}" in str(info.value)


# --------------------------------------------------------------------------------------------
# failures leave nothing behind


def test_partitioner_failure_leaves_nothing(tmp_path, data):
    with pytest.raises(RuntimeError, match="crashed"):
        partition_to_store(data, FailingPartitioner(), NUM_PARTS, tmp_path / "store")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        RuntimeError("serialisation failed"),
        KeyboardInterrupt(),
    ],
    ids=["OSError", "RuntimeError", "KeyboardInterrupt"],
)
def test_failure_while_writing_parts_leaves_nothing(tmp_path, data, monkeypatch, error):
    real_save = LocalPartition.save
    written = []

    def save(self, file):
        if self.part_id == 1:  # part 0 is on disk, part 1 half written
            Path(file).write_bytes(b"half a part")
            raise error
        real_save(self, file)
        written.append(Path(file))

    monkeypatch.setattr(LocalPartition, "save", save)
    with pytest.raises(type(error)):
        partition_to_store(data, RandomPartitioner(), NUM_PARTS, tmp_path / "store")
    assert len(written) == 1 and written[0].name == "part-00000.pt"  # it did fail mid-way
    assert list(tmp_path.iterdir()) == []


def test_failed_rename_leaves_nothing(tmp_path, data, monkeypatch):
    def rename(src, dst):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(store_module.os, "rename", rename)
    with pytest.raises(OSError, match="cross-device"):
        partition_to_store(data, RandomPartitioner(), NUM_PARTS, tmp_path / "store")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("matching", [True, False])
def test_store_written_concurrently_by_another_process(tmp_path, data, monkeypatch, matching):
    """Another process renames its store into place first: ours is discarded and theirs is used
    if it matches (refused otherwise)."""
    path = tmp_path / "store"
    theirs = tmp_path / "theirs"
    partition_to_store(data, RandomPartitioner(seed=0 if matching else 9), NUM_PARTS, theirs)
    real_rename = os.rename

    def rename(src, dst):
        shutil.copytree(theirs, dst)  # the other process wins the race
        real_rename(src, dst)  # ENOTEMPTY / EEXIST

    monkeypatch.setattr(store_module.os, "rename", rename)
    if matching:
        store = partition_to_store(data, RandomPartitioner(), NUM_PARTS, path)
        assert store.path == path and store.meta == PartitionStore.open(theirs).meta
    else:
        with pytest.raises(PartitionStoreError, match="seed: stored 9, requested 0"):
            partition_to_store(data, RandomPartitioner(), NUM_PARTS, path)
    assert snapshot(path).keys() == snapshot(theirs).keys()
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("num_parts", [0, -1, 61])
def test_invalid_num_parts_writes_nothing(tmp_path, data, counting, num_parts):
    with pytest.raises(ValueError, match="number of parts"):
        partition_to_store(data, counting(), num_parts, tmp_path / "store")
    assert list(tmp_path.iterdir()) == [] and counting.calls == 0


# --------------------------------------------------------------------------------------------
# loading parts


@pytest.mark.parametrize("partitioner", [RandomPartitioner(seed=3), MetisPartitioner()])
def test_load_part_returns_exactly_that_part(tmp_path, data, partitioner):
    store = partition_to_store(data, partitioner, NUM_PARTS, tmp_path / "store")
    reopened = PartitionStore.open(store.path)
    assignment = partitioner.partition(data, NUM_PARTS)
    np.testing.assert_array_equal(reopened.assignment(), assignment)
    expected = list(build_local_partitions(data, assignment, NUM_PARTS))
    for rank in reversed(range(NUM_PARTS)):
        part = reopened.load_part(rank)
        assert part.part_id == rank and part.num_parts == NUM_PARTS
        assert_parts_equal(part, expected[rank])
    # each rank reads only its own file
    (store.path / "part-00000.pt").unlink()
    assert_parts_equal(reopened.load_part(2), expected[2])


@pytest.mark.parametrize("part_id", [-1, NUM_PARTS, NUM_PARTS + 5])
def test_load_part_out_of_range(store, part_id):
    with pytest.raises(ValueError, match=f"part {part_id} does not exist.*0..{NUM_PARTS - 1}"):
        store.load_part(part_id)

"""METIS 5.2 in its worker (``on_disk``): the assignment of the same library in memory, clear
failures, nothing left behind (issue 34: the partition step's memory at R-MAT scale 20); small
graphs keep METIS 5.1 in this process."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from lightning_gnn_dist.data import limits
from lightning_gnn_dist.partition import get_partitioner, metis
from lightning_gnn_dist.partition.backends import metis_library
from lightning_gnn_dist.partition.backends._child import TEMP_PREFIX, WORKER
from lightning_gnn_dist.partition.store import partition_to_store
from tests.helpers import random_graph


@pytest.fixture(scope="module")
def multigraph():
    # Parallel edges, repeated self loops, and the last two vertices isolated.
    data = random_graph(300, 1200, seed=3, features=4, parallel_edges=True)
    src, dst = data.edge_index
    assert (src == dst).sum() >= 2 and data.edge_index.unique(dim=1).size(1) < src.numel()
    assert not np.isin([298, 299], data.edge_index.numpy()).any()
    return data


def _children(monkeypatch) -> list:
    """Record every METIS worker started (and run it)."""
    calls = []
    original = metis.run_in_child

    def counted(*args, **kwargs):
        calls.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(metis, "run_in_child", counted)
    return calls


def _leftovers() -> list[Path]:
    return sorted(Path(tempfile.gettempdir()).glob(f"{TEMP_PREFIX}*"))


@pytest.mark.parametrize(
    "options",
    [{}, {"vertex_weight": "nnz+rows", "balance_masks": True}],
    ids=["one-constraint", "five-constraints"],
)
@pytest.mark.parametrize("seed", [0, 7])
def test_the_worker_gives_the_in_memory_assignment(multigraph, monkeypatch, options, seed):
    """The worker (levels on disk) equals METIS 5.2 called here on the same arrays (levels in
    memory)."""
    calls, inputs = _children(monkeypatch), []
    original = metis._partition_in_child

    def recorded(*args):
        inputs.append(args)
        return original(*args)

    monkeypatch.setattr(metis, "_partition_in_child", recorded)
    before = _leftovers()
    there = get_partitioner("metis", seed=seed, on_disk=True, **options).partition(multigraph, 3)
    assert calls == ["METIS"]
    ((view, constraints, num_parts, native, ufactor),) = inputs
    arrays = metis._metis_arrays(view, constraints)
    here = metis_library.part_graph_kway(*arrays, num_parts, native, ufactor, on_disk=False)
    np.testing.assert_array_equal(there, here)
    assert there.dtype == np.int64 and set(np.unique(there)) == {0, 1, 2}
    assert _leftovers() == before


def test_on_disk_picks_the_build_and_is_a_setting(multigraph, monkeypatch):
    """``on_disk=False`` is METIS 5.1 in this process (what every graph below the size took
    before); the builds differ, so the choice is recorded with the other settings."""
    calls = _children(monkeypatch)
    a = get_partitioner("metis", seed=0, on_disk=False).partition(multigraph, 3)
    b = get_partitioner("metis", seed=7, on_disk=False).partition(multigraph, 3)
    assert calls == [] and (a != b).any()
    np.testing.assert_array_equal(a, get_partitioner("metis", seed=0).partition(multigraph, 3))
    settings = {on_disk: get_partitioner("metis", on_disk=on_disk).settings() for on_disk in
                (None, False, True)}  # fmt: skip
    assert [s["on_disk"] for s in settings.values()] == [None, False, True]
    assert {k: v for k, v in settings[True].items() if k != "on_disk"} == {
        k: v for k, v in settings[None].items() if k != "on_disk"
    }


def test_on_disk_by_default_from_a_size(multigraph, monkeypatch):
    calls = _children(monkeypatch)
    entries = 2 * int(multigraph.edge_index.unique(dim=1).size(1))
    monkeypatch.setattr(limits, "METIS_ON_DISK_MIN_ENTRIES", entries + 1)
    get_partitioner("metis").partition(multigraph, 2)
    assert calls == []
    monkeypatch.setattr(limits, "METIS_ON_DISK_MIN_ENTRIES", entries // 4)
    get_partitioner("metis").partition(multigraph, 2)
    assert calls == ["METIS"]


@pytest.mark.parametrize(
    "script, match",
    [
        ("import sys; print('METIS crashed', file=sys.stderr); sys.exit(3)",
         r"METIS failed with exit status 3; use on_disk=False .* 'METIS crashed'"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
         r"METIS failed with exit status -9 \(killed by SIGKILL\)"),
        ("pass", "METIS exited with status 0 but wrote no partition"),
    ],
    ids=["exit-3", "killed", "no-output"],
)  # fmt: skip
def test_a_failing_worker_is_a_clear_error_and_leaves_nothing(
    multigraph, monkeypatch, tmp_path, script, match
):
    monkeypatch.setattr(metis, "_worker_command", lambda *args: [sys.executable, "-c", script])
    before = _leftovers()
    store = tmp_path / "store"
    with pytest.raises(RuntimeError, match=match):
        partition_to_store(multigraph, get_partitioner("metis", on_disk=True), 2, store)
    assert not store.exists() and list(tmp_path.iterdir()) == []
    assert _leftovers() == before


def test_the_worker_refuses_a_missing_graph(tmp_path):
    child = subprocess.run(
        [sys.executable, str(WORKER), "metis", str(tmp_path), str(tmp_path / "out.npy"), "2", "30", "1"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert child.returncode == 2 and "no xadj/adjncy/vwgt.npy" in child.stderr
    assert not (tmp_path / "out.npy").exists()


def test_options_and_a_missing_library_are_refused(multigraph, monkeypatch):
    """Without ``cmeel-metis``: ``on_disk=True`` is refused at construction, a graph large
    enough for the worker when it is partitioned; small graphs still partition (METIS 5.1)."""
    with pytest.raises(ValueError, match="on_disk"):
        get_partitioner("metis", on_disk="yes")
    monkeypatch.setattr(metis_library, "_installed_files", lambda: {})
    metis_library.load.cache_clear()
    hint = "pip install cmeel-metis, or use method='kaminpar'"
    try:
        with pytest.raises(ImportError, match=hint):
            get_partitioner("metis", on_disk=True)
        assert get_partitioner("metis").partition(multigraph, 2).shape == (300,)
        monkeypatch.setattr(limits, "METIS_ON_DISK_MIN_ENTRIES", 4)
        with pytest.raises(ImportError, match=hint):
            get_partitioner("metis").partition(multigraph, 2)
    finally:
        monkeypatch.undo()
        metis_library.load.cache_clear()
    assert metis_library.index_dtype() in (np.int32, np.int64)


def test_weights_too_heavy_for_32_bit_ids_are_scaled_down():
    light = np.array([[1, 5], [2, 0], [3, 7]])
    np.testing.assert_array_equal(metis_library.fit_weights(light, np.dtype(np.int32)), light)
    limit = np.iinfo(np.int32).max // 4
    heavy = np.array([[limit, 1], [limit, 2], [3, 3]], dtype=np.int64)
    fitted = metis_library.fit_weights(heavy, np.dtype(np.int32))
    assert fitted.dtype == np.int32 and (fitted.sum(axis=0) <= limit).all()
    np.testing.assert_array_equal(fitted[:, 1], [1, 2, 3])  # a column that fits is unchanged
    np.testing.assert_array_equal(fitted[:, 0], [-(-limit // 3)] * 2 + [1])  # ceil(w / 3)


def test_the_worker_partitions_without_importing_torch(multigraph, tmp_path):
    """The worker loads METIS without the package (torch would add ~0.3 GB to its peak)."""
    from lightning_gnn_dist.partition.arrays import EdgeView
    from lightning_gnn_dist.partition.metis import _metis_arrays
    from lightning_gnn_dist.partition.weights import vertex_weights

    weights = vertex_weights(multigraph, "work", None).reshape(-1, 1)
    graph = tmp_path / "graph"
    graph.mkdir()
    view = EdgeView(multigraph.edge_index, multigraph.num_nodes)
    for name, array in zip(("xadj", "adjncy", "vwgt"), _metis_arrays(view, weights), strict=True):
        np.save(graph / f"{name}.npy", array)
    output = tmp_path / "out.npy"
    code = (
        "import runpy, sys\n"
        f"sys.argv = [{str(WORKER)!r}, 'metis', {str(graph)!r}, {str(output)!r}, '3', '30', '5']\n"
        "try:\n"
        f"    runpy.run_path({str(WORKER)!r}, run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    print(exit.code, 'torch' in sys.modules)\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60,
        cwd=tmp_path,
    )  # fmt: skip
    assert child.stdout.split() == ["0", "False"], child.stderr
    arrays = _metis_arrays(view, weights)
    expected = metis_library.part_graph_kway(*arrays, 3, 5, 30, on_disk=False)
    np.testing.assert_array_equal(np.load(output), expected)

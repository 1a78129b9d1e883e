"""METIS 5.2 in-process and in its worker (``on_disk``): the same assignment, clear failures,
nothing left behind (issue 34: the partition step's memory at R-MAT scale 20)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

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
def test_the_worker_gives_the_in_process_assignment(multigraph, monkeypatch, options, seed):
    calls = _children(monkeypatch)
    before = _leftovers()
    here = get_partitioner("metis", seed=seed, on_disk=False, **options).partition(multigraph, 3)
    assert calls == []
    there = get_partitioner("metis", seed=seed, on_disk=True, **options).partition(multigraph, 3)
    assert calls == ["METIS"]
    np.testing.assert_array_equal(there, here)
    assert here.dtype == np.int64 and set(np.unique(here)) == {0, 1, 2}
    assert _leftovers() == before


def test_seeds_matter_and_on_disk_is_not_a_setting(multigraph):
    a = get_partitioner("metis", seed=0).partition(multigraph, 3)
    b = get_partitioner("metis", seed=7).partition(multigraph, 3)
    assert (a != b).any()
    settings = get_partitioner("metis", on_disk=True).settings()
    assert "on_disk" not in settings and settings == get_partitioner("metis").settings()


def test_on_disk_by_default_from_a_size(multigraph, monkeypatch):
    calls = _children(monkeypatch)
    entries = 2 * int(multigraph.edge_index.unique(dim=1).size(1))
    monkeypatch.setattr(metis, "ON_DISK_MIN_ENTRIES", entries + 1)
    get_partitioner("metis").partition(multigraph, 2)
    assert calls == []
    monkeypatch.setattr(metis, "ON_DISK_MIN_ENTRIES", entries // 4)
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


def test_options_and_a_missing_library_are_refused_at_construction(monkeypatch):
    with pytest.raises(ValueError, match="on_disk"):
        get_partitioner("metis", on_disk="yes")
    monkeypatch.setattr(metis_library, "_installed_files", lambda: {})
    metis_library.load.cache_clear()
    try:
        with pytest.raises(ImportError, match="pip install cmeel-metis, or use method='kaminpar'"):
            get_partitioner("metis")
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
    expected = get_partitioner("metis", seed=4, on_disk=False).partition(multigraph, 3)
    np.testing.assert_array_equal(np.load(output), expected)  # METIS seed 5 = native_seed(4)

"""The partition step's memory estimate is checked before any work, and printed (issue 34)."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_gnn_dist.data import limits
from lightning_gnn_dist.data.datasets import load_dataset
from lightning_gnn_dist.partition import get_partitioner


@pytest.fixture(scope="module")
def graph():
    return load_dataset("rmat?scale=8&edge_factor=4")


def test_a_partition_that_cannot_fit_is_refused_before_the_work(graph, monkeypatch):
    edges = graph.edge_index.size(1)
    needed = limits.partition_memory_bytes("metis", graph.num_nodes, edges, 2)
    lean = limits.partition_memory_bytes("kaminpar", graph.num_nodes, edges, 2)
    assert lean < needed
    monkeypatch.setattr(limits, "available_memory_bytes", lambda: int((needed + lean) / 2))
    import pymetis

    def never(*args, **kwargs):
        raise AssertionError("METIS ran although the estimate did not fit")

    monkeypatch.setattr(pymetis, "part_graph", never)
    with pytest.raises(MemoryError, match=r"method='metis' needs about .* use method='kaminpar'"):
        get_partitioner("metis").partition(graph, 2)
    monkeypatch.setattr(limits, "available_memory_bytes", lambda: 10)
    with pytest.raises(MemoryError, match="10 bytes is available; free memory"):
        get_partitioner("kaminpar").partition(graph, 2)


def test_the_estimate_follows_the_metis_build_asked_for(graph, monkeypatch):
    """``on_disk=True`` (METIS 5.2 out of core) needs less than METIS 5.1 in-process: with room
    for the first only, the second is refused and the first runs."""
    edges = graph.edge_index.size(1)
    in_process = limits.partition_memory_bytes("metis", graph.num_nodes, edges, 2, on_disk=False)
    out_of_core = limits.partition_memory_bytes("metis", graph.num_nodes, edges, 2, on_disk=True)
    assert out_of_core < in_process
    monkeypatch.setattr(limits, "available_memory_bytes", lambda: (in_process + out_of_core) // 2)
    with pytest.raises(MemoryError, match=r"method='metis' needs about"):
        get_partitioner("metis", on_disk=False).partition(graph, 2)
    assignment = get_partitioner("metis", on_disk=True).partition(graph, 2)
    assert set(np.unique(assignment)) == {0, 1}


def test_the_estimate_is_printed_with_progress(graph, monkeypatch, capsys):
    monkeypatch.setenv("LGD_PROGRESS", "1")
    assignment = get_partitioner("metis").partition(graph, 2)
    assert set(np.unique(assignment)) == {0, 1}
    err = capsys.readouterr().err
    assert f"partitioning {graph.num_nodes:,} vertices" in err and "with 'metis': about" in err
    monkeypatch.setenv("LGD_PROGRESS", "0")
    get_partitioner("metis").partition(graph, 2)
    assert capsys.readouterr().err == ""


def test_estimate_grows_with_the_graph_and_the_method():
    small = limits.partition_memory_bytes("kaminpar", 1e6, 16e6, 2)
    assert limits.partition_memory_bytes("kaminpar", 4e6, 64e6, 2) == pytest.approx(4 * small)
    # METIS 5.1 in this process keeps its levels in memory; from the worker's size on, METIS
    # 5.2 keeps them on disk.
    assert limits.partition_memory_bytes("metis", 1e5, 4e6, 2) > 5 * limits.partition_memory_bytes(
        "kaminpar", 1e5, 4e6, 2
    )
    on_disk = limits.METIS_ON_DISK_MIN_ENTRIES
    below = limits.partition_memory_bytes("metis", 1e6, on_disk / 2 - 1, 2)
    assert limits.partition_memory_bytes("metis", 1e6, on_disk / 2, 2) < below / 3
    forced = limits.partition_memory_bytes("metis", 1e6, on_disk / 2, 2, on_disk=False)
    assert forced > limits.partition_memory_bytes("metis", 1e6, on_disk / 2, 2) * 3  # in-process
    assert limits.partition_memory_bytes("metis", 1e6, 16e6, 2) > small
    assert limits.partition_memory_bytes("some-new-method", 1e6, 16e6, 2) > small

"""Up-front refusal of graphs and files that cannot fit (``data/limits.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import lightning_gnn_dist.data.limits as limits
from lightning_gnn_dist.data import DatasetError, load_dataset


def test_available_memory_is_positive_and_at_most_the_machine():
    total = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0]) * 1024
    assert 0 < limits.available_memory_bytes() <= total


def test_estimate_counts_nodes_features_and_edges():
    assert limits.graph_memory_bytes(0, 0) == 0
    assert limits.graph_memory_bytes(10, 0, 0) == 10 * limits._BYTES_PER_NODE
    assert limits.graph_memory_bytes(0, 7) == 7 * limits._BYTES_PER_EDGE
    assert limits.graph_memory_bytes(1, 0, 4) == limits._BYTES_PER_NODE + 4 * 20


@pytest.fixture
def little_memory(monkeypatch):
    """A machine with 1 MiB available."""
    monkeypatch.setattr(limits, "available_memory_bytes", lambda: 2**20)


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("sbm?num_nodes=20000", "num_nodes=20000, avg_degree=10"),
        ("rmat?scale=15", "scale=15, edge_factor=16"),
    ],
)
def test_generator_that_cannot_fit_is_refused_with_the_estimate(little_memory, spec, named):
    with pytest.raises(DatasetError, match="is available") as info:
        load_dataset(spec)
    message = str(info.value)
    assert named in message and "needs about" in message and "1.0 MiB is available" in message


def test_text_file_too_large_to_parse_is_refused(little_memory, tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("0 1\n" * 100_000)  # 400 KB of text: ~4.6 MiB to parse
    with pytest.raises(DatasetError, match=r"parsing this 390\.6 KiB file needs about 4\.6 MiB"):
        load_dataset(f"edgelist:{path}")


def test_generated_features_that_cannot_fit_are_refused(little_memory, tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("0 1\n1 2\n")
    with pytest.raises(DatasetError, match="3 vertices, 2 edges, 100000 features"):
        load_dataset(f"edgelist:{path}?features=100000")

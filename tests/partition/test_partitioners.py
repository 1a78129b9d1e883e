"""Every registered partitioner: output contract, determinism, balance, quality."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from lightning_gnn_dist.data.datasets import load_dataset
from lightning_gnn_dist.data.graph import canonicalize, row_nnz
from lightning_gnn_dist.partition import (
    PARTITIONERS,
    HypergraphPartitioner,
    KaHyParPartitioner,
    MetisPartitioner,
    MtKaHyParPartitioner,
    RandomPartitioner,
    column_net_hypergraph,
    get_partitioner,
)
from lightning_gnn_dist.partition.metrics import partition_metrics
from tests.helpers import figure2_graph

METHODS = sorted(
    m for m, cls in PARTITIONERS.items() if cls.kind == "vertex"
)  # vertex cuts: test_vertex_cut.py
HYPERGRAPH_METHODS = ["hypergraph", "hypergraph-kahypar"]


def random_graph(num_nodes: int, avg_degree: int, seed: int = 0) -> Data:
    """Directed Erdős–Rényi-like graph (duplicates and self loops merged by ``canonicalize``)."""
    generator = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes, (2, avg_degree * num_nodes), generator=generator)
    return canonicalize(Data(edge_index=edge_index, num_nodes=num_nodes))


def grid_graph(side: int) -> Data:
    """``side x side`` 2-D grid, every edge in both directions."""
    ids = torch.arange(side * side).view(side, side)
    a = torch.cat([ids[:, :-1].reshape(-1), ids[:-1, :].reshape(-1)])
    b = torch.cat([ids[:, 1:].reshape(-1), ids[1:, :].reshape(-1)])
    edge_index = torch.stack([torch.cat([a, b]), torch.cat([b, a])])
    return canonicalize(Data(edge_index=edge_index, num_nodes=side * side))


def connectivity_minus_one(data: Data, assignment: np.ndarray) -> int:
    """km1 of the column-net hypergraph: Σ_nets (distinct parts among its pins − 1)."""
    hg = column_net_hypergraph(data)
    net_of_pin = np.repeat(np.arange(hg.num_nets), np.diff(hg.net_offsets))
    num_parts = int(assignment.max()) + 1
    distinct = np.unique(net_of_pin * num_parts + assignment[hg.pins])
    return len(distinct) - hg.num_nets


def assert_valid(assignment: np.ndarray, num_nodes: int, num_parts: int) -> None:
    assert isinstance(assignment, np.ndarray)
    assert assignment.dtype == np.int64
    assert assignment.shape == (num_nodes,)
    assert assignment.min() >= 0 and assignment.max() < num_parts


@pytest.fixture(scope="module")
def small_graph() -> Data:
    return random_graph(120, 4, seed=1)


@pytest.fixture(scope="module")
def tiny_graph() -> Data:
    return random_graph(10, 2, seed=2)


@pytest.fixture(scope="module")
def grid() -> Data:
    return grid_graph(40)


# ---------------------------------------------------------------------------------- contract


def test_registry_names() -> None:
    assert set(METHODS) >= {
        "hypergraph",
        "hypergraph-kahypar",
        "hypergraph-mtkahypar",
        "metis",
        "random",
    }
    assert PARTITIONERS["hypergraph"] is HypergraphPartitioner
    assert PARTITIONERS["hypergraph-kahypar"] is KaHyParPartitioner
    assert PARTITIONERS["hypergraph-mtkahypar"] is MtKaHyParPartitioner
    assert PARTITIONERS["metis"] is MetisPartitioner
    assert PARTITIONERS["random"] is RandomPartitioner


@pytest.mark.parametrize("method", METHODS)
def test_valid_and_deterministic(method: str, small_graph: Data) -> None:
    first = get_partitioner(method, seed=7).partition(small_graph, 4)
    second = get_partitioner(method, seed=7).partition(small_graph, 4)
    assert_valid(first, small_graph.num_nodes, 4)
    np.testing.assert_array_equal(first, second)
    assert len(np.unique(first)) == 4
    others = [get_partitioner(method, seed=s).partition(small_graph, 4) for s in (8, 9, 10)]
    assert any(not np.array_equal(first, o) for o in others), "the seed must reach the partitioner"


@pytest.mark.parametrize("method", METHODS)
def test_one_part_and_one_part_per_vertex(method: str, tiny_graph: Data) -> None:
    partitioner = get_partitioner(method)
    np.testing.assert_array_equal(partitioner.partition(tiny_graph, 1), np.zeros(10, np.int64))
    assert_valid(partitioner.partition(tiny_graph, 10), 10, 10)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("num_parts", [0, -1, 11])
def test_bad_num_parts(method: str, num_parts: int, tiny_graph: Data) -> None:
    with pytest.raises(ValueError, match="number of parts"):
        get_partitioner(method).partition(tiny_graph, num_parts)


def test_single_vertex_graph() -> None:
    data = canonicalize(Data(edge_index=torch.empty(2, 0, dtype=torch.long), num_nodes=1))
    for method in METHODS:
        np.testing.assert_array_equal(get_partitioner(method).partition(data, 1), [0])


# ------------------------------------------------------------------------- hypergraph options


def test_hypergraph_backend_validation() -> None:
    with pytest.raises(ValueError, match=r"'patoh'.*mtkahypar, kahypar"):
        HypergraphPartitioner(backend="patoh")
    for backend in ("kahypar", "mtkahypar"):
        with pytest.raises(ValueError, match=r"timeout must be a positive .* \(got 0\)"):
            HypergraphPartitioner(backend=backend, timeout=0)
    assert HypergraphPartitioner(backend="mtkahypar", timeout=5).timeout == 5


def test_hypergraph_settings() -> None:
    mt = get_partitioner("hypergraph", seed=3, epsilon=0.05).settings()
    weight = [mt.pop(k) for k in ("vertex_weight", "widths", "work_costs")]  # test_weights.py
    assert weight[:2] == ["work", None]
    assert mt == {
        "method": "hypergraph",
        "seed": 3,
        "epsilon": 0.05,
        "backend": "mtkahypar",
        "preset": "tuned",
        "threads": 1,
        "preset_sha256": mt["preset_sha256"],
        "balance_send_volume": True,
        "volume_slack": 0.05,
        "max_net_size": None,
    }
    assert len(mt["preset_sha256"]) == 16
    other = get_partitioner("hypergraph", preset="default", threads=2, max_net_size=64).settings()
    assert (other["preset"], other["threads"], other["max_net_size"]) == ("default", 2, 64)
    assert "preset_sha256" not in other
    kh = get_partitioner("hypergraph", backend="kahypar").settings()
    assert kh["backend"] == "kahypar" and kh["config"] == "kahypar_km1.ini"
    assert len(kh["config_sha256"]) == 16
    assert get_partitioner("hypergraph-kahypar").settings()["backend"] == "kahypar"
    assert get_partitioner("hypergraph-mtkahypar").settings()["backend"] == "mtkahypar"
    assert "backend='kahypar'" in repr(KaHyParPartitioner())


def test_fixed_backend_subclasses_match_the_option(small_graph: Data) -> None:
    np.testing.assert_array_equal(
        MtKaHyParPartitioner(seed=1).partition(small_graph, 3),
        HypergraphPartitioner(seed=1).partition(small_graph, 3),
    )
    np.testing.assert_array_equal(
        KaHyParPartitioner(seed=1).partition(small_graph, 3),
        HypergraphPartitioner(seed=1, backend="kahypar").partition(small_graph, 3),
    )


# --------------------------------------------------------------------------- balance, quality


@pytest.mark.parametrize("method", HYPERGRAPH_METHODS)
def test_hypergraph_balance(method: str) -> None:
    """(Mt-)KaHyPar's hard bound: every part weighs at most (1 + eps) * ceil(W / P)."""
    data = random_graph(2000, 4, seed=3)
    weights = row_nnz(data.edge_index, data.num_nodes)
    for epsilon in (0.03, 0.1):
        assignment = get_partitioner(method, epsilon=epsilon, vertex_weight="nnz").partition(
            data, 8
        )
        part_weights = np.bincount(assignment, weights=weights, minlength=8)
        assert part_weights.max() <= (1 + epsilon) * np.ceil(weights.sum() / 8)


MTKAHYPAR_IN_CHILD = """
import hashlib, sys
from lightning_gnn_dist.data.datasets import load_dataset
from lightning_gnn_dist.partition import get_partitioner
data = load_dataset("rmat?scale=11&edge_factor=8")
options = dict(seed=int(sys.argv[1]), balance_send_volume=False)
assignment = get_partitioner("hypergraph", **options).partition(data, 8)
print(hashlib.sha256(assignment.tobytes()).hexdigest())
"""


def test_mtkahypar_is_deterministic_across_processes() -> None:
    """One thread, default preset: equal seeds give equal assignments in separate processes (a
    fresh thread pool each), and the seed matters. The three processes run side by side."""
    children = [
        subprocess.Popen(
            [sys.executable, "-c", MTKAHYPAR_IN_CHILD, str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (3, 3, 4)
    ]
    digests = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err[-3000:]
        digests.append(out.strip())
    first, again, other = digests
    assert len(first) == 64
    assert again == first
    assert other != first


def test_metis_balance() -> None:
    """METIS' ufactor is a target, not a hard bound: allow (1 + eps) * W / P plus one vertex."""
    data = random_graph(2000, 4, seed=3)
    weights = row_nnz(data.edge_index, data.num_nodes)
    for epsilon in (0.03, 0.1):
        assignment = MetisPartitioner(epsilon=epsilon).partition(data, 8)
        part_weights = np.bincount(assignment, weights=weights, minlength=8)
        assert part_weights.max() <= (1 + epsilon) * weights.sum() / 8 + weights.max()


def test_random_sizes_differ_by_at_most_one(small_graph: Data) -> None:
    for num_parts in (2, 7, 120):
        sizes = np.bincount(RandomPartitioner(seed=5).partition(small_graph, num_parts))
        assert sizes.max() - sizes.min() <= 1
    a = RandomPartitioner(seed=5).partition(small_graph, 7)
    b = RandomPartitioner(seed=6).partition(small_graph, 7)
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("method", ["hypergraph", "hypergraph-kahypar", "metis"])
def test_quality_on_grid(method: str, grid: Data) -> None:
    """On a 40x40 grid a structured partition cuts ~5% of what a random one does (P = 8)."""
    random_km1 = connectivity_minus_one(grid, RandomPartitioner().partition(grid, 8))
    km1 = connectivity_minus_one(grid, get_partitioner(method).partition(grid, 8))
    assert km1 < 0.15 * random_km1


def test_connectivity_helper_on_known_partition() -> None:
    """Path 0-1-2-3 split {0,1} | {2,3}: only the nets of columns 1 and 2 span both parts."""
    edge_index = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    data = canonicalize(Data(edge_index=edge_index, num_nodes=4))
    assert connectivity_minus_one(data, np.array([0, 0, 1, 1])) == 2


# ------------------------------------------------------------------------------------- metis


def masked_grid() -> Data:
    """40x40 grid whose train/val/test vertices fill bands of rows (top, middle, bottom)."""
    data = grid_graph(40)
    row = torch.arange(40 * 40) // 40
    data.train_mask = row < 8
    data.val_mask = (row >= 8) & (row < 12)
    data.test_mask = row >= 32
    return data


def mask_counts(data: Data, assignment: np.ndarray, num_parts: int) -> dict[str, np.ndarray]:
    return {
        key: np.bincount(assignment[getattr(data, key).numpy()], minlength=num_parts)
        for key in ("train_mask", "val_mask", "test_mask")
    }


def test_metis_balance_masks() -> None:
    """Multi-constraint METIS spreads each mask evenly: every part's train/val/test count is
    within 10% of the mean, where plain METIS leaves some part with no training vertex at all
    (the bands are compact, so a min-cut partition keeps each band in one or two parts)."""
    data = masked_grid()
    plain = MetisPartitioner().partition(data, 4)
    assert mask_counts(data, plain, 4)["train_mask"].min() == 0

    for num_parts in (4, 8):
        assignment = MetisPartitioner(balance_masks=True, vertex_weight="nnz").partition(
            data, num_parts
        )
        assert_valid(assignment, data.num_nodes, num_parts)
        for key, counts in mask_counts(data, assignment, num_parts).items():
            assert np.abs(counts - counts.mean()).max() <= 0.10 * counts.mean(), (key, counts)
        weights = row_nnz(data.edge_index, data.num_nodes)
        part_weights = np.bincount(assignment, weights=weights, minlength=num_parts)
        assert part_weights.max() <= 1.03 * weights.sum() / num_parts + weights.max()
        again = MetisPartitioner(balance_masks=True, vertex_weight="nnz").partition(data, num_parts)
        np.testing.assert_array_equal(assignment, again)
    assert MetisPartitioner(balance_masks=True).settings()["balance_masks"] is True


def test_metis_balance_masks_needs_masks(small_graph: Data) -> None:
    with pytest.raises(ValueError, match=r"data\.train_mask.*balance_masks=False"):
        MetisPartitioner(balance_masks=True).partition(small_graph, 2)
    data = masked_grid()
    data.val_mask = torch.zeros(7, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"val_mask.*\(7,\)"):
        MetisPartitioner(balance_masks=True).partition(data, 2)


def test_metis_ufactor() -> None:
    assert MetisPartitioner(epsilon=0.03).ufactor == 30
    assert MetisPartitioner(epsilon=0.0).ufactor == 1


def test_metis_graph_without_edges() -> None:
    """No edges: vertices are dealt round-robin (per mask class with balance_masks)."""
    empty = torch.empty(2, 0, dtype=torch.long)
    data = canonicalize(Data(edge_index=empty, num_nodes=10))
    assignment = MetisPartitioner().partition(data, 3)
    np.testing.assert_array_equal(np.bincount(assignment), [4, 3, 3])

    data.train_mask = torch.arange(10) < 6
    data.val_mask = torch.arange(10) == 6
    data.test_mask = torch.arange(10) >= 7
    assignment = MetisPartitioner(balance_masks=True).partition(data, 3)
    train_counts = np.bincount(assignment[data.train_mask.numpy()], minlength=3)
    np.testing.assert_array_equal(train_counts, [2, 2, 2])
    test_counts = np.bincount(assignment[data.test_mask.numpy()], minlength=3)
    assert test_counts.max() - test_counts.min() <= 1


def test_self_loops_only_graph() -> None:
    """Only self loops: every net has one pin; all methods still return a valid assignment."""
    loops = torch.arange(6).repeat(2, 1)
    data = canonicalize(Data(edge_index=loops, num_nodes=6))
    for method in METHODS:
        assert_valid(get_partitioner(method).partition(data, 3), 6, 3)


# ------------------------------------------------------------------------------- empty parts
def test_an_empty_part_is_warned_about_with_part_and_partitioner() -> None:
    data, _ = figure2_graph()  # METIS leaves one of 4 parts of this 6-vertex graph empty
    with pytest.warns(UserWarning, match=r"'metis' partitioner .* left part\(s\) \[2\] of 4 empty"):
        assignment = get_partitioner("metis", vertex_weight="nnz").partition(data, 4)
    assert np.bincount(assignment, minlength=4)[2] == 0


def test_no_warning_when_every_part_has_a_vertex() -> None:
    data, _ = figure2_graph()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        get_partitioner("metis").partition(data, 3)


@pytest.mark.parametrize(
    "options, match",
    [
        ({"preset": "fastest"}, r"unknown Mt-KaHyPar preset 'fastest'; choose one of: tuned, "),
        ({"threads": 0}, r"threads must be a positive integer \(got 0\)"),
        ({"max_net_size": 1}, r"max_net_size must be an integer >= 2 or None \(got 1\)"),
        ({"backend": "kahypar", "preset": "default"}, r"backend='kahypar' takes no preset"),
        ({"backend": "kahypar", "threads": 2}, r"backend='kahypar' takes no preset or threads"),
    ],
)
def test_hypergraph_option_errors(options, match) -> None:
    with pytest.raises(ValueError, match=match):
        get_partitioner("hypergraph", **options)


@pytest.mark.parametrize("preset", ["tuned", "fast", "default", "large_k"])
def test_every_preset_partitions_within_the_bound(small_graph: Data, preset: str) -> None:
    partitioner = get_partitioner(
        "hypergraph", seed=2, preset=preset, balance_send_volume=False, vertex_weight="nnz"
    )
    assignment = partitioner.partition(small_graph, 4)
    weights = column_net_hypergraph(small_graph).vertex_weights
    loads = np.bincount(assignment, weights=weights, minlength=4)
    assert loads.max() <= 1.03 * np.ceil(weights.sum() / 4)
    np.testing.assert_array_equal(assignment, partitioner.partition(small_graph, 4))


def test_left_out_nets_still_count_in_the_refinement_and_metrics() -> None:
    data = load_dataset("rmat?scale=10&edge_factor=8")
    hg = column_net_hypergraph(data)
    sizes = hg.net_sizes()
    threshold = int(np.quantile(sizes[sizes >= 2], 0.9))
    reduced = hg.keep_nets(sizes <= threshold)
    assert reduced.num_nets == int((sizes <= threshold).sum()) and reduced.num_pins == int(
        sizes[sizes <= threshold].sum()
    )
    np.testing.assert_array_equal(np.diff(reduced.net_offsets), sizes[sizes <= threshold])
    partitioner = get_partitioner("hypergraph", seed=0, max_net_size=threshold)
    assignment = partitioner.partition(data, 8)
    report = partitioner.last_refinement
    metrics = partition_metrics(data, assignment, 8)
    # The refinement's volumes are the whole hypergraph's, left-out nets included.
    assert report.total_volume_rows_after == metrics.total_volume_rows
    assert report.max_send_rows_after == metrics.send_rows.max()


def plain_and_skewed_hypergraphs():
    """A small R-MAT's column-net hypergraph, and the same with only its 3 % largest nets and
    nets of at most 2 pins: there the large nets hold most pins (40x the mean size)."""
    plain = column_net_hypergraph(load_dataset("rmat?scale=10&edge_factor=8"))
    sizes = plain.net_sizes()
    return plain, plain.keep_nets((sizes >= np.quantile(sizes, 0.97)) | (sizes <= 2))


def test_tuned_preset_reads_its_configuration_only_for_heavy_tailed_nets(monkeypatch):
    from lightning_gnn_dist.partition.backends import mtkahypar as backend

    star, skewed = plain_and_skewed_hypergraphs()
    assert not backend.is_skewed(star)
    assert backend.is_skewed(skewed)
    seen = []
    monkeypatch.setattr(
        backend, "_worker_command", lambda *args: seen.append(args[5]) or [sys.executable, "-c", ""]
    )
    for hg in (star, skewed):
        with pytest.raises(RuntimeError, match="wrote no partition"):
            backend.partition_hypergraph(hg, 4, 0.03, 0)
    assert seen == ["plain", "tuned"]
    seen.clear()
    with pytest.raises(RuntimeError, match="wrote no partition"):
        backend.partition_hypergraph(skewed, 4, 0.03, 0, preset="fast")
    assert seen == ["fast"] and backend.FAST_CONFIG.is_file()
    assert backend.TUNED_CONFIG.is_file()


def test_fixed_backend_methods_refuse_a_backend_option() -> None:
    from lightning_gnn_dist.partition.base import partitioner_options

    assert "backend" not in partitioner_options("hypergraph-kahypar")
    assert "preset" in partitioner_options("hypergraph-mtkahypar")
    with pytest.raises(
        ValueError, match=r"'hypergraph-kahypar' partitioner has no option 'backend'"
    ):
        get_partitioner("hypergraph-kahypar", backend="mtkahypar")
    with pytest.raises(ValueError, match=r"'hypergraph-kahypar' always uses backend='kahypar'"):
        KaHyParPartitioner(backend="mtkahypar")


@pytest.mark.parametrize("preset", ["tuned", "fast"])
def test_skewed_presets_run_their_configuration_file(preset: str) -> None:
    from lightning_gnn_dist.partition.backends import mtkahypar as backend

    _, skewed = plain_and_skewed_hypergraphs()
    assert backend.is_skewed(skewed)
    assignment = backend.partition_hypergraph(skewed, 8, 0.03, 0, preset=preset)
    loads = np.bincount(assignment, weights=skewed.vertex_weights, minlength=8)
    assert assignment.min() >= 0 and assignment.max() < 8
    assert loads.max() <= 1.03 * np.ceil(skewed.vertex_weights.sum() / 8) + 1e-9
    np.testing.assert_array_equal(
        assignment, backend.partition_hypergraph(skewed, 8, 0.03, 0, preset=preset)
    )

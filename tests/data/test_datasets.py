"""``load_dataset``: spec grammar, the canonical contract, determinism and error messages."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from lightning_gnn_dist.data import (
    DATASET_KINDS,
    DatasetError,
    DatasetSpec,
    load_dataset,
    parse_dataset_spec,
)
from lightning_gnn_dist.data.graph import graph_fingerprint

TINY_METIS = "% tiny\n5 5\n2 3\n1 3 4\n1 2\n2 5\n4\n"


def assert_canonical(data: Data) -> None:
    """The contract of ``load_dataset``."""
    n = data.num_nodes
    assert isinstance(n, int) and n > 0
    assert data.x.dtype == torch.float32 and data.x.dim() == 2 and data.x.size(0) == n
    assert data.y.dtype == torch.int64 and data.y.shape == (n,)
    assert data.edge_index.dtype == torch.int64 and data.edge_index.size(0) == 2
    keys = data.edge_index[0] * n + data.edge_index[1]
    assert bool((keys[1:] > keys[:-1]).all())  # coalesced: these datasets are simple graphs
    for key in ("train_mask", "val_mask", "test_mask"):
        assert data[key].dtype == torch.bool and data[key].shape == (n,)
    overlap = data.train_mask.int() + data.val_mask.int() + data.test_mask.int()
    assert int(overlap.max()) <= 1
    assert isinstance(data.name, str) and data.name


def assert_identical(a: Data, b: Data) -> None:
    assert graph_fingerprint(a) == graph_fingerprint(b)
    assert a.name == b.name


def edge_set(data: Data) -> set[tuple[int, int]]:
    return {(int(s), int(t)) for s, t in data.edge_index.t().tolist()}


@pytest.fixture(scope="module")
def digits() -> Data:
    return load_dataset("digits")


# --------------------------------------------------------------------------------------------
# spec grammar


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("digits", DatasetSpec("digits")),
        ("Digits?k=5&seed=2", DatasetSpec("digits", None, {"k": "5", "seed": "2"})),
        ("metis:/a/b.graph", DatasetSpec("metis", "/a/b.graph")),
        ("metis:C:\\g.graph?seed=1", DatasetSpec("metis", "C:\\g.graph", {"seed": "1"})),
        ("ogb:ogbn-arxiv?root=/d", DatasetSpec("ogb", "ogbn-arxiv", {"root": "/d"})),
        ("sbm?", DatasetSpec("sbm")),
    ],
)
def test_parse_dataset_spec(spec, expected):
    assert parse_dataset_spec(spec) == expected


def test_spec_round_trips_through_str():
    spec = "edgelist:/x/e.txt?directed=false&num_nodes=7"
    assert str(parse_dataset_spec(spec)) == spec


@pytest.mark.parametrize(
    "spec, message",
    [
        ("?k=1", "has no kind"),
        ("sbm?seed", "option 'seed' is not key=value"),
        ("sbm?seed=1&seed=2", "option 'seed' is given twice"),
    ],
)
def test_parse_dataset_spec_errors(spec, message):
    with pytest.raises(DatasetError, match=re.escape(message)):
        parse_dataset_spec(spec)


def test_unknown_kind_lists_the_known_kinds():
    with pytest.raises(ValueError) as info:
        load_dataset("cora")
    message = str(info.value)
    assert "'cora'" in message
    for kind in ("digits", "edgelist", "metis", "mtx", "ogb", "powerlaw", "rmat", "sbm"):
        assert kind in message
    assert set(DATASET_KINDS) >= {"digits", "metis", "mtx", "edgelist", "sbm", "rmat", "ogb"}


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("sbm?colour=red", "unknown option colour='red'"),
        ("sbm?num_nodes=abc", "option num_nodes='abc' must be an integer"),
        ("sbm?avg_degree=lots", "option avg_degree='lots' must be a number"),
        ("edgelist:/x?directed=maybe", "option directed='maybe' must be true or false"),
        ("sbm?num_nodes=1.5", "option num_nodes='1.5' must be an integer"),
    ],
)
def test_bad_options_name_key_and_value(spec, fragment):
    with pytest.raises(ValueError, match=re.escape(fragment)):
        load_dataset(spec)


def test_arg_is_required_or_refused():
    with pytest.raises(DatasetError, match=re.escape("needs a PATH; usage: metis:PATH?")):
        load_dataset("metis")
    with pytest.raises(DatasetError, match="takes no ':x' part"):
        load_dataset("digits:x")


# --------------------------------------------------------------------------------------------
# digits (the default dataset)


def test_digits_contract_and_split(digits):
    assert_canonical(digits)
    assert digits.name == "digits"
    assert digits.x.shape == (1797, 64)
    assert sorted(digits.y.unique().tolist()) == list(range(10))
    counts = [int(digits[k].sum()) for k in ("train_mask", "val_mask", "test_mask")]
    assert counts == [1078, 359, 360]
    assert bool((digits.train_mask | digits.val_mask | digits.test_mask).all())


def test_digits_graph_is_an_undirected_knn_graph(digits):
    n = digits.num_nodes
    edges = edge_set(digits)
    assert edges == {(t, s) for s, t in edges}
    assert not any(s == t for s, t in edges)
    in_degree = torch.bincount(digits.edge_index[1], minlength=n)
    assert int(in_degree.min()) >= 10
    # Vertex 0's 10 nearest neighbours (raw pixels) are all joined to it.
    from sklearn.datasets import load_digits

    pixels = load_digits().data
    distance = ((pixels - pixels[0]) ** 2).sum(1)
    distance[0] = np.inf
    tenth = np.sort(distance)[9]
    strictly_closer = set(np.flatnonzero(distance < tenth).tolist())
    neighbours_of_0 = {s for s, t in edges if t == 0}
    assert strictly_closer <= neighbours_of_0
    # Labels agree along most edges (a useful graph for node classification).
    src, dst = digits.edge_index
    assert (digits.y[src] == digits.y[dst]).float().mean() > 0.9


def test_digits_features_are_standardised(digits):
    std = digits.x.std(0, unbiased=False)
    varying = std > 0
    assert torch.allclose(digits.x.mean(0), torch.zeros(64), atol=1e-5)
    assert torch.allclose(std[varying], torch.ones(int(varying.sum())), atol=1e-4)


def test_digits_is_bit_identical_and_options_work(digits):
    assert_identical(digits, load_dataset("digits"))
    other_seed = load_dataset("digits?seed=1")
    assert torch.equal(other_seed.edge_index, digits.edge_index)
    assert not torch.equal(other_seed.train_mask, digits.train_mask)
    fewer = load_dataset("digits", k=3)  # override through the Python API
    assert fewer.edge_index.size(1) < digits.edge_index.size(1)


# --------------------------------------------------------------------------------------------
# files through specs


@pytest.fixture()
def tiny_metis(tmp_path) -> Path:
    path = tmp_path / "tiny.graph"
    path.write_text(TINY_METIS)
    return path


def test_metis_spec_gets_seeded_synthetic_features(tiny_metis):
    data = load_dataset(f"metis:{tiny_metis}?features=4&classes=3&seed=1")
    assert_canonical(data)
    assert data.name == "tiny"
    assert data.x.shape == (5, 4)
    assert int(data.y.max()) < 3
    assert edge_set(data) == {(a, b) for a, b in [(0, 1), (0, 2), (1, 2), (1, 3), (3, 4)]} | {
        (b, a) for a, b in [(0, 1), (0, 2), (1, 2), (1, 3), (3, 4)]
    }
    assert_identical(data, load_dataset(f"metis:{tiny_metis}?features=4&classes=3&seed=1"))
    assert not torch.equal(data.x, load_dataset(f"metis:{tiny_metis}?features=4&seed=2").x)


def test_overrides_replace_spec_options(tiny_metis):
    data = load_dataset(f"metis:{tiny_metis}?features=4", features=6)
    assert data.x.shape == (5, 6)


def test_edgelist_spec_options(tmp_path):
    path = tmp_path / "e.txt"
    path.write_text("0 1\n1 2\n")
    data = load_dataset(f"edgelist:{path}?directed=false&num_nodes=4")
    assert_canonical(data)
    assert data.num_nodes == 4
    assert edge_set(data) == {(0, 1), (1, 0), (1, 2), (2, 1)}
    directed = load_dataset(f"edgelist:{path}")
    assert edge_set(directed) == {(0, 1), (1, 2)}


def test_mtx_spec(tmp_path):
    path = tmp_path / "m.mtx"
    path.write_text("%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n3 1\n")
    data = load_dataset(f"mtx:{path}")
    assert_canonical(data)
    assert edge_set(data) == {(1, 0), (0, 2)}
    assert data.name == "m"


def test_file_errors_propagate_with_file_and_line(tmp_path):
    path = tmp_path / "g.graph"
    path.write_text("5 5\n2 3\n1 9 4\n1 2\n2 5\n4\n")
    with pytest.raises(DatasetError, match=re.escape(f"{path}:3: vertex id 9 out of range 1..5")):
        load_dataset(f"metis:{path}")
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "none.graph"))):
        load_dataset(f"metis:{tmp_path / 'none.graph'}")


def test_empty_graph_is_refused(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("# nothing here\n")
    with pytest.raises(ValueError, match="the graph is empty"):
        load_dataset(f"edgelist:{path}")


# --------------------------------------------------------------------------------------------
# generators through specs


def test_sbm_and_rmat_specs():
    data = load_dataset("sbm?num_nodes=400&num_classes=5&avg_degree=6&features=8&seed=2")
    assert_canonical(data)
    assert (data.name, data.num_nodes, data.x.size(1)) == ("sbm", 400, 8)
    assert data.y.unique().numel() == 5
    power = load_dataset("powerlaw?scale=9&edge_factor=4&classes=3")
    assert_canonical(power)
    assert (power.name, power.num_nodes) == ("rmat", 512)
    assert_identical(power, load_dataset("rmat?scale=9&edge_factor=4&classes=3"))


# --------------------------------------------------------------------------------------------
# in-memory Data


def test_in_memory_data_is_canonicalised_and_filled():
    edge_index = torch.tensor([[2, 0, 1, 0], [1, 1, 2, 1]])  # unsorted, one duplicate
    data = load_dataset(Data(edge_index=edge_index, num_nodes=4), features=5, seed=3)
    assert data.name == "graph"
    # sorted by (source, target); the parallel edge 0 -> 1 is kept, as PyG would aggregate it
    assert data.edge_index.tolist() == [[0, 0, 1, 2], [1, 1, 2, 1]]
    assert data.x.shape == (4, 5)


def test_in_memory_data_dtypes_are_normalised():
    given = Data(
        x=torch.rand(3, 2, dtype=torch.float64),
        y=torch.tensor([[1.0], [float("nan")], [0.0]]),
        edge_index=torch.tensor([[0, 1], [1, 2]]),
        num_nodes=3,
    )
    given.name = "mine"
    data = load_dataset(given)
    assert_canonical(data)
    assert data.name == "mine"
    assert data.y.tolist() == [1, -1, 0]
    assert not bool(data.train_mask[1] | data.val_mask[1] | data.test_mask[1])


def test_in_memory_data_errors():
    base = Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2)
    with pytest.raises(ValueError, match=re.escape("unknown option scale=3")):
        load_dataset(base, scale=3)
    multi = base.clone()
    multi.y = torch.tensor([[0, 1, 2], [1, 0, 0]])
    with pytest.raises(DatasetError, match="task='multilabel' needs y of 0 and 1.* holds 2"):
        load_dataset(multi, task="multilabel")
    with pytest.raises(ValueError, match="the graph is empty"):
        load_dataset(Data(edge_index=torch.empty(2, 0, dtype=torch.long), num_nodes=0))


def test_in_memory_features_with_wrong_row_count_are_refused():
    bad = Data(x=torch.zeros(3, 2), edge_index=torch.tensor([[0], [1]]), num_nodes=2)
    with pytest.raises(
        DatasetError, match=re.escape("x must have shape [num_nodes=2, d] (got (3, 2))")
    ):
        load_dataset(bad)

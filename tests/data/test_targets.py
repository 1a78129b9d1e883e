"""Issue 30: targets of every task, synthetic targets and edge attributes, weighted files."""

from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.data import Data

from lightning_gnn_dist.data import DatasetError, load_dataset
from lightning_gnn_dist.data.contract import check_dataset_argument
from lightning_gnn_dist.data.targets import canonical_targets, labelled_per_vertex, target_info

NAN = math.nan


@pytest.mark.parametrize(
    ("y", "task", "dtype", "shape"),
    [
        (torch.tensor([0, 2, -1]), "multiclass", torch.int64, (3,)),
        (torch.tensor([[0], [2], [1]]), "multiclass", torch.int64, (3,)),
        (torch.tensor([0.0, 2.0, NAN]), "multiclass", torch.int64, (3,)),  # as before issue 30
        (torch.tensor([0.5, 2.0, NAN]), "regression", torch.float32, (3,)),
        (
            torch.tensor([[0.5], [2.0], [1.0]], dtype=torch.float64),
            "regression",
            torch.float32,
            (3, 1),
        ),
        (torch.tensor([[0, 1], [1, 1], [0, 0]]), "multilabel", torch.float32, (3, 2)),
        (torch.tensor([[0.0, 1.0], [NAN, 1.0], [0.0, 0.0]]), "multilabel", torch.float32, (3, 2)),
        (torch.tensor([[True, False]] * 3), "multilabel", torch.float32, (3, 2)),
        (torch.tensor([[0.0, 3.0], [NAN, 1.0], [0.0, 0.0]]), "regression", torch.float32, (3, 2)),
        (torch.tensor([[0, 3], [2, 1], [0, 0]]), "regression", torch.float32, (3, 2)),
    ],
)
def test_the_task_is_inferred_from_y(y, task, dtype, shape):
    canonical, inferred = canonical_targets(y, 3, "g")
    assert inferred == task and canonical.dtype == dtype and canonical.shape == shape


@pytest.mark.parametrize(
    ("y", "task", "message"),
    [
        (torch.tensor([0.5, 1.0, 2.0]), "multiclass", r"non-integer values \(e.g. 0.5\)"),
        (torch.tensor([[0, 1], [2, 0], [0, 0]]), "multiclass", r"one class id per vertex"),
        (torch.tensor([[0, 1], [2, 0], [0, 0]]), "multilabel", "y holds 2;"),
        (torch.tensor([[0.0, 0.25], [1, 0], [0, 0]]), "multilabel", "y holds 0.25;"),
        (torch.tensor([0.0, math.inf, 1.0]), "regression", "y holds inf;"),
        (torch.tensor([0, 1, 2]), "ranking", "undefined task option 'ranking'"),
        (torch.tensor([0, 1]), None, r"one row per vertex, shape \[3\]"),
    ],
)
def test_a_task_that_does_not_fit_y_is_refused_naming_the_value(y, task, message):
    with pytest.raises(ValueError, match=message):
        canonical_targets(y, 3, "g", task)


def test_integral_floats_are_regression_targets_when_the_task_says_so():
    y, task = canonical_targets(torch.tensor([1.0, 2.0, NAN]), 3, "g", "regression")
    assert task == "regression" and y.dtype == torch.float32 and torch.isnan(y[2])
    y, task = canonical_targets(torch.tensor([0, 1, 1]), 3, "g", "multilabel")
    assert task == "multilabel" and y.shape == (3, 1)


def test_labelled_counts_and_info():
    y = torch.tensor([[0.0, NAN], [NAN, NAN], [1.0, 1.0]])
    assert labelled_per_vertex(y, "multilabel").tolist() == [1, 0, 2]
    assert labelled_per_vertex(torch.tensor([NAN, 0.5]), "regression").tolist() == [0, 1]
    assert labelled_per_vertex(torch.tensor([-1, 3]), "multiclass").tolist() == [0, 1]
    assert target_info(y, "multilabel").to_dict() == {
        "task": "multilabel", "num_classes": 0, "num_tasks": 2,
    }  # fmt: skip
    assert target_info(torch.tensor([0, 4]), "multiclass").num_outputs == 5


def _graph(**attributes):
    edge_index = torch.tensor([[0, 1, 2, 0], [1, 2, 0, 1]])
    return Data(edge_index=edge_index, num_nodes=3, **attributes)


@pytest.mark.parametrize(
    ("attributes", "task", "message"),
    [
        ({"y": torch.tensor([0.5, 1.0, 2.0])}, "multiclass", "non-integer values"),
        ({"x": torch.tensor([[0.0], [NAN], [1.0]])}, None, "x holds nan at vertex 1, column 0"),
        ({"x": torch.tensor([1.0, math.inf, 1.0])}, None, "x holds inf at vertex 1"),
        ({"pos": torch.zeros(5, 2)}, None, "'pos' has shape \\(5, 2\\)"),
        ({"n_id": torch.arange(3)}, None, "'n_id' has a name the loaders set"),
    ],
)
def test_bad_graphs_are_refused_before_loading(attributes, task, message):
    with pytest.raises(DatasetError, match=message):
        check_dataset_argument(_graph(**attributes), task)


def test_attributes_that_cannot_be_partitioned_are_named_in_a_warning():
    graph = _graph(meta={"a": 1}, scale=torch.tensor(2.0), edge_weight=torch.ones(4))
    with pytest.warns(UserWarning, match="'meta', 'scale' are not tensors with one row"):
        check_dataset_argument(graph)


def test_synthetic_targets_and_edge_attributes_are_seeded():
    spec = "sbm?num_nodes=120&targets=multilabel:5&edge_features=3&edge_weights=uniform"
    data, again = load_dataset(spec), load_dataset(spec)
    other = load_dataset(spec + "&seed=1")
    assert data.task == "multilabel" and data.y.shape == (120, 5)
    assert set(data.y.unique().tolist()) == {0.0, 1.0}
    assert data.edge_attr.shape == (data.num_edges, 3) and data.edge_weight.shape == (
        data.num_edges,
    )
    assert 0 < float(data.edge_weight.min()) and float(data.edge_weight.max()) <= 1
    for key in ("y", "edge_attr", "edge_weight", "edge_index"):
        assert torch.equal(data[key], again[key])
    assert not torch.equal(data.edge_attr, other.edge_attr)
    regression = load_dataset("rmat?scale=7&targets=regression:2")
    assert regression.task == "regression" and regression.y.shape == (128, 2)
    assert abs(float(regression.y.mean())) < 1e-4  # standardised


def test_edge_weight_kinds():
    weights = {
        kind: load_dataset(f"sbm?num_nodes=80&edge_weights={kind}")
        for kind in ("ones", "count", "degree")
    }
    assert bool((weights["ones"].edge_weight == 1).all())
    count = weights["count"].edge_weight
    assert bool((count >= 1).all() and (count == count.round()).all()) and float(count.max()) > 1
    degree = weights["degree"]
    sums = torch.zeros(80).index_add_(0, degree.edge_index[1], degree.edge_weight)
    has_in = torch.bincount(degree.edge_index[1], minlength=80) > 0
    torch.testing.assert_close(sums[has_in], torch.ones(int(has_in.sum())))


def test_a_task_without_targets_in_the_spec_makes_synthetic_ones():
    data = load_dataset("sbm?num_nodes=60", task="regression")
    assert data.task == "regression" and data.y.dtype == torch.float32
    assert not bool((data.y == data.y.round()).all())


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("sbm?targets=ranking", "targets='ranking' must be multiclass"),
        ("sbm?targets=multilabel:0", "k must be an integer >= 1"),
        ("sbm?targets=multiclass:3", "targets='multiclass:3' must be"),
        ("sbm?edge_weights=heavy", "edge_weights='heavy' must be one of"),
        ("sbm?edge_features=-1", "edge_features=-1 must be >= 0"),
        ("sbm?targets=regression&num_nodes=30", None),
    ],
)
def test_synthetic_attribute_options_are_checked(spec, message):
    if message is None:
        assert load_dataset(spec).task == "regression"
        return
    with pytest.raises(DatasetError, match=message):
        load_dataset(spec)


def test_proteins_shaped_graph():
    data = load_dataset("proteins?num_nodes=240&tasks=12&species=4")
    assert data.task == "multilabel" and data.y.shape == (240, 12)
    assert data.edge_attr.shape == (data.num_edges, 8) and data.x.shape == (240, 8)
    species = data.node_species.view(-1)
    assert bool((species[data.edge_index[0]] == species[data.edge_index[1]]).all())
    # both directions of an association carry the same scores
    forward = {
        tuple(e): a
        for e, a in zip(data.edge_index.t().tolist(), data.edge_attr.tolist(), strict=True)
    }
    assert all(forward[(t, s)] == a for (s, t), a in forward.items())


@pytest.mark.parametrize(
    ("symmetry", "expected"),
    [
        ("general", {(1, 0): 2.5, (2, 1): -1.0}),
        ("symmetric", {(1, 0): 2.5, (0, 1): 2.5, (2, 1): -1.0, (1, 2): -1.0}),
        ("skew-symmetric", {(1, 0): 2.5, (0, 1): -2.5, (2, 1): -1.0, (1, 2): 1.0}),
    ],
)
def test_mtx_values_become_edge_weights(tmp_path, symmetry, expected):
    path = tmp_path / "w.mtx"
    path.write_text(
        f"%%MatrixMarket matrix coordinate real {symmetry}\n3 3 3\n1 2 2.5\n2 3 -1\n3 3 0\n"
    )
    data = load_dataset(f"mtx:{path}?weights=true")
    got = dict(
        zip(map(tuple, data.edge_index.t().tolist()), data.edge_weight.tolist(), strict=True)
    )
    assert got == expected
    assert getattr(load_dataset(f"mtx:{path}"), "edge_weight", None) is None


def test_edge_list_weights(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("0 1 0.5\n1 2 2\n0 1 3\n2 0 1.5 99\n")
    directed = load_dataset(f"edgelist:{path}?weights=true")
    pairs = sorted(
        zip(
            map(tuple, directed.edge_index.t().tolist()), directed.edge_weight.tolist(), strict=True
        )
    )
    assert pairs == [((0, 1), 0.5), ((0, 1), 3.0), ((1, 2), 2.0), ((2, 0), 1.5)]  # parallel kept
    undirected = load_dataset(f"edgelist:{path}?weights=true&directed=false")
    got = dict(
        zip(
            map(tuple, undirected.edge_index.t().tolist()),
            undirected.edge_weight.tolist(),
            strict=True,
        )
    )
    assert got == {(0, 1): 0.5, (1, 0): 0.5, (1, 2): 2.0, (2, 1): 2.0, (2, 0): 1.5, (0, 2): 1.5}
    path.write_text("0 1 0.5\n1 2\n")
    with pytest.raises(DatasetError, match=r"g.txt:2: weights=true needs 'src dst weight'"):
        load_dataset(f"edgelist:{path}?weights=true")
    pattern = tmp_path / "p.mtx"
    pattern.write_text("%%MatrixMarket matrix coordinate pattern general\n2 2 1\n1 2\n")
    with pytest.raises(DatasetError, match="weights=true takes the values of a 'real'"):
        load_dataset(f"mtx:{pattern}?weights=true")

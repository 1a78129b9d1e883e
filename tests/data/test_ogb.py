"""The OGB loader on a tiny dataset written in OGB's on-disk layout; the network is blocked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# Keep imports offline: "outdated" checks PyPI for itself on import unless OUTDATED_IGNORE is
# set, and ogb starts a PyPI version check of ogb in a thread on import (stubbed below).
os.environ.setdefault("OUTDATED_IGNORE", "1")
try:
    import outdated

    outdated.check_outdated = lambda package, version, *args, **kwargs: (False, version)
except ImportError:  # then ogb does not check
    pass

pytest.importorskip("ogb")

from lightning_gnn_dist.data import DatasetError, load_dataset  # noqa: E402
from lightning_gnn_dist.data.ogb import load_ogb  # noqa: E402
from tests.helpers import forbid_ogb_network, write_gzip_rows  # noqa: E402

EDGES = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0), (0, 3)]  # cites: source -> target
NUM_NODES = 6


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Any download, URL open, socket connection or stdin prompt fails the test."""
    import ogb.nodeproppred.dataset_pyg as dataset_pyg

    forbid_ogb_network(monkeypatch, dataset_pyg)


def write_arxiv(root: Path, labels: list[str] | None = None) -> Path:
    """A 6-vertex ``ogbn-arxiv`` in OGB's raw layout (see ogb/nodeproppred/master.csv)."""
    directory = root / "ogbn_arxiv"
    (directory / "raw").mkdir(parents=True)
    (directory / "split" / "time").mkdir(parents=True)

    def write(name: str, rows: list[str]) -> None:
        write_gzip_rows(directory, name, rows)

    write("raw/edge.csv.gz", [f"{s},{t}" for s, t in EDGES])
    write("raw/node-feat.csv.gz", [f"{i + 0.5},{-(i + 0.25)}" for i in range(NUM_NODES)])
    write("raw/node-label.csv.gz", labels or [str(i % 3) for i in range(NUM_NODES)])
    write("raw/node_year.csv.gz", [str(2000 + i) for i in range(NUM_NODES)])
    write("raw/num-node-list.csv.gz", [str(NUM_NODES)])
    write("raw/num-edge-list.csv.gz", [str(len(EDGES))])
    write("split/time/train.csv.gz", ["0", "1", "2"])
    write("split/time/valid.csv.gz", ["3"])
    write("split/time/test.csv.gz", ["4", "5"])
    (directory / "RELEASE_v1.txt").write_text("")
    return directory


def test_ogb_arxiv_layout_loads_without_download(tmp_path):
    write_arxiv(tmp_path)
    data = load_dataset(f"ogb:ogbn-arxiv?root={tmp_path}")
    assert data.name == "ogbn-arxiv"
    assert data.num_nodes == NUM_NODES
    edges = {(int(s), int(t)) for s, t in data.edge_index.t().tolist()}
    assert edges == set(EDGES)  # kept directed, as OGB stores them
    assert data.x.dtype == torch.float32
    assert torch.equal(data.x[:, 0], torch.arange(NUM_NODES) + 0.5)
    assert torch.equal(data.x[:, 1], -(torch.arange(NUM_NODES) + 0.25))
    assert data.y.dtype == torch.int64 and data.y.shape == (NUM_NODES,)
    assert data.y.tolist() == [0, 1, 2, 0, 1, 2]
    assert data.train_mask.tolist() == [True, True, True, False, False, False]
    assert data.val_mask.tolist() == [False, False, False, True, False, False]
    assert data.test_mask.tolist() == [False, False, False, False, True, True]
    assert (tmp_path / "ogbn_arxiv" / "processed" / "geometric_data_processed.pt").exists()

    # The second load reads ogb's processed file (torch.load) and gives identical tensors.
    again = load_dataset(f"ogb:ogbn-arxiv?root={tmp_path}")
    for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(data[key], again[key]), key


def test_ogb_nan_labels_become_minus_one_and_leave_the_masks(tmp_path):
    write_arxiv(tmp_path, labels=["0", "nan", "2", "1", "nan", "2"])
    data = load_ogb("ogbn-arxiv", root=tmp_path)
    assert data.y.tolist() == [0, -1, 2, 1, -1, 2]
    assert data.train_mask.tolist() == [True, False, True, False, False, False]
    assert data.test_mask.tolist() == [False, False, False, False, False, True]


def test_ogb_directory_without_release_marker_is_refused_without_prompt(tmp_path):
    directory = write_arxiv(tmp_path)
    (directory / "RELEASE_v1.txt").unlink()
    with pytest.raises(DatasetError, match="without RELEASE_v1.txt"):
        load_ogb("ogbn-arxiv", root=tmp_path)


@pytest.mark.parametrize(
    "name, message",
    [
        ("ogbn-nope", "unknown OGB node-property dataset 'ogbn-nope'"),
    ],
)
def test_ogb_unsupported_datasets_fail_before_any_download(tmp_path, name, message):
    with pytest.raises(ValueError, match=message):
        load_ogb(name, root=tmp_path)
    assert not any(tmp_path.iterdir())


def test_the_network_guard_catches_a_download_attempt(tmp_path):
    # No local files: ogb would download; the guard turns that into a test failure.
    with pytest.raises(AssertionError, match="tried to use the network"):
        load_ogb("ogbn-arxiv", root=tmp_path)


PROTEIN_EDGES = [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (0, 1)]  # (0, 1) twice: parallel edges
TASKS, SPECIES = 112, [3, 3, 3, 7, 7, 7]


def write_proteins(root: Path) -> Path:
    """A 6-vertex ``ogbn-proteins`` in OGB's raw layout: 8 edge features, 112 binary tasks,
    ``node_species``, the species split; OGB adds the inverse edges itself."""
    directory = root / "ogbn_proteins"
    (directory / "raw").mkdir(parents=True)
    (directory / "split" / "species").mkdir(parents=True)

    def write(name: str, rows: list[str]) -> None:
        write_gzip_rows(directory, name, rows)

    write("raw/edge.csv.gz", [f"{s},{t}" for s, t in PROTEIN_EDGES])
    write(
        "raw/edge-feat.csv.gz",
        [",".join(f"{(e + 1) * 0.01 + k * 0.1:.3f}" for k in range(8)) for e in range(6)],
    )
    write(
        "raw/node-label.csv.gz",
        [",".join(str((v + t) % 2) for t in range(TASKS)) for v in range(NUM_NODES)],
    )
    write("raw/node_species.csv.gz", [str(s) for s in SPECIES])
    write("raw/num-node-list.csv.gz", [str(NUM_NODES)])
    write("raw/num-edge-list.csv.gz", [str(len(PROTEIN_EDGES))])
    write("split/species/train.csv.gz", ["0", "1", "2"])
    write("split/species/valid.csv.gz", ["3"])
    write("split/species/test.csv.gz", ["4", "5"])
    (directory / "RELEASE_v1.txt").write_text("")
    return directory


def test_ogb_proteins_layout_gives_edge_features_and_multilabel_targets(tmp_path):
    """Issue 30: ogbn-proteins through OGB's PyG loader: ``edge_attr [E, 8]`` permuted with its
    edges (the inverse edges and the parallel ones keep their own rows), ``y [N, 112]``
    multi-label, ``node_species`` a node attribute, ``x`` the sum of the in-edge features."""
    write_proteins(tmp_path)
    data = load_dataset(f"ogb:ogbn-proteins?root={tmp_path}")
    assert data.task == "multilabel"
    assert data.y.dtype == torch.float32 and data.y.shape == (NUM_NODES, TASKS)
    expected_y = (torch.arange(NUM_NODES)[:, None] + torch.arange(TASKS)) % 2
    assert torch.equal(data.y, expected_y.float())
    assert data.node_species.view(-1).tolist() == SPECIES
    # every listed edge in both directions, each with its line's features
    rows = {}
    for e, (s, t) in enumerate(PROTEIN_EDGES):
        for pair in ((s, t), (t, s)):
            rows.setdefault(pair, []).append([(e + 1) * 0.01 + k * 0.1 for k in range(8)])
    got = {}
    for (s, t), features in zip(data.edge_index.t().tolist(), data.edge_attr.tolist(), strict=True):
        got.setdefault((s, t), []).append(features)
    assert got.keys() == rows.keys()
    for pair, features in rows.items():
        torch.testing.assert_close(torch.tensor(sorted(got[pair])), torch.tensor(sorted(features)))
    x = torch.zeros(NUM_NODES, 8).index_add_(0, data.edge_index[1], data.edge_attr)
    torch.testing.assert_close(data.x, x)
    assert data.train_mask.tolist() == [True, True, True, False, False, False]
    assert data.test_mask.tolist() == [False, False, False, False, True, True]


def write_mag(root: Path) -> Path:
    """A tiny ``ogbn-mag`` in OGB's raw heterogeneous layout (ogb/io/read_graph_raw.py)."""
    directory = root / "ogbn_mag"

    def write(name: str, rows: list[str]) -> None:
        write_gzip_rows(directory, name, rows)

    counts = {"author": 4, "field_of_study": 2, "institution": 2, "paper": 5}
    write("raw/num-node-dict.csv.gz", [",".join(counts), ",".join(map(str, counts.values()))])
    relations = {
        ("author", "affiliated_with", "institution"): [(0, 0), (1, 1), (3, 1)],
        ("author", "writes", "paper"): [(0, 0), (1, 0), (2, 3), (3, 4)],
        ("paper", "cites", "paper"): [(0, 1), (1, 2), (3, 0), (4, 0)],
        ("paper", "has_topic", "field_of_study"): [(0, 0), (2, 1), (4, 1)],
    }
    write("raw/triplet-type-list.csv.gz", [",".join(t) for t in relations])
    for r, (triplet, edges) in enumerate(relations.items()):
        base = "raw/relations/" + "___".join(triplet)
        write(f"{base}/edge.csv.gz", [f"{s},{d}" for s, d in edges])
        write(f"{base}/num-edge-list.csv.gz", [str(len(edges))])
        write(f"{base}/edge_reltype.csv.gz", [str(r)] * len(edges))
    write("raw/node-feat/paper/node-feat.csv.gz", [f"{i}.5,{-i}.25" for i in range(5)])
    write("raw/node-feat/paper/node_year.csv.gz", [str(2015 + i) for i in range(5)])
    write("raw/nodetype-has-label.csv.gz", [",".join(counts), "False,False,False,True"])
    write("raw/node-label/paper/node-label.csv.gz", ["0", "1", "2", "1", "0"])
    write("split/time/nodetype-has-split.csv.gz", [",".join(counts), "False,False,False,True"])
    write("split/time/paper/train.csv.gz", ["0", "1", "2"])
    write("split/time/paper/valid.csv.gz", ["3"])
    write("split/time/paper/test.csv.gz", ["4"])
    (directory / "RELEASE_v2.txt").write_text("")
    return directory


def test_ogbn_mag_layout_loads_as_a_typed_graph(tmp_path):
    """Issue 33: a heterogeneous OGB dataset is a typed graph (types, relations, the labelled
    type's split, additional node and edge files as per-type attributes)."""
    write_mag(tmp_path)
    view = load_dataset(f"ogb:ogbn-mag?root={tmp_path}")
    schema = view.hetero.schema
    assert view.name == "ogbn-mag" and schema.target_type == "paper"
    assert set(schema.node_types) == {"author", "field_of_study", "institution", "paper"}
    assert len(schema.edge_types) == 4 and view.num_edges == 14
    start = int(schema.node_offsets()[schema.type_index("paper")])
    assert view.y[start : start + 5].tolist() == [0, 1, 2, 1, 0]
    assert view.train_mask[start : start + 5].tolist() == [True, True, True, False, False]
    assert view.test_mask[start : start + 5].tolist() == [False, False, False, False, True]
    x = view.hetero.node_attrs["paper"]["x"]
    assert torch.equal(x[:, 0], torch.arange(5) + 0.5)
    assert view.hetero.node_attrs["paper"]["year"].tolist() == [2015, 2016, 2017, 2018, 2019]
    assert set(view.hetero.edge_attrs["paper__cites__paper"]) == {"edge_reltype"}

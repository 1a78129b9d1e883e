"""The OGB link loader on tiny datasets written in OGB's on-disk layout; the network is blocked."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("OUTDATED_IGNORE", "1")
try:
    import outdated

    outdated.check_outdated = lambda package, version, *args, **kwargs: (False, version)
except ImportError:
    pass

pytest.importorskip("ogb")

from lightning_gnn_dist import LinkDataModule  # noqa: E402
from lightning_gnn_dist.data import DatasetError  # noqa: E402
from lightning_gnn_dist.data.ogb_link import load_ogb_link  # noqa: E402
from tests.helpers import forbid_ogb_network, write_gzip_rows  # noqa: E402

EDGES = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0), (0, 3), (1, 4), (2, 5)]
NUM_NODES = 6


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Any download, URL open, socket connection or stdin prompt fails the test."""
    import ogb.linkproppred.dataset_pyg as dataset_pyg

    forbid_ogb_network(monkeypatch, dataset_pyg)


def _raw(directory: Path, edges, extra_edge=(), extra_node=()) -> None:
    (directory / "raw").mkdir(parents=True)
    write_gzip_rows(directory, "raw/edge.csv.gz", [f"{s},{t}" for s, t in edges])
    write_gzip_rows(
        directory, "raw/node-feat.csv.gz", [f"{i + 0.5},{-i}" for i in range(NUM_NODES)]
    )
    write_gzip_rows(directory, "raw/num-node-list.csv.gz", [str(NUM_NODES)])
    write_gzip_rows(directory, "raw/num-edge-list.csv.gz", [str(len(edges))])
    for name in extra_edge:
        write_gzip_rows(
            directory, f"raw/{name}.csv.gz", [str(1 + i % 3) for i in range(len(edges))]
        )
    for name in extra_node:
        write_gzip_rows(directory, f"raw/{name}.csv.gz", [str(2000 + i) for i in range(NUM_NODES)])
    (directory / "RELEASE_v1.txt").write_text("")


def write_collab(root: Path) -> None:
    """``ogbl-collab``: the training graph (OGB adds the inverse edges) and the time split, as
    OGB stores it (dicts of numpy arrays)."""
    directory = root / "ogbl_collab"
    train = EDGES[:6]
    _raw(directory, train, extra_edge=("edge_weight", "edge_year"))
    (directory / "split" / "time").mkdir(parents=True)
    arrays = lambda pairs: np.array(pairs, dtype=np.int64)  # noqa: E731
    torch.save({"edge": arrays(train), "weight": np.ones(6), "year": np.full(6, 2000)},
               directory / "split/time/train.pt")  # fmt: skip
    torch.save({"edge": arrays(EDGES[6:8]), "edge_neg": arrays([(0, 2), (1, 5), (3, 5)])},
               directory / "split/time/valid.pt")  # fmt: skip
    torch.save({"edge": arrays(EDGES[8:]), "edge_neg": arrays([(0, 4), (2, 4)])},
               directory / "split/time/test.pt")  # fmt: skip


def write_citation2(root: Path) -> None:
    """``ogbl-citation2``: directed, per-source splits with 3 negatives per positive."""
    directory = root / "ogbl_citation2"
    _raw(directory, EDGES[:6], extra_node=("node_year",))
    (directory / "split" / "time").mkdir(parents=True)
    column = lambda values: np.array(values, dtype=np.int64)  # noqa: E731
    torch.save({"source_node": column([0, 1, 2, 3, 4, 5]), "target_node": column([1, 2, 3, 4, 5, 0])},
               directory / "split/time/train.pt")  # fmt: skip
    for name, (src, dst) in (("valid", ([0, 1], [3, 4])), ("test", ([2], [5]))):
        neg = column([[(s + j + 2) % NUM_NODES for j in range(3)] for s in src])
        torch.save({"source_node": column(src), "target_node": column(dst), "target_node_neg": neg},
                   directory / f"split/time/{name}.pt")  # fmt: skip


def test_collab_pairs_labels_and_the_training_graph(tmp_path):
    write_collab(tmp_path)
    data, index, label, per_positive = load_ogb_link(f"ogb:ogbl-collab?root={tmp_path}")
    assert data.name == "ogbl-collab" and data.num_nodes == NUM_NODES
    assert data.edge_index.size(1) == 12  # both directions of the training edges
    assert data.edge_weight.shape == (12, 1) and data.x.shape == (NUM_NODES, 2)
    assert index["train"].t().tolist() == [list(e) for e in EDGES[:6]]
    assert index["val"].t().tolist() == [[0, 3], [1, 4], [0, 2], [1, 5], [3, 5]]
    assert label["val"].tolist() == [1, 1, 0, 0, 0] and per_positive == {}


def test_citation2_negatives_per_positive_and_a_partitioned_store(tmp_path):
    write_citation2(tmp_path)
    spec = f"ogb:ogbl-citation2?root={tmp_path}"
    _, index, label, per_positive = load_ogb_link(spec)
    assert per_positive == {"val": 3, "test": 3}
    assert index["val"][:, 2:5].tolist() == [[0, 0, 0], [2, 3, 4]]  # positive 0's negatives
    module = LinkDataModule(spec, method="random", num_parts=2, root=str(tmp_path / "stores"))
    module.prepare_data()
    meta = module.store.meta["link"]
    assert meta["source"] == "user" and meta["negatives_per_positive"] == {"val": 3, "test": 3}
    assert meta["num_positives"] == {"train": 6, "val": 2, "test": 1}
    assert module.store.meta["num_edges"] == 6  # directed: no inverse edges
    from lightning_gnn_dist.loaders.link import LinkPairs

    served = 0
    for p in range(2):
        pairs = LinkPairs.of_part(module.store.load_part(p), "val", meta)
        for (s, _), negatives in zip(
            pairs.index.t().tolist(), pairs.per_positive.tolist(), strict=True
        ):
            assert negatives == [(s + j + 2) % NUM_NODES for j in range(3)]
            served += 1
    assert served == 2
    with pytest.raises(DatasetError, match="unknown OGB link-prediction dataset 'ogbl-foo'"):
        load_ogb_link(f"ogb:ogbl-foo?root={tmp_path}")

"""Chunked graph files (issue 34): DGL's chunked format ingested once into a memory-mapped
canonical copy that equals the in-memory graph bit for bit, fingerprint included; the R-MAT
writer gives ``rmat?...`` exactly; malformed input is refused in one line naming the file."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

import lightning_gnn_dist.data.chunked_ingest as ingest_module
import lightning_gnn_dist.data.graph as graph_module
from lightning_gnn_dist.data import limits
from lightning_gnn_dist.data.chunked import NpyFile, file_rows, read_metadata
from lightning_gnn_dist.data.chunked_write import write_chunked, write_rmat_chunked
from lightning_gnn_dist.data.datasets import load_dataset
from lightning_gnn_dist.data.errors import DatasetError
from lightning_gnn_dist.data.graph import graph_fingerprint
from tests.helpers import random_graph

KEYS = ("edge_index", "x", "y", "train_mask", "val_mask", "test_mask")


def assert_same_graph(loaded: Data, expected: Data) -> None:
    keys = set(expected.keys()) - {"name", "task", "num_nodes"}
    assert set(loaded.keys()) - {"name", "task", "num_nodes"} == keys
    assert loaded.num_nodes == expected.num_nodes
    for key in keys:
        assert loaded[key].dtype == expected[key].dtype, key
        assert torch.equal(loaded[key], expected[key]), key
    assert loaded.task == expected.task
    assert graph_fingerprint(loaded) == graph_fingerprint(expected)


def multigraph() -> Data:
    """Parallel edges with their own weights, self loops, isolated vertices, extra attributes."""
    data = random_graph(30, 120, seed=3, features=4, parallel_edges=True)
    gen = torch.Generator().manual_seed(3)
    data.edge_weight = torch.rand(data.edge_index.size(1), generator=gen)
    data.edge_attr = torch.randn(data.edge_index.size(1), 2, generator=gen)
    data.node_year = torch.randint(1990, 2020, (30,), generator=gen)
    order = torch.randperm(data.edge_index.size(1), generator=gen)  # unsorted input
    for key in ("edge_index", "edge_weight", "edge_attr"):
        data[key] = data[key][..., order] if key == "edge_index" else data[key][order]
    return data


def test_rmat_writer_gives_the_rmat_spec_bit_for_bit(tmp_path):
    meta = write_rmat_chunked(tmp_path / "rmat", scale=9, features=8, classes=5, num_chunks=3)
    loaded = load_dataset(f"chunked:{meta}")
    assert_same_graph(loaded, load_dataset("rmat?scale=9&features=8&classes=5"))
    assert len(read_metadata(meta).edges.files) == 3
    assert loaded.name == "rmat"


@pytest.mark.parametrize(
    "edge_format, node_format, num_chunks",
    [("numpy", "numpy", 3), ("csv", "csv", 2), ("csv", "numpy", 1)],
)
def test_chunked_graph_equals_the_graph_in_memory(tmp_path, edge_format, node_format, num_chunks):
    data = multigraph()
    meta = write_chunked(data, tmp_path / "g", num_chunks, edge_format, node_format)
    loaded = load_dataset(f"chunked:{meta}")
    assert_same_graph(loaded, load_dataset(data))
    # parallel edges keep their own weights, in input order (a stable sort)
    assert not bool((loaded.edge_index[:, 1:] == loaded.edge_index[:, :-1]).all(0).sum() == 0)


def test_graph_is_memory_mapped_and_rows_are_read_from_the_file(tmp_path):
    meta = write_chunked(multigraph(), tmp_path / "g")
    data = load_dataset(f"chunked:{meta}")
    folder = meta.parent / "lgd-canonical"
    maps = Path("/proc/self/maps").read_text()
    for key in ("edge_index", "x"):
        address = data[key].data_ptr()
        assert any(
            str(folder) in line
            and int(line.split()[0].split("-")[0], 16)
            <= address
            < int(line.split()[0].split("-")[1], 16)
            for line in maps.splitlines()
        ), key
    index = np.array([29, 3, 3, 0, 17])
    assert torch.equal(file_rows(data, "x", index), data.x[index])
    assert torch.equal(file_rows(data, "edge_weight", index), data.edge_weight[index])
    data.x = data.x + 1  # a replaced tensor is no longer the file's
    assert file_rows(data, "x", index) is None


def test_fingerprint_is_remembered_for_the_mapped_tensors_only(tmp_path, monkeypatch):
    data = multigraph()
    meta = write_chunked(data, tmp_path / "g")
    loaded = load_dataset(f"chunked:{meta}")
    expected = graph_fingerprint(load_dataset(data))

    class NoHashing:
        @staticmethod
        def sha256():
            raise AssertionError("the remembered fingerprint must be used")

    monkeypatch.setattr(graph_module, "hashlib", NoHashing)
    assert graph_fingerprint(loaded) == expected
    monkeypatch.undo()
    loaded.y = loaded.y.clone()
    loaded.y[0] += 1  # another graph: hashed again
    assert graph_fingerprint(loaded) != expected


def test_canonical_copy_is_reused_and_rebuilt_when_an_input_changes(tmp_path, monkeypatch):
    meta = write_chunked(multigraph(), tmp_path / "g")
    first = load_dataset(f"chunked:{meta}")
    calls = []
    real = ingest_module.write_canonical
    monkeypatch.setattr(ingest_module, "write_canonical", lambda *a: calls.append(1) or real(*a))
    load_dataset(f"chunked:{meta}")
    assert calls == []
    x0 = tmp_path / "g" / "x" / "part-0.npy"
    array = np.load(x0)
    array[0, 0] += 1.0
    np.save(x0, array)
    os.utime(x0, ns=(1, 1))  # another modification time, whatever the clock's resolution
    changed = load_dataset(f"chunked:{meta}")
    assert calls == [1]
    assert changed.x[0, 0] == first.x[0, 0] + 1
    assert graph_fingerprint(changed) != graph_fingerprint(first)


def test_options_cache_seed_and_task(tmp_path):
    data = multigraph()
    del data.train_mask, data.val_mask, data.test_mask
    meta = write_chunked(data, tmp_path / "g")
    cache = tmp_path / "elsewhere"
    loaded = load_dataset(f"chunked:{meta}?cache={cache}&seed=4")
    assert (cache / "canonical.json").is_file()
    assert not (meta.parent / "lgd-canonical").exists()
    assert_same_graph(loaded, load_dataset(data, seed=4))
    regression = load_dataset(f"chunked:{meta}?cache={cache}&seed=4", task="regression")
    assert regression.task == "regression" and regression.y.dtype == torch.float32
    with pytest.raises(DatasetError, match="unknown option features='8'"):
        load_dataset(f"chunked:{meta}?features=8")


def edit_metadata(meta: Path, change) -> Path:
    content = json.loads(meta.read_text())
    change(content)
    meta.write_text(json.dumps(content))
    return meta


def _nodes(content):
    return content["node_data"]["_N"]


BAD_METADATA = {
    "no-x": (lambda c: _nodes(c).pop("x"), DatasetError, "node_data has no 'x'"),
    "two-node-types": (
        lambda c: c.update(node_type=["a", "b"]),
        DatasetError,
        "one node type and one edge type",
    ),
    "two-masks": (
        lambda c: _nodes(c).pop("test_mask"),
        DatasetError,
        "not all three masks",
    ),
    "format": (
        lambda c: _nodes(c)["x"].update(format={"name": "hdf5"}),
        DatasetError,
        "format 'hdf5'; use one of numpy, csv, parquet",
    ),
    "missing-file": (
        lambda c: _nodes(c)["y"]["data"].append("y/nope.npy"),
        FileNotFoundError,
        "names y/nope.npy, which does not exist",
    ),
    "edge-count": (
        lambda c: c.update(num_edges_per_chunk=[[c["num_edges_per_chunk"][0][0] - 1, 1000]]),
        DatasetError,
        r"edges/part-0.npy: (\d+) rows, but the metadata declares \d+ for it",
    ),
    "edge-total": (
        lambda c: c.update(num_edges_per_chunk=[[1, 2]]),
        DatasetError,
        "part-0.npy: more edges than the declared 3",
    ),
}


@pytest.mark.parametrize("case", BAD_METADATA, ids=list(BAD_METADATA))
def test_malformed_metadata_is_refused_in_one_line(tmp_path, case):
    change, error, message = BAD_METADATA[case]
    meta = edit_metadata(write_chunked(multigraph(), tmp_path / "g"), change)
    with pytest.raises(error, match=message) as raised:
        load_dataset(f"chunked:{meta}")
    assert "\n" not in str(raised.value)
    assert not (meta.parent / "lgd-canonical").exists()


def test_bad_rows_are_named_by_file_and_row(tmp_path):
    data = multigraph()
    meta = write_chunked(data, tmp_path / "g", num_chunks=2)
    edges = tmp_path / "g" / "edges" / "part-1.npy"
    array = np.load(edges)
    array[4, 1] = 30  # num_nodes
    np.save(edges, array)
    with pytest.raises(DatasetError, match=r"part-1.npy: row 5: vertex id \[\d+, 30\] is out of"):
        load_dataset(f"chunked:{meta}")
    np.save(edges, np.load(edges).clip(0, 29))
    features = tmp_path / "g" / "x" / "part-1.npy"
    array = np.load(features)
    array[2, 3] = np.nan
    np.save(features, array)
    with pytest.raises(DatasetError, match="x holds nan at vertex 17, column 3"):
        load_dataset(f"chunked:{meta}")


def test_ingestion_is_refused_with_its_estimate_when_memory_is_short(tmp_path, monkeypatch):
    meta = write_chunked(multigraph(), tmp_path / "g")
    monkeypatch.setattr(limits, "available_memory_bytes", lambda: 1000)
    with pytest.raises(DatasetError, match="ingesting 30 vertices and .* edges needs about"):
        load_dataset(f"chunked:{meta}")


def test_parquet_files_or_the_install_hint(tmp_path, monkeypatch):
    data = multigraph()
    meta = write_chunked(data, tmp_path / "g")
    try:
        import pyarrow
        import pyarrow.parquet as parquet
    except ImportError:
        monkeypatch.setitem(sys.modules, "pyarrow", None)
        monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
        edit_metadata(meta, lambda c: _nodes(c)["y"].update(format={"name": "parquet"}))
        with pytest.raises(ImportError, match="reading Parquet needs pyarrow"):
            load_dataset(f"chunked:{meta}")
        return
    for number, file in enumerate(read_metadata(meta).node_data["y"].files):
        table = pyarrow.table({"y": np.load(file)})
        parquet.write_table(table, tmp_path / f"y-{number}.parquet")
    edit_metadata(
        meta,
        lambda c: _nodes(c)["y"].update(
            format={"name": "parquet"}, data=[str(tmp_path / "y-0.parquet"), "../y-1.parquet"]
        ),
    )
    assert_same_graph(load_dataset(f"chunked:{meta}"), load_dataset(data))


def test_npy_file_reads_rows_in_any_order(tmp_path, monkeypatch):
    array = np.arange(60, dtype=np.int32).reshape(20, 3)
    np.save(tmp_path / "a.npy", array)
    source = NpyFile.open(tmp_path / "a.npy")
    monkeypatch.setattr("lightning_gnn_dist.data.chunked.BLOCK_BYTES", 24)  # two rows a block
    index = np.array([19, 0, 5, 5, 6, 18, 1])
    np.testing.assert_array_equal(source.rows(index), array[index])
    np.testing.assert_array_equal(np.concatenate(list(source.blocks())), array)
    np.save(tmp_path / "f.npy", np.asfortranarray(array))
    with pytest.raises(DatasetError, match="Fortran-ordered"):
        NpyFile.open(tmp_path / "f.npy")


def test_datamodule_checks_a_chunked_dataset_against_its_store_without_reading_it(
    tmp_path, monkeypatch
):
    """``verify_dataset=True`` on a ``chunked:`` graph: the fingerprint recorded at ingestion is
    checked against the store, no array of the graph is read and nothing is ingested again."""
    from lightning_gnn_dist.data.chunked import NpyFile
    from lightning_gnn_dist.lightning.datamodule import GraphPartitionDataModule

    meta = write_rmat_chunked(tmp_path / "rmat", scale=8, features=8)
    spec = f"chunked:{meta}"
    module = GraphPartitionDataModule(spec, method="random", num_parts=2, root=str(tmp_path / "p"))
    module.prepare_data()
    assert module.store.meta["fingerprint"] == graph_fingerprint(
        load_dataset("rmat?scale=8&features=8")
    )

    def unread(*args, **kwargs):
        raise AssertionError("the graph must not be read")

    monkeypatch.setattr(graph_module, "hashlib", None)  # no hashing of the graph
    monkeypatch.setattr(NpyFile, "rows", unread)
    monkeypatch.setattr(NpyFile, "read", unread)
    monkeypatch.setattr(ingest_module, "write_canonical", unread)
    again = GraphPartitionDataModule(spec, method="random", num_parts=2, root=str(tmp_path / "p"))
    again.prepare_data()  # the store matches: reused
    assert again.store_path == module.store_path
    part = again.store.load_part(1)
    assert part.num_parts == 2 and part.x.size(1) == 8


def write_ogb_raw(root: Path, name: str, split: str, labels: list[str]) -> None:
    """A 6-vertex OGB node-property dataset in OGB's raw layout (as tests/data/test_ogb.py)."""
    import gzip

    directory = root / name.replace("-", "_")
    (directory / "raw").mkdir(parents=True)
    (directory / "split" / split).mkdir(parents=True)

    def write(file: str, rows: list[str]) -> None:
        with gzip.open(directory / file, "wt") as handle:
            handle.write("".join(row + "\n" for row in rows))

    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0), (0, 3), (0, 3)]
    write("raw/edge.csv.gz", [f"{s},{t}" for s, t in edges])
    write("raw/node-feat.csv.gz", [f"{i + 0.5},{-(i + 0.25)},{i / 3}" for i in range(6)])
    write("raw/node-label.csv.gz", labels)
    write("raw/node_year.csv.gz", [str(2000 + i) for i in range(6)])
    write("raw/num-node-list.csv.gz", ["6"])
    write("raw/num-edge-list.csv.gz", [str(len(edges))])
    write(f"split/{split}/train.csv.gz", ["0", "1", "2"])
    write(f"split/{split}/valid.csv.gz", ["3"])
    write(f"split/{split}/test.csv.gz", ["4", "5"])
    (directory / "RELEASE_v1.txt").write_text("")


@pytest.mark.parametrize(
    "name, split, labels",
    [
        ("ogbn-arxiv", "time", ["0", "nan", "2", "1", "nan", "2"]),
        ("ogbn-products", "sales_ranking", [str(i % 4) for i in range(6)]),  # inverse edges
    ],
)
def test_ogb_raw_files_ingested_chunk_by_chunk_equal_the_ogb_loader(tmp_path, name, split, labels):
    pytest.importorskip("ogb")
    import tests.data.test_ogb  # noqa: F401  (keeps ogb's import offline)
    from lightning_gnn_dist.data.chunked_write import ogb_chunked

    write_ogb_raw(tmp_path, name, split, labels)
    meta = ogb_chunked(name, root=tmp_path)
    loaded = load_dataset(f"chunked:{meta}")
    expected = load_dataset(f"ogb:{name}?root={tmp_path}")
    assert loaded.name == expected.name == name
    assert_same_graph(loaded, expected)
    assert loaded.edge_index.size(1) == (16 if name == "ogbn-products" else 8)


def test_ogb_datasets_that_cannot_be_read_in_chunks_are_refused(tmp_path):
    pytest.importorskip("ogb")
    import tests.data.test_ogb  # noqa: F401
    from lightning_gnn_dist.data.chunked_write import ogb_chunked

    with pytest.raises(ValueError, match="ogbn-proteins has no node features"):
        ogb_chunked("ogbn-proteins", root=tmp_path)
    with pytest.raises(ValueError, match="raw files are one .npz"):
        ogb_chunked("ogbn-papers100M", root=tmp_path)
    with pytest.raises(FileNotFoundError, match="edge.csv.gz does not exist"):
        ogb_chunked("ogbn-arxiv", root=tmp_path)

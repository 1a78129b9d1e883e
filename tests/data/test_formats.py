"""Readers for METIS, Matrix Market and edge-list files: exact edges and exact error messages."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from lightning_gnn_dist.data.formats import DatasetError, read_edgelist, read_metis, read_mtx

METIS_EXAMPLES = Path("/usr/share/doc/libmetis-dev/examples/graphs")


def edge_set(data) -> set[tuple[int, int]]:
    return {(int(s), int(t)) for s, t in data.edge_index.t().tolist()}


def undirected(pairs: list[tuple[int, int]]) -> set[tuple[int, int]]:
    return {(a, b) for a, b in pairs} | {(b, a) for a, b in pairs}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# 1-based edges 1-2, 1-3, 2-3, 2-4, 4-5 (0-based below).
TINY_EDGES = undirected([(0, 1), (0, 2), (1, 2), (1, 3), (3, 4)])
TINY_METIS = """% a comment line
5 5
2 3
1 3 4
1 2
2 5
4
"""


# --------------------------------------------------------------------------------------------
# METIS


def test_metis_tiny_graph_exact_edges(tmp_path):
    data = read_metis(write(tmp_path, "tiny.graph", TINY_METIS))
    assert data.num_nodes == 5
    assert data.name == "tiny"
    assert data.edge_index.dtype.is_floating_point is False
    assert data.edge_index.shape == (2, 10)
    assert edge_set(data) == TINY_EDGES


@pytest.mark.parametrize(
    "header, lines",
    [
        ("5 5 1", ["2 7 3 1", "1 7 3 2 4 9", "1 1 2 2", "2 9 5 4", "4 4"]),  # edge weights
        ("5 5 10", ["3 2 3", "1 1 3 4", "4 1 2", "2 2 5", "8 4"]),  # one vertex weight
        ("5 5 010 2", ["3 1 2 3", "1 0 1 3 4", "4 4 1 2", "2 2 2 5", "8 1 4"]),  # ncon = 2
        ("5 5 11", ["3 2 7 3 1", "1 1 7 3 2 4 9", "4 1 1 2 2", "2 2 9 5 4", "8 4 4"]),
        ("5 5 100", ["1 2 3", "1 1 3 4", "1 1 2", "1 2 5", "1 4"]),  # vertex sizes
    ],
)
def test_metis_weighted_formats_parse_to_the_same_edges(tmp_path, header, lines):
    text = "% weighted\n" + header + "\n" + "\n".join(lines) + "\n"
    data = read_metis(write(tmp_path, "w.graph", text))
    assert data.num_nodes == 5
    assert edge_set(data) == TINY_EDGES


def test_metis_blank_vertex_line_is_an_isolated_vertex(tmp_path):
    # Vertex 2 has no neighbours; vertex 4 is the last line and isolated too.
    data = read_metis(write(tmp_path, "iso.graph", "4 1\n3\n\n1\n\n"))
    assert data.num_nodes == 4
    assert edge_set(data) == undirected([(0, 2)])


def test_metis_gzip_is_read_transparently(tmp_path):
    path = tmp_path / "tiny.graph.gz"
    with gzip.open(path, "wt") as handle:
        handle.write(TINY_METIS)
    assert edge_set(read_metis(path)) == TINY_EDGES
    # The path without ".gz" finds the compressed file as well.
    data = read_metis(tmp_path / "tiny.graph")
    assert edge_set(data) == TINY_EDGES
    assert data.name == "tiny"


def test_metis_crlf_line_endings(tmp_path):
    path = tmp_path / "crlf.graph"
    path.write_bytes(TINY_METIS.replace("\n", "\r\n").encode())
    assert edge_set(read_metis(path)) == TINY_EDGES


def test_metis_missing_file_names_the_path(tmp_path):
    path = tmp_path / "absent.graph"
    with pytest.raises(FileNotFoundError, match=re.escape(str(path))):
        read_metis(path)


@pytest.mark.parametrize(
    "text, line, message",
    [
        # the example from the spec: the comment is line 1, so vertex 2 is on line 3
        ("%c\n5 5\n2 3\n1 9 4\n1 2\n2 5\n4\n", 4, "vertex id 9 out of range 1..5"),
        ("5 5\n2 3\n1 3 4\n1 2\n2 5\n0\n", 6, "vertex id 0 out of range 1..5"),
        ("5 5\n2 3\n1 3 4 2\n1 2\n2 5\n4\n", 3, "vertex 2 lists itself as a neighbour"),
        ("5 5\n2 3\n1 3 4 3\n1 2\n2 5\n4\n", 3, "vertex 2 lists neighbour 3 more than once"),
        (
            "5 5\n2 3\n1 3 4\n1 2\n2 5\n4 1\n",
            6,
            "vertex 5 lists neighbour 1 but vertex 1 (line 2) does not list 5",
        ),
        ("5 5\n2 3\n1 3 x4\n1 2\n2 5\n4\n", 3, "'x4' is not an integer"),
        ("5 6\n2 3\n1 3 4\n1 2\n2 5\n4\n", 1, "the header says m=6 undirected edges but"),
        ("5 5\n2 3\n1 3 4\n1 2\n2 5\n", 1, "n=5 vertices but the file has only 4 vertex lines"),
        ("5 5\n2 3\n1 3 4\n1 2\n2 5\n4\n\n3\n", 8, "unexpected line after the 5 vertex lines"),
        ("5 5 1\n2 1 3\n1 1 3 4\n1 2\n2 5\n4 1\n", 2, "found an odd number (3) of them"),
        ("5 5 010 2\n3\n1 1 3 4\n1 2 1 2\n2 2 2 5\n8 1 4\n", 2, "found 1 number(s)"),
        ("5 5 2\n2 3\n", 1, "unsupported METIS fmt '2'"),
        ("5\n2 3\n", 1, "bad METIS header '5'"),
        ("five 5\n", 1, "bad METIS header 'five 5'"),
    ],
)
def test_metis_errors_name_file_and_line(tmp_path, text, line, message):
    path = write(tmp_path, "bad.graph", text)
    with pytest.raises(DatasetError) as info:
        read_metis(path)
    assert str(info.value).startswith(f"{path}:{line}: "), str(info.value)
    assert message in str(info.value)


def test_metis_error_message_matches_the_documented_example(tmp_path):
    path = write(tmp_path, "g.graph", "5 5\n2 3\n1 9 4\n1 2\n2 5\n4\n")
    with pytest.raises(DatasetError, match=re.escape(f"{path}:3: vertex id 9 out of range 1..5")):
        read_metis(path)


def test_metis_empty_file(tmp_path):
    with pytest.raises(DatasetError, match="no header line"):
        read_metis(write(tmp_path, "empty.graph", "% only a comment\n\n"))


@pytest.mark.skipif(not (METIS_EXAMPLES / "4elt.graph").exists(), reason="libmetis-doc absent")
def test_metis_real_mesh_matches_its_header():
    path = METIS_EXAMPLES / "4elt.graph"
    n, m = (int(v) for v in path.read_text().split("\n", 1)[0].split()[:2])
    data = read_metis(path)
    assert data.num_nodes == n
    assert data.edge_index.size(1) == 2 * m
    src, dst = data.edge_index.numpy()
    assert np.array_equal(np.sort(src * n + dst), np.sort(dst * n + src))  # symmetric


@pytest.mark.skipif(not (METIS_EXAMPLES / "test.mgraph").exists(), reason="libmetis-doc absent")
def test_metis_real_multi_constraint_graph():
    # Header "766 1314 010 2": two vertex weights per line before the neighbours.
    data = read_metis(METIS_EXAMPLES / "test.mgraph")
    assert data.num_nodes == 766
    assert data.edge_index.size(1) == 2 * 1314


# --------------------------------------------------------------------------------------------
# Matrix Market


def test_mtx_general_real_entry_ij_is_edge_j_to_i_and_zeros_are_dropped(tmp_path):
    text = """%%MatrixMarket matrix coordinate real general
% comment
4 4 4
1 2 1.5
3 1 -2e0
2 2 0.0
4 4 7
"""
    data = read_mtx(write(tmp_path, "a.mtx", text))
    assert data.num_nodes == 4
    assert data.name == "a"
    # A[1,2] -> edge 2->1 (0-based 1->0); A[3,1] -> 0->2; A[2,2] = 0 dropped; A[4,4] self loop.
    assert edge_set(data) == {(1, 0), (0, 2), (3, 3)}


def test_mtx_symmetric_pattern_adds_both_directions(tmp_path):
    text = "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 3\n2 1\n3 2\n3 3\n"
    data = read_mtx(write(tmp_path, "s.mtx", text))
    assert edge_set(data) == undirected([(0, 1), (1, 2)]) | {(2, 2)}
    assert data.edge_index.size(1) == 5  # the diagonal entry once


def test_mtx_integer_field(tmp_path):
    text = "%%MatrixMarket matrix coordinate integer general\n3 3 2\n1 3 4\n2 1 -1\n"
    assert edge_set(read_mtx(write(tmp_path, "i.mtx", text))) == {(2, 0), (0, 1)}


def test_mtx_agrees_with_scipy_mmread(tmp_path):
    matrix = sp.random(40, 40, density=0.1, format="coo", random_state=np.random.RandomState(3))
    path = tmp_path / "r.mtx"
    scipy.io.mmwrite(str(path), matrix)
    expected = scipy.io.mmread(str(path)).tocoo()
    data = read_mtx(path)
    assert edge_set(data) == {
        (int(j), int(i)) for i, j in zip(expected.row, expected.col, strict=True)
    }


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 2 1\n", 2, "says 2 entries"),
        ("%%MatrixMarket matrix coordinate real general\n3 3 1\n1 4 1\n", 3, "vertex id 4 out of"),
        ("%%MatrixMarket matrix coordinate real general\n3 3 1\n1 2\n", 3, "expected 3 numbers"),
        ("%%MatrixMarket matrix coordinate real general\n3 4 1\n1 2 1\n", 2, "3 x 4"),
        ("%%MatrixMarket matrix coordinate real general\n3 3 1\n1 2 one\n", 3, "'one' is not a"),
        ("%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n", 1, "'array'"),
        ("%%MatrixMarket matrix coordinate real circulant\n", 1, "symmetry 'circulant'"),
        ("3 3 1\n1 2 1\n", 1, "not a Matrix Market banner"),
    ],
)
def test_mtx_errors_name_file_and_line(tmp_path, text, line, message):
    path = write(tmp_path, "bad.mtx", text)
    with pytest.raises(DatasetError) as info:
        read_mtx(path)
    assert str(info.value).startswith(f"{path}:{line}: "), str(info.value)
    assert message in str(info.value)


# --------------------------------------------------------------------------------------------
# edge lists


def test_edgelist_whitespace_commas_comments_and_extra_columns(tmp_path):
    text = "# src dst\n0 1\n\n% other comment\n1,2\n 2\t0 0.5\n3,1,7\n"
    data = read_edgelist(write(tmp_path, "e.txt", text))
    assert data.num_nodes == 4  # max id + 1
    assert edge_set(data) == {(0, 1), (1, 2), (2, 0), (3, 1)}
    # Directed by default: some edges lack their reverse.
    assert (1, 0) not in edge_set(data)


def test_edgelist_undirected_and_num_nodes(tmp_path):
    path = write(tmp_path, "e.csv", "0,1\n1,2\n")
    data = read_edgelist(path, directed=False, num_nodes=6)
    assert data.num_nodes == 6
    assert edge_set(data) == undirected([(0, 1), (1, 2)])


@pytest.mark.parametrize(
    "text, kwargs, line, message",
    [
        ("src,dst\n0,1\n", {}, 1, "'src' is not a vertex id"),
        ("0 1\n\n2\n", {}, 3, "expected 'src dst'"),
        ("0 1\n# c\n-1 2\n", {}, 3, "vertex id -1 is negative"),
        ("0 1\n1 5\n", {"num_nodes": 5}, 2, "vertex id 5 out of range 0..4"),
    ],
)
def test_edgelist_errors_name_file_and_line(tmp_path, text, kwargs, line, message):
    path = write(tmp_path, "bad.txt", text)
    with pytest.raises(DatasetError) as info:
        read_edgelist(path, **kwargs)
    assert str(info.value).startswith(f"{path}:{line}: "), str(info.value)
    assert message in str(info.value)


def test_edgelist_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        read_edgelist(tmp_path / "nope.txt")

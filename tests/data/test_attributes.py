"""Node and edge attributes ride with what they belong to (design §10, issue 30): classified
once, permuted with their edges by ``canonicalize``, and partitioned with their vertex (owned
rows) or their edge (in the part's ``edge_index`` order), parallel edges keeping their values."""

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from lightning_gnn_dist.data.attributes import graph_attributes
from lightning_gnn_dist.data.graph import canonicalize, graph_fingerprint
from lightning_gnn_dist.data.local import LocalPartition, build_local_partitions
from lightning_gnn_dist.data.vertex_cut import VertexCutPart, build_vertex_cut_parts


def _multigraph(num_nodes=12, seed=0):
    """Random edges with parallel edges, repeated self loops and an isolated vertex, each edge
    with its own weight and features (so a mixed-up edge shows)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, num_nodes - 1, 40)  # vertex num_nodes - 1 stays isolated
    dst = rng.integers(0, num_nodes - 1, 40)
    src = np.concatenate([src, [0, 0, 3, 3, 3]])  # parallel 0 → 1, two self loops on 3
    dst = np.concatenate([dst, [1, 1, 3, 3, 5]])
    edges = len(src)
    return Data(
        x=torch.randn(num_nodes, 3),
        edge_index=torch.from_numpy(np.stack([src, dst])),
        edge_weight=torch.arange(edges, dtype=torch.float32) + 0.5,
        edge_attr=torch.randn(edges, 4),
        pos=torch.randn(num_nodes, 2),
        node_year=torch.arange(num_nodes),
        num_nodes=num_nodes,
        name="multi",
        note="not partitioned",
    )


def test_attributes_are_classified_by_their_first_dimension():
    data = _multigraph()
    found = graph_attributes(data)
    assert found.node == ("node_year", "pos")
    assert found.edge == ("edge_attr", "edge_weight")
    assert found.other == ("note",)


def test_a_name_decides_when_vertices_and_edges_are_as_many():
    data = Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3)
    data.edge_time, data.score = torch.arange(3), torch.arange(3)
    found = graph_attributes(data)
    assert found.edge == ("edge_time",) and found.node == ("score",)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("weights", torch.ones(7), "neither the number of vertices (12) nor of edges (45)"),
        ("e_id", torch.ones(45), "name the loaders set"),
        ("n_id", torch.ones(12), "name the loaders set"),
    ],
)
def test_attributes_that_cannot_be_partitioned_are_refused_by_name(key, value, message):
    data = _multigraph()
    data[key] = value
    with pytest.raises(ValueError, match=f"'{key}'") as error:
        graph_attributes(data)
    assert message in str(error.value)


def test_canonicalize_permutes_every_edge_attribute_with_its_edge():
    data = _multigraph()
    before = {
        (s, d, float(w)): row.tolist()
        for s, d, w, row in zip(
            *data.edge_index.tolist(), data.edge_weight, data.edge_attr, strict=True
        )
    }
    out = canonicalize(data)
    src, dst = out.edge_index.tolist()
    assert sorted(zip(src, dst, strict=True)) == list(zip(src, dst, strict=True))
    after = {
        (s, d, float(w)): row.tolist()
        for s, d, w, row in zip(src, dst, out.edge_weight, out.edge_attr, strict=True)
    }
    assert after == before  # every edge kept its weight and features, parallel ones included
    assert torch.equal(out.pos, data.pos)


def test_the_fingerprint_covers_every_attribute_and_keeps_the_old_one_without_them():
    data = canonicalize(_multigraph())
    plain = Data(x=data.x, edge_index=data.edge_index, num_nodes=data.num_nodes)
    with_weight = plain.clone()
    with_weight.edge_weight = data.edge_weight
    other_weight = plain.clone()
    other_weight.edge_weight = data.edge_weight.flip(0)
    prints = {graph_fingerprint(g) for g in (plain, with_weight, other_weight)}
    assert len(prints) == 3
    plain.note = "graph-level, not partitioned"
    assert graph_fingerprint(plain) in prints


def _check_parts(data, parts, owned_ids):
    seen = []
    for part in parts:
        ids = part.edge_ids
        seen.append(ids)
        for key in ("edge_weight", "edge_attr"):
            assert torch.equal(part.edge_attrs[key], data[key][ids])
        rows = owned_ids(part)
        for key in ("pos", "node_year"):
            assert torch.equal(part.node_attrs[key], data[key][rows])
        assert set(part.node_attrs) == {"pos", "node_year"}
    return torch.cat(seen)


@pytest.mark.parametrize("num_parts", [1, 3])
def test_vertex_partitions_hold_each_edge_with_its_target_and_its_values(num_parts, tmp_path):
    data = canonicalize(_multigraph())
    assignment = np.arange(data.num_nodes) % num_parts
    parts = list(build_local_partitions(data, assignment, num_parts))
    for part in parts:  # local edge -> the dataset edge it is, target owned
        start = part.owned_range[0]
        local = torch.cat([part.global_ids, part.halo_global_ids])
        src, dst = data.edge_index[:, part.edge_ids]
        assert torch.equal(local[part.edge_index[0]], src)
        assert torch.equal(part.global_ids[part.edge_index[1]], dst)
        assert start >= 0
    every = _check_parts(data, parts, lambda part: part.global_ids)
    assert torch.equal(every.sort().values, torch.arange(data.num_edges))  # each edge once
    parts[-1].save(tmp_path / "part.pt")
    loaded = LocalPartition.load(tmp_path / "part.pt")
    assert torch.equal(loaded.edge_attrs["edge_attr"], parts[-1].edge_attrs["edge_attr"])


def test_vertex_cuts_hold_each_edge_on_its_part_with_its_values(tmp_path):
    data = canonicalize(_multigraph())
    edge_parts = np.arange(data.num_edges) % 3
    parts = list(build_vertex_cut_parts(data, edge_parts, 3))
    for part in parts:
        src, dst = data.edge_index[:, part.edge_ids]
        assert torch.equal(part.global_ids[part.edge_index[0]], src)
        assert torch.equal(part.global_ids[part.edge_index[1]], dst)
    every = _check_parts(data, parts, lambda part: part.global_ids)
    assert torch.equal(every.sort().values, torch.arange(data.num_edges))
    parts[0].save(tmp_path / "part.pt")
    loaded = VertexCutPart.load(tmp_path / "part.pt")
    assert torch.equal(loaded.edge_attrs["edge_weight"], parts[0].edge_attrs["edge_weight"])

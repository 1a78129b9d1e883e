"""Typed graphs as their homogeneous view (issue 33): PyG's ``to_homogeneous`` ids, the target
type's labels and masks, per-type attributes; typed parts with per-type contiguous ids and the
homogeneous plan restricted per relation; partitions balanced per type (and the target's
training vertices) for every method; the store's ``types`` record and relation metrics; the
ogbn-mag-shaped generator and OGB's heterogeneous on-disk format."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from torch_geometric.data import HeteroData

from lightning_gnn_dist.data import DatasetError, load_dataset
from lightning_gnn_dist.data.graph import graph_fingerprint
from lightning_gnn_dist.data.hetero import HeteroSchema, typed_graph
from lightning_gnn_dist.data.hetero_local import relation_view, typed_batch
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.store import partition_to_store
from lightning_gnn_dist.partition.types import balance_classes, stored_relation_metrics

METHODS = ["random", "metis", "hypergraph"] + (
    ["kaminpar"] if importlib.util.find_spec("kaminpar") else []
)


def small() -> HeteroData:
    gen = torch.Generator().manual_seed(1)
    data = HeteroData()
    data["user"].x = torch.randn(9, 3, generator=gen)
    data["item"].x = torch.randn(5, 2, generator=gen)
    data["item"].y = torch.tensor([0, 2, 1, -1, 2])
    data["item"].price = torch.arange(5.0)
    data["tag"].num_nodes = 4
    data["user", "buys", "item"].edge_index = torch.tensor([[0, 1, 8, 8, 3], [4, 0, 2, 2, 1]])
    data["user", "buys", "item"].edge_weight = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    data["item", "has", "tag"].edge_index = torch.tensor([[0, 1, 4], [3, 3, 0]])
    data["user", "knows", "user"].edge_index = torch.tensor([[0, 2, 2, 5], [1, 2, 2, 0]])
    return data


def test_typed_graph_is_pyg_homogeneous_view_with_target_labels():
    data = small()
    view = typed_graph(data)
    schema = view.hetero.schema
    assert schema.node_types == ("user", "item", "tag") and schema.target_type == "item"
    assert schema.num_nodes == (9, 5, 4) and view.num_nodes == 18
    assert view.node_type.tolist() == [0] * 9 + [1] * 5 + [2] * 4
    # y: the item's labels at their homogeneous ids, -1 elsewhere; masks inside the items only
    assert view.y[9:14].tolist() == [0, 2, 1, -1, 2]
    assert (view.y[:9] == -1).all() and (view.y[14:] == -1).all()
    for key in ("train_mask", "val_mask", "test_mask"):
        assert not view[key][:9].any() and not view[key][14:].any()
    assert int(sum(view[k][9:14].sum() for k in ("train_mask", "val_mask", "test_mask"))) == 5
    offsets = dict(zip(schema.node_types, schema.node_offsets().tolist(), strict=False))
    # Every homogeneous edge is its relation's edge at edge_position, shifted by the types.
    for r, (s, rel, d) in enumerate(schema.edge_types):
        mine = view.edge_type == r
        positions = view.hetero.edge_position[mine]
        index = data[s, rel, d].edge_index[:, positions]
        assert torch.equal(view.edge_index[0, mine], index[0] + offsets[s])
        assert torch.equal(view.edge_index[1, mine], index[1] + offsets[d])
        assert int(mine.sum()) == data[s, rel, d].num_edges  # parallel edges kept
    assert set(view.hetero.node_attrs["item"]) == {"x", "price"}
    assert view.hetero.node_attrs["tag"] == {}
    assert set(view.hetero.edge_attrs["user__buys__item"]) == {"edge_weight"}


@pytest.mark.parametrize("num_parts", [1, 2])
def test_every_relation_keeps_its_edge_attributes_in_parts_and_batches(num_parts, tmp_path):
    data = small()  # attributes on the second and third relations too, not only the first
    data["item", "has", "tag"].edge_attr = torch.arange(6.0).view(3, 2)
    data["user", "knows", "user"].edge_weight = torch.tensor([7.0, 8.0, 9.0, 10.0])
    view = typed_graph(data)
    store = partition_to_store(view, get_partitioner("random"), num_parts, tmp_path / "s")
    schema = HeteroSchema.from_meta(store.meta["types"])
    seen = {key: 0 for key in schema.relation_keys}
    for p in range(num_parts):
        batch = typed_batch(store.load_part(p), schema)
        for (s, rel, d), key in zip(schema.edge_types, schema.relation_keys, strict=True):
            relation = batch[s, rel, d]
            seen[key] += relation.e_id.numel()
            for name in ("edge_weight", "edge_attr"):
                if name in data[s, rel, d]:
                    assert torch.equal(relation[name], data[s, rel, d][name][relation.e_id])
    assert list(seen.values()) == list(schema.num_edges)


def test_fingerprint_covers_typed_attributes():
    first = graph_fingerprint(typed_graph(small()))
    changed = small()
    changed["item"].price[0] = 9.0
    assert graph_fingerprint(typed_graph(changed)) != first
    assert graph_fingerprint(typed_graph(small())) == first
    other_target = small()
    other_target["user"].y = torch.zeros(9, dtype=torch.long)
    assert graph_fingerprint(typed_graph(other_target, target_type="item")) != first


def test_target_type_with_a_homogeneous_graph_is_refused():
    with pytest.raises(DatasetError, match="target_type='paper' names a node type"):
        load_dataset("digits", target_type="paper")
    with pytest.raises(DatasetError, match="target_type='paper' names a node type"):
        load_dataset(_homogeneous(), target_type="paper")


def _homogeneous():
    from torch_geometric.data import Data

    return Data(x=torch.ones(3, 2), edge_index=torch.tensor([[0, 1], [1, 2]]))


@pytest.fixture(scope="module")
def mag_view():
    return load_dataset("mag?scale=0.002&features=8&classes=4")


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("num_parts", [2, 4])
def test_every_method_balances_each_type_and_the_training_vertices(
    method, num_parts, mag_view, tmp_path
):
    partitioner = get_partitioner(method, epsilon=0.05)
    store = partition_to_store(mag_view, partitioner, num_parts, tmp_path / "store")
    assignment = store.assignment()
    classes = balance_classes(mag_view)
    for c in np.unique(classes):
        counts = np.bincount(assignment[classes == c], minlength=num_parts)
        total = counts.sum()
        bound = max(-(-total // num_parts), int((1 + 0.05) * total / num_parts))
        assert counts.max() <= bound, (method, c, counts)
    types = store.meta["types"]
    assert types["target_type"] == "paper" and len(types["edge_types"]) == 7
    assert np.array(types["part_type_counts"]).sum(0).tolist() == list(types["num_nodes"].values())
    assert set(store.meta["node_attrs"]) >= {"paper/x", "paper/year", "node_type"}
    assert store.meta["node_attrs"]["paper/x"] == {
        "dtype": "float32",
        "shape": [8],
        "role": "feature",
    }


def test_typed_parts_have_per_type_ranges_and_the_plan_restricted_per_relation(mag_view, tmp_path):
    num_parts = 3
    store = partition_to_store(mag_view, get_partitioner("random"), num_parts, tmp_path / "s")
    schema = HeteroSchema.from_meta(store.meta["types"])
    metrics = stored_relation_metrics(store.meta)
    parts = [store.load_part(p) for p in range(num_parts)]
    node_type = mag_view.node_type
    for part in parts:
        types = node_type[part.global_ids]
        assert torch.equal(types, torch.sort(types).values)  # owned sorted by type
        assert torch.equal(torch.bincount(types, minlength=4), torch.diff(part.node_type_offsets))
        assert torch.equal(part.halo_node_type, node_type[part.halo_global_ids])
        local_types = part.edge_attrs["edge_type"]
        assert torch.equal(local_types, torch.sort(local_types, stable=True).values)
        assert set(part.node_attrs) >= {"paper/x", "paper/year"}
        k = schema.type_index("paper")
        start, end = (int(v) for v in part.node_type_offsets[k : k + 2])
        ids = part.global_ids[start:end]  # papers are type 0: dataset id = per-type id
        assert torch.equal(
            part.node_attrs["paper/x"], mag_view.hetero.node_attrs["paper"]["x"][ids]
        )
    for key in schema.relation_keys:
        views = [relation_view(part, schema, key) for part in parts]
        for p, view in enumerate(views):
            # what p receives from q is what q sends p: the restricted plans agree
            for q, other in enumerate(views):
                assert int(view.recv_counts[q]) == int(other.send_counts[p])
            assert view.send_counts.sum() == metrics[key].send_rows[p]
            assert view.recv_counts.sum() == metrics[key].recv_rows[p]
            assert torch.equal(
                view.part_offsets[1:] - view.part_offsets[:-1],
                torch.tensor(metrics[key].part_sizes),
            )
            # halo ids are the source type's per-type relabelled ids of vertices owned elsewhere
            owner = torch.searchsorted(view.part_offsets, view.halo_ids, right=True) - 1
            assert (owner != p).all()
        # every relation edge is held once, by its target's owner
        assert (
            sum(v.edge_index.size(1) for v in views) == schema.num_edges[schema.relation_index(key)]
        )


def test_mag_generator_is_seeded_power_law_and_scales(mag_view):
    again = load_dataset("mag?scale=0.002&features=8&classes=4")
    assert torch.equal(again.edge_index, mag_view.edge_index)
    schema = mag_view.hetero.schema
    assert schema.node_types == ("paper", "author", "institution", "field_of_study")
    assert schema.target_type == "paper"
    cites = mag_view.edge_index[
        1, mag_view.edge_type == schema.relation_index("paper__cites__paper")
    ]
    degree = torch.bincount(cites)
    assert degree.max() > 10 * degree.float().mean()  # heavy tail
    larger = load_dataset("mag?scale=0.004&features=8&classes=4")
    assert 1.6 < larger.num_edges / mag_view.num_edges < 2.4
    with pytest.raises(DatasetError, match="option scale=0.0 must be in"):
        load_dataset("mag?scale=0")

"""Edge splits for link prediction (RandomLinkSplit semantics), stored per part, and negatives."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import RandomLinkSplit

from lightning_gnn_dist.data.links import random_link_split, user_link_split
from lightning_gnn_dist.data.negatives import (
    check_negative_count,
    check_negatives,
    draw_negatives,
    filtered_negatives,
    graph_edge_keys,
    known_edge_keys,
)
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.store import (
    PartitionStore,
    PartitionStoreError,
    partition_to_store,
)
from tests.helpers import random_graph


def _multiset(edge_index: torch.Tensor) -> list[tuple[int, int]]:
    return sorted(map(tuple, edge_index.t().tolist()))


@pytest.fixture(scope="module")
def undirected():
    return random_graph(80, 300, seed=1, directed=False, self_loops=True)


@pytest.fixture(scope="module")
def multigraph():
    """Parallel edges both ways, repeated self loops and isolated vertices."""
    return random_graph(60, 260, seed=2, directed=False, parallel_edges=True)


def test_random_split_equals_pyg_random_link_split(undirected):
    split = random_link_split(undirected, 0.1, 0.2, seed=7)
    torch.manual_seed(7)
    transform = RandomLinkSplit(0.1, 0.2, is_undirected=True, neg_sampling_ratio=0.0,
                                add_negative_train_samples=False)  # fmt: skip
    train, val, test = transform(Data(edge_index=undirected.edge_index, num_nodes=80))
    for name, ours in (("train", train), ("val", val), ("test", test)):
        assert torch.equal(split.label_index[name], ours.edge_label_index), name
    assert split.undirected
    # PyG appends the flipped training edges, a self loop's flip included (each loop twice);
    # the message-passing graph here keeps the input's own loops once
    mp = undirected.edge_index[:, split.edge_ids]
    pyg = train.edge_index
    assert _multiset(mp[:, mp[0] != mp[1]]) == _multiset(pyg[:, pyg[0] != pyg[1]])
    loops = mp[:, mp[0] == mp[1]]
    assert loops.size(1) > 0 and _multiset(torch.cat([loops, loops], 1)) == _multiset(
        pyg[:, pyg[0] == pyg[1]]
    )


@pytest.mark.parametrize("disjoint", [0.0, 0.3])
@pytest.mark.parametrize("graph", ["undirected", "multigraph"])
def test_split_is_disjoint_and_keeps_both_directions_together(graph, disjoint, request):
    data = request.getfixturevalue(graph)
    split = random_link_split(data, 0.15, 0.15, seed=3, disjoint_train_ratio=disjoint)
    src, dst = data.edge_index
    keys = lambda i: set(  # noqa: E731 (undirected keys of pairs)
        zip(torch.minimum(i[0], i[1]).tolist(), torch.maximum(i[0], i[1]).tolist(), strict=True)
    )
    held_out = keys(split.label_index["val"]) | keys(split.label_index["test"])
    assert (
        not keys(split.label_index["val"]) & keys(split.label_index["test"])
        or graph == "multigraph"
    )
    # no held-out edge (either direction) in the message-passing graph, unless a parallel copy
    # of it was drawn for training (a multigraph's copies are edges of their own)
    mp = data.edge_index[:, split.edge_ids]
    if graph == "undirected":
        assert not keys(mp) & held_out
        if disjoint:
            assert not keys(mp) & keys(split.label_index["train"])
    # every edge: in the message-passing graph, or a supervision pair (one direction) held out
    counted = split.edge_ids.numel() + sum(
        2 * int((i[0] != i[1]).sum()) + int((i[0] == i[1]).sum())
        for name, i in split.label_index.items()
        if name != "train" or disjoint
    )
    assert counted == data.edge_index.size(1)
    # both directions of every message-passing edge are there, as many copies each way
    assert _multiset(mp) == _multiset(mp.flip(0))
    assert torch.all(split.label_index["train"][0] <= split.label_index["train"][1])
    del src, dst


def test_directed_split_counts_and_refusals():
    data = random_graph(40, 150, seed=4)
    split = random_link_split(data, 0.2, 0.2, seed=0)
    assert not split.undirected
    m = data.edge_index.size(1)
    assert split.label_index["val"].size(1) == int(0.2 * m)
    assert split.edge_ids.numel() == split.label_index["train"].size(1)
    with pytest.raises(ValueError, match="leave no training edge"):
        random_link_split(data, 0.6, 0.5)
    with pytest.raises(ValueError, match="val_ratio must be a fraction"):
        random_link_split(data, 1.5, 0.1)
    with pytest.raises(ValueError, match="undirected=True, but the graph is not symmetric"):
        random_link_split(data, 0.1, 0.1, undirected=True)


def test_user_split_refusals_and_held_out_edges_removed(undirected):
    n = undirected.num_nodes
    pairs = undirected.edge_index[:, undirected.edge_index[0] < undirected.edge_index[1]]
    train, val = pairs[:, :50], pairs[:, 50:60]
    split = user_link_split(undirected, {"train": train, "val": val})
    mp = undirected.edge_index[:, split.edge_ids]
    val_keys = set(map(tuple, val.t().tolist())) | set(map(tuple, val.flip(0).t().tolist()))
    assert not set(map(tuple, mp.t().tolist())) & val_keys
    assert mp.size(1) == undirected.edge_index.size(1) - 2 * 10
    with pytest.raises(
        ValueError, match=r"edge \(\d+, \d+\) is a positive pair of both 'train' and 'val'"
    ):
        user_link_split(undirected, {"train": train, "val": train[:, :3].flip(0)})
    bad = val.clone()
    bad[1, 0] = n + 5
    with pytest.raises(
        ValueError, match=rf"edge_label_index\['val'\] holds vertex id {n + 5}, outside \[0, {n}\)"
    ):
        user_link_split(undirected, {"train": train, "val": bad})
    with pytest.raises(ValueError, match=r"edge_label\['val'\] must hold one label per pair"):
        user_link_split(undirected, {"train": train, "val": val}, {"val": torch.ones(3)})


def test_store_keeps_pairs_with_their_sources_owner(multigraph, tmp_path):
    split = random_link_split(multigraph, 0.2, 0.2, seed=5)
    mp = split.message_passing_graph(multigraph)
    partitioner = get_partitioner("random", seed=0)
    store = partition_to_store(mp, partitioner, 3, tmp_path / "s", link=split)
    assignment = store.assignment()
    meta = store.meta["link"]
    assert meta["seed"] == 5 and meta["sha256"] == split.settings["link_sha256"]
    for name, index in split.label_index.items():
        seen = []
        for p in range(3):
            part = store.load_part(p)
            stored = part.link_label_index[name]
            assert (assignment[stored[0].numpy()] == p).all()
            ids = part.link_label_id[name]
            assert torch.equal(index[:, ids], stored)
            assert meta["counts"][name][p] == stored.size(1)
            # far rows: distinct targets owned by each other part
            far = np.zeros(3, dtype=np.int64)
            for q in range(3):
                if q != p:
                    far[q] = np.unique(stored[1].numpy()[assignment[stored[1].numpy()] == q]).size
            assert meta["far_rows"][name][p] == far.tolist()
            seen.append(ids)
        assert torch.equal(torch.sort(torch.cat(seen)).values, torch.arange(index.size(1)))
    # another split of the same graph is refused by name
    other = random_link_split(multigraph, 0.2, 0.2, seed=6)
    with pytest.raises(PartitionStoreError, match="link_seed: stored 5, requested 6"):
        partition_to_store(mp, partitioner, 3, tmp_path / "s", link=other)
    assert PartitionStore.open(tmp_path / "s").meta["link"]["seed"] == 5


def test_global_negatives_are_one_stream_whatever_the_batching():
    pair_id = torch.arange(50)
    dst = torch.zeros(50, dtype=torch.long)
    whole = draw_negatives("global", dst, pair_id, 4, num_nodes=1000, seed=1, epoch=2)
    halves = torch.cat(
        [
            draw_negatives("global", dst[i], pair_id[i], 4, num_nodes=1000, seed=1, epoch=2)
            for i in (torch.arange(0, 50, 2), torch.arange(1, 50, 2))
        ]
    )
    order = torch.cat([torch.arange(0, 50, 2), torch.arange(1, 50, 2)])
    assert torch.equal(whole[order], halves)
    assert whole.min() >= 0 and whole.max() < 1000 and whole.unique().numel() > 150
    other = draw_negatives("global", dst, pair_id, 4, num_nodes=1000, seed=1, epoch=3)
    assert not torch.equal(whole, other)
    pool = torch.tensor([5, 9, 11])
    local = draw_negatives("local", dst, pair_id, 4, num_nodes=1000, seed=1, epoch=2, pool=pool)
    assert set(local.unique().tolist()) <= {5, 9, 11}
    batch = draw_negatives("in-batch", torch.arange(10, 15), pair_id[:5], 2, num_nodes=1000,
                           seed=1, epoch=0)  # fmt: skip
    assert batch.tolist() == [[11, 12], [12, 13], [13, 14], [14, 10], [10, 11]]


def test_filtering_matches_between_a_part_and_the_whole_graph(tmp_path):
    data = random_graph(30, 400, seed=8)  # dense: many draws hit true edges
    split = random_link_split(data, 0.1, 0.1, seed=0)
    mp = split.message_passing_graph(data)
    store = partition_to_store(mp, get_partitioner("metis", seed=0), 2, tmp_path / "f", link=split)
    train = split.label_index["train"]
    whole = graph_edge_keys(mp.edge_index, 30, train)
    for p in range(2):
        part = store.load_part(p)
        keys = known_edge_keys(part)
        owned = torch.isin(whole // 30, part.global_ids)
        assert torch.equal(keys, whole[owned])
        pairs, ids = part.link_label_index["train"], part.link_label_id["train"]
        stream = dict(num_nodes=30, seed=0, epoch=1)
        mine = filtered_negatives("global", pairs[0], pairs[1], ids, 3, keys, **stream)
        ref = filtered_negatives("global", pairs[0], pairs[1], ids, 3, whole, **stream)
        assert torch.equal(mine[0], ref[0]) and torch.equal(mine[1], ref[1])
        true = torch.isin(pairs[0].unsqueeze(1) * 30 + mine[0], whole)
        assert not (true & mine[1]).any()


def test_negative_options_are_refused_one_line_each():
    with pytest.raises(ValueError, match="num_negatives must be an integer >= 1 .*got 0"):
        check_negatives("global", 0)
    with pytest.raises(ValueError, match="undefined negatives option 'hard'"):
        check_negatives("hard", 1)
    with pytest.raises(ValueError, match="eval_num_negatives=1000 negatives .* only 500 vertices"):
        check_negative_count(1000, 500, "eval_num_negatives")

import numpy as np
import pytest

from lightning_gnn_dist.partition import column_net_hypergraph, get_partitioner
from lightning_gnn_dist.partition.metrics import partition_metrics
from lightning_gnn_dist.partition.placement import (
    Topology,
    map_parts_to_nodes,
    node_traffic,
    renumber_by_node,
    two_level_assignment,
)
from tests.helpers import random_graph


def _block_traffic(num_nodes: int, ranks_per_node: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Heavy traffic inside hidden groups, light across; parts shuffled. Returns the traffic and
    the hidden group of each part."""
    rng = np.random.default_rng(seed)
    size = num_nodes * ranks_per_node
    group = rng.permutation(np.arange(size) // ranks_per_node)
    light = rng.integers(0, 5, (size, size))
    heavy = rng.integers(50, 100, (size, size))
    traffic = np.where(group[:, None] == group[None, :], heavy, light)
    np.fill_diagonal(traffic, 0)
    return traffic, group


@pytest.mark.parametrize("num_nodes, ranks_per_node", [(2, 2), (4, 2), (2, 4), (3, 3)])
def test_mapping_finds_the_hidden_groups(num_nodes, ranks_per_node):
    topology = Topology(num_nodes, ranks_per_node)
    traffic, group = _block_traffic(num_nodes, ranks_per_node, seed=num_nodes * 10 + ranks_per_node)
    node = map_parts_to_nodes(traffic, topology)
    assert np.bincount(node, minlength=num_nodes).tolist() == [ranks_per_node] * num_nodes
    # Same grouping as the hidden one (up to the nodes' names).
    assert len({(g, n) for g, n in zip(group, node, strict=True)}) == num_nodes
    renumber = renumber_by_node(node, topology)
    placed = np.empty_like(traffic)
    placed[np.ix_(renumber, renumber)] = traffic
    naive = node_traffic(traffic, topology).total_inter_rows
    assert node_traffic(placed, topology).total_inter_rows < naive


def test_mapping_never_worse_than_the_numbering_it_starts_from():
    topology = Topology(2, 3)
    rng = np.random.default_rng(0)
    for _ in range(20):
        traffic = rng.integers(0, 20, (6, 6))
        np.fill_diagonal(traffic, 0)
        node = map_parts_to_nodes(traffic, topology)
        renumber = renumber_by_node(node, topology)
        placed = np.empty_like(traffic)
        placed[np.ix_(renumber, renumber)] = traffic
        brute = min(
            node_traffic(traffic[np.ix_(perm, perm)], topology).total_inter_rows
            for perm in _balanced_orders(6)
        )
        assert node_traffic(placed, topology).total_inter_rows == brute


def _balanced_orders(size: int):
    from itertools import combinations

    for first in combinations(range(size), size // 2):
        rest = [p for p in range(size) if p not in first]
        yield np.array([*first, *rest])


def test_node_traffic_splits_rows():
    topology = Topology(2, 2)
    peer = np.arange(16).reshape(4, 4)
    np.fill_diagonal(peer, 0)
    split = node_traffic(peer, topology)
    assert split.intra_rows.tolist() == [1, 4, 11, 14]
    assert split.inter_rows.tolist() == [2 + 3, 6 + 7, 8 + 9, 12 + 13]
    assert split.total_inter_rows + split.total_intra_rows == peer.sum()
    assert split.max_node_inter_rows(topology) == 8 + 9 + 12 + 13


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: Topology(0, 2), "num_nodes must be an integer >= 1"),
        (lambda: Topology(2, 1.5), "ranks_per_node must be an integer >= 1"),
        (lambda: node_traffic(np.zeros((3, 3)), Topology(2, 2)), "2 nodes × 2 ranks = 4 ranks"),
        (lambda: renumber_by_node(np.array([0, 0, 0, 1]), Topology(2, 2)), r"\[3, 1\]"),
    ],
)
def test_bad_input_is_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_restrict_keeps_the_pins_among_the_vertices():
    data = random_graph(num_nodes=40, num_edges=160, seed=3, parallel_edges=True)
    hypergraph = column_net_hypergraph(data)
    vertices = np.array([1, 4, 5, 9, 17, 23, 30, 39])
    sub = hypergraph.restrict(vertices)
    expected = []
    for net in range(hypergraph.num_nets):
        pins = hypergraph.pins[hypergraph.net_offsets[net] : hypergraph.net_offsets[net + 1]]
        kept = sorted(np.searchsorted(vertices, p) for p in pins if p in vertices)
        if kept:
            expected.append(kept)
    got = [
        sorted(sub.pins[sub.net_offsets[n] : sub.net_offsets[n + 1]].tolist())
        for n in range(sub.num_nets)
    ]
    assert got == expected
    assert sub.vertex_weights.tolist() == hypergraph.vertex_weights[vertices].tolist()


def test_two_level_groups_each_node_and_balances_ranks():
    data = random_graph(num_nodes=300, num_edges=1500, seed=5, parallel_edges=True)
    topology = Topology(2, 2)
    partitioner = get_partitioner("hypergraph", seed=0, epsilon=0.1)
    assignment = two_level_assignment(column_net_hypergraph(data), partitioner, topology)
    sizes = np.bincount(assignment, minlength=4)
    assert (sizes > 0).all()
    # The first level's node split is kept: the node-level volume equals level one's km1.
    nodes = partitioner.partition_hypergraph(column_net_hypergraph(data), 2)
    assert (assignment // 2 == nodes).all()
    node_volume = partition_metrics(data, assignment // 2, 2).total_volume_rows
    assert node_volume == partition_metrics(data, nodes, 2).total_volume_rows


def test_the_store_records_the_placement_and_refuses_another_topology(tmp_path):
    from lightning_gnn_dist.partition.store import PartitionStoreError, partition_to_store

    data = random_graph(80, 400, seed=2, features=3)
    partitioner = get_partitioner("random", seed=0)
    topology = Topology(2, 2)
    path = tmp_path / "placed"
    store = partition_to_store(data, partitioner, 4, path, topology=topology, placement="mapped")
    placement = store.meta["placement"]
    assert (placement["num_nodes"], placement["ranks_per_node"]) == (2, 2)
    assert placement["method"] == "mapped"
    assert sorted(placement["part_to_rank"]) == [0, 1, 2, 3]
    # the stored assignment is the partitioner's renumbered: part p of it runs on rank p
    rank_of = np.asarray(placement["part_to_rank"])
    np.testing.assert_array_equal(store.assignment(), rank_of[partitioner.partition(data, 4)])
    assert store.metrics.ranks_per_node == 2
    assert store.metrics.hierarchical_peer_rows.shape == (4, 4)
    store.check_topology(topology)
    store.check_topology(None)  # nothing known about the launch: nothing to check
    with pytest.raises(PartitionStoreError, match=r"placed \('mapped'\) for 2 node\(s\) x 2"):
        store.check_topology(Topology(1, 4))
    with pytest.raises(PartitionStoreError, match="num_nodes=2 and devices=2"):
        partition_to_store(data, partitioner, 4, path, topology=Topology(4, 1))
    # the same topology by another placement method is another store
    with pytest.raises(PartitionStoreError, match="placed 'mapped', but placement='naive'"):
        partition_to_store(data, partitioner, 4, path, topology=topology)
    store.check_topology(None, "naive")  # nothing known about the launch: nothing to check
    plain = partition_to_store(data, partitioner, 4, tmp_path / "plain")
    assert "placement" not in plain.meta and plain.topology is None
    plain.check_topology(Topology(2, 2))  # an unplaced store runs anywhere (part p on rank p)
    with pytest.raises(PartitionStoreError, match=r"pass placement='naive' \(--placement naive"):
        plain.check_topology(Topology(2, 2), "two-level")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"placement": "mapped"}, "needs the topology"),
        ({"placement": "nearest", "topology": Topology(2, 2)}, "unknown placement 'nearest'"),
        ({"topology": Topology(3, 1)}, "has 3 ranks but num_parts=4"),
        ({"placement": "two-level", "topology": Topology(2, 2)}, "use method='hypergraph'"),
        ({"placement": "mapped", "topology": Topology(1, 4)}, "the topology has one node"),
    ],
)
def test_bad_placements_are_refused_before_partitioning(tmp_path, kwargs, match):
    from lightning_gnn_dist.partition.store import partition_to_store

    data = random_graph(40, 100, seed=1, features=3)
    with pytest.raises(ValueError, match=match):
        partition_to_store(data, get_partitioner("random"), 4, tmp_path / "s", **kwargs)
    assert not (tmp_path / "s").exists()


def test_a_mapped_store_from_the_naive_assignment_is_the_repartitioned_one(tmp_path):
    """``naive=`` renumbers a given partition instead of partitioning again: the same store
    (assignment, parts, metrics, meta apart from the seconds) as partitioning anew."""
    from lightning_gnn_dist.partition.store import partition_to_store, placed_assignment

    data = random_graph(600, 1500, seed=4, features=8, parallel_edges=True)
    partitioner, topology = get_partitioner("metis", seed=0), Topology(2, 2)
    naive = partitioner.partition(data, 4)
    kwargs = {"topology": topology, "placement": "mapped"}
    fresh = partition_to_store(data, partitioner, 4, tmp_path / "fresh", **kwargs)
    calls = []
    partitioner.partition = lambda *args: calls.append(args)  # must not be called
    reused = partition_to_store(data, partitioner, 4, tmp_path / "reused", naive=naive, **kwargs)
    assert calls == [] and fresh.meta["placement"]["part_to_rank"] != [0, 1, 2, 3]
    np.testing.assert_array_equal(reused.assignment(), fresh.assignment())
    same = {
        key: value for key, value in fresh.meta.items() if key not in ("seconds", "meta_sha256")
    }
    assert {key: reused.meta[key] for key in same} == same  # the parts' hashes included
    assignment, part_to_rank = placed_assignment(data, partitioner, 4, topology, "naive", naive)
    assert assignment is naive or (assignment == naive).all()
    assert (part_to_rank == np.arange(4)).all()
    with pytest.raises(ValueError, match="cannot reuse a 4-way assignment"):
        placed_assignment(data, partitioner, 4, topology, "two-level", naive)
    with pytest.raises(ValueError, match=r"naive must be the \[600\] int64 part in \[0, 4\)"):
        placed_assignment(data, partitioner, 4, topology, "mapped", naive[:-1])
    with pytest.raises(ValueError, match="part in"):
        placed_assignment(data, partitioner, 4, topology, "mapped", naive + 4)
    assert calls == []


@pytest.mark.parametrize(
    ("pairs", "variants"),
    [
        ([(0, 1), (2, 3)], []),  # the naive groups: mapped only swaps the nodes (part 2 first)
        ([(0, 2), (1, 3)], ["mapped"]),
    ],
)
def test_mapped_is_a_variant_only_when_it_regroups_the_parts(pairs, variants):
    from lightning_gnn_dist.partition.store import placed_variants

    traffic = np.ones((4, 4), dtype=np.int64)
    for p, q in pairs:
        traffic[p, q] = traffic[q, p] = 100
    traffic[2, :] += 5  # part 2 has the most traffic: the greedy mapping puts it on node 0
    np.fill_diagonal(traffic, 0)
    metis, topology = get_partitioner("metis"), Topology(2, 2)
    assert placed_variants(metis, topology, traffic) == variants
    assert placed_variants(get_partitioner("hypergraph"), topology, traffic) == [
        *variants,
        "two-level",
    ]
    for other in (Topology(4, 1), Topology(1, 4), None):  # nothing to place
        assert placed_variants(metis, other, traffic) == []
    assert placed_variants(get_partitioner("vertex-cut"), topology, traffic) == []

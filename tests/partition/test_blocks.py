"""``gnn-blocks``: ByteGNN's K-hop blocks, assigned whole with balanced train/val/test counts."""

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.blocks import build_blocks
from lightning_gnn_dist.partition.store import partition_to_store

SBM = "sbm?num_nodes=1200&num_classes=4&avg_degree=6&features=4&seed=2"


def _path_graph(n):
    """``0 -> 1 -> ... -> n-1``: the in-neighbour of ``i`` is ``i - 1``."""
    edges = torch.stack([torch.arange(n - 1), torch.arange(1, n)])
    return Data(edge_index=edges, num_nodes=n)


@pytest.mark.parametrize(
    ("hops", "expected"),
    [(0, [0, 1, 2, 3, 4, 5, 6, 7]), (1, [0, 1, 1, 2, 3, 4, 4, 5]), (2, [0, 0, 0, 1, 2, 2, 2, 3])],
)
def test_blocks_grow_k_hops_over_in_edges(hops, expected):
    # Centers 2 and 6 reach their in-neighbours (1, 0 and 5, 4) hop by hop; 3 and 7 stay alone.
    centers = np.zeros(8, dtype=bool)
    centers[[2, 6]] = True
    block = build_blocks(_path_graph(8), centers, hops)
    assert block.tolist() == expected


def test_first_block_id_received_wins():
    # Vertex 0 feeds centers 1 and 2 at the same hop: it joins exactly one of their blocks.
    edges = torch.tensor([[0, 0, 3], [1, 2, 0]])
    centers = np.array([False, True, True, False])
    block = build_blocks(Data(edge_index=edges, num_nodes=4), centers, 2)
    assert block[0] in (block[1], block[2]) and block[1] != block[2]
    assert block[3] == block[0]  # reached at hop 2 through vertex 0's block


def test_blocks_stay_whole_and_sets_are_balanced():
    data = load_dataset(SBM)
    partitioner = get_partitioner("gnn-blocks", num_hops=2)
    assignment = partitioner.partition(data, 4)
    labelled = (data.train_mask | data.val_mask | data.test_mask).numpy()
    block = build_blocks(data, labelled, 2)
    # every block in one part
    per_block = np.zeros((block.max() + 1, 4), dtype=int)
    np.add.at(per_block, (block, assignment), 1)
    assert ((per_block > 0).sum(1) == 1).all()
    assert (
        np.bincount(assignment, minlength=4).max()
        <= 1.03 * data.num_nodes / 4 + per_block.sum(1).max()
    )
    for key in ("train_mask", "val_mask", "test_mask"):
        counts = np.bincount(assignment[getattr(data, key).numpy()], minlength=4)
        assert counts.max() <= 1.1 * counts.mean(), (key, counts)
    assert np.array_equal(assignment, get_partitioner("gnn-blocks", num_hops=2).partition(data, 4))


def test_blocks_cut_fewer_edges_than_random():
    data = load_dataset(SBM)
    src, dst = data.edge_index.numpy()
    cut = {
        m: float((a[src] != a[dst]).mean())
        for m in ("gnn-blocks", "random")
        for a in [get_partitioner(m).partition(data, 4)]
    }
    assert cut["gnn-blocks"] < 0.8 * cut["random"], cut


def test_gnn_blocks_in_the_store(tmp_path):
    data = load_dataset(SBM)
    store = partition_to_store(data, get_partitioner("gnn-blocks"), 3, tmp_path / "s", dataset=SBM)
    assert store.meta["settings"]["method"] == "gnn-blocks"
    assert store.meta["settings"]["num_hops"] == 2
    assert sum(store.meta["mask_counts"]["train_mask"]) == int(data.train_mask.sum())


def test_bad_num_hops():
    with pytest.raises(ValueError, match="num_hops"):
        get_partitioner("gnn-blocks", num_hops=-1)

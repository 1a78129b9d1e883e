"""The link neighbour loader's batches equal a single-process redraw of the same stream."""

from __future__ import annotations

import pytest
import torch

from lightning_gnn_dist.comm.score import VertexDirectory
from lightning_gnn_dist.data.links import random_link_split
from lightning_gnn_dist.data.negatives import draw_negatives
from lightning_gnn_dist.data.sampler import stream_key
from lightning_gnn_dist.loaders.graph_store import LocalGraphStore, PartitionedGraphStore
from lightning_gnn_dist.loaders.link import LinkPairs, NegativeSampler
from lightning_gnn_dist.loaders.link_neighbor import LinkNeighborLoader, exclude_pair_edges
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.store import PartitionStore, partition_to_store
from tests.distributed import run_ranks
from tests.helpers import random_graph

SEED, K = 3, 2


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    graph = random_graph(120, 420, seed=9, directed=False, features=5, parallel_edges=True)
    split = random_link_split(graph, 0.1, 0.1, seed=2)
    mp = split.message_passing_graph(graph)
    # load the sampler's compiled kernels once here: the forked ranks inherit them
    LinkNeighborLoader(
        LocalGraphStore(mp), [2], LinkPairs(split.label_index["train"][:, :4], torch.ones(4),
                                            torch.arange(4), 4, [4]),
        NegativeSampler("global", 1, mp.num_nodes), batch_size=4,
    ).make_batch(torch.arange(4), 0)  # fmt: skip
    root = tmp_path_factory.mktemp("link-neighbor")
    paths = {}
    for parts in (2, 3):
        paths[parts] = str(root / f"p{parts}")
        partition_to_store(mp, get_partitioner("metis", seed=0), parts, paths[parts], link=split)
    return paths


def _edges(n_id, edge_index):
    return sorted(map(tuple, n_id[edge_index].t().tolist()))


def _same_as_single_process(rank, world_size, path, negatives):
    store = PartitionStore.open(path)
    part = store.load_part(rank)
    meta = store.meta["link"]
    num_nodes = part.num_nodes_global
    directory = VertexDirectory.from_owner(store.assignment(), world_size)
    pairs = LinkPairs.of_part(part, "train", meta)
    pairs.counts = meta["counts"]["train"]
    sampler = NegativeSampler(negatives, K, num_nodes, SEED, pool=part.global_ids)
    graph_store = PartitionedGraphStore(part)
    loader = LinkNeighborLoader(
        graph_store, [3, 2], pairs, sampler, directory, batch_size=40, shuffle=True, seed=SEED
    )
    # the whole message-passing graph, rebuilt from every part's in-edges (dataset ids)
    edges = torch.cat([part.global_ids[part.edge_index[1]].unsqueeze(0)], 0)
    src = torch.cat([part.global_ids, part.halo_global_ids])[part.edge_index[0]]
    local = torch.stack([src, edges[0]])
    gathered = [None] * world_size
    torch.distributed.all_gather_object(gathered, (local, part.global_ids, part.x, part.edge_ids))
    from torch_geometric.data import Data

    order = torch.argsort(torch.cat([g[3] for g in gathered]))
    x = torch.zeros(num_nodes, part.x.size(1))
    for _, ids, features, _ in gathered:
        x[ids] = features
    whole = Data(
        edge_index=torch.cat([g[0] for g in gathered], 1)[:, order], x=x, num_nodes=num_nodes
    )
    reference = LocalGraphStore(whole)
    report = {"steps": 0, "excluded": 0, "remote_seeds": 0}
    for epoch in range(2):
        loader.set_epoch(epoch)
        for step, (positions, batch) in enumerate(zip(loader.batches(), loader, strict=True)):
            seeds = batch.n_id[: batch.batch_size]
            # labels and pairs: the positives at these positions, their negatives redrawn
            index = pairs.index[:, positions]
            if negatives == "global":
                targets = draw_negatives("global", index[1], pairs.pair_id[positions], K,
                                         num_nodes=num_nodes, seed=SEED, epoch=epoch)  # fmt: skip
                expected = torch.cat(
                    [index, torch.stack([index[0].repeat_interleave(K), targets.reshape(-1)])], 1
                )
                assert torch.equal(seeds[batch.edge_label_index], expected)
            assert torch.equal(seeds, torch.unique(seeds[batch.edge_label_index]))
            assert batch.edge_label.tolist() == [1.0] * index.size(1) + [0.0] * index.size(1) * K
            # the sampled structure: the whole graph sampled with the same stream
            redraw = loader.neighbor_sampler.sample(
                seeds, stream_key(SEED, epoch, step, rank), reference.sample_hop
            )
            drawn = _edges(redraw.n_id, redraw.edge_index)
            redraw = exclude_pair_edges(redraw, redraw.n_id, index, num_nodes)
            assert _edges(redraw.n_id, redraw.edge_index) == _edges(batch.n_id, batch.edge_index)
            keys = set(map(tuple, index.t().tolist())) | set(map(tuple, index.flip(0).t().tolist()))
            # exactly the edges joining a positive pair are gone, in either direction
            assert [e for e in drawn if e not in keys] == _edges(batch.n_id, batch.edge_index)
            report["excluded"] += len(drawn) - batch.edge_index.size(1)
            assert sorted(redraw.n_id.tolist()) == sorted(batch.n_id.tolist())
            assert torch.equal(batch.x, x[batch.n_id])
            assert not keys & set(_edges(batch.n_id, batch.edge_index))
            report["steps"] += 1
            report["remote_seeds"] += int((~torch.isin(seeds, part.global_ids)).sum())
    return report


@pytest.mark.parametrize("world_size", [2, 3])
def test_batches_equal_a_single_process_redraw(world_size, stores):
    reports = run_ranks(_same_as_single_process, world_size, stores[world_size], "global")
    assert len({r["steps"] for r in reports}) == 1  # every rank runs the same steps
    assert sum(r["remote_seeds"] for r in reports) > 0  # targets owned elsewhere were seeds
    assert sum(r["excluded"] for r in reports) > 0  # the positives' own edges were sampled


def test_local_negatives_come_from_the_rank(stores):
    reports = run_ranks(_same_as_single_process, 2, stores[2], "local")
    assert all(r["steps"] > 0 for r in reports)

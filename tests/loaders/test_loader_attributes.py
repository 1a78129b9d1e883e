"""Issue 30: every node and edge attribute reaches the mini-batches, on a multigraph.

Neighbour batches carry the sampled edges' ``e_id`` and attributes and the batch vertices' node
attributes (a multi-label ``y`` with ``NaN`` among them) exactly as the single-process graph
holds them, on 1–3 forked gloo ranks, with the hot-row cache and a lossy codec; the bytes counted
(``features.attrs``, ``sampling.edges``) are the bytes of the rows and edges that travelled.
Subgraph batches carry them too.
"""

import math

import numpy as np
import pytest
import torch

from lightning_gnn_dist.data.graph import gcn_weight_terms
from lightning_gnn_dist.data.local import build_local_partitions
from lightning_gnn_dist.data.sampler import stream_key
from lightning_gnn_dist.loaders.graph_store import LocalGraphStore, PartitionedGraphStore
from lightning_gnn_dist.loaders.neighbor import NeighborLoader
from tests.distributed import run_ranks
from tests.helpers import random_graph

NODE_ROW_BYTES = 5 * 4 + 2 * 4 + 4  # y [5] float32, pos [2] float32, node_time int32
EDGE_ROW_BYTES = 8 + 3 * 4 + 8 + 8  # e_id, edge_attr [3] float32, edge_time int64, edge_weight f64


def attributed_graph(flag: bool = False):
    """A multigraph (parallel edges, repeated self loops, isolated vertices) whose every edge
    and vertex has values of its own; ``flag`` adds a 1-byte ``bool`` node attribute, so a
    fetched row's packed bytes are not a multiple of the feature's 4."""
    graph = random_graph(120, 700, seed=3, features=4, parallel_edges=True)
    gen = torch.Generator().manual_seed(9)
    num_nodes, num_edges = graph.num_nodes, graph.num_edges
    graph.edge_attr = torch.rand(num_edges, 3, generator=gen)
    graph.edge_weight = torch.arange(num_edges, dtype=torch.float64) + 0.5
    graph.edge_time = torch.arange(num_edges) * 7
    graph.pos = torch.randn(num_nodes, 2, generator=gen)
    graph.node_time = torch.arange(num_nodes, dtype=torch.int32)
    y = (torch.rand(num_nodes, 5, generator=gen) > 0.5).float()
    y[::7, 1] = math.nan
    graph.y = y
    if flag:
        graph.flag = torch.arange(num_nodes) % 3 == 0
    return graph


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(a.nan_to_num(-9), b.nan_to_num(-9))
    )


def check_batch(batch, graph) -> list[str]:
    """What differs between a batch and the graph (``[]``: nothing)."""
    problems = []
    for key in ("x", "y", "pos", "node_time") + (("flag",) if "flag" in graph else ()):
        if not _same(batch[key], graph[key][batch.n_id]):
            problems.append(key)
    ends = batch.n_id[batch.edge_index]
    if not torch.equal(ends, graph.edge_index[:, batch.e_id]):
        problems.append("e_id")
    for key in ("edge_attr", "edge_weight", "edge_time"):
        if not _same(batch[key], graph[key][batch.e_id]):
            problems.append(key)
    return problems


def _neighbour_batches(rank, world_size, num_neighbors, cache_size, codec, flag, replace):
    graph = attributed_graph(flag)
    assignment = np.arange(graph.num_nodes) % world_size
    part = list(build_local_partitions(graph, assignment, world_size))[rank]
    store = PartitionedGraphStore(part, cache_size=cache_size, codec=codec)
    loader = NeighborLoader(
        store, num_neighbors, part.train_mask, batch_size=12, shuffle=True, seed=3, num_steps=3,
        replace=replace,
    )  # fmt: skip
    whole = LocalGraphStore(graph)
    report = {"problems": [], "remote_rows": 0, "remote_edges": 0, "same_edges": True}
    store.counter.reset()
    before = store.cache_hit_rows
    terms = gcn_weight_terms(graph.edge_index, graph.edge_weight, graph.num_nodes)
    for step, batch in enumerate(loader):
        report["problems"] += check_batch(batch, graph)
        if num_neighbors[0] == -1:  # a weighted GCN's global degrees, from each row's owner
            got = batch.global_gcn_weight_terms
            if set(got) != {"edge_weight"} or not _same(got["edge_weight"], terms[batch.n_id]):
                report["problems"].append("global_gcn_weight_terms")
        elif "global_gcn_weight_terms" in batch:
            report["problems"].append("terms in a sampled batch")
        if codec != "fp32":
            report["problems"] = [p for p in report["problems"] if p != "x"]
        reference = loader.neighbor_sampler.sample(
            batch.n_id[: batch.batch_size],
            stream_key(3, 0, step, rank),
            lambda frontier, fanout, stream: whole.sample_hop(frontier, fanout, stream, replace),
        )
        same = sorted(reference.edge_data["e_id"].tolist()) == sorted(batch.e_id.tolist())
        report["same_edges"] &= same
        remote = ~torch.isin(batch.n_id, part.global_ids)
        report["remote_rows"] += int(remote.sum())
        later_hops = batch.edge_index[1, batch.num_sampled_edges[0] :]
        report["remote_edges"] += int(remote[later_hops].sum())
    traffic = {(t["layer"], t["direction"]): t for t in store.counter.as_dicts()}
    requested = traffic.get(("features", "request"), {}).get("rows_sent", 0)
    report["expected_rows"] = report["remote_rows"] - (store.cache_hit_rows - before)
    report["requested"] = requested
    attrs = traffic.get(("features.attrs", "response"), {})
    report["attrs_bytes"] = attrs.get("bytes_received", 0)
    report["ids_width"] = traffic.get(("features.ids", "response"), {}).get("width", 1)
    edges = traffic.get(("sampling.edges", "response"), {})
    report["edge_bytes"] = edges.get("bytes_received", 0)
    report["edge_rows"] = edges.get("rows_received", 0)
    # The answers' byte sizes travel for every sampled hop but the one after the seeds'.
    report["answer_sizes"] = traffic.get(("control", "response"), {}).get("calls", 0)
    return report


@pytest.mark.parametrize(
    ("world_size", "num_neighbors", "cache_size", "codec", "flag", "replace"),
    [
        (1, [3, 2], 0, "fp32", False, False),
        (2, [-1, -1], 0, "fp32", False, False),
        (3, [3, 2], 15, "fp32", True, False),
        (3, [4, 3], 0, "int8", False, False),
        (2, [3, 2, 2], 0, "fp32", False, True),
    ],
)
def test_neighbour_batches_carry_every_attribute(
    world_size, num_neighbors, cache_size, codec, flag, replace
):
    args = (world_size, num_neighbors, cache_size, codec, flag, replace)
    for report in run_ranks(_neighbour_batches, *args, timeout=120):
        assert report["problems"] == []
        assert report["same_edges"]  # the single-process sampler draws the same edges
        assert report["requested"] == report["expected_rows"]
        # each fetched row's attributes, each remotely sampled edge's id and values, once
        # with fan-out -1 also the 1-D edge_weight's three float64 weighted-GCN terms per row
        row_bytes = NODE_ROW_BYTES + (3 * 8 if num_neighbors[0] == -1 else 0) + flag
        assert report["attrs_bytes"] == report["requested"] * row_bytes
        # the multi-label y travels as an attribute: ids (and with fan-out -1 the degrees) only
        assert report["ids_width"] == (3 if num_neighbors[0] == -1 else 1)
        assert report["edge_rows"] == report["remote_edges"]
        steps = 3 if world_size > 1 else 0
        assert report["answer_sizes"] == steps * (len(num_neighbors) - 2)
        assert report["edge_bytes"] == report["remote_edges"] * EDGE_ROW_BYTES
        assert (report["remote_edges"] > 0) == (world_size > 1)


def test_single_process_neighbour_batches_carry_every_attribute():
    graph = attributed_graph()
    loader = NeighborLoader(
        LocalGraphStore(graph), [4, 4], graph.train_mask, batch_size=16, num_steps=3
    )
    for batch in loader:
        assert check_batch(batch, graph) == []


def _subgraph_batches(rank, world_size):
    from lightning_gnn_dist.data.subgraph_sampler import make_sampler
    from lightning_gnn_dist.loaders.subgraph import SubgraphLoader

    graph = attributed_graph()
    part = list(build_local_partitions(graph, np.arange(120) % world_size, world_size))[rank]
    loader = SubgraphLoader(part, make_sampler("uniform", 120, 60, seed=1), steps_per_epoch=2)
    problems, labels = [], []
    for batch in loader:
        view = batch.local_partition
        batch.n_id = batch.global_ids
        ends = torch.cat([view.global_ids, view.halo_global_ids])[batch.edge_index]
        if not torch.equal(ends, graph.edge_index[:, batch.e_id]):
            problems.append("e_id")
        for key in ("edge_attr", "edge_weight", "edge_time"):
            if not _same(batch[key], graph[key][batch.e_id]):
                problems.append(key)
        for key in ("y", "pos", "node_time"):
            if not _same(batch[key], graph[key][batch.global_ids]):
                problems.append(key)
        labels.append(batch.num_train_labels_global)
    return problems, labels


def test_subgraph_batches_carry_every_attribute_and_the_labelled_count():
    from lightning_gnn_dist.data.subgraph_sampler import make_sampler

    graph = attributed_graph()
    known = (~torch.isnan(graph.y)).sum(1)
    sampler = make_sampler("uniform", 120, 60, seed=1)
    expected = [
        int(known[sampler.sample(s)][graph.train_mask[sampler.sample(s)]].sum()) for s in (0, 1)
    ]
    for problems, labels in run_ranks(_subgraph_batches, 2):
        assert problems == []
        assert labels == expected  # labelled (vertex, task) entries of the batch's training rows

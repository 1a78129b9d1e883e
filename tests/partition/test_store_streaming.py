"""Writing parts one at a time (issue 34): :class:`~lightning_gnn_dist.data.local.PartBuilder`
gives exactly the parts of the builder it replaced (kept here verbatim as ``reference_build``),
on multigraphs, self loops, isolated vertices, empty parts and across chunk boundaries; parts
of a memory-mapped ``chunked:`` graph equal those of the same graph in memory."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

import lightning_gnn_dist.data.local as local_module
from lightning_gnn_dist.data import limits
from lightning_gnn_dist.data.attributes import graph_attributes
from lightning_gnn_dist.data.chunked_write import write_chunked
from lightning_gnn_dist.data.datasets import load_dataset
from lightning_gnn_dist.data.graph import sorted_unique
from lightning_gnn_dist.data.local import (
    _OPTIONAL,
    LocalPartition,
    build_local_partitions,
    relabel_order,
)
from lightning_gnn_dist.partition import MetisPartitioner, RandomPartitioner
from lightning_gnn_dist.partition.store import partition_to_store
from tests.helpers import random_graph


def reference_build(data: Data, assignment: np.ndarray, num_parts: int) -> Iterator[LocalPartition]:
    """The builder before issue 34 (every part from whole-graph arrays), kept verbatim."""
    num_nodes = data.num_nodes
    assignment = np.asarray(assignment, dtype=np.int64)
    new_to_old, offsets = relabel_order(assignment, num_parts)
    old_to_new = np.empty(num_nodes, dtype=np.int64)
    old_to_new[new_to_old] = np.arange(num_nodes)
    new_part = assignment[new_to_old]

    src_old, dst_old = data.edge_index.numpy()
    src, dst = old_to_new[src_old], old_to_new[dst_old]
    loop = src == dst
    in_degree = np.bincount(dst[~loop], minlength=num_nodes)
    num_loops = np.bincount(dst[loop], minlength=num_nodes)

    # Halo pairs (target part, remote source), unique and sorted: per target part the halo is
    # ascending in relabelled id, hence grouped by owner.
    cross = new_part[src] != new_part[dst]
    halo_key = sorted_unique(new_part[dst[cross]] * num_nodes + src[cross])
    halo_part, halo_src = halo_key // num_nodes, halo_key % num_nodes
    halo_bounds = np.searchsorted(halo_part, np.arange(num_parts + 1))
    # The same pairs ordered by (owner, target part, id) form every part's send plan.
    send_order = np.lexsort((halo_src, halo_part, new_part[halo_src]))
    send_owner, send_peer, send_src = (
        new_part[halo_src][send_order],
        halo_part[send_order],
        halo_src[send_order],
    )
    send_bounds = np.searchsorted(send_owner, np.arange(num_parts + 1))
    # Cross edges ordered like the send entries (owner, peer, source): each entry's out-edges.
    cross_src, cross_dst = src[cross], dst[cross]
    cross_order = np.lexsort((cross_dst, cross_src, new_part[cross_dst], new_part[cross_src]))
    cross_src, cross_dst = cross_src[cross_order], cross_dst[cross_order]
    entry_key = (send_owner * num_parts + send_peer) * num_nodes + send_src
    cross_key = (new_part[cross_src] * num_parts + new_part[cross_dst]) * num_nodes + cross_src
    send_edge_bounds = np.searchsorted(cross_key, entry_key)
    send_edge_bounds = np.append(send_edge_bounds, cross_key.size).astype(np.int64)

    edge_order = np.argsort(dst, kind="stable")
    src, dst = src[edge_order], dst[edge_order]
    edge_bounds = np.searchsorted(dst, offsets)
    attributes = graph_attributes(data)

    for p in range(num_parts):
        start, end = offsets[p], offsets[p + 1]
        halo = halo_src[halo_bounds[p] : halo_bounds[p + 1]]
        s, d = src[edge_bounds[p] : edge_bounds[p + 1]], dst[edge_bounds[p] : edge_bounds[p + 1]]
        owned = (s >= start) & (s < end)
        local_src = np.where(owned, s - start, end - start + np.searchsorted(halo, s))
        sl = slice(send_bounds[p], send_bounds[p + 1])
        local_vertices = np.concatenate([np.arange(start, end), halo])
        owned_old = new_to_old[start:end]
        part = LocalPartition(
            part_id=p,
            num_parts=num_parts,
            num_nodes_global=num_nodes,
            part_offsets=torch.from_numpy(offsets.copy()),
            global_ids=torch.from_numpy(owned_old.copy()),
            edge_index=torch.from_numpy(np.stack([local_src, d - start])),
            halo_ids=torch.from_numpy(halo.copy()),
            recv_counts=torch.from_numpy(np.bincount(new_part[halo], minlength=num_parts)),
            send_index=torch.from_numpy(send_src[sl] - start),
            send_counts=torch.from_numpy(np.bincount(send_peer[sl], minlength=num_parts)),
            in_degree=torch.from_numpy(in_degree[local_vertices]),
            has_self_loop=torch.from_numpy(num_loops[local_vertices] > 0),
            num_self_loops=torch.from_numpy(num_loops[local_vertices]),
        )
        part.halo_global_ids = torch.from_numpy(new_to_old[halo])
        edge_bounds_p = send_edge_bounds[send_bounds[p] : send_bounds[p + 1] + 1]
        part.send_edge_offsets = torch.from_numpy(edge_bounds_p - edge_bounds_p[0])
        part.send_edge_targets = torch.from_numpy(
            new_to_old[cross_dst[edge_bounds_p[0] : edge_bounds_p[-1]]]
        )
        index = torch.from_numpy(owned_old)
        for key in _OPTIONAL:
            value = getattr(data, key, None)
            if value is not None:
                setattr(part, key, value[index].clone())
        edge_ids = torch.from_numpy(edge_order[edge_bounds[p] : edge_bounds[p + 1]].copy())
        part.edge_ids = edge_ids
        part.node_attrs = {key: data[key][index].clone() for key in attributes.node}
        part.edge_attrs = {key: data[key][edge_ids].clone() for key in attributes.edge}
        yield part


def assert_same_parts(new, old) -> None:
    for a, b in zip(new, old, strict=True):
        for key, value in vars(b).items():
            other = getattr(a, key)
            if isinstance(value, torch.Tensor):
                assert isinstance(other, torch.Tensor), key
                assert other.dtype == value.dtype and other.shape == value.shape, key
                assert torch.equal(other, value), key
                assert other.is_contiguous(), key
            elif isinstance(value, dict):
                assert other.keys() == value.keys(), key
                for name in value:
                    assert torch.equal(other[name], value[name]), (key, name)
                    assert other[name].dtype == value[name].dtype, (key, name)
            else:
                assert other == value, key


def graph_with_attributes(seed: int, num_nodes: int, num_edges: int, **options) -> Data:
    data = random_graph(num_nodes, num_edges, seed, features=3, **options)
    gen = torch.Generator().manual_seed(seed)
    data.edge_weight = torch.rand(data.edge_index.size(1), generator=gen)
    data.edge_attr = torch.randn(data.edge_index.size(1), 2, generator=gen)
    data.node_time = torch.randint(0, 9, (num_nodes,), generator=gen)
    return data


CASES = [
    # (seed, vertices, edges, parts, options)
    (0, 40, 160, 3, {}),
    (1, 60, 300, 4, {"parallel_edges": True}),
    (2, 30, 90, 2, {"directed": False, "self_loops": True, "parallel_edges": True}),
    (3, 50, 20, 5, {}),  # mostly isolated vertices
    (4, 25, 120, 1, {"parallel_edges": True}),
    (5, 80, 400, 7, {"directed": False}),
]


@pytest.mark.parametrize("case", CASES, ids=[f"case{c[0]}" for c in CASES])
@pytest.mark.parametrize("chunk", [7, 1 << 22], ids=["small-chunks", "one-chunk"])
def test_part_builder_gives_the_parts_it_replaced(monkeypatch, case, chunk):
    seed, num_nodes, num_edges, num_parts, options = case
    monkeypatch.setattr(local_module, "EDGE_CHUNK", chunk)
    data = graph_with_attributes(seed, num_nodes, num_edges, **options)
    rng = np.random.default_rng(seed)
    assignment = rng.integers(0, num_parts, num_nodes)
    if num_parts > 2:
        assignment[assignment == 1] = 0  # an empty part
    assert_same_parts(
        list(build_local_partitions(data, assignment, num_parts)),
        list(reference_build(data, assignment, num_parts)),
    )


def test_parts_are_built_only_when_asked_for():
    """The generator builds part p + 1 only after part p was taken: a writer that drops each part
    before the next holds one at a time."""
    data = graph_with_attributes(7, 40, 200)
    assignment = np.arange(40) % 4
    built = []
    real = local_module.PartBuilder.part

    def part(self, p):
        built.append(p)
        return real(self, p)

    local_module.PartBuilder.part = part
    try:
        parts = build_local_partitions(data, assignment, 4)
        assert built == []
        next(parts)
        assert built == [0]
        next(parts)
        assert built == [0, 1]
    finally:
        local_module.PartBuilder.part = real


def test_store_holds_one_part_at_a_time(tmp_path, monkeypatch):
    """When part p + 1 is built, part p is gone: the writer keeps no reference to it."""
    data = graph_with_attributes(8, 50, 250)
    alive = []
    real = local_module.PartBuilder.part

    def part(self, p):
        gc.collect()
        alive.append([p_ for p_, ref in refs if ref() is not None])
        built = real(self, p)
        refs.append((p, weakref.ref(built)))
        return built

    refs: list = []
    monkeypatch.setattr(local_module.PartBuilder, "part", part)
    partition_to_store(data, RandomPartitioner(seed=1), 4, tmp_path / "store")
    assert alive == [[], [], [], []]


def mapped_from(tensor: torch.Tensor, file: Path) -> bool:
    """Whether ``tensor``'s memory lies in a mapping of ``file``."""
    address = tensor.data_ptr()
    for line in Path("/proc/self/maps").read_text().splitlines():
        span, *rest = line.split()
        low, high = (int(v, 16) for v in span.split("-"))
        if rest and rest[-1] == str(file) and low <= address < high:
            return True
    return False


def test_a_rank_memory_maps_its_part(tmp_path):
    data = graph_with_attributes(9, 400, 3000)
    store = partition_to_store(data, RandomPartitioner(seed=2), 2, tmp_path / "store")
    part = store.load_part(1)
    file = store.path / "part-00001.pt"
    for key in ("edge_index", "x", "edge_ids"):
        assert mapped_from(getattr(part, key), file), key
    assert mapped_from(part.edge_attrs["edge_attr"], file)
    expected = list(build_local_partitions(data, store.assignment(), 2))[1]
    assert_same_parts([part], [expected])
    part.x[0, 0] = 123.0  # copy-on-write: the file keeps its bytes
    store.verify(full=True)


def test_partition_step_is_refused_before_any_work_when_it_cannot_fit(tmp_path, monkeypatch):
    data = graph_with_attributes(10, 60, 300)
    monkeypatch.setattr(limits, "available_memory_bytes", lambda: 5000)
    calls = []
    monkeypatch.setattr(
        RandomPartitioner, "_partition", lambda self, data, p: calls.append(p) or np.zeros(60)
    )
    with pytest.raises(MemoryError, match="writing 3 parts of 60 vertices .* needs about"):
        partition_to_store(data, RandomPartitioner(), 3, tmp_path / "store")
    assert calls == [] and not (tmp_path / "store").exists()


@pytest.mark.parametrize("partitioner", [RandomPartitioner(seed=4), MetisPartitioner()])
def test_store_of_a_chunked_graph_equals_the_store_of_the_graph_in_memory(tmp_path, partitioner):
    data = graph_with_attributes(11, 70, 400, parallel_edges=True)
    meta = write_chunked(data, tmp_path / "chunked", num_chunks=3)
    mapped = load_dataset(f"chunked:{meta}")
    in_memory = load_dataset(data)
    a = partition_to_store(mapped, partitioner, 3, tmp_path / "a")
    b = partition_to_store(in_memory, partitioner, 3, tmp_path / "b")
    assert a.meta["fingerprint"] == b.meta["fingerprint"]
    ignored = {"seconds", "meta_sha256", "dataset"}
    assert {k: v for k, v in a.meta.items() if k not in ignored} == {
        k: v for k, v in b.meta.items() if k not in ignored
    }
    for p in range(3):
        assert_same_parts([a.load_part(p)], [b.load_part(p)])
    # the in-memory graph reuses the chunked graph's store: same fingerprint, same settings
    assert partition_to_store(in_memory, partitioner, 3, tmp_path / "a").meta == a.meta

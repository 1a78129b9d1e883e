"""``split_first`` (``eval_loader="full"``): the reordered view keeps every attribute with its
vertex or edge, and its self-loop counts with their vertices."""

import numpy as np
import pytest
import torch

from lightning_gnn_dist.data.eval_batch import split_first
from lightning_gnn_dist.data.local import build_local_partitions
from tests.loaders.test_loader_attributes import attributed_graph


@pytest.mark.parametrize("split", ["val", "test", "predict"])
def test_split_first_keeps_every_attribute_with_its_vertex_and_edge(split):
    graph = attributed_graph()
    for part in build_local_partitions(graph, np.arange(graph.num_nodes) % 2, 2):
        view, batch = split_first(part, split)
        for key in ("y", "pos", "node_time", "x"):
            assert torch.equal(batch[key].nan_to_num(-1), graph[key][batch.n_id].nan_to_num(-1))
        ends = torch.cat([view.global_ids, view.halo_global_ids])[batch.edge_index]
        assert torch.equal(ends, graph.edge_index[:, batch.e_id])
        for key in ("edge_attr", "edge_weight", "edge_time"):
            assert torch.equal(batch[key], graph[key][batch.e_id])
        # self-loop counts move with their vertices: the GCN weights without added loops agree
        moved = torch.cat([view.global_ids, view.halo_global_ids])
        original = torch.cat([part.global_ids, part.halo_global_ids])
        order = torch.argsort(original)
        back = order[torch.searchsorted(original[order], moved)]
        assert torch.equal(view.num_self_loops, part.num_self_loops[back])
        _, weights = view.gcn_edge_weight(add_self_loops=False)
        _, expected = part.gcn_edge_weight(add_self_loops=False)
        torch.testing.assert_close(weights, expected)

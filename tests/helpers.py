"""Small graph builders shared by tests (importable as ``tests.helpers``)."""

from __future__ import annotations

import numpy as np
import torch
from torch_geometric.data import Data

from lightning_gnn_dist.data.graph import canonicalize, distinct_edges


def random_graph(
    num_nodes: int,
    num_edges: int,
    seed: int,
    directed: bool = True,
    self_loops: bool = True,
    features: int = 0,
    classes: int = 3,
    parallel_edges: bool = False,
) -> Data:
    """A canonical random graph; vertices beyond the edges' reach stay isolated. Repeated draws
    are merged into one edge unless ``parallel_edges`` (a multigraph)."""
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, max(1, num_nodes - 2), (2, num_edges), generator=gen)
    if not self_loops:
        edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    if not directed:
        edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    if not parallel_edges:
        edge_index = torch.from_numpy(np.stack(distinct_edges(*edge_index.numpy(), num_nodes)))
    data = Data(edge_index=edge_index, num_nodes=num_nodes)
    if features:
        data.x = torch.randn(num_nodes, features, generator=gen)
        data.y = torch.randint(0, classes, (num_nodes,), generator=gen)
        masks = torch.rand(num_nodes, generator=gen)
        data.train_mask, data.val_mask, data.test_mask = (
            masks < 0.5,
            (masks >= 0.5) & (masks < 0.75),
            masks >= 0.75,
        )
    return canonicalize(data)


def figure2_graph() -> tuple[Data, list[int]]:
    """The worked example of paper 000 Figure 2 (vertices v1..v6 as ids 0..5, undirected) and
    its partition V1 = {v1, v2}, V2 = {v3, v4}, V3 = {v5, v6}."""
    pairs = [(1, 2), (1, 5), (2, 4), (2, 6), (3, 4), (4, 5), (4, 6)]
    edges = torch.tensor(pairs).t() - 1
    data = canonicalize(Data(edge_index=torch.cat([edges, edges.flip(0)], dim=1), num_nodes=6))
    return data, [0, 0, 1, 1, 2, 2]

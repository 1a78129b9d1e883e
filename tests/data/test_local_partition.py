import numpy as np
import pytest
import torch
from torch_geometric.nn import GCNConv

from lightning_gnn_dist.data.local import LocalPartition, build_local_partitions
from lightning_gnn_dist.partition.metrics import partition_metrics
from tests.helpers import figure2_graph, random_graph


def simulate_exchange(parts, x_global_new):
    """Assemble each part's halo rows from its owners' send plans (no process group)."""
    halos = []
    for p, _part in enumerate(parts):
        blocks = []
        for q, owner in enumerate(parts):
            if q == p:
                continue
            offsets = np.concatenate([[0], np.cumsum(owner.send_counts.numpy())])
            rows = owner.send_index[offsets[p] : offsets[p + 1]]
            start = owner.owned_range[0]
            blocks.append(x_global_new[start + rows])
        halos.append(torch.cat(blocks) if blocks else x_global_new[:0])
    return halos


@pytest.mark.parametrize("seed", range(12))
def test_plans_match_metrics_and_exchange_reproduces_gcn(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 60))
    data = random_graph(
        n, 3 * n, seed, directed=bool(seed % 2), self_loops=seed % 3 == 0, features=5
    )
    p = int(rng.integers(1, min(n, 5) + 1))
    assignment = rng.integers(0, p, n)
    metrics = partition_metrics(data, assignment, p)
    parts = list(build_local_partitions(data, assignment, p))

    for part in parts:
        np.testing.assert_array_equal(part.send_counts.numpy(), metrics.peer_rows[part.part_id])
        np.testing.assert_array_equal(part.recv_counts.numpy(), metrics.peer_rows[:, part.part_id])
        assert part.num_halo == metrics.halo_rows[part.part_id]
        assert part.x.shape == (part.num_owned, 5)

    new_to_old = torch.cat([part.global_ids for part in parts])
    x_new = data.x[new_to_old]
    halos = simulate_exchange(parts, x_new)

    conv = GCNConv(5, 3)
    expected = conv(data.x, data.edge_index)
    conv.normalize = False
    for part, halo in zip(parts, halos, strict=True):
        np.testing.assert_array_equal(halo.numpy(), x_new[part.halo_ids].numpy())
        edge_index, weight = part.gcn_edge_weight()
        out = conv(torch.cat([part.x, halo]), edge_index, weight)[: part.num_owned]
        torch.testing.assert_close(out, expected[part.global_ids], rtol=1e-5, atol=1e-6)


def test_figure2_local_view_and_save_load(tmp_path):
    data, assignment = figure2_graph()
    parts = list(build_local_partitions(data, np.array(assignment), 3))
    p3 = parts[2]
    # P3 owns v5, v6 (relabelled 4, 5) and receives v1, v2 from P1 and v4 from P2.
    assert p3.halo_ids.tolist() == [0, 1, 3]
    assert p3.recv_counts.tolist() == [2, 1, 0]
    assert parts[0].send_counts.tolist() == [0, 1, 2]
    p3.save(tmp_path / "p.pt")
    again = LocalPartition.load(tmp_path / "p.pt")
    assert repr(again) == repr(p3)
    assert torch.equal(again.edge_index, p3.edge_index)

"""RDM's redistributions on a gloo group: row ↔ column slices, panel exchanges, autograd inverse.

Any number of ranks (3 and 4 here; 1 and 2 run in tests/nn/test_rdm.py), uneven rows (one rank
owns none), uneven and empty column blocks, every divisor as replication; the values land where
the layouts say and the counters equal the layout's closed-form element counts.
"""

import numpy as np
import pytest
import torch

from lightning_gnn_dist.comm import make_exchange
from lightning_gnn_dist.data.local import build_local_partitions
from tests.distributed import run_ranks
from tests.helpers import random_graph

N = 11


def _parts(world_size):
    data = random_graph(N, 30, seed=2)
    assignment = np.arange(N) % world_size
    assignment[assignment == 1] = 0  # rank 1 owns no row
    return list(build_local_partitions(data, assignment, world_size))


def _matrix(width, seed=0):
    return torch.arange(N * width, dtype=torch.float32).view(N, width).mul(1 + seed).sin()


def _rank(rank, world_size):
    part = _parts(world_size)[rank]
    start, end = part.owned_range
    checked = 0
    for replication in [r for r in range(1, world_size + 1) if world_size % r == 0]:
        ex = make_exchange("rdm", part, replication=replication)
        layout = ex.layout
        lo, hi = layout.panel_rows(layout.panel(rank))
        for width in (1, 3, 7):
            m = _matrix(width)
            c0, c1 = layout.column_range(width, layout.block(rank))
            ex.counter.reset()
            v = ex.to_columns(m[start:end], "t", "forward")
            torch.testing.assert_close(v, m[lo:hi, c0:c1])
            torch.testing.assert_close(ex.to_rows(v, "t", "backward", width), m[start:end])
            torch.testing.assert_close(ex.gather_panels(v, "t", "forward"), m[:, c0:c1])
            traffic = {d: t for _, d, t in ex.counter.items()}
            assert traffic["forward"].bytes_sent == 4 * layout.elements_sent("V", width)[rank].sum()
            assert (
                traffic["backward"].bytes_sent == 4 * layout.elements_sent("H", width)[rank].sum()
            )
            assert (
                traffic["forward"].bytes_received
                == 4 * layout.elements_sent("V", width)[:, rank].sum()
            )
            gathered = layout.gather_elements_sent(width)[rank].sum()
            assert (
                traffic.get("forward-panel", None) is None
                if layout.num_panels == 1
                else (traffic["forward-panel"].bytes_sent == 4 * gathered)
            )
            # autograd: the backward of H → V is V → H of the gradient, and vice versa
            h = m[start:end].clone().requires_grad_()
            weights = _matrix(width, seed=1)
            (ex.redistribute(h, "V", "t") * weights[lo:hi, c0:c1]).sum().backward()
            torch.testing.assert_close(h.grad, weights[start:end])
            vv = m[lo:hi, c0:c1].clone().requires_grad_()
            (ex.redistribute(vv, "H", "t", width) * weights[start:end]).sum().backward()
            torch.testing.assert_close(vv.grad, weights[lo:hi, c0:c1])
            checked += 1
    # set-up exchange: rows chosen per destination, counted apart from the per-step counters
    ex = make_exchange("rdm", part)
    rows = torch.arange(start, end).view(-1, 1).repeat(1, 2)
    targets = [torch.nonzero(rows[:, 0] % world_size == q).flatten() for q in range(world_size)]
    received = ex.send_rows(rows, targets, "structure")
    expected = torch.arange(N)[torch.arange(N) % world_size == rank]
    assert sorted(received[:, 0].tolist()) == expected.tolist()
    assert ex.counter.items() == [] and ex.setup_counter.items()[0][:2] == ("structure", "setup")
    return checked


@pytest.mark.parametrize("world_size", [3, 4])
def test_redistribution_moves_values_and_counts_bytes(world_size):
    checks = run_ranks(_rank, world_size, timeout=120)
    divisors = sum(1 for r in range(1, world_size + 1) if world_size % r == 0)
    assert checks == [3 * divisors] * world_size


def test_rdm_exchange_refuses_halo_requests_and_bad_replication():
    part = _parts(1)[0]
    ex = make_exchange("rdm", part)
    with pytest.raises(NotImplementedError, match="layer conv asked for halo rows"):
        ex(torch.zeros(N, 2), "conv")
    with pytest.raises(ValueError, match="replication=2"):
        make_exchange("rdm", part, replication=2)
    with pytest.raises(ValueError, match="rdm_order='fastest'"):
        make_exchange("rdm", part, rdm_order="fastest")
    with pytest.raises(ValueError, match="width"):
        ex.redistribute(torch.zeros(N, 2), "H", "conv")
    assert make_exchange("rdm", part, codec="fp32").codec_policy.lossless
    with pytest.raises(ValueError, match="exchange='rdm' sends fp32 only.*'int8'"):
        make_exchange("rdm", part, codec={"forward": "int8"})

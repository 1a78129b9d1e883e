"""Neighbour batches moved to the training device (issue 35): pinned and asynchronous only for
CUDA; elsewhere a plain copy (``meta`` stands in for a device here)."""

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from lightning_gnn_dist.data.local import build_local_partitions
from lightning_gnn_dist.loaders import NeighborLoader, PartitionedGraphStore
from lightning_gnn_dist.loaders.transfer import DeviceTransfer
from tests.helpers import random_graph


def _loader(device, prefetch):
    data = random_graph(30, 90, 2, features=4)
    part = next(iter(build_local_partitions(data, np.zeros(30, dtype=np.int64), 1)))
    store = PartitionedGraphStore(part)
    return NeighborLoader(
        store, [3, 3], part.train_mask, batch_size=5, replace=True, prefetch=prefetch, device=device
    )


@pytest.mark.parametrize("prefetch", [False, True])
def test_batches_reach_the_loaders_device_and_pin_only_for_cuda(prefetch, monkeypatch):
    pinned = []
    monkeypatch.setattr(Data, "pin_memory", lambda self, *a: pinned.append(self) or self)
    on_cpu = list(_loader(None, prefetch))
    moved = list(_loader("meta", prefetch))
    assert len(on_cpu) == len(moved) > 1
    for cpu_batch, batch in zip(on_cpu, moved, strict=True):
        assert batch.x.device.type == "meta" and batch.edge_index.device.type == "meta"
        assert (
            batch.x.shape == cpu_batch.x.shape
            and batch.edge_index.shape == cpu_batch.edge_index.shape
        )
    assert pinned == []  # pinning is for a CUDA target only
    assert list(_loader("cpu", prefetch))[0].x.device.type == "cpu"


def test_a_cuda_transfer_pins_and_copies_on_its_own_stream():
    transfer = DeviceTransfer("cuda:0")
    assert transfer.pins and repr(transfer) == "DeviceTransfer('cuda:0', pinned=True)"
    assert not DeviceTransfer("cpu").pins
    batch = Data(x=torch.ones(2, 2))
    assert DeviceTransfer("cpu")(batch) is batch


def test_the_tensors_a_copy_must_keep_alive_include_those_in_dicts():
    """A neighbour batch's ``global_gcn_weight_terms`` (a dict of tensors) is copied with the
    batch; its tensors are marked as used by the consuming stream too."""
    from lightning_gnn_dist.loaders.transfer import _tensors

    terms = torch.ones(3, 3)
    batch = Data(x=torch.zeros(3, 2), global_gcn_weight_terms={"edge_weight": terms})
    assert any(tensor is terms for tensor in _tensors(batch))


def test_the_csr_matrices_built_on_the_host_travel_with_the_batch():
    """The loader builds the batch's CSR matrices (and transposes) on the host; the copy takes
    them along, so the step on the device builds none."""
    from lightning_gnn_dist.data.csr import tensor_cache

    for prefetch in (False, True):
        batch = next(iter(_loader("meta", prefetch)))
        matrices = tensor_cache(batch.edge_index)["csr"]
        assert matrices, "no CSR matrix came with the batch"
        for adj in matrices.values():
            assert adj.col.device.type == "meta" and adj.transpose().crow.device.type == "meta"

"""``RowLayout`` packs per-row tensors of any dtype and trailing shape side by side, for any row
count: no rows (a peer asked for nothing) included."""

import pytest
import torch

from lightning_gnn_dist.loaders.packing import RowLayout


@pytest.mark.parametrize("rows", [0, 1, 5])
def test_rows_of_every_shape_survive_packing(rows):
    tensors = {
        "e_id": torch.arange(rows, dtype=torch.int64),
        "edge_weight": torch.rand(rows),
        "edge_attr": torch.rand(rows, 3),
        "flags": torch.rand(rows, 2, 2) > 0.5,
        "empty": torch.empty(rows, 0),
    }
    layout = RowLayout.of(tensors)
    packed = layout.pack(tensors, rows)
    assert packed.shape == (rows, layout.row_bytes) and layout.row_bytes == 8 + 4 + 12 + 4
    unpacked = layout.unpack(torch.cat([torch.zeros(rows, 3, dtype=torch.uint8), packed], 1), 3)
    for name, value in tensors.items():
        assert unpacked[name].dtype == value.dtype and torch.equal(unpacked[name], value), name

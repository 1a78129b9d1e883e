"""Exact full-neighbourhood evaluation batches for mini-batch training (``eval_loader="full"``).

A model written for sampled batches reads its predictions as ``out[:batch.batch_size]``. To run
it on a rank's whole part with the halo exchange (exact layer-wise inference, every layer
computed once for all owned vertices), :func:`split_first` relabels the owned rows so the
split's vertices come first. The relabelling is local: the halo and every peer's plan stay as
they are, only this rank's ``send_index`` is renumbered, so the exchange moves the same rows.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch_geometric.data import Data

from lightning_gnn_dist.data.attributes import batch_attributes
from lightning_gnn_dist.data.local import LocalPartition


def split_first(part: LocalPartition, split: str) -> tuple[LocalPartition, Data]:
    """``(partition, batch)`` with the owned rows of ``{split}_mask`` first.

    Args:
        part: this rank's partition.
        split: ``"val"``, ``"test"`` (a mask of the partition) or ``"predict"`` (all rows).

    Returns:
        The reordered :class:`LocalPartition` (for the graph context) and its batch: ``x``,
        ``y``, masks, every other node attribute and ``n_id`` (dataset ids) of the owned rows,
        the local ``edge_index`` (sources over ``[owned | halo]``) with every edge attribute in
        its order and ``e_id``, and ``batch_size`` = the split's owned vertices.
    """
    num_owned = part.num_owned
    mask = (
        torch.ones(num_owned, dtype=torch.bool)
        if split == "predict"
        else getattr(part, f"{split}_mask")
    )
    if mask is None:
        raise ValueError(f"the partition has no {split}_mask; cannot evaluate {split!r}")
    order = torch.cat([mask.nonzero().view(-1), (~mask).nonzero().view(-1)])
    new_row = torch.empty_like(order)
    new_row[order] = torch.arange(num_owned)
    src, dst = part.edge_index
    src = torch.where(src < num_owned, new_row[src.clamp(max=num_owned - 1)], src)
    local = torch.cat([order, torch.arange(num_owned, num_owned + part.num_halo)])
    rows = {
        k: getattr(part, k)[order]
        for k in ("global_ids", "x", "y", "train_mask", "val_mask", "test_mask")
        if getattr(part, k) is not None
    }
    reordered = replace(
        part,
        edge_index=torch.stack([src, new_row[dst]]),
        send_index=new_row[part.send_index],
        in_degree=part.in_degree[local],
        has_self_loop=part.has_self_loop[local],
        num_self_loops=None if part.num_self_loops is None else part.num_self_loops[local],
        node_attrs={k: v[order] for k, v in part.node_attrs.items()},
        **rows,
    )
    batch = Data(
        edge_index=reordered.edge_index,
        n_id=reordered.global_ids,
        batch_size=int(mask.sum()),
        num_nodes=num_owned,
        **{k: v for k, v in rows.items() if k != "global_ids"},
        **batch_attributes(reordered),  # edges keep their order: only their ends are renamed
    )
    return reordered, batch

"""Where a routed vertex's values sit: its position in a sorted id list, and per-vertex segments
(sampled in-edges) put back in the order their vertices were asked in."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["position_in", "segments_in_order"]


def position_in(sorted_values: Tensor, queries: Tensor, perm: Tensor | None = None) -> Tensor:
    """Index of each query in ``sorted_values`` (mapped through ``perm`` when given), ``-1`` if absent."""
    if sorted_values.numel() == 0:
        return torch.full_like(queries, -1)
    pos = torch.searchsorted(sorted_values, queries).clamp(max=sorted_values.numel() - 1)
    found = sorted_values[pos] == queries
    if perm is not None:
        pos = perm[pos]
    return torch.where(found, pos, -1)


def segments_in_order(counts: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
    """Reorder variable-length segments: segment ``k`` (``counts[k]`` values) belongs at
    ``positions[k]``; returns ``(index, counts)``: ``values[index]`` are the values in position
    order, ``counts`` the segments' lengths in that order."""
    inverse = torch.argsort(positions)
    starts = (torch.cumsum(counts, 0) - counts)[inverse]
    new_counts = counts[inverse]
    new_starts = torch.cumsum(new_counts, 0) - new_counts
    total = int(new_counts.sum())
    index = torch.repeat_interleave(starts - new_starts, new_counts) + torch.arange(total)
    return index, new_counts

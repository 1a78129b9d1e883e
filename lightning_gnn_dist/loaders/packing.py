"""Rows of several tensors packed side by side as bytes, so that what belongs to one vertex or
one edge (its feature row, its other attributes, its ids) travels in one message per peer, and
the bytes on the wire are exactly the bytes of the rows (no padding)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class RowLayout:
    """The byte layout of named per-row tensors ``[n, ...]`` packed side by side.

    Attributes:
        names: the tensors, in packing order.
        dtypes: their dtypes.
        shapes: their trailing shapes (``()`` for ``[n]``).
    """

    names: tuple[str, ...] = ()
    dtypes: tuple[torch.dtype, ...] = ()
    shapes: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def of(cls, tensors: dict[str, Tensor]) -> RowLayout:
        """The layout of ``tensors`` (each ``[n, ...]``), in their order."""
        return cls(
            tuple(tensors),
            tuple(value.dtype for value in tensors.values()),
            tuple(tuple(value.shape[1:]) for value in tensors.values()),
        )

    def _widths(self) -> list[int]:
        return [
            math.prod(shape) * dtype.itemsize
            for dtype, shape in zip(self.dtypes, self.shapes, strict=True)
        ]

    @property
    def row_bytes(self) -> int:
        """Bytes of one packed row."""
        return sum(self._widths())

    def pack(self, tensors: dict[str, Tensor], rows: int) -> Tensor:
        """``[rows, row_bytes] uint8``: the rows of ``tensors`` (named as the layout) side by
        side."""
        pieces = [  # explicit widths: with no rows, reshape(0, -1) is ambiguous
            tensors[name].contiguous().reshape(rows, math.prod(shape)).view(torch.uint8)
            for name, shape in zip(self.names, self.shapes, strict=True)
        ]
        if not pieces:
            return torch.empty(rows, 0, dtype=torch.uint8)
        return torch.cat(pieces, 1)

    def unpack(self, packed: Tensor, start: int = 0) -> dict[str, Tensor]:
        """The tensors of the rows ``packed[:, start : start + row_bytes]`` (``[n, w] uint8``),
        by name, in their dtypes and shapes (new tensors, not views)."""
        out = {}
        for name, dtype, shape, width in zip(
            self.names, self.dtypes, self.shapes, self._widths(), strict=True
        ):
            values = columns_as(packed, start, start + width, dtype)
            out[name] = values.reshape(packed.size(0), *shape)
            start += width
        return out


def columns_as(packed: Tensor, start: int, stop: int, dtype: torch.dtype) -> Tensor:
    """The bytes ``packed[:, start:stop]`` (``[n, w] uint8``) as a new ``[n, w / size] dtype``
    tensor. Not a view: a column slice keeps its storage offset ``start`` even where it is
    contiguous (one row), and viewing bytes as a wider type needs an offset divisible by its
    size (``4·d`` for the ids after ``d`` float32 columns is not, for odd ``d``)."""
    columns = (stop - start) // dtype.itemsize
    out = torch.empty(packed.size(0), columns, dtype=dtype, device=packed.device)
    out.view(torch.uint8).copy_(packed[:, start:stop])
    return out


def pack_answers(
    target_peer: Tensor, counts: Tensor, src: Tensor, rows: Tensor, world_size: int
) -> tuple[Tensor, Tensor, Tensor]:
    """A sampled hop's answers as one byte block per peer: ``(send uint8, targets [P], edges
    [P])``. Peer ``p``'s block is its targets' counts and their sampled sources as 8-byte
    integers, then one packed ``rows [E, row_bytes]`` row per edge; the targets come grouped
    by peer (``target_peer [T]``) and each target's edges follow it, so every peer's counts,
    sources and rows are contiguous slices."""
    targets = torch.bincount(target_peer, minlength=world_size)
    edges = torch.zeros_like(targets).index_add_(0, target_peer, counts)
    pieces, target_start, edge_start = [], 0, 0
    for num_targets, num_edges in zip(targets.tolist(), edges.tolist(), strict=True):
        pieces += [
            counts[target_start : target_start + num_targets].view(torch.uint8),
            src[edge_start : edge_start + num_edges].view(torch.uint8),
            rows[edge_start : edge_start + num_edges].reshape(-1),
        ]
        target_start, edge_start = target_start + num_targets, edge_start + num_edges
    return torch.cat(pieces), targets, edges


def unpack_answers(
    received: Tensor, block_bytes: list[int], asked: list[int], row_bytes: int
) -> tuple[Tensor, Tensor, Tensor, list[int]]:
    """The answers :func:`pack_answers` sent, one block per peer (``block_bytes`` each, the
    answers to ``asked`` targets): ``(counts [T], src [E], rows [E, row_bytes] uint8, edges
    per peer)``.

    Raises:
        RuntimeError: a block's size disagrees with the edges its counts announce.
    """
    counts, src, rows, edges = [], [], [], []
    offset = 0
    for size, targets in zip(block_bytes, asked, strict=True):
        block = received[offset : offset + size]
        offset += size
        block_counts = columns_as(block[: 8 * targets].view(-1, 8), 0, 8, torch.int64)
        num_edges = int(block_counts.sum())
        end = 8 * (targets + num_edges)
        if end + num_edges * row_bytes != size:
            raise RuntimeError(
                f"a peer answered {num_edges} sampled edges in {size} bytes; the halo's "
                "in-edge counts disagree with their owners' parts"
            )
        counts.append(block_counts.view(-1))
        src.append(columns_as(block[8 * targets : end].view(-1, 8), 0, 8, torch.int64).view(-1))
        rows.append(block[end:].view(num_edges, row_bytes))
        edges.append(num_edges)
    return torch.cat(counts), torch.cat(src), torch.cat(rows), edges

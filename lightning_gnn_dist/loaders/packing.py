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

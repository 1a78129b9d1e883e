"""``RGCNConv`` with sparse-matrix aggregation (design §9, "compute at peer speed").

PyG's ``RGCNConv`` gathers one row per edge and scatters it for each relation in turn, after
masking the edge list per relation on every call. :class:`FusedRGCNConv` (same parameters and
state dict, the same outputs) aggregates each relation with one CSR product: the per-relation
matrices (mean or sum over the relation's in-edges of each target) are built once per
``edge_index`` tensor (a partition's or a batch's, reused by every layer) and each relation's
rows are transformed by its weight before or after the product, whichever is narrower (as
DGL's ``GraphConv`` chooses). In a graph context with a halo the targets are the owned rows
only, so the root weight and the products skip the halo rows that the layer's output would
drop anyway.

It takes the fused path for feature inputs (``x [N, d]``, or a bipartite ``(x_src, x_dst)``
pair whose target rows the root weight reads, as PyG's), ``num_bases`` or none, and ``mean``,
``sum``/``add`` aggregation; anything else (``num_blocks``, index inputs ``x=None``, sparse
adjacencies, other aggregations) runs PyG's ``RGCNConv`` unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import RGCNConv
from torch_geometric.utils import is_sparse

from lightning_gnn_dist.data.csr import CSRAdjacency, tensor_cache, tensor_version
from lightning_gnn_dist.nn.spmm import SparseMatrix, spmm

__all__ = ["FusedRGCNConv", "relation_matrices"]

_AGGREGATIONS = {"mean": "mean", "sum": "sum", "add": "sum"}


def relation_matrices(
    edge_index: Tensor, edge_type: Tensor, num_rows: int, num_cols: int, num_relations: int,
    reduce: str,
) -> tuple[list[tuple[int, int, SparseMatrix] | None], list[int]]:  # fmt: skip
    """``(matrices, column_blocks)``. Per relation ``r``, ``matrices[r]`` is
    ``(first_row, block, matrix)``: its edges as a
    :class:`~lightning_gnn_dist.nn.spmm.SparseMatrix` over the range of rows its targets span
    (``reduce`` over each target's in-edges of ``r``) and the columns of one block of the
    input rows, or ``None`` for a relation without edges. ``column_blocks`` (sizes summing to
    ``num_cols``) splits the input rows into blocks: the union of the relations' source ranges
    (overlapping ranges merged) and the gaps between them. Cached on ``edge_index`` for this
    ``edge_type`` tensor. A typed graph's targets (and owned sources) of one relation are one
    type, one contiguous range, so each product and transform covers that type's rows only (as
    DGL's per-relation graphs do), and the blocks are the source types' rows: one ``split``
    whose gradient is one ``cat``, instead of a slice per relation whose gradient is a
    zero-filled copy of every row."""
    cache = tensor_cache(edge_index)
    key = (
        "rgcn", num_rows, num_cols, num_relations, reduce,
        edge_type.data_ptr(), edge_type.numel(), tensor_version(edge_type),
    )  # fmt: skip
    if key not in cache:
        stale = [k for k in cache if isinstance(k, tuple) and k and k[0] == "rgcn"]
        for k in stale:  # the edge types of an earlier call: one set per edge_index
            del cache[k]
        if not bool((edge_type[1:] >= edge_type[:-1]).all()):  # typed views come grouped
            order = torch.argsort(edge_type, stable=True)
            edge_index, edge_type = edge_index[:, order], edge_type[order]
        relations = torch.arange(num_relations + 1, device=edge_type.device)
        bounds = torch.searchsorted(edge_type, relations).tolist()
        edges_of = [edge_index[:, bounds[r] : bounds[r + 1]] for r in range(num_relations)]
        spans = {
            r: (int(e[0].min()), int(e[0].max()) + 1) for r, e in enumerate(edges_of) if e.numel()
        }
        blocks: list[list[int]] = []  # merged source ranges [start, end)
        for start, end in sorted(spans.values()):
            if blocks and start < blocks[-1][1]:
                blocks[-1][1] = max(blocks[-1][1], end)
            else:
                blocks.append([start, end])
        sizes, index_of, at = [], {}, 0
        for start, end in blocks:
            if start > at:
                sizes.append(start - at)
            index_of[start] = len(sizes)
            sizes.append(end - start)
            at = end
        if at < num_cols:
            sizes.append(num_cols - at)
        starts = [start for start, _ in blocks]
        matrices: list[tuple[int, int, SparseMatrix] | None] = []
        for r, edges in enumerate(edges_of):
            if r not in spans:
                matrices.append(None)
                continue
            block = blocks[
                int(torch.searchsorted(torch.tensor(starts), spans[r][0], right=True)) - 1
            ]
            first, last = int(edges[1].min()), int(edges[1].max()) + 1
            shifted = torch.stack([edges[0] - block[0], edges[1] - first])
            adj = CSRAdjacency.from_edge_index(shifted, last - first, block[1] - block[0])
            matrices.append((first, index_of[block[0]], SparseMatrix(adj, None, reduce)))
        cache[key] = (matrices, sizes)
    return cache[key]


class FusedRGCNConv(RGCNConv):
    """:class:`torch_geometric.nn.RGCNConv` aggregating each relation with a CSR product (module
    docstring); the same parameters, state dict and outputs."""

    def forward(self, x, edge_index, edge_type=None):
        reduce = _AGGREGATIONS.get(self.aggr) if isinstance(self.aggr, str) else None
        x_dst = None
        if isinstance(x, (tuple, list)):  # bipartite (a layer of a trimmed sampled batch)
            x, x_dst = x
        if (
            reduce is None
            or self.num_blocks is not None
            or not isinstance(x, Tensor)
            or not x.is_floating_point()
            or (x_dst is not None and not isinstance(x_dst, Tensor))
            or not isinstance(edge_index, Tensor)
            or is_sparse(edge_index)
            or edge_type is None
        ):
            return super().forward(x if x_dst is None else (x, x_dst), edge_index, edge_type)
        # Targets: the owned rows when a halo follows them (set by distribute's exchange hook),
        # a bipartite call's target rows, else every row.
        num_rows = self.__dict__.get("_lgd_num_owned") or x.size(0)
        if x_dst is not None:
            num_rows = x_dst.size(0)
        else:
            x_dst = x if num_rows == x.size(0) else x[:num_rows]  # a slice copies its gradient
        matrices, column_blocks = relation_matrices(
            edge_index, edge_type, num_rows, x.size(0), self.num_relations, reduce
        )
        blocks = torch.split(x, column_blocks)
        weight = self.weight
        if self.num_bases is not None:
            weight = (self.comp @ weight.view(self.num_bases, -1)).view(
                self.num_relations, self.in_channels_l, self.out_channels
            )
        transform_first = self.out_channels < self.in_channels_l  # aggregate the narrower
        # Each relation adds to one range of target rows (its type's). Summed out of place per
        # range and joined once: an in-place ``out[rows] +=`` would make autograd fill and copy
        # a gradient of every row for every relation.
        pieces: list[tuple[int, int, Tensor]] = []
        for r, entry in enumerate(matrices):
            if entry is not None:
                first, block, matrix = entry
                source = blocks[block]
                if transform_first:
                    piece = spmm(matrix, source @ weight[r])
                else:
                    piece = spmm(matrix, source) @ weight[r]
                pieces.append((first, first + matrix.adj.num_rows, piece))
        out = _join_ranges(pieces, num_rows, self.out_channels, x)
        if self.root is not None:
            out = out + x_dst @ self.root
        if self.bias is not None:
            out = out + self.bias
        return out


def _join_ranges(
    pieces: list[tuple[int, int, Tensor]], num_rows: int, width: int, like: Tensor
) -> Tensor:
    """``[num_rows, width]``: the sum of ``pieces`` (``(start, end, rows [end - start, width])``),
    zero on rows no piece covers. Overlapping ranges are merged into segments, each summed
    out of place (pieces padded to their segment), and the segments joined by one ``cat``."""
    pieces = sorted(pieces, key=lambda piece: piece[0])
    segments: list[list] = []  # [start, end, [pieces]]
    for start, end, rows in pieces:
        if segments and start < segments[-1][1]:
            segments[-1][1] = max(segments[-1][1], end)
            segments[-1][2].append((start, end, rows))
        else:
            segments.append([start, end, [(start, end, rows)]])
    parts, at = [], 0
    for start, end, members in segments:
        if start > at:
            parts.append(like.new_zeros(start - at, width))
        total = None
        for first, last, rows in members:
            if first != start or last != end:
                rows = F.pad(rows, (0, 0, first - start, end - last))
            total = rows if total is None else total + rows
        parts.append(total)
        at = end
    if at < num_rows:
        parts.append(like.new_zeros(num_rows - at, width))
    if not parts:
        return like.new_zeros(num_rows, width)
    return parts[0] if len(parts) == 1 else torch.cat(parts)

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
) -> list[tuple[int, SparseMatrix] | None]:  # fmt: skip
    """Per relation ``r``, ``(first_row, first_col, matrix)``: its edges as a
    :class:`~lightning_gnn_dist.nn.spmm.SparseMatrix` over the range of rows its targets span
    and the range of columns its sources span (``reduce`` over each target's in-edges of
    ``r``), or ``None`` for a relation without edges; cached on ``edge_index`` for this
    ``edge_type`` tensor. A typed graph's targets (and owned sources) of one relation are one
    type, one contiguous range, so each product and transform covers that type's rows only (as
    DGL's per-relation graphs do)."""
    cache = tensor_cache(edge_index)
    key = (
        "rgcn", num_rows, num_cols, num_relations, reduce,
        edge_type.data_ptr(), edge_type.numel(), tensor_version(edge_type),
    )  # fmt: skip
    if key not in cache:
        stale = [k for k in cache if isinstance(k, tuple) and k and k[0] == "rgcn"]
        for k in stale:  # the edge types of an earlier call: one set per edge_index
            del cache[k]
        order = torch.argsort(edge_type, stable=True)
        bounds = torch.searchsorted(
            edge_type[order], torch.arange(num_relations + 1, device=edge_type.device)
        ).tolist()
        matrices: list[tuple[int, SparseMatrix] | None] = []
        for r in range(num_relations):
            edges = edge_index[:, order[bounds[r] : bounds[r + 1]]]
            if edges.size(1) == 0:
                matrices.append(None)
                continue
            first, last = int(edges[1].min()), int(edges[1].max()) + 1
            col_first, col_last = int(edges[0].min()), int(edges[0].max()) + 1
            shifted = torch.stack([edges[0] - col_first, edges[1] - first])
            adj = CSRAdjacency.from_edge_index(shifted, last - first, col_last - col_first)
            matrices.append((first, col_first, SparseMatrix(adj, None, reduce)))
        cache[key] = matrices
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
            x_dst = x[:num_rows]
        matrices = relation_matrices(
            edge_index, edge_type, num_rows, x.size(0), self.num_relations, reduce
        )
        weight = self.weight
        if self.num_bases is not None:
            weight = (self.comp @ weight.view(self.num_bases, -1)).view(
                self.num_relations, self.in_channels_l, self.out_channels
            )
        if self.root is not None:
            out = x_dst @ self.root
        else:
            out = x.new_zeros(num_rows, self.out_channels)
        transform_first = self.out_channels < self.in_channels_l  # aggregate the narrower
        for r, entry in enumerate(matrices):
            if entry is not None:
                first, col_first, matrix = entry
                rows = slice(first, first + matrix.adj.num_rows)
                source = x[col_first : col_first + matrix.adj.num_cols]
                if transform_first:
                    out[rows] += spmm(matrix, source @ weight[r])
                else:
                    out[rows] += spmm(matrix, source) @ weight[r]
        if self.bias is not None:
            out = out + self.bias
        return out

"""Sparse × dense products ``Â · X`` with the transpose kept for backward (design §9).

The local aggregation of every exact mode is one CSR product instead of a gather of one row per
edge and a scatter-add (on a 1 M-edge graph, 64 columns, one thread: ~10 ms against ~360 ms).
:class:`SparseMatrix` is ``Â`` with fixed values (``Âᵀ``'s structure built on the first
backward), and :func:`spmm` the autograd product, computed by ``embedding_bag`` over the CSR
rows (torch's vectorised kernel; ``torch.sparse.mm`` on the same CSR takes ~5× longer)::

    adj = CSRAdjacency.from_edge_index(edge_index, num_targets, num_sources)
    matrix = SparseMatrix(adj, values=adj.entry_values(edge_weight))   # or reduce="mean"
    out = spmm(matrix, x)                # [num_targets, d]; x.grad = Âᵀ · grad_out

The values are constants (no gradient flows to them); layers whose edge weights are learned keep
PyG's scatter path.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd import Function

from lightning_gnn_dist.data.csr import CSRAdjacency

REDUCTIONS = ("sum", "add", "mean")
CUDA_KERNELS = ("csr", "embedding_bag")
#: The product's kernel on CUDA tensors: ``"csr"`` (cuSPARSE's SpMM through ``torch.sparse``)
#: or ``"embedding_bag"`` (the CPU's kernel). ``python -m benchmarks.gpu_check`` times both.
CUDA_KERNEL = "csr"


def csr_tensor(crow: Tensor, col: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    with warnings.catch_warnings():  # torch warns once that sparse CSR support is in beta
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, values, shape, check_invariants=False)


class SparseMatrix:
    """``Â`` with fixed values, ready for :func:`spmm` (and ``matrix @ x``).

    Args:
        adj: the structure (``num_rows`` targets × ``num_cols`` sources).
        values: ``[E]`` entry values in ``adj``'s entry order (see
            :meth:`~lightning_gnn_dist.data.csr.CSRAdjacency.entry_values`); ``None`` for ones.
        reduce: ``"sum"`` (``"add"``) or ``"mean"``: each row divided by its entry count (a row
            without entries gives zeros, as PyG's mean aggregation). (default: ``"sum"``)
    """

    def __init__(self, adj: CSRAdjacency, values: Tensor | None = None, reduce: str = "sum"):
        if reduce not in REDUCTIONS:
            raise ValueError(f"reduce must be one of {REDUCTIONS} (got {reduce!r})")
        if values is not None and values.numel() != adj.num_entries:
            raise ValueError(
                f"values has {values.numel()} entries but the adjacency {adj.num_entries}"
            )
        self.adj, self.reduce = adj, reduce
        self._values = values.detach() if values is not None else None
        self._forward: dict[torch.dtype, Tensor | None] = {}
        self._backward: dict[torch.dtype, Tensor | None] = {}

    @property
    def shape(self) -> tuple[int, int]:
        return self.adj.shape

    def values(self, dtype: torch.dtype = torch.float32) -> Tensor | None:
        """``[E]`` entry values of ``Â`` (the mean's ``1 / degree`` folded in), built once per
        dtype; ``None`` when every value is one."""
        if dtype not in self._forward:
            adj, values = self.adj, self._values
            if values is not None:
                values = values.to(dtype)
            if self.reduce == "mean":
                degree = adj.degree()
                inverse = (1.0 / degree.clamp(min=1).to(dtype)).repeat_interleave(
                    degree, output_size=adj.num_entries
                )
                values = inverse if values is None else values * inverse
            self._forward[dtype] = values
        return self._forward[dtype]

    def transpose_values(self, dtype: torch.dtype = torch.float32) -> Tensor | None:
        """``[E]`` entry values of ``Âᵀ`` (in the order of ``adj.transpose()``), built once."""
        if dtype not in self._backward:
            values = self.values(dtype)
            self._backward[dtype] = (
                None if values is None else values[self.adj.transpose().perm.long()]
            )
        return self._backward[dtype]

    def sparse_csr(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """``Â`` as a ``torch`` CSR tensor (for code that wants one; :func:`spmm` does not)."""
        adj = self.adj
        values = self.values(dtype)
        if values is None:
            values = torch.ones(adj.num_entries, dtype=dtype, device=adj.device)
        return csr_tensor(adj.crow, adj.col, values, adj.shape)

    def row_prefix(self, num_rows: int, num_cols: int) -> SparseMatrix:
        """The first ``num_rows`` rows as a ``num_rows × num_cols`` matrix with the same values
        (views; see :meth:`~lightning_gnn_dist.data.csr.CSRAdjacency.row_prefix` for when it is
        valid)."""
        adj = self.adj.row_prefix(num_rows, num_cols)
        values = None if self._values is None else self._values[: adj.num_entries]
        return SparseMatrix(adj, values, self.reduce)

    def __matmul__(self, x: Tensor) -> Tensor:
        return spmm(self, x)

    def __repr__(self) -> str:
        return (
            f"SparseMatrix({self.adj.num_rows}x{self.adj.num_cols}, "
            f"entries={self.adj.num_entries}, reduce={self.reduce!r})"
        )


def spmm(matrix: SparseMatrix, x: Tensor) -> Tensor:
    """``Â · x``: ``[num_rows, d]`` from ``x [num_cols, d]`` (or ``[num_cols]``, or more
    trailing dimensions); differentiable in ``x`` (the backward is ``Âᵀ · grad`` with the kept
    transpose)."""
    if x.size(0) != matrix.adj.num_cols:
        raise ValueError(
            f"x has {x.size(0)} rows but the sparse matrix {matrix.adj.num_cols} columns"
        )
    if x.dim() == 1:
        return _SpMM.apply(x.unsqueeze(-1), matrix).squeeze(-1)
    if x.dim() != 2:
        return _SpMM.apply(x.reshape(x.size(0), -1), matrix).view(-1, *x.shape[1:])
    return _SpMM.apply(x, matrix)


def _product(adj: CSRAdjacency, values: Tensor | None, dense: Tensor) -> Tensor:
    """``Â · dense`` as one ``embedding_bag`` (row ``i`` = the bag of its entries' columns):
    torch's vectorised gather-and-sum kernel, ~5× faster than ``torch.sparse.mm`` on CSR on
    CPU (1 M entries, 64 columns, one thread: ~10 ms against ~50 ms). On CUDA tensors:
    cuSPARSE (:func:`product_csr`) unless :data:`CUDA_KERNEL` says otherwise."""
    if adj.num_entries == 0 or dense.size(1) == 0:
        return dense.new_zeros(adj.num_rows, dense.size(1))
    if dense.is_cuda and CUDA_KERNEL == "csr":
        return product_csr(adj, values, dense)
    return F.embedding_bag(
        adj.col,
        dense.contiguous(),
        adj.crow,
        mode="sum",
        per_sample_weights=values,
        include_last_offset=True,
    )


def product_csr(adj: CSRAdjacency, values: Tensor | None, dense: Tensor) -> Tensor:
    """``Â · dense`` through a ``torch`` CSR tensor (cuSPARSE's SpMM on CUDA; any device)."""
    if values is None:
        values = dense.new_ones(adj.num_entries)
    matrix = csr_tensor(adj.crow, adj.col, values.to(dense.dtype), adj.shape)
    return torch.sparse.mm(matrix, dense.contiguous())


class _SpMM(Function):
    @staticmethod
    def forward(ctx, x: Tensor, matrix: SparseMatrix) -> Tensor:
        ctx.matrix = matrix
        return _product(matrix.adj, matrix.values(x.dtype), x)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        if not ctx.needs_input_grad[0]:
            return None, None
        matrix = ctx.matrix
        values = matrix.transpose_values(grad_out.dtype)
        return _product(matrix.adj.transpose(), values, grad_out), None


def spmm_with_prefix(matrix: SparseMatrix, x: Tensor) -> Tensor:
    """``cat([Â · x, x[:num_rows]], 1)``: ``[num_rows, 2d]`` from ``x [num_cols, d]``, as one
    autograd node (a SAGE layer's aggregate beside its targets' own rows, the targets being
    the first rows of the sources). Its backward adds the second half's gradient into the
    first rows of ``Âᵀ · grad`` instead of a zero-padded ``[num_cols, d]`` copy that autograd
    would then sum with it (what ``x[:num_rows]`` costs)."""
    if x.dim() != 2 or x.size(0) != matrix.adj.num_cols:
        raise ValueError(
            f"x must be [{matrix.adj.num_cols}, d] for this sparse matrix (got {list(x.shape)})"
        )
    if x.size(0) < matrix.adj.num_rows:
        raise ValueError(
            f"the targets must be the first rows of x: {matrix.adj.num_rows} targets, "
            f"{x.size(0)} rows"
        )
    return _SpMMWithPrefix.apply(x, matrix)


class _SpMMWithPrefix(Function):
    @staticmethod
    def forward(ctx, x: Tensor, matrix: SparseMatrix) -> Tensor:
        ctx.matrix = matrix
        num_rows = matrix.adj.num_rows
        return torch.cat([_product(matrix.adj, matrix.values(x.dtype), x), x[:num_rows]], 1)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        if not ctx.needs_input_grad[0]:
            return None, None
        matrix = ctx.matrix
        width = grad_out.size(1) // 2
        values = matrix.transpose_values(grad_out.dtype)
        grad = _product(matrix.adj.transpose(), values, grad_out[:, :width])
        grad[: matrix.adj.num_rows] += grad_out[:, width:]
        return grad, None

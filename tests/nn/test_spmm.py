"""The CSR product and its backward against a dense reference, on a multigraph."""

import pytest
import torch

from lightning_gnn_dist.data.csr import CSRAdjacency
from lightning_gnn_dist.nn.spmm import SparseMatrix, spmm, spmm_with_prefix
from tests.data.test_csr import dense, multigraph_edges


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_product_and_gradient_equal_the_dense_matrix(reduce, weighted, dtype):
    edges = multigraph_edges()
    adj = CSRAdjacency.from_edge_index(edges, 7, 8)  # column 7: no edges at all
    weight = torch.rand(edges.size(1), dtype=torch.float64) if weighted else None
    matrix = SparseMatrix(adj, None if weight is None else adj.entry_values(weight), reduce)
    values = None if weight is None else adj.entry_values(weight)
    a = dense(adj, values.to(torch.float64) if weighted else None).to(dtype)
    if reduce == "mean":
        a = a / adj.degree().clamp(min=1).to(dtype).unsqueeze(1)
    x = torch.randn(8, 3, dtype=dtype, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    out, ref = spmm(matrix, x), a @ x_ref
    grad = torch.randn(7, 3, dtype=dtype)
    out.backward(grad)
    ref.backward(grad)
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=tol, atol=tol)
    assert out[5:].abs().sum() == 0  # isolated rows aggregate to zero
    # Beside the targets' own rows (the first 7 of the 8 sources), in one autograd node.
    x.grad = x_ref.grad = None
    out = spmm_with_prefix(matrix, x)
    ref = torch.cat([a @ x_ref, x_ref[:7]], 1)
    grad = torch.randn(7, 6, dtype=dtype)
    out.backward(grad)
    ref.backward(grad)
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=tol, atol=tol)


def test_shapes_and_errors():
    adj = CSRAdjacency.from_edge_index(multigraph_edges(), 7, 7)
    matrix = SparseMatrix(adj)
    assert spmm(matrix, torch.ones(7)).shape == (7,)
    assert spmm(matrix, torch.ones(7, 2, 3)).shape == (7, 2, 3)
    assert (matrix @ torch.ones(7, 1)).squeeze(1).tolist() == [2, 3, 3, 1, 1, 0, 0]
    with pytest.raises(ValueError, match="x has 6 rows"):
        spmm(matrix, torch.ones(6, 1))
    with pytest.raises(ValueError, match=r"x must be \[7, d\]"):
        spmm_with_prefix(matrix, torch.ones(6, 1))
    wide = SparseMatrix(CSRAdjacency.from_edge_index(multigraph_edges(), 7, 5))
    with pytest.raises(ValueError, match="the first rows of x: 7 targets, 5 rows"):
        spmm_with_prefix(wide, torch.ones(5, 1))
    with pytest.raises(ValueError, match="reduce must be one of"):
        SparseMatrix(adj, reduce="max")
    empty = CSRAdjacency.from_edge_index(torch.zeros(2, 0, dtype=torch.long), 3, 4)
    assert spmm(SparseMatrix(empty), torch.ones(4, 2)).abs().sum() == 0

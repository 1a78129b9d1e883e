"""The CSR product (cuSPARSE's path on CUDA, issue 35) equals the embedding-bag product."""

import pytest
import torch

from lightning_gnn_dist.data.csr import CSRAdjacency
from lightning_gnn_dist.nn import spmm


@pytest.mark.parametrize("weighted", [False, True])
def test_csr_product_equals_the_embedding_bag_product(weighted):
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, 30, (2, 200), generator=gen)
    edge_index = torch.cat([edge_index, torch.tensor([[3, 3], [5, 5]])], 1)  # parallel edges
    adj = CSRAdjacency.from_edge_index(edge_index, 30, 30)
    values = torch.rand(adj.num_entries, generator=gen) if weighted else None
    dense = torch.randn(30, 7, generator=gen)
    expected = spmm._product(adj, values, dense)
    torch.testing.assert_close(spmm.product_csr(adj, values, dense), expected)
    # the transpose too (what backward multiplies by)
    transposed = adj.transpose()
    values_t = None if values is None else values[transposed.perm.long()]
    torch.testing.assert_close(
        spmm.product_csr(transposed, values_t, dense), spmm._product(transposed, values_t, dense)
    )
    assert spmm.CUDA_KERNEL in spmm.CUDA_KERNELS

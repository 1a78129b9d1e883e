"""Measure the compute costs of the cost model on this machine (:func:`calibrate`)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from lightning_gnn_dist.data.csr import CSRAdjacency
from lightning_gnn_dist.nn.functional import dropout
from lightning_gnn_dist.nn.spmm import SparseMatrix, spmm
from lightning_gnn_dist.partition.work import ComputeCosts, gcn_layers


def calibrate(
    dims: Sequence[int],
    num_rows: int = 20_000,
    nnz_per_row: int = 10,
    repeats: int = 5,
    seed: int = 0,
) -> ComputeCosts:
    """Measure :class:`ComputeCosts` on this machine for a GCN with widths ``dims``.

    Times (median of ``repeats``, after one warm-up) the model's own operations, forward and
    backward, on a random graph of ``num_rows`` rows and ``nnz_per_row`` non-zeros per row:
    the CSR product of :func:`lightning_gnn_dist.nn.spmm.spmm` at each layer's aggregated
    width, each layer's ``Linear``, and bias + ReLU + dropout on its output; each cost is the
    summed time over the layers divided by the summed units. Takes about a second. Draws from
    its own generator (``seed``) and leaves the global random state as it found it, so a run
    that calibrates trains as one that does not.

    Args:
        dims: layer widths ``[d_0, ..., d_L]``.
        num_rows: rows of the calibration graph.
        nnz_per_row: non-zeros per row of the calibration graph.
        repeats: timed repetitions per operation.
        seed: seed of the calibration graph and features.
    """
    layers = gcn_layers(dims)
    generator = torch.Generator().manual_seed(seed)
    nnz = num_rows * nnz_per_row
    edges = torch.randint(0, num_rows, (2, nnz), generator=generator)
    weight = torch.rand(nnz, generator=generator)
    adj = CSRAdjacency.from_edge_index(edges, num_rows, num_rows)
    matrix = SparseMatrix(adj, adj.entry_values(weight))

    def timed(step) -> float:
        step()
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            step()
            seconds.append(time.perf_counter() - start)
        return float(np.median(seconds))

    agg = dense = elementwise = 0.0
    agg_units = dense_units = elementwise_units = 0
    for layer in layers:
        width = layer.aggregate_width
        h = torch.randn(num_rows, width, generator=generator, requires_grad=True)
        agg += timed(lambda h=h: spmm(matrix, h).sum().backward())
        agg_units += nnz * width
        # skip_init: torch.nn.Linear's own initialisation would draw from the global generator
        linear = torch.nn.utils.skip_init(torch.nn.Linear, layer.d_in, layer.d_out, bias=False)
        with torch.no_grad():
            linear.weight.copy_(
                torch.randn(layer.d_out, layer.d_in, generator=generator) / layer.d_in**0.5
            )
        x = torch.randn(num_rows, layer.d_in, generator=generator, requires_grad=True)
        dense += timed(lambda x=x, linear=linear: linear(x).sum().backward())
        dense_units += num_rows * layer.d_in * layer.d_out
        y = torch.randn(num_rows, layer.d_out, generator=generator, requires_grad=True)
        bias = torch.zeros(layer.d_out, requires_grad=True)
        # the model's dropout draws from the global generator (as in training): fork it
        with torch.random.fork_rng(devices=[]):
            elementwise += timed(
                lambda y=y, bias=bias: (
                    dropout(torch.relu(y + bias), 0.5, training=True).sum().backward()
                )
            )
        elementwise_units += num_rows * layer.d_out
    return ComputeCosts(agg / agg_units, dense / dense_units, elementwise / elementwise_units)

"""The column-net hypergraph model of ``Â`` (paper 000 §4.3.2).

One vertex per row ``i`` of ``Â`` with weight ``nnz(Â[i, :])``; one net per column ``j`` whose
pins are the rows with a non-zero in column ``j``. Under a partition, the connectivity−1 cut of
this hypergraph is exactly the number of feature rows the halo exchange moves per SpMM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch_geometric.data import Data

from lightning_gnn_dist.partition.arrays import EdgeView, column_net_csr, row_nnz


@dataclass(frozen=True)
class ColumnNetHypergraph:
    """Column-net hypergraph in CSR form.

    Attributes:
        num_vertices: rows of ``Â`` (= graph vertices).
        net_offsets: ``[num_nets + 1] int64``; pins of net ``j`` are
            ``pins[net_offsets[j]:net_offsets[j + 1]]``.
        pins: ``[nnz(Â)] int64`` vertex ids.
        vertex_weights: ``[num_vertices] int64``, non-zeros of each row.
        net_weights: ``[num_nets] int64`` weight of each net, or ``None`` for unit weights (the
            column-net model; the stochastic model merges identical nets into weighted ones).
    """

    num_vertices: int
    net_offsets: np.ndarray
    pins: np.ndarray
    vertex_weights: np.ndarray
    net_weights: np.ndarray | None = None

    @property
    def num_nets(self) -> int:
        return len(self.net_offsets) - 1

    @property
    def num_pins(self) -> int:
        return len(self.pins)

    def net_sizes(self) -> np.ndarray:
        """``[num_nets] int64`` pins per net."""
        return np.diff(self.net_offsets)

    def keep_nets(self, keep: np.ndarray) -> ColumnNetHypergraph:
        """The same vertices with only the nets where ``keep`` (``[num_nets] bool``) is set."""
        sizes = self.net_sizes()
        offsets = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
        np.cumsum(sizes[keep], out=offsets[1:])
        pins = self.pins[np.repeat(keep, sizes)]
        weights = None if self.net_weights is None else self.net_weights[keep]
        return ColumnNetHypergraph(self.num_vertices, offsets, pins, self.vertex_weights, weights)

    def restrict(self, vertices: np.ndarray) -> ColumnNetHypergraph:
        """The sub-hypergraph on ``vertices`` (``[n] int64``, sorted, distinct): vertex ``k`` is
        ``vertices[k]``; every net keeps its pins among ``vertices`` (nets left with none are
        dropped). Its connectivity−1 cut counts, per net, the extra parts among ``vertices``
        that read the net's row — what the second level of a two-level partition minimises."""
        vertices = np.asarray(vertices, dtype=np.int64)
        position = np.full(self.num_vertices, -1, dtype=np.int64)
        position[vertices] = np.arange(vertices.size)
        sizes = self.net_sizes()
        net_of_pin = np.repeat(np.arange(self.num_nets), sizes)
        kept = position[self.pins] >= 0
        counts = np.bincount(net_of_pin[kept], minlength=self.num_nets)
        nonempty = counts > 0
        offsets = np.zeros(int(nonempty.sum()) + 1, dtype=np.int64)
        np.cumsum(counts[nonempty], out=offsets[1:])
        weights = None if self.net_weights is None else self.net_weights[nonempty]
        return ColumnNetHypergraph(
            vertices.size,
            offsets,
            position[self.pins[kept]],
            self.vertex_weights[vertices],
            weights,
        )


def column_net_hypergraph(data: Data) -> ColumnNetHypergraph:
    """Build the column-net hypergraph of a canonical graph (vectorised, ``O(nnz)``, in chunks:
    about 8 bytes per pin besides the result)."""
    num_nodes = data.num_nodes
    view = EdgeView(data.edge_index, num_nodes)
    offsets, pins = column_net_csr(view)
    return ColumnNetHypergraph(num_nodes, offsets, pins, row_nnz(data.edge_index, num_nodes, view))

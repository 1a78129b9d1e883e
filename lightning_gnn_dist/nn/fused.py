"""Sparse-matrix aggregation for unchanged PyG layers (design §9).

PyG runs a layer's fused ``message_and_aggregate`` (one sparse × dense product) only when it is
given a sparse adjacency; with an ``edge_index [2, E]`` it gathers one row per edge and
scatter-adds them, ~5–10× slower on CPU. :func:`use_sparse_aggregation` makes the layers of a
model take the fused path with the ``edge_index`` the user already passes:

* before ``propagate`` runs, the edges become the CSR adjacency ``Â`` (targets × sources) of
  :mod:`lightning_gnn_dist.data.csr`, built once per ``edge_index`` tensor (a partition's or a
  batch's edges are reused by every layer and step) with the layer's edge weights as values;
* ``message_and_aggregate`` then computes ``Â · X`` with :func:`~lightning_gnn_dist.nn.spmm.spmm`,
  whose backward uses the kept transpose ``Âᵀ``;
* an active graph context still sees the aggregates (a vertex cut synchronises them).

Layers and settings that take the path (:data:`FUSED_LAYERS`): ``GCNConv``, ``SAGEConv``,
``GINConv`` and ``GraphConv`` with ``sum``/``add``/``mean`` aggregation, constant edge weights
(or none), the default ``source_to_target`` flow, no explainer and no ``decomposed_layers``, and
no subclass that overrides ``message``, ``aggregate`` or ``message_and_aggregate``. Everything
else keeps PyG's scatter path unchanged (``max``/``min`` aggregation — ties between parallel edges
need PyG's own gradient — attention layers, learned edge weights, other layers).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric import EdgeIndex
from torch_geometric.nn import GCNConv, GINConv, GraphConv, SAGEConv
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.utils import is_sparse

from lightning_gnn_dist.data.csr import CSRAdjacency, adjacency_of, tensor_version
from lightning_gnn_dist.nn.context import current_graph_context
from lightning_gnn_dist.nn.spmm import SparseMatrix, csr_tensor, spmm

FUSED_LAYERS: dict[type[MessagePassing], str | None] = {
    GCNConv: "edge_weight",
    SAGEConv: None,
    GINConv: None,
    GraphConv: "edge_weight",
}
"""Layer classes whose fused ``message_and_aggregate`` is ``Â · x_j`` (same result as their
``message`` + ``aggregate``), with the ``propagate`` keyword that carries ``Â``'s values
(``None``: the values are ones)."""

_FUSED_AGGRS = ("sum", "add", "mean")
_METHODS = ("message", "aggregate", "message_and_aggregate", "update")
_HOOKS = "_lgd_sparse_hooks"
_PENDING = "_lgd_sparse_matrix"


def use_sparse_aggregation(model: nn.Module) -> nn.Module:
    """Make every supported message-passing layer of ``model`` aggregate with a CSR product
    (in place, idempotent; see the module docstring). Returns ``model``.

    Single-process code that trains on :class:`~lightning_gnn_dist.loaders.NeighborLoader`
    batches calls it once on its model; :func:`~lightning_gnn_dist.nn.distribute` and the
    reference models do it themselves.
    """
    for module in model.modules():
        if isinstance(module, MessagePassing) and not hasattr(module, _HOOKS):
            if _fused_base(type(module)) is None:
                continue
            setattr(
                module,
                _HOOKS,
                (
                    module.register_propagate_forward_pre_hook(_to_sparse),
                    module.register_message_and_aggregate_forward_pre_hook(_swap_in_matrix),
                    module.register_message_and_aggregate_forward_hook(_after_fused),
                ),
            )
    return model


def _fused_base(cls: type) -> type | None:
    """The entry of :data:`FUSED_LAYERS` ``cls`` derives from without overriding its message
    passing, or ``None``."""
    for base in FUSED_LAYERS:
        if issubclass(cls, base) and all(
            getattr(cls, name) is getattr(base, name) for name in _METHODS
        ):
            return base
    return None


def _sizes(module: MessagePassing, size, kwargs: dict) -> tuple[int, int] | None:
    """``(num_sources, num_targets)`` of a ``propagate`` call, as PyG infers them."""
    num_src, num_dst = (None, None) if size is None else (size[0], size[1])
    x = kwargs.get("x")
    if isinstance(x, (tuple, list)):
        if num_src is None and isinstance(x[0], Tensor):
            num_src = x[0].size(module.node_dim)
        if num_dst is None and isinstance(x[1], Tensor):
            num_dst = x[1].size(module.node_dim)
    elif isinstance(x, Tensor):
        num_src = x.size(module.node_dim) if num_src is None else num_src
        num_dst = x.size(module.node_dim) if num_dst is None else num_dst
    if num_src is None:
        return None
    return int(num_src), int(num_dst if num_dst is not None else num_src)


def _to_sparse(module: MessagePassing, inputs: tuple):
    """``propagate`` pre-hook: ``edge_index [2, E]`` → the layer's CSR matrix, when fusable."""
    edge_index, size, kwargs = inputs
    if (
        not module.fuse
        or module.explain
        or module.flow != "source_to_target"
        or module.decomposed_layers != 1
        or module.aggr not in _FUSED_AGGRS
        or not isinstance(edge_index, Tensor)
        or is_sparse(edge_index)
        or edge_index.dim() != 2
        or edge_index.size(0) != 2
        or edge_index.is_floating_point()
    ):
        return None
    weight_key = FUSED_LAYERS[_fused_base(type(module))]
    weight = kwargs.get(weight_key) if weight_key else None
    if weight is not None and (weight.requires_grad or weight.dim() != 1):
        return None
    sizes = _sizes(module, size, kwargs)
    if sizes is None:
        return None
    num_src, num_dst = sizes
    matrix = sparse_matrix(edge_index, num_dst, num_src, weight, module.aggr)
    module.__dict__[_PENDING] = matrix
    return _placeholder(matrix.adj), None, kwargs


def _placeholder(adj: CSRAdjacency) -> Tensor:
    """A ``torch`` CSR tensor of ``Â``'s shape and no entries: it makes PyG choose the fused
    path (and costs PyG's bookkeeping nothing); ``message_and_aggregate`` gets the real matrix."""
    cache = adj.__dict__.setdefault("_lgd_placeholder", {})
    if "csr" not in cache:
        empty = torch.zeros(0, dtype=adj.col.dtype, device=adj.device)
        crow = torch.zeros(adj.num_rows + 1, dtype=adj.col.dtype, device=adj.device)
        cache["csr"] = csr_tensor(crow, empty, empty.float(), adj.shape)
    return cache["csr"]


def sparse_matrix(
    edge_index: Tensor,
    num_rows: int,
    num_cols: int,
    edge_weight: Tensor | None = None,
    reduce: str = "sum",
) -> SparseMatrix:
    """The :class:`SparseMatrix` ``Â`` of ``edge_index`` (targets × sources) with per-edge
    ``edge_weight`` (``[E]``, edge order) or ones, cached with the ``edge_index`` tensor: the
    unweighted matrix per reduction, the weighted one for the last weight tensor seen."""
    adj = adjacency_of(edge_index, num_rows, num_cols)
    cache = adj.__dict__.setdefault("_lgd_matrices", {})
    if edge_weight is None:
        key: tuple = (reduce, None)
    else:
        key = (reduce, edge_weight.data_ptr(), tensor_version(edge_weight), edge_weight.numel())
        stale = [k for k in cache if k[1] is not None and k != key]
        for k in stale:
            del cache[k]
    if key not in cache:
        values = None if edge_weight is None else adj.entry_values(edge_weight)
        cache[key] = SparseMatrix(adj, values, "mean" if reduce == "mean" else "sum")
    return cache[key]


class _MatrixToken(EdgeIndex):
    """What ``message_and_aggregate`` receives: PyG's ``spmm``/``GraphConv`` call its
    ``matmul``, which computes ``Â · x`` with the prepared :class:`SparseMatrix`."""

    matrix: SparseMatrix

    def matmul(self, other, input_value=None, other_value=None, reduce="sum", transpose=False):
        del input_value, other_value, transpose  # the values and orientation are the matrix's
        expected = "mean" if reduce == "mean" else "sum"
        if expected != self.matrix.reduce:
            raise RuntimeError(f"fused aggregation prepared for {self.matrix.reduce}, got {reduce}")
        return spmm(self.matrix, other)


def _swap_in_matrix(module: MessagePassing, inputs: tuple):
    matrix = module.__dict__.pop(_PENDING, None)
    if matrix is None:
        return None  # the user passed a sparse adjacency themselves: PyG's own path
    edge_index, kwargs = inputs
    token = _MatrixToken(torch.empty(2, 0, dtype=torch.long, device=matrix.adj.device))
    token.matrix = matrix
    return token, kwargs


def _after_fused(module: MessagePassing, inputs: tuple, output: Tensor):
    """The graph context's post-aggregation hook, as on PyG's scatter path."""
    edge_index = inputs[0]
    ctx = current_graph_context()
    if ctx is None or not isinstance(edge_index, _MatrixToken):
        return None
    adj: CSRAdjacency = edge_index.matrix.adj
    return ctx.after_aggregate(module, {"index": adj.row, "dim_size": adj.num_rows}, output)

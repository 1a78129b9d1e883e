"""Exact batch normalisation over all ranks' rows: :class:`DistBatchNorm`.

Batch statistics of a node-level batch norm are means over *every* vertex of the graph, so under a
vertex partition each rank must see the statistics of all parts, not its own. The forward merges
per-rank ``(count, mean, M2)`` triples with Chan et al.'s parallel update (numerically safe, unlike
raw sums of squares) after one all-gather; the backward needs the global sums of ``dy`` and
``dy · x̂``, one all-reduce. Running statistics are updated from the merged values, so they are
identical on every rank and equal single-process training. Eval mode with running statistics needs
no communication.

Which norms are exact under :func:`~lightning_gnn_dist.nn.distribute`:

* per-node norms (PyG ``LayerNorm(mode="node")``, ``HeteroLayerNorm``, ``MessageNorm``,
  ``torch.nn.LayerNorm``) and dropout need nothing;
* ``torch.nn.BatchNorm1d``, ``torch.nn.SyncBatchNorm`` and PyG ``BatchNorm`` become
  :class:`DistBatchNorm` (PyG ``DiffGroupNorm`` too, through its inner ``BatchNorm1d``);
* graph-level norms (:data:`GRAPH_LEVEL_NORMS`) are refused with an error.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd import Function
from torch.nn.modules.batchnorm import _BatchNorm
from torch_geometric.nn import norm as pyg_norm

from lightning_gnn_dist.nn.context import current_graph_context

GRAPH_LEVEL_NORMS: dict[type[nn.Module], str] = {
    pyg_norm.GraphNorm: "normalises by per-graph statistics",
    pyg_norm.InstanceNorm: "normalises by per-graph statistics",
    pyg_norm.PairNorm: "centres and scales by the mean over the whole graph",
    pyg_norm.MeanSubtractionNorm: "subtracts the mean over the whole graph",
    pyg_norm.GraphSizeNorm: "divides by the size of the whole graph",
    pyg_norm.HeteroBatchNorm: "keeps batch statistics per type (not synchronised here)",
}
"""Norms whose output row depends on statistics of the whole graph; ``distribute`` refuses them
(plus PyG ``LayerNorm(mode="graph")``), since each rank would normalise over its own part only."""


def check_norm_is_exact(module: nn.Module, name: str) -> None:
    """Raise ``ValueError`` if ``module`` is a graph-level norm that a partition cannot reproduce.

    Args:
        module: any submodule of the model.
        name: its qualified name, quoted in the message.
    """
    reason = GRAPH_LEVEL_NORMS.get(type(module))
    if isinstance(module, pyg_norm.LayerNorm) and module.mode == "graph":
        reason = "with mode='graph' normalises by statistics of the whole graph"
    if isinstance(module, _BatchNorm) and type(module) not in _SYNCHRONISED:
        reason = "keeps batch statistics that only BatchNorm1d and SyncBatchNorm get synchronised"
    if reason is not None:
        raise ValueError(
            f"{type(module).__name__} ({name or 'model'}) {reason}; under a vertex partition each "
            "rank would see its own part only, so training would not be exact. Use BatchNorm "
            "(synchronised across ranks), LayerNorm(mode='node') or no norm."
        )


class _SyncBatchNorm(Function):
    """``y = (x − μ) / sqrt(σ² + eps) · weight + bias`` with ``μ, σ²`` over all ranks' rows.

    ``counted`` (``[N] bool`` or ``None`` for all rows) marks the rows the statistics were taken
    over; the others (leaf copies of split vertices under a vertex cut) are normalised with the
    same statistics but do not enter them, so their gradient has no statistics term.
    """

    @staticmethod
    def forward(
        ctx, x: Tensor, weight, bias, mean: Tensor, invstd: Tensor, count: int, group, counted
    ):
        x_hat = (x - _bcast(mean, x)) * _bcast(invstd, x)
        ctx.save_for_backward(x_hat, weight, invstd, counted)
        ctx.count, ctx.group = count, group
        y = x_hat
        if weight is not None:
            y = y * _bcast(weight, x) + _bcast(bias, x)
        return y

    @staticmethod
    def backward(ctx, grad_y: Tensor):
        x_hat, weight, invstd, counted = ctx.saved_tensors
        dims = _reduce_dims(grad_y)
        local = torch.stack([grad_y.sum(dims), (grad_y * x_hat).sum(dims)])
        total = local.clone()
        dist.all_reduce(total, group=ctx.group)
        mean_dy, mean_dy_xhat = total / ctx.count
        scale = invstd if weight is None else invstd * weight
        correction = _bcast(mean_dy, x_hat) + x_hat * _bcast(mean_dy_xhat, x_hat)
        if counted is not None:
            correction = correction * counted.view(-1, *([1] * (x_hat.dim() - 1)))
        grad_x = (grad_y - correction) * _bcast(scale, x_hat)
        grad_weight = local[1] if weight is not None and ctx.needs_input_grad[1] else None
        grad_bias = local[0] if weight is not None and ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias, None, None, None, None, None


def _reduce_dims(x: Tensor) -> list[int]:
    return [0, *range(2, x.dim())]


def _bcast(v: Tensor, like: Tensor) -> Tensor:
    """``[C]`` → broadcastable against ``[N, C]`` or ``[N, C, L]``."""
    return v.view(1, -1, *([1] * (like.dim() - 2)))


def global_moments(x: Tensor, group=None) -> tuple[int, Tensor, Tensor]:
    """``(count, mean [C], M2 [C])`` of the rows of every rank (channel dim 1), identical on all.

    Each rank contributes ``(n, mean, M2)`` of its rows; the all-gathered triples are merged in rank
    order with Chan et al.'s update ``M2 = Σ M2_r + Σ n_r (mean_r − mean)²``, in float64.
    """
    channels = x.size(1)
    rows = x.detach().transpose(0, 1).reshape(channels, -1).to(torch.float64)
    n = rows.size(1)
    mean = rows.mean(1) if n else rows.new_zeros(channels)
    m2 = (rows - mean[:, None]).pow(2).sum(1)
    local = torch.cat([rows.new_tensor([n]), mean, m2])
    world = dist.get_world_size(group)
    gathered = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(gathered, local, group=group)
    stats = torch.stack(gathered)
    counts, means, m2s = stats[:, :1], stats[:, 1 : 1 + channels], stats[:, 1 + channels :]
    total = int(counts.sum())
    merged_mean = (counts * means).sum(0) / max(total, 1)
    merged_m2 = m2s.sum(0) + (counts * (means - merged_mean).pow(2)).sum(0)
    return total, merged_mean, merged_m2


class DistBatchNorm(nn.BatchNorm1d):
    """:class:`torch.nn.BatchNorm1d` whose batch statistics cover every rank's rows.

    Same parameters, buffers and state dict as ``BatchNorm1d``; :func:`distribute` swaps the class
    of existing ``BatchNorm1d``/``SyncBatchNorm`` modules to this one. Outside a graph context (or
    on one rank) it *is* ``BatchNorm1d``. Inside one, ``x`` is ``[num_owned, C]`` (or
    ``[num_owned, C, L]``) and the output equals the owned rows of the single-process output; the
    running statistics (unbiased variance with the **global** count, ``momentum`` or the cumulative
    average for ``momentum=None``) are the same on every rank. Under a vertex cut the rows are
    every local copy, and only root copies enter the statistics (each vertex counts once, as
    for labels and masks); leaf copies are normalised with the same statistics.

    Args: as :class:`torch.nn.BatchNorm1d`. Attribute ``allow_single_element`` (PyG ``BatchNorm``)
    makes a batch of at most one row *over all ranks* use the running statistics.
    """

    allow_single_element: bool = False

    def forward(self, x: Tensor) -> Tensor:
        ctx = current_graph_context()
        group = ctx.exchange.group if ctx is not None else None
        batch_stats = self.training or self.running_mean is None
        if ctx is None or ctx.exchange.world_size == 1 or not batch_stats:
            return self._local_forward(x)
        self._check_input_dim(x)
        counted = ctx.counted_rows(x.device)  # a vertex cut counts root copies only
        count, mean, m2 = global_moments(x if counted is None else x[counted], group)
        if count <= 1:
            if self.allow_single_element and self.running_mean is not None:
                return self._eval_forward(x)
            raise ValueError(
                f"{type(self).__name__}: expected more than 1 row per channel over all ranks when "
                f"training (got {count}); use eval mode or allow_single_element=True"
            )
        if self.training and self.track_running_stats:
            self._update_running_stats(mean, m2, count)
        var = m2 / count
        invstd = (var + self.eps).rsqrt().to(x.dtype)
        return _SyncBatchNorm.apply(
            x, self.weight, self.bias, mean.to(x.dtype), invstd, count, group, counted
        )

    def _local_forward(self, x: Tensor) -> Tensor:
        if self.allow_single_element and x.size(0) <= 1 and self.running_mean is not None:
            return self._eval_forward(x)
        return super().forward(x)

    def _eval_forward(self, x: Tensor) -> Tensor:
        return F.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
        )

    @torch.no_grad()
    def _update_running_stats(self, mean: Tensor, m2: Tensor, count: int) -> None:
        self.num_batches_tracked.add_(1)
        factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        unbiased = m2 / (count - 1)
        self.running_mean.mul_(1 - factor).add_(mean.to(self.running_mean.dtype), alpha=factor)
        self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype), alpha=factor)


_SYNCHRONISED = (nn.BatchNorm1d, nn.SyncBatchNorm, DistBatchNorm)


class DistPyGBatchNorm(pyg_norm.BatchNorm):
    """:class:`torch_geometric.nn.BatchNorm` whose inner ``BatchNorm1d`` is a
    :class:`DistBatchNorm`; ``allow_single_element`` counts the rows of all ranks."""

    def forward(self, x: Tensor) -> Tensor:
        return self.module(x)


def make_norm_distributed(module: nn.Module) -> bool:
    """Swap the class of a batch norm in place (state dict unchanged); ``True`` if it is one."""
    if isinstance(module, pyg_norm.BatchNorm):
        module.__class__ = DistPyGBatchNorm
        make_norm_distributed(module.module)
        module.module.allow_single_element = module.allow_single_element
        return True
    if type(module) in _SYNCHRONISED:
        module.__class__ = DistBatchNorm
        return True
    return False

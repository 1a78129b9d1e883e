"""Ranking metrics of link prediction, computed where the scores are.

* **MRR** (ogbl-citation2's protocol): each positive ``(s, t)`` against its own ``K`` negative
  targets ``(s, t'_1..K)``; its rank is ``1 + (#neg > pos + #neg ≥ pos) / 2`` (ties count half,
  as ``ogb.linkproppred.Evaluator``), MRR the mean of ``1 / rank``. A positive and its negatives
  live on the rank that owns ``s``, so each rank sums its reciprocal ranks and one
  ``all_reduce`` of ``(sum, count)`` gives the global mean.
* **Hits@K** (ogbl-collab's, -ppa's, -ddi's): the share of positives scored above the
  ``K``-th highest score of *all* negatives (a shared pool; ``1.0`` when there are fewer than
  ``K`` negatives, as OGB). Each rank keeps its ``K`` highest negative scores; one
  ``all_gather`` of ``K`` scores per rank gives the global ``K``-th, and one ``all_reduce``
  counts the positives above it.

No rank ever holds another rank's embeddings or scores beyond those ``K`` per rank. Values equal
OGB's evaluator on the same scores (``tests/nn/test_link_metrics.py``).
"""

from __future__ import annotations

import re

import torch
import torch.distributed as dist
from torch import Tensor

METRIC_PATTERN = re.compile(r"mrr|hits@([1-9][0-9]*)")


def check_metrics(metrics: list[str], num_negatives: int | None = None) -> list[str]:
    """``metrics`` as given (``"mrr"``, ``"hits@K"``), refused one line each otherwise."""
    if isinstance(metrics, str) or not metrics:
        raise ValueError(
            f"metrics must be a non-empty list such as ['mrr', 'hits@50'] (got {metrics!r})"
        )
    for name in metrics:
        if not isinstance(name, str) or METRIC_PATTERN.fullmatch(name) is None:
            raise ValueError(f"undefined link metric {name!r}; use 'mrr' or 'hits@K' (K >= 1)")
    return list(metrics)


def reciprocal_ranks(pos: Tensor, neg: Tensor) -> Tensor:
    """``[n] float32`` reciprocal rank of each positive score ``pos [n]`` among its negatives'
    ``neg [n, K]`` (OGB's optimistic/pessimistic mean rank)."""
    pos = pos.view(-1, 1)
    optimistic = (neg > pos).sum(dim=1)
    pessimistic = (neg >= pos).sum(dim=1)
    rank = 0.5 * (optimistic + pessimistic) + 1
    return 1.0 / rank.to(torch.float)


class LinkRankMetrics:
    """Accumulates one split's scores on one rank and computes MRR and Hits@K over all ranks.

    Args:
        metrics: ``["mrr", "hits@50", ...]``.
        group: process group of the ranks (default: the world; none needed single-process).
    """

    def __init__(self, metrics: list[str], group=None) -> None:
        self.metrics = check_metrics(metrics)
        self.ks = [int(m[5:]) for m in self.metrics if m.startswith("hits@")]
        self.group = group
        self.reset()

    def reset(self) -> None:
        self._rr_sum = torch.zeros((), dtype=torch.float64)
        self._rr_count = 0
        self._pos: list[Tensor] = []
        self._top = torch.empty(0)
        self._num_neg = 0

    def update(self, pos: Tensor, neg: Tensor | None = None, pool: Tensor | None = None) -> None:
        """Add positives' scores ``pos [n]`` with their own negatives' ``neg [n, K]`` (MRR; also
        pooled for Hits@K) and/or a negative pool ``pool [m]`` (Hits@K only)."""
        pos = pos.detach().float().cpu().view(-1)
        self._pos.append(pos)
        pooled = []
        if neg is not None:
            neg = neg.detach().float().cpu()
            if "mrr" in self.metrics:
                rr = reciprocal_ranks(pos, neg)
                self._rr_sum += rr.double().sum()
                self._rr_count += rr.numel()
            pooled.append(neg.reshape(-1))
        if pool is not None:
            pooled.append(pool.detach().float().cpu().view(-1))
        if pooled and self.ks:
            scores = torch.cat([self._top, *pooled])
            self._num_neg += sum(p.numel() for p in pooled)
            self._top = torch.topk(scores, min(max(self.ks), scores.numel())).values

    def compute(self) -> dict[str, float]:
        """``{"mrr": ..., "hits@K": ...}`` over every rank (collective when a process group
        exists: every rank calls it)."""
        distributed = dist.is_available() and dist.is_initialized()
        out: dict[str, float] = {}
        if "mrr" in self.metrics:
            totals = torch.tensor([float(self._rr_sum), float(self._rr_count)], dtype=torch.float64)
            if distributed:
                dist.all_reduce(totals, group=self.group)
            out["mrr"] = float(totals[0] / totals[1]) if totals[1] > 0 else 0.0
        if self.ks:
            out.update(self._hits(distributed))
        return {name: out[name] for name in self.metrics}

    def _hits(self, distributed: bool) -> dict[str, float]:
        k_max = max(self.ks)
        top = torch.full((k_max,), float("-inf"))
        top[: self._top.numel()] = self._top
        counts = torch.tensor([self._num_neg], dtype=torch.float64)
        pos = torch.cat(self._pos) if self._pos else torch.empty(0)
        if distributed:
            world = dist.get_world_size(self.group)
            gathered = [torch.empty_like(top) for _ in range(world)]
            dist.all_gather(gathered, top, group=self.group)
            top = torch.cat(gathered)
            dist.all_reduce(counts, group=self.group)
        top = torch.sort(top, descending=True).values
        above = torch.tensor(
            [float((pos > top[k - 1]).sum()) for k in self.ks] + [float(pos.numel())],
            dtype=torch.float64,
        )
        if distributed:
            dist.all_reduce(above, group=self.group)
        num_neg, num_pos = float(counts[0]), float(above[-1])
        return {
            f"hits@{k}": 1.0 if num_neg < k else (float(above[i]) / num_pos if num_pos else 0.0)
            for i, k in enumerate(self.ks)
        }


__all__ = ["LinkRankMetrics", "check_metrics", "reciprocal_ranks"]

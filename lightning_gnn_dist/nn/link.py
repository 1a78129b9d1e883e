"""Link prediction on embeddings: the pairs' rows, decoders and losses.

Decoders map the embeddings of a pair's endpoints ``h_src, h_dst [n, d]`` to one score per pair
``[n]`` (a logit): ``"dot"`` (``Σ h_src · h_dst``), ``"distmult"`` (``Σ h_src · r · h_dst``
with a learned relation vector ``r [d]``) and ``"mlp"`` (an MLP on ``h_src ⊙ h_dst``, OGB's
``LinkPredictor``). Any ``nn.Module`` called as ``decoder(h_src, h_dst)`` that returns ``[n]``
or ``[n, 1]`` works unchanged (:func:`check_decoder` refuses another shape at construction).

Losses read the positives' scores ``[n]`` and their negatives' ``[n, k]`` (negative ``j`` of
positive ``i``, see :mod:`~lightning_gnn_dist.data.negatives`) and return a **sum** and the
number of terms it adds up, so that a loss over all ranks is the global sum divided by the
global count (exact, as node losses are):

* ``"bce"``: ``BCE(s⁺, y)`` per positive and ``BCE(s⁻, 0)`` per negative, ``n (1 + k)`` terms;
* ``"bpr"``: ``−log σ(s⁺ᵢ − s⁻ᵢⱼ)`` per (positive, negative), ``n k`` terms;
* ``"margin"``: ``max(0, margin − s⁺ᵢ + s⁻ᵢⱼ)`` per (positive, negative), ``n k`` terms;
* ``"contrastive"``: the softmax cross-entropy of ``[s⁺ᵢ, s⁻ᵢ₁ … s⁻ᵢₖ]`` with target 0,
  ``n`` terms.

Masked-out negatives (``valid = False``, see ``filter_true``) add nothing but still count, so the
divisor never needs a collective.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_gnn_dist.comm.score import ScoreExchange, VertexDirectory
from lightning_gnn_dist.nn.context import current_graph_context

DECODERS = ("dot", "distmult", "mlp")
LOSSES = ("bce", "bpr", "margin", "contrastive")


class DotProduct(nn.Module):
    """``score = Σ h_src · h_dst`` (no parameters)."""

    def forward(self, h_src: Tensor, h_dst: Tensor) -> Tensor:
        return (h_src * h_dst).sum(-1)


class DistMult(nn.Module):
    """``score = Σ h_src · r · h_dst`` with a learned relation vector ``r [channels]`` (one
    relation; GraphStorm's and DGL's DistMult)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.relation = nn.Parameter(torch.ones(channels))

    def forward(self, h_src: Tensor, h_dst: Tensor) -> Tensor:
        return (h_src * self.relation * h_dst).sum(-1)


class MLPDecoder(nn.Module):
    """OGB's ``LinkPredictor``: an MLP on ``h_src ⊙ h_dst``, ``channels → hidden → … → 1``."""

    def __init__(
        self, channels: int, hidden_channels: int = 64, num_layers: int = 2, dropout: float = 0.0
    ) -> None:
        super().__init__()
        dims = [channels] + [hidden_channels] * (num_layers - 1) + [1]
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True))
        self.dropout = dropout

    def forward(self, h_src: Tensor, h_dst: Tensor) -> Tensor:
        x = h_src * h_dst
        for i, lin in enumerate(self.lins):
            x = lin(x)
            if i < len(self.lins) - 1:
                x = F.dropout(F.relu(x), self.dropout, self.training)
        return x.squeeze(-1)


def make_decoder(
    decoder: str | nn.Module,
    channels: int,
    hidden_channels: int = 64,
    num_layers: int = 2,
    dropout: float = 0.0,
) -> nn.Module:
    """The decoder ``decoder`` names (``"dot"``, ``"distmult"``, ``"mlp"``) for embeddings of
    width ``channels``, or the user's module itself (checked by :func:`check_decoder`).

    Raises:
        ValueError: an unknown name, or a module whose output does not fit.
    """
    if isinstance(decoder, nn.Module):
        check_decoder(decoder, channels)
        return decoder
    if decoder == "dot":
        return DotProduct()
    if decoder == "distmult":
        return DistMult(channels)
    if decoder == "mlp":
        return MLPDecoder(channels, hidden_channels, num_layers, dropout)
    raise ValueError(
        f"undefined decoder {decoder!r}; choose one of {', '.join(map(repr, DECODERS))} or pass "
        "an nn.Module called as decoder(h_src, h_dst)"
    )


def check_decoder(decoder: nn.Module, channels: int) -> None:
    """Refuse a decoder that does not return one score per pair for ``[3, channels]``
    embeddings (``[3]`` or ``[3, 1]``).

    Raises:
        ValueError: naming the shape it returned (or the error it raised).
    """
    probe = torch.zeros(3, channels)
    params = next(iter(decoder.parameters()), None)
    if params is not None:
        probe = probe.to(params)
    try:
        with torch.no_grad():
            was = decoder.training
            decoder.eval()
            out = decoder(probe, probe)
            decoder.train(was)
    except Exception as error:  # noqa: BLE001 (the user's module: report any failure)
        raise ValueError(
            f"decoder {type(decoder).__name__} fails on two [n, {channels}] embeddings "
            f"(decoder(h_src, h_dst)): {error}"
        ) from None
    shape = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
    if not isinstance(out, Tensor) or shape not in ((3,), (3, 1)):
        raise ValueError(
            f"decoder {type(decoder).__name__} returns {shape} for 3 pairs of [3, {channels}] "
            "embeddings; it must return one score per pair, [n] or [n, 1]"
        )


def check_loss(loss: str) -> None:
    if loss not in LOSSES:
        raise ValueError(f"undefined loss {loss!r}; choose one of {', '.join(map(repr, LOSSES))}")


def link_loss(
    loss: str,
    pos: Tensor,
    neg: Tensor,
    valid: Tensor | None = None,
    label: Tensor | None = None,
    margin: float = 1.0,
) -> tuple[Tensor, int]:
    """``(sum, terms)`` of ``loss`` over ``n`` positives' scores ``pos [n]`` and their
    negatives' ``neg [n, k]`` (module docstring); ``valid [n, k]`` masks negatives out,
    ``label [n]`` are the positives' targets for ``"bce"`` (default ``1``)."""
    n, k = neg.shape
    mask = torch.ones_like(neg, dtype=torch.bool) if valid is None else valid
    if loss == "bce":
        target = torch.ones_like(pos) if label is None else label.to(pos.dtype)
        positive = F.binary_cross_entropy_with_logits(pos, target, reduction="sum")
        negative = (F.softplus(neg) * mask).sum()
        return positive + negative, n * (1 + k)
    if loss == "bpr":
        return (F.softplus(neg - pos.unsqueeze(1)) * mask).sum(), n * k
    if loss == "margin":
        return (F.relu(margin - pos.unsqueeze(1) + neg) * mask).sum(), n * k
    if loss == "contrastive":
        logits = torch.cat([pos.unsqueeze(1), neg.masked_fill(~mask, float("-inf"))], 1)
        return (torch.logsumexp(logits, 1) - pos).sum(), n
    raise ValueError(f"undefined loss {loss!r}; choose one of {', '.join(map(repr, LOSSES))}")


def loss_terms(loss: str, num_positives: int, num_negatives: int) -> int:
    """Terms ``loss`` adds up over ``num_positives`` pairs with ``num_negatives`` each."""
    if loss == "bce":
        return num_positives * (1 + num_negatives)
    if loss in ("bpr", "margin"):
        return num_positives * num_negatives
    return num_positives


def endpoint_table(
    h: Tensor, ids: Tensor, directory: VertexDirectory | None = None
) -> tuple[Tensor, Tensor]:
    """``(table [T, d], index [m])``: the embedding rows of dataset ``ids`` (``[m]``) are
    ``table[index]``.

    Without a ``directory`` (one process, or a sampled batch whose ``ids`` index its own
    rows) ``table`` is ``h`` and ``index`` is ``ids``. With one, inside a distributed graph
    context, ``table`` is ``h`` followed by the rows of the vertices owned elsewhere, which come
    by the score exchange (:mod:`~lightning_gnn_dist.comm.score`; the context's exchange counts
    them); collective then: every rank calls it once per step.
    """
    if directory is None:
        return h, ids
    context = current_graph_context()
    if context is None:
        if directory.num_parts != 1:
            raise RuntimeError(
                "the pairs' rows of a partitioned graph are exchanged inside a distributed "
                "step: train with GNNStrategy (strategy='gnn_ddp')"
            )
        return h, directory.routing(ids).to(h.device)
    partition, exchange = context.partition, context.exchange
    owned_rows = None
    if getattr(partition, "kind", "vertex") == "vertex-cut":
        owned_rows = partition.is_root.nonzero().view(-1)
    cache = context._cache
    key = ("score-exchange", id(directory))
    score = cache.get(key)
    if score is None:
        score = cache[key] = ScoreExchange(
            directory, partition.part_id, partition.num_parts, owned_rows, exchange.group
        )
    score.counter = exchange.counter  # the stage's counter (the strategy sets it per step)
    return score.table(h, ids)


def endpoint_rows(h: Tensor, ids: Tensor, directory: VertexDirectory | None = None) -> Tensor:
    """``[m, d]`` the embedding rows of dataset ``ids`` (``[m]``) from the model output ``h``
    (:func:`endpoint_table`, gathered; ``h[ids]`` without a ``directory``)."""
    table, index = endpoint_table(h, ids, directory)
    return table.index_select(0, index)


def dot_scores(left: Tensor, right: Tensor, src: Tensor, dst: Tensor) -> Tensor:
    """``[n]`` scores ``Σ left[src[i]] · right[dst[i]]`` without gathering ``[n, d]`` rows: one
    sampled dense-dense product on the pairs' sparsity pattern (SDDMM, as DGL's ``u_dot_v``),
    whose backward is two sparse-dense products (8x less CPU than gather, multiply and sum
    with its scatter-add backward, on 330k pairs of 64-wide rows)."""
    n = src.numel()
    order = torch.argsort(src, stable=True)
    crow = torch.zeros(left.size(0) + 1, dtype=torch.long, device=src.device)
    crow[1:] = torch.cumsum(torch.bincount(src, minlength=left.size(0)), 0)
    with warnings.catch_warnings():  # "sparse CSR support is in beta": it is what we use
        warnings.simplefilter("ignore")
        pattern = torch.sparse_csr_tensor(
            crow, dst[order], left.new_zeros(n), size=(left.size(0), right.size(0)),
            check_invariants=False,
        )  # fmt: skip
        values = torch.sparse.sampled_addmm(pattern, left, right.t(), beta=0.0).values()
    return values.new_zeros(n).scatter(0, order, values)


def pair_scores(decoder: nn.Module, h: Tensor, pairs: Tensor, directory=None) -> Tensor:
    """``[n]`` scores of ``pairs [2, n]`` (dataset ids with a ``directory``, else rows of
    ``h``): both endpoints' rows from one :func:`endpoint_table` call, then the decoder. The
    dot-product and DistMult decoders score without gathering the rows (:func:`dot_scores`)."""
    n = pairs.size(1)
    table, index = endpoint_table(h, pairs.reshape(-1), directory)
    if type(decoder) in (DotProduct, DistMult) and n and table.dtype in _SDDMM_DTYPES:
        left = table * decoder.relation if isinstance(decoder, DistMult) else table
        return dot_scores(left, table, index[:n], index[n:])
    rows = table.index_select(0, index)
    out = decoder(rows[:n], rows[n:])
    return out.view(-1) if out.dim() > 1 else out


_SDDMM_DTYPES = (torch.float32, torch.float64)


__all__ = [
    "DECODERS",
    "LOSSES",
    "DistMult",
    "DotProduct",
    "MLPDecoder",
    "check_decoder",
    "check_loss",
    "dot_scores",
    "endpoint_rows",
    "endpoint_table",
    "link_loss",
    "loss_terms",
    "make_decoder",
    "pair_scores",
]

"""MRR and Hits@K computed where the scores are equal ogb.linkproppred.Evaluator; decoders
and losses."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lightning_gnn_dist.nn.link import check_decoder, link_loss, make_decoder
from lightning_gnn_dist.nn.link_metrics import LinkRankMetrics, check_metrics
from tests.distributed import run_ranks

os.environ.setdefault("OUTDATED_IGNORE", "1")
ogb = pytest.importorskip("ogb.linkproppred")


def _scores(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    pos = torch.randint(0, 20, (60,), generator=gen).float()  # integers: ties happen
    neg = torch.randint(0, 20, (60, 30), generator=gen).float()
    return pos, neg


def _ogb(pos, neg):
    mrr = ogb.Evaluator("ogbl-citation2").eval({"y_pred_pos": pos, "y_pred_neg": neg})
    out = {"mrr": float(mrr["mrr_list"].mean())}
    for k in (10, 50, 2000):
        evaluator = ogb.Evaluator("ogbl-collab")
        evaluator.K = k
        out[f"hits@{k}"] = evaluator.eval({"y_pred_pos": pos, "y_pred_neg": neg.reshape(-1)})[
            f"hits@{k}"
        ]
    return out


def _on_ranks(rank, world_size):
    pos, neg = _scores()
    mine = torch.arange(rank, 60, world_size)  # each rank holds some positives and their negatives
    metrics = LinkRankMetrics(["mrr", "hits@10", "hits@50", "hits@2000"])
    for chunk in torch.tensor_split(mine, 3):  # several batches
        metrics.update(pos[chunk], neg[chunk])
    return metrics.compute()


@pytest.mark.parametrize("world_size", [1, 3])
def test_distributed_metrics_equal_ogb_evaluator(world_size):
    expected = _ogb(*_scores())
    results = run_ranks(_on_ranks, world_size) if world_size > 1 else [_on_ranks(0, 1)]
    for result in results:
        for name, value in expected.items():
            assert result[name] == pytest.approx(value, abs=1e-6), name
    assert expected["hits@2000"] == 1.0  # fewer negatives than K, as OGB


def test_pool_negatives_and_metric_names():
    pos, neg = _scores(1)
    metrics = LinkRankMetrics(["hits@20"])
    metrics.update(pos[:30], pool=neg[:10].reshape(-1))
    metrics.update(pos[30:], pool=neg[10:].reshape(-1))
    evaluator = ogb.Evaluator("ogbl-ddi")
    assert metrics.compute()["hits@20"] == pytest.approx(
        evaluator.eval({"y_pred_pos": pos, "y_pred_neg": neg.reshape(-1)})["hits@20"]
    )
    with pytest.raises(ValueError, match="undefined link metric 'hits@0'"):
        check_metrics(["mrr", "hits@0"])


def test_losses_match_their_definitions():
    pos, neg = torch.randn(5), torch.randn(5, 3)
    total, terms = link_loss("bce", pos, neg)
    scores = torch.cat([pos, neg.reshape(-1)])
    labels = torch.cat([torch.ones(5), torch.zeros(15)])
    assert terms == 20
    assert total / terms == pytest.approx(float(F.binary_cross_entropy_with_logits(scores, labels)))
    total, terms = link_loss("contrastive", pos, neg)
    ce = F.cross_entropy(torch.cat([pos.unsqueeze(1), neg], 1), torch.zeros(5, dtype=torch.long))
    assert terms == 5 and total / terms == pytest.approx(float(ce))
    total, _ = link_loss("bpr", pos, neg)
    assert total == pytest.approx(float(-F.logsigmoid(pos.unsqueeze(1) - neg).sum()), rel=1e-5)
    valid = torch.zeros(5, 3, dtype=torch.bool)
    total, terms = link_loss("margin", pos, neg, valid)
    assert float(total) == 0.0 and terms == 15


def test_decoders_and_a_decoder_that_does_not_fit():
    h = torch.randn(4, 6)
    assert torch.allclose(make_decoder("dot", 6)(h, h), (h * h).sum(1))
    assert make_decoder("distmult", 6)(h, h).shape == (4,)
    assert make_decoder("mlp", 6, hidden_channels=8)(h, h).shape == (4,)

    class Wide(nn.Module):
        def forward(self, a, b):
            return torch.cat([a, b], 1)

    with pytest.raises(ValueError, match=r"decoder Wide returns \(3, 12\) for 3 pairs"):
        check_decoder(Wide(), 6)
    with pytest.raises(ValueError, match="undefined decoder 'cosine'"):
        make_decoder("cosine", 6)


def test_sampled_dot_scores_equal_gathered_rows_with_their_gradients():
    from lightning_gnn_dist.nn.link import DistMult, pair_scores

    gen = torch.Generator().manual_seed(0)
    h = torch.randn(30, 5, generator=gen, requires_grad=True)
    pairs = torch.randint(0, 30, (2, 200), generator=gen)
    pairs[:, :5] = torch.tensor([[3], [4]])  # repeated pairs
    weight = torch.randn(200, generator=gen)
    for decoder in (make_decoder("dot", 5), DistMult(5)):
        if isinstance(decoder, DistMult):
            decoder.relation.data.uniform_(0.5, 1.5, generator=gen)
        fast = pair_scores(decoder, h, pairs)
        (fast * weight).sum().backward()
        fast_grad, h.grad = h.grad.clone(), None
        slow = decoder(h[pairs[0]], h[pairs[1]])  # the decoder's own forward: gathered rows
        (slow * weight).sum().backward()
        assert torch.allclose(fast, slow, atol=1e-5)
        assert torch.allclose(fast_grad, h.grad, atol=1e-5)
        h.grad = None

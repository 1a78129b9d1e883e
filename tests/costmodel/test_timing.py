import pytest

from lightning_gnn_dist.costmodel.timing import best_round


@pytest.mark.parametrize(
    "blocks, seconds",
    [
        ([[0.088, 0.087, 0.090], [0.058, 0.059, 0.120]], 0.059),  # a slow first block is dropped
        ([[0.05, 0.40, 0.06]], 0.06),  # one slow step of a block is not its figure
        ([[0.07, 0.07, 0.07], [0.07, 0.07, 0.07]], 0.07),
    ],
)
def test_a_candidate_is_timed_by_its_best_round_median(blocks, seconds):
    assert best_round(blocks) == pytest.approx(seconds)

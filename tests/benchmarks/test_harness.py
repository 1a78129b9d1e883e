"""The benchmark harness's arithmetic and the committed tables (no benchmark runs here)."""

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness.rounds import interleaved, pooled_median, ratio, ratio_cell, run_rounds

REPO = Path(__file__).resolve().parents[2]


def test_rounds_alternate_direction():
    order = list(interleaved(["a", "b", "c"], 3))
    assert order == [
        (0, "a"), (0, "b"), (0, "c"),
        (1, "c"), (1, "b"), (1, "a"),
        (2, "a"), (2, "b"), (2, "c"),
    ]  # fmt: skip


def test_run_rounds_calls_each_variant_once_per_round_in_order():
    calls = []
    results = run_rounds({"a": lambda r: calls.append(("a", r)) or r, "b": lambda r: -r}, 2)
    assert results == {"a": [0, 1], "b": [0, -1]}
    assert calls == [("a", 0), ("a", 1)]


def test_ratio_is_of_pooled_medians_with_the_per_round_range():
    variant = [[2.0, 4.0], [3.0]]
    baseline = [[1.0, 1.0], [2.0]]
    r = ratio(variant, baseline)
    assert r.value == pytest.approx(pooled_median(variant) / pooled_median(baseline))
    assert r.value == pytest.approx(3.0 / 1.0)
    assert r.per_round == (3.0, 1.5)
    assert (r.low, r.high) == (1.5, 3.0)
    assert r.cell() == "3.00 (1.50–3.00)"
    assert ratio_cell(0.5) == "0.50"


def test_committed_tables_render_from_their_json():
    """``render-all --check``: every committed markdown table equals its JSON's rendering."""
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "render-all", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]

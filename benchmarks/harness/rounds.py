"""Interleaved repeats of named variants, pooled medians and per-round ratios.

A benchmark compares variants (A, B, C …) measured in the same invocation. Each *round* runs every
variant once; round ``r`` runs them forwards when ``r`` is even and backwards when it is odd
(A B C, C B A, A B C …), so a slow drift of the machine's load (other jobs starting, thermal
limits) falls on every variant alike. A variant's samples are pooled over its rounds for the
median; a ratio against a baseline variant is the ratio of pooled medians, and its range is the
smallest and largest ratio between the two variants' samples of the same round.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

#: Samples of one variant: one list per round (e.g. the epoch seconds of one fit).
Samples = Sequence[Sequence[float]]


def interleaved(variants: Sequence[K], rounds: int) -> Iterator[tuple[int, K]]:
    """``(round, variant)`` in run order: forwards in even rounds, backwards in odd ones."""
    for r in range(rounds):
        for variant in variants if r % 2 == 0 else list(reversed(variants)):
            yield r, variant


def run_rounds(
    variants: Mapping[K, Callable[[int], T]],
    rounds: int,
    on_result: Callable[[int, K, T], None] | None = None,
) -> dict[K, list[T]]:
    """Call every variant once per round in :func:`interleaved` order.

    Args:
        variants: name → ``measure(round)``; the round index lets a variant pick a seed.
        rounds: rounds to run (``--repeats``).
        on_result: called with ``(round, name, result)`` after each call (progress, saving).

    Returns:
        name → the results of its calls, in round order.
    """
    results: dict[K, list[T]] = {name: [] for name in variants}
    for r, name in interleaved(list(variants), rounds):
        result = variants[name](r)
        results[name].append(result)
        if on_result is not None:
            on_result(r, name, result)
    return results


def pooled(samples: Samples) -> list[float]:
    """Every round's samples in one list."""
    return [value for round_samples in samples for value in round_samples]


def pooled_median(samples: Samples) -> float:
    """Median over the samples of every round (same unit as the samples)."""
    return statistics.median(pooled(samples))


@dataclass(frozen=True)
class Ratio:
    """``value``: pooled median of a variant ÷ pooled median of its baseline; ``per_round``: the
    same ratio within each round (rounds where either side has no sample are left out)."""

    value: float
    per_round: tuple[float, ...]

    @property
    def low(self) -> float:
        return min(self.per_round, default=self.value)

    @property
    def high(self) -> float:
        return max(self.per_round, default=self.value)

    def cell(self, digits: int = 2) -> str:
        """``0.68 (0.60–0.75)``: the ratio and, with two rounds or more, its per-round range."""
        return ratio_cell(self.value, self.per_round, digits)

    def as_dict(self) -> dict[str, Any]:
        return {"ratio": self.value, "per_round": list(self.per_round)}


def ratio(samples: Samples, baseline: Samples) -> Ratio:
    """:class:`Ratio` of two variants' samples, both ``[round][sample]`` from the same rounds."""
    per_round = tuple(
        statistics.median(a) / statistics.median(b)
        for a, b in zip(samples, baseline, strict=True)
        if a and b
    )
    return Ratio(pooled_median(samples) / pooled_median(baseline), per_round)


def ratio_cell(value: float, per_round: Sequence[float] = (), digits: int = 2) -> str:
    """``0.68 (0.60–0.75)`` for a ratio with its per-round range; just ``0.68`` with fewer than two
    rounds (reports written before the harness hold no per-round values)."""
    if len(per_round) < 2:
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} ({min(per_round):.{digits}f}–{max(per_round):.{digits}f})"

"""Validation of user options: each check returns the value (normalised) or raises one
``ValueError`` naming the option, the value it got and what it accepts.

``bool`` is never an integer or a number here (``batch_size=True`` is a mistake), and numbers
must be finite unless a bound says otherwise.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _range(low, high) -> str:
    if high is None:
        return f">= {low}"
    if low is None:
        return f"<= {high}"
    return f"in [{low}, {high}]"


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an ``int`` within ``[low, high]`` (``None``: unbounded)."""
    if (
        not _is_int(value)
        or (low is not None and value < low)
        or (high is not None and value > high)
    ):
        bound = "" if low is None and high is None else " " + _range(low, high)
        raise ValueError(f"{name} must be an integer{bound} (got {value!r})")
    return int(value)


def check_number(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
) -> float:
    """``value`` as a finite ``float`` within ``[low, high]`` (``(low, high]`` with
    ``low_open``)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        bound = "" if low is None and high is None else " " + _range(low, high)
        if low_open:
            bound = f" > {low}" + (f" and <= {high}" if high is not None else "")
        raise ValueError(f"{name} must be a finite number{bound} (got {value!r})")
    return float(value)


def check_bool(name: str, value: Any) -> bool:
    """``value`` if it is a ``bool`` (``"yes"``, ``1`` or ``"false"`` are refused: the caller
    must say ``True`` or ``False``)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False (got {value!r})")
    return value


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """``value`` if it is one of ``choices``."""
    choices = list(choices)
    if not any(value is c or (type(value) is type(c) and value == c) for c in choices):
        listed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {listed} (got {value!r})")
    return value


def check_keywords(
    owner: str, given: Iterable[str], valid: Sequence[str], refused: dict[str, str] | None = None
) -> None:
    """Refuse keyword arguments ``owner`` does not take: the first unknown one is named with the
    closest valid name and the list of valid ones; ``refused`` maps names that exist upstream
    but have no effect here to the reason."""
    for key in given:
        if refused and key in refused:
            raise ValueError(f"{owner} does not take {key!r}: {refused[key]}")
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"{owner} got an unknown keyword argument {key!r}{hint}; valid: {', '.join(valid)}"
            )

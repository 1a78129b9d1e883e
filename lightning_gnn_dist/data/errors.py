"""The one exception of the data layer: a dataset file, spec or size that cannot work."""

from __future__ import annotations


class DatasetError(ValueError):
    """A dataset file or spec is malformed, or the graph cannot fit.

    The message names the file (or spec), the 1-based line where known and what is wrong, e.g.
    ``"/tmp/g.graph:3: vertex id 9 out of range 1..5"``.
    """

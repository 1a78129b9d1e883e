"""The command line, ``python -m lightning_gnn_dist COMMAND``: see :func:`main`."""

from lightning_gnn_dist.cli.entry import main
from lightning_gnn_dist.cli.partition import parse_options

__all__ = ["main", "parse_options"]

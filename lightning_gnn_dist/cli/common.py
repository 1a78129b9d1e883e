"""What every command of ``python -m lightning_gnn_dist`` shares: one-line usage errors, tables
that are never truncated."""

from __future__ import annotations

import argparse
from typing import NoReturn

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

PROG = "python -m lightning_gnn_dist"
LIGHTNING_COMMANDS = {
    "fit": "train with the LightningCLI: fit --config FILE.yaml (see fit --help)",
    "validate": "validate a checkpoint: validate --config FILE.yaml --ckpt_path CKPT",
    "test": "test a checkpoint: test --config FILE.yaml --ckpt_path CKPT",
    "predict": "predict with a checkpoint and a PredictionWriter callback",
}
"""The LightningCLI subcommands (:mod:`lightning_gnn_dist.lightning.cli`) and their one-line help."""
OTHER_COMMANDS = {
    "emulate": "run a multi-node command on an emulated cluster on this machine (emulate --help)",
    "probe": "measure bandwidth and latency between the ranks it runs on (probe --help)",
}
"""Commands with parsers of their own (:mod:`.emulate`, :mod:`.probe`), listed in ``--help``."""


class OneLineErrorParser(argparse.ArgumentParser):
    """Usage errors as one ``error: ...`` line on stderr and exit code 2 (argparse would print
    the whole usage block first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def print_table(console: Console, table: Table) -> None:
    """Print ``table``; when stdout is not a terminal (a pipe, a file) widen the console so that
    no column is truncated to ``…`` (rich assumes 80 columns there)."""
    if not console.is_terminal:
        unbounded = console.options.update_width(1 << 16)
        console.width = max(console.width, Measurement.get(console, unbounded, table).maximum)
    console.print(table)

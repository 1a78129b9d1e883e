"""``python -m lightning_gnn_dist``: the command dispatcher.

``partition`` and ``partition-compare`` are argparse commands (:mod:`.partition`);
``fit|validate|test|predict`` are the LightningCLI (:mod:`lightning_gnn_dist.lightning.cli`);
``emulate`` runs a command on an emulated cluster (:mod:`.emulate`); ``probe`` measures the
network between the ranks it runs on (:mod:`.probe`).
Bad input ends with exit code 2 and one ``error: ...`` line on stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from lightning_gnn_dist.cli.common import LIGHTNING_COMMANDS
from lightning_gnn_dist.cli.partition import run_partition_command


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; ``argv`` defaults to ``sys.argv[1:]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in LIGHTNING_COMMANDS:
        from lightning_gnn_dist.lightning.cli import CLIError, run_lightning_cli

        # LightningCLI reads sys.argv itself; passing it again as `args` only triggers a warning.
        try:
            run_lightning_cli(None if argv is None else args)
        except CLIError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    try:
        if args and args[0] == "emulate":
            from lightning_gnn_dist.cli.emulate import run_emulate_command

            return run_emulate_command(args[1:])
        if args and args[0] == "probe":
            from lightning_gnn_dist.cli.probe import run_probe_command

            return run_probe_command(args[1:])
        return run_partition_command(args)
    except (ValueError, OSError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except MemoryError:
        print(
            "error: out of memory; use a smaller dataset or a machine with more memory",
            file=sys.stderr,
        )
        return 2

"""``python -m lightning_gnn_dist.cli.torchrun TORCHRUN-ARGS``: ``torchrun`` for one node of
``emulate`` (:mod:`.emulate`), quiet about failures, because ``emulate`` reports them.

Plain ``torchrun`` answers a failed rank with its agent's log line and a ``ChildFailedError``
traceback (about 40 lines per node) that repeat, without the cause, what the ranks wrote into
``emulate``'s report folder. Here the agent logs nothing below ``CRITICAL``, a rank killed by a
signal gets a report of its own (``killed by SIGKILL``: it could not write one), and the node
exits with the first failed rank's exit code (``128 + N`` for signal ``N``), or ``128 + N`` when
the agent itself was ended by signal ``N`` (``emulate`` stopping the node).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from lightning_gnn_dist.lightning.reports import ENV_JOB_REPORT_DIR, FailureReport


def _report_killed_ranks(failures: dict, folder: Path) -> None:
    """A report for every rank that a signal ended without one (``failures``: torch's
    ``ChildFailedError.failures``, global rank → ``ProcessFailure``)."""
    reported = {report.rank for report in FailureReport.read_all(folder)}
    for rank, failure in failures.items():
        if failure.exitcode < 0 and rank not in reported:
            name = signal.Signals(-failure.exitcode).name
            FailureReport(rank, f"killed by {name}", time=failure.timestamp).write(folder)


def main(argv: Sequence[str] | None = None) -> int:
    """Run torchrun with ``argv`` (default: ``sys.argv[1:]``); returns the node's exit code."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed.elastic"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        run(parse_args(list(sys.argv[1:] if argv is None else argv)))
    except ChildFailedError as error:
        folder = os.environ.get(ENV_JOB_REPORT_DIR)
        if folder:
            _report_killed_ranks(error.failures, Path(folder))
        _, first = error.get_first_failure()
        return 128 - first.exitcode if first.exitcode < 0 else first.exitcode
    except SignalException as error:  # the agent was ended (emulate stops the node)
        return 128 + int(error.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())

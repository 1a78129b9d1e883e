"""``python -m lightning_gnn_dist``: ``--help`` and usage errors of the project's own commands
answer before torch or Lightning load (issue 29, item 9). Asserted on ``sys.modules`` in a fresh
interpreter, not on a time; ``fit --help`` is the LightningCLI's and loads Lightning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "lightning", "pytorch_lightning", "torch_geometric", "numpy")


def _run(args: list[str], tmp_path: Path, setup: str = "") -> tuple[int, list[str], str]:
    """Run the package as ``python -m lightning_gnn_dist ARGS`` does (the package is imported,
    then its ``__main__``) after ``setup``; the exit code, the heavy modules loaded, the output."""
    report = tmp_path / "report.json"
    script = (
        "import json, runpy, sys\n"
        "report, setup, args = sys.argv[1], sys.argv[2], sys.argv[3:]\n"
        "exec(setup)\n"
        "sys.argv = ['lightning_gnn_dist', *args]\n"
        "try:\n"
        "    runpy.run_module('lightning_gnn_dist', run_name='__main__', alter_sys=True)\n"
        "    code = 0\n"
        "except SystemExit as exit_:\n"
        "    code = exit_.code\n"
        f"heavy = sorted({{n.split('.')[0] for n in sys.modules}} & set({HEAVY!r}))\n"
        "open(report, 'w').write(json.dumps([code, heavy]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run(
        [sys.executable, "-c", script, str(report), setup, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    code, heavy = json.loads(report.read_text())
    return code, heavy, result.stdout + result.stderr


# Without CAP_NET_ADMIN/CAP_SYS_ADMIN (a login node): emulate's privilege check.
_NO_PRIVILEGES = (
    "from lightning_gnn_dist.testing import cluster\ncluster._effective_capabilities = lambda: 0"
)


@pytest.mark.parametrize(
    "args, code, expected, setup",
    [
        (["--help"], 0, "partition-compare", ""),
        (["partition", "--help"], 0, "--placement", ""),
        (["partition-compare", "--help"], 0, "--auto", ""),
        (["emulate", "--help"], 0, "--nodes", ""),
        (["probe", "--help"], 0, "--sizes", ""),
        (["bogus"], 2, "invalid choice: 'bogus'", ""),
        (["partition", "--num-parts", "x"], 2, "invalid int value: 'x'", ""),
        (["partition", "-p", "2", "--method", "kmeans"], 2, "invalid choice: 'kmeans'", ""),
        (["partition", "-p", "2", "--force"], 2, "--force rebuilds", ""),
        (["partition", "-p", "4", "--nodes", "3"], 2, "--nodes 3: give a divisor", ""),
        (["partition", "-p", "2", "--option", "nokey"], 2, "--option 'nokey'", ""),
        (["partition-compare", "-p", "2", "--placement", "x"], 2, "unrecognized arguments", ""),
        (["emulate", "--nodes", "x"], 2, "invalid int value: 'x'", ""),
        (["emulate", "--nodes", "2"], 2, "give the command to run after --", ""),
        (["emulate", "--nodes", "2", "--bandwidth", "fast", "--", "fit"], 2, "bandwidth", ""),
        (["emulate", "--nodes", "2", "--", "fit"], 2, "needs root privileges", _NO_PRIVILEGES),
        (["probe", "--sizes", "64,big"], 2, "--sizes '64,big'", ""),
        (["probe"], 2, "torchrun", ""),
    ],
)
def test_help_and_usage_errors_load_no_torch(tmp_path, args, code, expected, setup):
    got, heavy, out = _run(args, tmp_path, setup)
    assert got == code, out
    assert expected in out
    assert heavy == [], f"{' '.join(args)} imported {heavy}"
    if code == 2:
        assert len(out.strip().splitlines()) == 1 and out.startswith("error: "), out


def test_the_parsers_choices_are_the_registries():
    """The choices written out in the parser (so that it needs no torch) are the real ones."""
    from lightning_gnn_dist.cli import partition as command
    from lightning_gnn_dist.costmodel.plan import AUTO_METHODS
    from lightning_gnn_dist.partition import PARTITIONERS
    from lightning_gnn_dist.partition.compare import DEFAULT_METHODS
    from lightning_gnn_dist.partition.placement import PLACEMENTS

    assert command.METHODS == tuple(sorted(PARTITIONERS))
    assert command.DEFAULT_METHODS == tuple(DEFAULT_METHODS)
    assert command.AUTO_METHODS == tuple(AUTO_METHODS)
    assert command.PLACEMENTS == tuple(PLACEMENTS)

"""The examples run: ``examples/existing_module.py`` trains single-process and with ``gnn_ddp``,
and every ``examples/*.yaml`` parses with LightningCLI.

Everything runs in a subprocess: the ``gnn_ddp`` (popen) launcher re-executes the script for rank
1 and writes ``LOCAL_RANK`` into the environment, which must not happen in the pytest process.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
CONFIGS = sorted(EXAMPLES.glob("*.yaml"))
TIMEOUT = 180

# Variables a launcher sets; inherited by the example they would make it act as a child rank.
LAUNCHER_VARIABLES = (
    "LOCAL_RANK",
    "NODE_RANK",
    "WORLD_SIZE",
    "GLOBAL_RANK",
    "RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "PL_GLOBAL_SEED",
    "PL_SEED_WORKERS",
)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", LGD_PROGRESS="0")
    # The package importable without an installed copy (the example runs from a temporary cwd).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` in its own session; on timeout kill the whole group (the rank-1
    process the launcher started included) and fail."""
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=cwd,
        env=_env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"{' '.join(args)} did not finish in {TIMEOUT} s:\n{_tail(stdout, stderr)}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _tail(stdout: str, stderr: str) -> str:
    return f"--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-3000:]}"


@pytest.mark.slow
def test_existing_module_single_process_then_gnn_ddp(tmp_path):
    # Dropout off: the distributed run then computes the same updates as the single-process one.
    script = str(EXAMPLES / "existing_module.py")
    result = _run([script, "--mode", "both", "--epochs", "5", "--dropout", "0"], cwd=tmp_path)
    assert result.returncode == 0, _tail(result.stdout, result.stderr)

    single = re.findall(r"^single-process test accuracy: ([0-9.]+)$", result.stdout, re.M)
    dist = re.findall(
        r"^distributed \(gnn_ddp, 2 processes\) test accuracy: ([0-9.]+)$", result.stdout, re.M
    )
    # Exactly once each: the rank-1 process (a re-run of the script) neither repeats the
    # single-process part nor prints.
    assert len(single) == 1 and len(dist) == 1, _tail(result.stdout, result.stderr)
    single_acc, dist_acc = float(single[0]), float(dist[0])
    assert 0.2 < single_acc <= 1.0  # 10 classes: chance is 0.1; 5 epochs reach ~0.6
    assert abs(single_acc - dist_acc) <= 0.01  # equal up to a few float-rounding argmax flips
    # The partition store went under the cwd, for 2 parts.
    (store,) = (tmp_path / "partitions").glob("digits-hypergraph-p2-s0-e0.03-*")
    assert (store / "meta.json").is_file()


def test_examples_exist():
    assert (EXAMPLES / "existing_module.py").is_file()
    assert {p.name for p in CONFIGS} >= {
        "gcn_digits.yaml",
        "graphsage_digits.yaml",
        "gat_digits.yaml",
    }


@pytest.mark.parametrize("config", CONFIGS, ids=[p.name for p in CONFIGS])
def test_config_parses(config, tmp_path):
    result = _run(
        ["-m", "lightning_gnn_dist", "fit", "--config", str(config), "--print_config"], tmp_path
    )
    assert result.returncode == 0, _tail(result.stdout, result.stderr)
    printed = yaml.safe_load(result.stdout)
    written = yaml.safe_load(config.read_text())
    for section in ("model", "data"):
        for key, value in written[section].items():
            assert printed[section][key] == value, (section, key)
    strategy, shown = written["trainer"]["strategy"], printed["trainer"]["strategy"]
    if isinstance(strategy, dict):  # class_path form: the printout adds every default argument
        assert shown["class_path"] == strategy["class_path"]
        assert strategy.get("init_args", {}).items() <= shown["init_args"].items()
    else:
        assert shown == strategy
    assert printed["trainer"]["devices"] == written["trainer"]["devices"]


def test_misspelt_config_key_is_rejected(tmp_path):
    """--print_config validates: an unknown model argument fails instead of printing."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (EXAMPLES / "gcn_digits.yaml").read_text().replace("hidden_channels:", "hidden_channel:")
    )
    result = _run(
        ["-m", "lightning_gnn_dist", "fit", "--config", str(bad), "--print_config"], tmp_path
    )
    assert result.returncode != 0
    assert "hidden_channel" in result.stderr

"""Both hypergraph backends run in a child process: KaHyPar's ways of ending a process, a crash
or a hang must reach us as RuntimeError.

Each test asserts something *after* the failing call: if KaHyPar ended the pytest process
(exit 0 or 255), the test would never get there and the run would stop short.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from lightning_gnn_dist.data.graph import canonicalize
from lightning_gnn_dist.partition import column_net_hypergraph
from lightning_gnn_dist.partition.backends import kahypar as kahypar_backend
from lightning_gnn_dist.partition.backends import mtkahypar as mtkahypar_backend
from lightning_gnn_dist.partition.backends._child import WORKER

pytest.importorskip("kahypar")

CONFIG = kahypar_backend.DEFAULT_CONFIG


@pytest.fixture(scope="module")
def hypergraph():
    """Column-net hypergraph of a 12-vertex cycle."""
    src = torch.arange(12)
    dst = (src + 1) % 12
    edge_index = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
    return column_net_hypergraph(canonicalize(Data(edge_index=edge_index, num_nodes=12)))


@pytest.mark.parametrize("backend", [kahypar_backend, mtkahypar_backend], ids=["kahypar", "mt"])
def test_good_call_is_valid_and_deterministic(hypergraph, backend) -> None:
    first = backend.partition_hypergraph(hypergraph, 3, 0.03, seed=11)
    second = backend.partition_hypergraph(hypergraph, 3, 0.03, seed=11)
    assert first.dtype == np.int64 and first.shape == (12,)
    assert set(first.tolist()) == {0, 1, 2}
    np.testing.assert_array_equal(first, second)


def test_our_config_is_complete() -> None:
    """Every key kahypar needs is present: the ones whose absence exits 255, hangs or raises."""
    keys = {
        line.split("=", 1)[0].strip()
        for line in CONFIG.read_text().splitlines()
        if "=" in line and not line.lstrip().startswith("#")
    }
    required = {
        "mode", "objective", "p-louvain-edge-weight", "c-type", "c-rating-score",
        "c-rating-use-communities", "c-rating-heavy_node_penalty",
        "c-rating-acceptance-criterion", "c-fixed-vertex-acceptance-criterion", "i-mode",
        "i-technique", "i-c-type", "i-c-rating-score", "i-c-rating-use-communities",
        "i-c-rating-heavy_node_penalty", "i-c-rating-acceptance-criterion",
        "i-c-fixed-vertex-acceptance-criterion", "i-algo", "i-runs", "i-bp-algorithm",
        "i-r-type", "i-r-fm-stop", "r-type", "r-fm-stop", "r-flow-execution-policy",
    }  # fmt: skip
    assert required <= keys
    assert "objective=km1" in CONFIG.read_text() and "mode=direct" in CONFIG.read_text()


def test_missing_config_raises(hypergraph, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.ini"
    with pytest.raises(RuntimeError, match=r"exit status 2.*does not exist"):
        kahypar_backend.partition_hypergraph(hypergraph, 2, 0.03, 0, config=missing)
    assert kahypar_backend.partition_hypergraph(hypergraph, 2, 0.03, 0).shape == (12,)


def test_incomplete_config_exit_255_raises(hypergraph, tmp_path: Path) -> None:
    """Without ``c-type`` kahypar calls exit(255) (it would end the caller's process)."""
    incomplete = tmp_path / "incomplete.ini"
    lines = [line for line in CONFIG.read_text().splitlines() if not line.startswith("c-type=")]
    incomplete.write_text("\n".join(lines) + "\n")
    with pytest.raises(RuntimeError, match="exit status 255") as raised:
        kahypar_backend.partition_hypergraph(hypergraph, 2, 0.03, 0, config=incomplete)
    assert "ini" in str(raised.value)
    assert sys.modules["lightning_gnn_dist.partition.backends.kahypar"] is kahypar_backend


def test_corrupt_config_raises(hypergraph, tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.ini"
    corrupt.write_bytes(b"\x00\xff[[[ not an ini\nmode=\n")
    with pytest.raises(RuntimeError, match="exit status") as raised:
        kahypar_backend.partition_hypergraph(hypergraph, 2, 0.03, 0, config=corrupt)
    assert "invalid line" in str(raised.value)


def test_child_exiting_zero_without_output_raises(hypergraph, monkeypatch) -> None:
    """The reused-Context trap for real: kahypar prompts, reads EOF and calls exit(0)."""
    reuse_context = f"""
import kahypar
context = kahypar.Context()
context.loadINIconfiguration({str(CONFIG)!r})
context.setK(2); context.setEpsilon(0.03); context.setSeed(0); context.suppressOutput(True)
for _ in range(2):
    hypergraph = kahypar.Hypergraph(4, 2, [0, 2, 4], [0, 1, 2, 3], 2, [1, 1], [1, 1, 1, 1])
    kahypar.partition(hypergraph, context)
raise SystemExit(3)  # not reached: the second partition() ends the process with status 0
"""
    monkeypatch.setattr(
        kahypar_backend, "_worker_command", lambda *args: [sys.executable, "-c", reuse_context]
    )
    with pytest.raises(RuntimeError, match="status 0 but wrote no partition"):
        kahypar_backend.partition_hypergraph(hypergraph, 2, 0.03, 0)
    monkeypatch.setattr(
        kahypar_backend, "_worker_command", lambda *args: [sys.executable, "-c", "pass"]
    )
    with pytest.raises(RuntimeError, match="wrote no partition"):
        kahypar_backend.partition_hypergraph(hypergraph, 2, 0.03, 0)
    assert hypergraph.num_vertices == 12


def test_timeout_kills_the_child(hypergraph, monkeypatch) -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.setattr(kahypar_backend, "_worker_command", lambda *args: sleeper)
    with pytest.raises(RuntimeError, match=r"did not finish within 1\.0 s"):
        kahypar_backend.partition_hypergraph(hypergraph, 2, 0.03, 0, timeout=1.0)
    assert hypergraph.num_vertices == 12


def test_malformed_output_raises(hypergraph, monkeypatch) -> None:
    def command(input_path, output_path, *args):
        write = f"import numpy; numpy.save({str(output_path)!r}, numpy.zeros(3, 'int64'))"
        return [sys.executable, "-c", write]

    monkeypatch.setattr(kahypar_backend, "_worker_command", command)
    with pytest.raises(RuntimeError, match=r"\(3,\) part ids for 12 vertices"):
        kahypar_backend.partition_hypergraph(hypergraph, 2, 0.03, 0)


@pytest.mark.parametrize(
    "args",
    [["kahypar", "a.npz"], ["mtkahypar", "a.npz", "b.npy", "2", "0.03", "0", "extra"], ["patoh"]],
)
def test_worker_rejects_bad_arguments(args) -> None:
    child = subprocess.run(
        [sys.executable, str(WORKER), *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert child.returncode == 2 and "expected arguments BACKEND INPUT OUTPUT.npy" in child.stderr


def test_crashing_child_raises(hypergraph, monkeypatch) -> None:
    """KaHyPar 1.3.7 segfaults on a hypergraph without a two-pin net; a crash is an error here."""
    crash = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
    monkeypatch.setattr(kahypar_backend, "_worker_command", lambda *args: crash)
    with pytest.raises(RuntimeError, match="killed by SIGSEGV"):
        kahypar_backend.partition_hypergraph(hypergraph, 2, 0.03, 0)
    assert hypergraph.num_vertices == 12


def test_hypergraph_without_cuttable_nets_skips_kahypar(monkeypatch) -> None:
    """Only one-pin nets (a graph of self loops): dealt round-robin, KaHyPar is never started."""
    loops = torch.arange(7).repeat(2, 1)
    hg = column_net_hypergraph(canonicalize(Data(edge_index=loops, num_nodes=7)))
    monkeypatch.setattr(kahypar_backend, "_worker_command", lambda *args: pytest.fail("started"))
    assignment = kahypar_backend.partition_hypergraph(hg, 3, 0.03, 0)
    np.testing.assert_array_equal(np.bincount(assignment), [3, 2, 2])


# ------------------------------------------------------------------------- Mt-KaHyPar child


def test_mtkahypar_timeout_and_crash_raise(hypergraph, monkeypatch) -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.setattr(mtkahypar_backend, "_worker_command", lambda *args: sleeper)
    with pytest.raises(RuntimeError, match=r"Mt-KaHyPar did not finish within 1\.0 s"):
        mtkahypar_backend.partition_hypergraph(hypergraph, 2, 0.03, 0, timeout=1.0)
    crash = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
    monkeypatch.setattr(mtkahypar_backend, "_worker_command", lambda *args: crash)
    with pytest.raises(RuntimeError, match=r"Mt-KaHyPar failed .*killed by SIGSEGV"):
        mtkahypar_backend.partition_hypergraph(hypergraph, 2, 0.03, 0)
    assert hypergraph.num_vertices == 12

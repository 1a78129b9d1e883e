"""A benchmark's node job on the emulated cluster (:mod:`lightning_gnn_dist.testing`)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness import REPO
from lightning_gnn_dist.testing import EmulatedCluster, run_nodes


def run_on_emulated_nodes(
    nodes: int, rate: str, module: str, args: Sequence[str], port: int
) -> dict:
    """Run ``python -m MODULE ARGS... OUT`` on every node of an emulated cluster of ``nodes``
    nodes (one core each, links shaped to ``rate``; the rendezvous on node 0 at ``port``) and
    return the JSON that node 0 wrote to ``OUT``.

    Raises:
        RuntimeError: a node exited with a non-zero code.
    """
    with tempfile.TemporaryDirectory() as tmp, EmulatedCluster(nodes, rate, cpus_per_node=1) as cl:
        out = Path(tmp) / "node0.json"
        command = [sys.executable, "-m", module, *args, str(out)]
        envs = []
        for i in range(cl.nodes):
            env = cl.node_environment(i)
            env.update(MASTER_ADDR=cl.master_address, MASTER_PORT=str(port))
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
            envs.append(env)
        codes = run_nodes(cl, [cl.exec_prefix(i) + command for i in range(nodes)], envs)
        if any(codes):
            raise RuntimeError(
                f"a node of {module} failed ({nodes} nodes, {rate}): exit codes {codes}"
            )
        return json.loads(out.read_text())

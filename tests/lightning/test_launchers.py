"""Launcher contracts: Lightning's subprocess launcher, torchrun, spawn; predict (failures:
``test_rank_failures.py``)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from lightning_gnn_dist import GraphPartitionDataModule, NodeClassifier, load_predictions
from lightning_gnn_dist.data import load_dataset

SCRIPT = Path(__file__).parent / "scripts" / "train_script.py"
REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHONPATH=str(REPO))
    for key in ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RANK"):
        env.pop(key, None)
    return env


def _run(args, tmp_path, timeout=150):
    # torchrun's agent leaves its ``torchelastic_*`` log folder in TMPDIR: keep it in tmp_path.
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir(exist_ok=True)
    start = time.monotonic()
    proc = subprocess.run(
        args,
        cwd=tmp_path,
        env={**_env(), "TMPDIR": str(tmpdir)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc, time.monotonic() - start


def test_torchrun_two_processes(tmp_path):
    result = tmp_path / "result.json"
    torchrun = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    proc, _ = _run(
        [
            *torchrun,
            str(SCRIPT),
            "--root",
            str(tmp_path / "parts"),
            "--epochs",
            "5",
            "--result",
            str(result),
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    values = json.loads(result.read_text())
    assert values["world_size"] == 2 and values["env_rank"] == "0"
    assert values["val_acc"] > 0.5


def test_predict_writes_every_vertex_once_by_global_id(tmp_path):
    out = tmp_path / "pred"
    proc, _ = _run(
        [
            PYTHON,
            str(SCRIPT),
            "--root",
            str(tmp_path / "parts"),
            "--epochs",
            "2",
            "--predict-dir",
            str(out),
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = sorted(out.glob("predictions-rank*.pt"))
    assert [f.name for f in files] == ["predictions-rank00000.pt", "predictions-rank00001.pt"]
    per_rank = [torch.load(f, weights_only=True)["global_ids"] for f in files]
    assert set(per_rank[0].tolist()).isdisjoint(per_rank[1].tolist())
    ids, logits = load_predictions(out)
    num_nodes = load_dataset("digits").num_nodes
    assert torch.equal(ids, torch.arange(num_nodes))
    assert logits.shape == (num_nodes, 10)


def test_spawn_strategy_two_ranks(tmp_path, lightning):
    """Spawn pickles the module and datamodule into fresh interpreters (the concrete classes of
    the namespace by name); results come back through callback_metrics."""
    pl = lightning
    pl.seed_everything(0)
    trainer = pl.Trainer(
        strategy="gnn_ddp_spawn",
        accelerator="cpu",
        devices=2,
        max_epochs=20,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = NodeClassifier(in_channels=64, num_classes=10)
    trainer.fit(
        model, datamodule=GraphPartitionDataModule("digits", method="random", root=str(tmp_path))
    )
    assert trainer.callback_metrics["val_acc"] > 0.5

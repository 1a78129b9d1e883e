"""A tiny distributed fit driven by command-line flags, for launcher contract tests.

    python train_script.py --root DIR [--devices 2] [--fail-rank R --fail-epoch E]
                           [--fail-how raise|kill|stop|stop-after-fit|abort-after-fit]
                           [--timeout S] [--startup-timeout S]
                           [--delay-rank R --delay S] [--pid-dir DIR]
                           [--predict-dir DIR] [--result FILE]
                           [--dataset SPEC] [--mode full|cd-2|cached|neighbor|subgraph] [--prefetch]
                           [--started FILE]

Run directly (Lightning's subprocess launcher starts the other ranks) or under torchrun.
"""

import argparse
import atexit
import faulthandler
import json
import os
import signal
import time
from pathlib import Path

import pytorch_lightning as pl
import torch.nn.functional as F

from lightning_gnn_dist import (
    GNNStrategy,
    GraphPartitionDataModule,
    NodeClassifier,
    PredictionWriter,
)

MODES = {  # mode: (exchange, datamodule options)
    "full": ("p2p", {}),
    "cd-2": ("cd-2", {}),
    "cached": ("cached", {}),
    "neighbor": ("p2p", {"loader": "neighbor", "num_neighbors": [5, 5], "batch_size": 64}),
    "subgraph": ("p2p", {"loader": "subgraph", "subgraph_size": 0.3, "steps_per_epoch": 3}),
}


class FailingClassifier(NodeClassifier):
    """Fails on ``fail_rank`` at ``fail_epoch``: raises, SIGKILLs or SIGSTOPs itself."""

    def __init__(self, fail_rank: int, fail_epoch: int, fail_how: str = "raise", **kwargs):
        super().__init__(**kwargs)
        self.fail_rank, self.fail_epoch, self.fail_how = fail_rank, fail_epoch, fail_how

    def training_step(self, batch, batch_idx):
        started = os.environ.get("TRAINING_STARTED_FILE")
        if started and self.global_rank == 0 and batch_idx == 0 and self.current_epoch == 1:
            Path(started).write_text(str(time.time()))  # every rank is in its training loop
        failing = self.global_rank == self.fail_rank and not self.fail_how.endswith("-after-fit")
        if failing and self.current_epoch == self.fail_epoch:
            if self.fail_how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.fail_how == "stop":
                if os.environ.get("FAILURE_TIME_FILE"):  # when the rank froze, for the test
                    Path(os.environ["FAILURE_TIME_FILE"]).write_text(str(time.time()))
                os.kill(os.getpid(), signal.SIGSTOP)
            raise RuntimeError(f"deliberate failure on rank {self.global_rank}")
        if "train_mask" not in batch:  # a neighbour batch: the seeds come first
            out = self(batch.x, batch.edge_index)[: batch.batch_size]
            return F.cross_entropy(out, batch.y[: batch.batch_size])
        return super().training_step(batch, batch_idx)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-epoch", type=int, default=1)
    parser.add_argument(
        "--fail-how",
        choices=["raise", "kill", "stop", "stop-after-fit", "abort-after-fit"],
        default="raise",
    )
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--startup-timeout", type=float, default=300)
    parser.add_argument("--delay-rank", type=int, default=-1)
    parser.add_argument("--delay", type=float, default=0)
    parser.add_argument("--pid-dir")
    parser.add_argument("--predict-dir")
    parser.add_argument("--result")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--mode", choices=list(MODES), default="full")
    parser.add_argument("--prefetch", action="store_true")
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # where a rank hangs, for the tests
    if args.pid_dir:
        Path(args.pid_dir, f"rank-{local_rank}.pid").write_text(str(os.getpid()))
    if local_rank == args.delay_rank:
        time.sleep(args.delay)  # a rank that is slow to start (a loaded machine)

    pl.seed_everything(0)
    exchange, data_options = MODES[args.mode]
    if args.prefetch:
        data_options = {**data_options, "prefetch": True}
    model = FailingClassifier(args.fail_rank, args.fail_epoch, args.fail_how)
    trainer = pl.Trainer(
        strategy=GNNStrategy(
            exchange=exchange, timeout=args.timeout, startup_timeout=args.startup_timeout
        ),
        accelerator="cpu",
        devices=args.devices,
        max_epochs=args.epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[PredictionWriter(args.predict_dir)] if args.predict_dir else [],
        limit_val_batches=0 if args.mode == "neighbor" else None,
    )
    method = "vertex-cut" if exchange.startswith("cd-") else "metis"
    datamodule = GraphPartitionDataModule(
        args.dataset, method=method, root=args.root, **data_options
    )
    trainer.fit(model, datamodule=datamodule)
    if args.fail_how == "stop-after-fit" and trainer.global_rank == args.fail_rank:
        os.kill(os.getpid(), signal.SIGSTOP)  # frozen after the last collective
    if args.fail_how == "abort-after-fit" and trainer.global_rank == args.fail_rank:
        atexit.register(os.abort)  # dies of SIGABRT in its shutdown, after a successful fit
    if args.predict_dir:
        trainer.predict(model, datamodule=datamodule, return_predictions=False)
    if args.result and trainer.is_global_zero:
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        with open(args.result, "w") as handle:
            json.dump(
                {"world_size": trainer.world_size, "env_rank": os.environ.get("RANK"), **metrics},
                handle,
            )


if __name__ == "__main__":
    main()

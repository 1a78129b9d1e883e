"""A tiny distributed fit driven by command-line flags, for launcher contract tests.

    python train_script.py --root DIR [--devices 2] [--fail-rank R --fail-epoch E] [--timeout S]
                           [--predict-dir DIR] [--result FILE]

Run directly (Lightning's subprocess launcher starts the other ranks) or under torchrun.
"""

import argparse
import json
import os

import pytorch_lightning as pl

from lightning_gnn_dist import (
    GNNStrategy,
    GraphPartitionDataModule,
    NodeClassifier,
    PredictionWriter,
)


class FailingClassifier(NodeClassifier):
    def __init__(self, fail_rank: int, fail_epoch: int, **kwargs):
        super().__init__(**kwargs)
        self.fail_rank, self.fail_epoch = fail_rank, fail_epoch

    def training_step(self, batch, batch_idx):
        if self.global_rank == self.fail_rank and self.current_epoch == self.fail_epoch:
            raise RuntimeError(f"deliberate failure on rank {self.global_rank}")
        return super().training_step(batch, batch_idx)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-epoch", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--predict-dir")
    parser.add_argument("--result")
    args = parser.parse_args()

    pl.seed_everything(0)
    model = FailingClassifier(args.fail_rank, args.fail_epoch, in_channels=64, num_classes=10)
    trainer = pl.Trainer(
        strategy=GNNStrategy(timeout=args.timeout),
        accelerator="cpu",
        devices=args.devices,
        max_epochs=args.epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[PredictionWriter(args.predict_dir)] if args.predict_dir else [],
    )
    datamodule = GraphPartitionDataModule("digits", method="metis", root=args.root)
    trainer.fit(model, datamodule=datamodule)
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

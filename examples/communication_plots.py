"""Train GCN on digits over several CPU processes and draw its communication (``plot`` extra).

Writes ``comm_matrix.png``, ``balance.png`` and ``comm_vs_compute.png`` into ``--out`` and the
same figures into TensorBoard logs under ``--logs`` (``tensorboard --logdir <logs>``). The README's
figure is ``python examples/communication_plots.py --devices 4 --out docs/images``.

The fork launcher (``gnn_ddp_fork``) keeps the script short: no re-execution of the script per
rank. Use ``gnn_ddp`` (and ``if __name__ == "__main__"``, as here) for real runs.
"""

from __future__ import annotations

import argparse

import pytorch_lightning as pl
from pytorch_lightning.loggers import TensorBoardLogger

from lightning_gnn_dist import CommunicationMonitor, GraphPartitionDataModule, NodeClassifier


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=4, help="CPU processes (default: 4)")
    parser.add_argument("--epochs", type=int, default=20, help="(default: 20)")
    parser.add_argument("--method", default="hypergraph", help="partitioner (default: hypergraph)")
    parser.add_argument("--out", default="plots", help="folder for the PNGs (default: plots)")
    parser.add_argument("--logs", default="lightning_logs", help="TensorBoard folder")
    parser.add_argument(
        "--root", default="partitions", help="partition stores (default: partitions)"
    )
    args = parser.parse_args()

    pl.seed_everything(0)
    trainer = pl.Trainer(
        strategy="gnn_ddp_fork",
        accelerator="cpu",
        devices=args.devices,
        max_epochs=args.epochs,
        logger=TensorBoardLogger(args.logs, name="communication_plots"),
        callbacks=[CommunicationMonitor(plot_dir=args.out)],
        enable_checkpointing=False,
    )
    datamodule = GraphPartitionDataModule("digits", method=args.method, root=args.root)
    trainer.fit(NodeClassifier("gcn", in_channels=64, num_classes=10), datamodule=datamodule)
    print(f"figures written to {args.out}/ and to TensorBoard under {args.logs}/")


if __name__ == "__main__":
    main()

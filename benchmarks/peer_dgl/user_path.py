"""The user's path in :mod:`benchmarks.peer_dgl`: the neighbour guide's code, timed.

A ``LightningModule`` holding PyG's ``GraphSAGE``/``GCN``/``GAT`` model
(``torch_geometric.nn.models``, ``(d, 256, 2, c)``), whose ``training_step`` is the guide's
(``self.gnn(batch.x, batch.edge_index)[:batch.batch_size]``, cross-entropy, ``self.log``), Adam;
``GraphPartitionDataModule(loader="neighbor")`` on METIS parts with the training vertices
balanced; ``Trainer(strategy="gnn_ddp", devices=ranks)``, which starts the other ranks itself.
No logger, checkpoint, progress bar or validation (the DGL loops have none); test accuracy
afterwards with ``eval_loader="full"`` (exact full-neighbourhood inference, as DGL's).

The timing is a callback plus two wrappers, outside the user's code: per epoch the process's
CPU seconds (every thread: the prefetch thread and gloo's included) and wall seconds, and, in
CPU seconds, ``sample+fetch`` (inside ``NeighborLoader.made_batches``, any thread), ``forward``
(``training_step``), ``backward`` (from ``on_before_backward`` to ``on_before_optimizer_step``:
the gradient all-reduce included), ``optimizer`` (the Adam step), ``lightning`` (the main
thread's remaining CPU: hooks, batch transfer, the strategy's step context, logging) and ``comm
threads`` (every other thread: gloo's transport moving the loader's and the gradients' bytes).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from benchmarks.common.processes import peak_rss_bytes


def run_lightning(args, task: str, data) -> tuple[list[dict], float]:
    """``(per-epoch records, test accuracy)`` of the user's path; ranks other than 0 write their
    data memory to ``<out>.rank<r>`` and return ``([], nan)``."""
    del data  # every rank loads its part from the store
    import pytorch_lightning as pl
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn.models import GAT, GCN, GraphSAGE

    import lightning_gnn_dist as lgd
    from lightning_gnn_dist.loaders.neighbor import NeighborLoader

    model_class = {"sage": GraphSAGE, "gcn": GCN, "gat": GAT}[task.split("-")[0]]
    timer = EpochTimer()
    timer.wrap(NeighborLoader)

    class Model(pl.LightningModule):  # the neighbour guide's module
        def __init__(self):
            super().__init__()
            self.gnn = model_class(args.in_channels, args.mini_hidden, 2, 16, dropout=args.dropout)

        def training_step(self, batch, batch_idx):
            start = time.thread_time()
            out = self.gnn(batch.x, batch.edge_index)[: batch.batch_size]
            loss = F.cross_entropy(out, batch.y[: batch.batch_size])
            self.log("train_loss", loss, batch_size=batch.batch_size)
            timer.forward += time.thread_time() - start
            return loss

        def test_step(self, batch, batch_idx):
            out = self.gnn(batch.x, batch.edge_index)[: batch.batch_size]
            correct = (out.argmax(-1) == batch.y[: batch.batch_size]).sum().float()
            self.log("correct", correct, reduce_fx="sum", sync_dist=True, batch_size=1)
            count = torch.tensor(float(batch.batch_size))
            self.log("count", count, reduce_fx="sum", sync_dist=True, batch_size=1)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    datamodule = lgd.GraphPartitionDataModule(**datamodule_options(args, args.ranks))
    trainer = timed_trainer(args.ranks, args.mini_epochs, timer, Path(args.out).parent)
    module = Model()
    trainer.fit(module, datamodule=datamodule)
    (tested,) = trainer.test(module, datamodule=datamodule, verbose=False)
    if trainer.global_rank != 0:
        trained = timer.records[-1]["peak_rss_bytes"]
        Path(f"{args.out}.rank{trainer.global_rank}").write_text(
            json.dumps(
                {
                    "data_memory_bytes": peak_rss_bytes() - args.after_imports,
                    "train_memory_bytes": trained - args.after_imports,
                }
            )
        )
    trainer.strategy.barrier()  # rank 0 ends after every rank wrote its record
    return timer.records, tested["correct"] / tested["count"]


def timed_trainer(devices: int, max_epochs: int, timer, root: Path):
    """The user's ``Trainer(strategy="gnn_ddp")`` with nothing the peers' loops lack: no
    logger, checkpoint, progress bar, model summary or validation; ``timer`` its callback."""
    from benchmarks.common.fits import make_trainer

    return make_trainer(
        "gnn_ddp", devices, max_epochs, [timer], limit_val_batches=0, default_root_dir=str(root)
    )


def datamodule_options(args, ranks: int) -> dict:
    """The guide's datamodule on the benchmark's stores (built once by ``prepare``)."""
    return {
        "dataset": args.dataset,
        "method": "metis",
        "num_parts": ranks,
        "root": args.stores,
        "loader": "neighbor",
        "num_neighbors": list(args.fanout),
        "batch_size": args.batch_size,
        "shuffle": True,
        "prefetch": args.prefetch,
        "eval_loader": "full",
        "partition_options": {"balance_masks": True},
        "verify_dataset": False,
    }


def _callback_base():
    import pytorch_lightning as pl

    return pl.Callback


class EpochTimer(_callback_base()):
    """Per-epoch CPU and wall seconds and CPU phases (module docstring)."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self.forward = 0.0
        self._lock = threading.Lock()
        self._sample = {"any": 0.0, "main": 0.0}

    def wrap(self, loader_class) -> None:
        """Time ``loader_class.made_batches``: the sampling and the fetch of each batch, in the
        thread that makes it (a batch's fetch travels with the next batch's sampling)."""
        original = loader_class.made_batches
        timer = self

        def made_batches(loader, *args, **kwargs):
            made = original(loader, *args, **kwargs)
            while True:
                start = time.thread_time()
                try:
                    batch = next(made)
                except StopIteration:
                    return
                finally:
                    spent = time.thread_time() - start
                    main = threading.current_thread() is threading.main_thread()
                    with timer._lock:
                        timer._sample["any"] += spent
                        timer._sample["main"] += spent if main else 0.0
                yield batch

        loader_class.made_batches = made_batches

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start = (time.process_time(), time.perf_counter(), time.thread_time())
        self.forward, self._backward, self._optimizer, self._steps = 0.0, 0.0, 0.0, 0
        with self._lock:
            self._sample = {"any": 0.0, "main": 0.0}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._steps += 1

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self._mark = time.thread_time()

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        now = time.thread_time()
        self._backward += now - self._mark
        self._mark = now

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._optimizer += time.thread_time() - self._mark

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        cpu, wall, main = (
            now - then
            for now, then in zip(
                (time.process_time(), time.perf_counter(), time.thread_time()),
                self._start,
                strict=True,
            )
        )
        with self._lock:
            sample = dict(self._sample)
        phases = {
            "sample+fetch": sample["any"],
            "forward": self.forward,
            "backward": self._backward,
            "optimizer": self._optimizer,
        }
        accounted = self.forward + self._backward + self._optimizer + sample["main"]
        phases["lightning"] = max(0.0, main - accounted)
        # Threads that are neither the main thread nor the prefetch thread: gloo's transport.
        phases["comm threads"] = max(0.0, cpu - main - (sample["any"] - sample["main"]))
        self.records.append(
            {
                "cpu": cpu,
                "wall": wall,
                "phases_cpu": phases,
                "steps": self._steps,
                "start": self._start[1],
                "peak_rss_bytes": peak_rss_bytes(),
            }
        )

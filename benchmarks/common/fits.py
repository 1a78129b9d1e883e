"""Lightning fits for benchmarks: one trainer configuration, one recorder, one fit function.

:func:`fit` runs ``trainer.fit`` (the ``gnn_ddp_fork`` launcher forks the ranks from this
process, after the stores exist) and returns what rank 0 recorded: per-epoch wall times, per-step
times, validation accuracy, the communication monitor's rows and every rank's compute and wait
seconds.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch


def quiet() -> None:
    """One torch thread per process; no Lightning info lines or known-harmless warnings."""
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    warnings.filterwarnings(
        "ignore", message=".*(does not have many workers|deprecated|log_every_n_steps).*"
    )
    for name in ("pytorch_lightning", "lightning_fabric", "lightning.pytorch"):
        logging.getLogger(name).setLevel(logging.WARNING)


def make_trainer(strategy: Any, devices: int, epochs: int, callbacks: list, **kwargs: Any):
    """A CPU trainer with nothing but training: no logger, checkpoints, progress bar, summary or
    sanity check; ``kwargs`` override (e.g. ``limit_val_batches=0``)."""
    options = dict(
        strategy=strategy,
        accelerator="cpu",
        devices=devices,
        max_epochs=epochs,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
    )
    return pl.Trainer(**{**options, **kwargs})


class Recorder(pl.Callback):
    """Rank 0 writes, at the end of training, to ``path``: ``epoch_seconds`` (wall time of each
    training epoch), ``step_seconds`` (each training step), ``val_acc`` (each validation),
    ``traffic`` (the monitor's rows), ``ranks`` (per epoch, every rank's ``compute_seconds`` and
    ``wait_seconds``) and what ``extra(trainer, module)`` returns; ``extra`` runs on every rank
    (it may use collectives). Put it first in the callback list, so the monitor's end-of-epoch
    gather is outside the timed epoch."""

    def __init__(
        self,
        path: Path,
        monitor: Any = None,
        extra: Callable[[Any, Any], dict] | None = None,
    ) -> None:
        self.path, self.monitor, self.extra = Path(path), monitor, extra
        self.epoch_seconds: list[float] = []
        self.step_seconds: list[float] = []
        self.val_acc: list[float] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._epoch_start = time.perf_counter()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._step_start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.step_seconds.append(time.perf_counter() - self._step_start)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.epoch_seconds.append(time.perf_counter() - self._epoch_start)

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if "val_acc" in trainer.callback_metrics:
            self.val_acc.append(float(trainer.callback_metrics["val_acc"]))

    def on_train_end(self, trainer, pl_module) -> None:
        extra = self.extra(trainer, pl_module) if self.extra is not None else {}
        if not trainer.is_global_zero:
            return
        monitor = self.monitor
        ranks = [
            {k: r[k].tolist() for k in ("compute_seconds", "wait_seconds")}
            for r in getattr(monitor, "rank_history", [])
        ]
        record = {
            "epoch_seconds": self.epoch_seconds,
            "step_seconds": self.step_seconds,
            "val_acc": self.val_acc,
            "traffic": monitor.history if monitor is not None else [],
            "ranks": ranks,
            **extra,
        }
        self.path.write_text(json.dumps(record))


class StepCPUTimer(pl.Callback):
    """Every rank: CPU seconds of its process during each epoch's training steps
    (``time.process_time``). Unlike wall time it leaves out waiting for a core (4 ranks on 2
    cores) and waiting in gloo: the rank's own work. Each rank writes ``<path>.rank<r>.json``."""

    def __init__(self, path: Path) -> None:
        self.path, self.seconds = Path(path), []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.seconds.append(0.0)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._start = time.process_time()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.seconds[-1] += time.process_time() - self._start

    def on_train_end(self, trainer, pl_module) -> None:
        self.path.with_suffix(f".rank{trainer.global_rank}.json").write_text(
            json.dumps(self.seconds)
        )


def fit(
    module: Any,
    datamodule: Any,
    strategy: Any,
    devices: int,
    epochs: int,
    monitor: Any = None,
    extra: Callable[[Any, Any], dict] | None = None,
    cpu_times: bool = False,
    callbacks: Sequence[Any] = (),
    **trainer_kwargs: Any,
) -> dict[str, Any]:
    """Fit ``module`` and return rank 0's :class:`Recorder` record, plus ``fit_wall_seconds``
    and, with ``cpu_times``, ``cpu_seconds[rank][epoch]`` (:class:`StepCPUTimer`).

    The fork launcher writes ``MASTER_PORT`` and friends into this process's environment; they
    are restored afterwards so the next fit starts clean."""
    environ = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="lgd-fit-") as tmp:
        out = Path(tmp) / "fit.json"
        first = [Recorder(out, monitor, extra)] + ([monitor] if monitor is not None else [])
        timers = [StepCPUTimer(out)] if cpu_times else []
        trainer = make_trainer(
            strategy, devices, epochs, [*first, *callbacks, *timers], **trainer_kwargs
        )
        start = time.perf_counter()
        try:
            trainer.fit(module, datamodule=datamodule)
        finally:
            os.environ.clear()
            os.environ.update(environ)
        record = json.loads(out.read_text())
        record["fit_wall_seconds"] = time.perf_counter() - start
        if cpu_times:
            record["cpu_seconds"] = [
                json.loads(out.with_suffix(f".rank{r}.json").read_text()) for r in range(devices)
            ]
    return record

"""Callbacks: communication volume and time, the partition report, prediction writing."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import BasePredictionWriter, Callback
from pytorch_lightning.utilities import rank_zero_only
from rich.console import Console
from rich.table import Table

_FIELDS = (
    "rows_sent",
    "bytes_sent",
    "bytes_received",
    "messages_sent",
    "messages_received",
    "seconds",
)


def _console() -> Console:
    """stdout console; wide enough for the tables when stdout is not a terminal (logs, CI)."""
    console = Console()
    return console if console.is_terminal else Console(width=160)


def _strategy_and_store(trainer: pl.Trainer):
    strategy = trainer.strategy
    if not hasattr(strategy, "comm_counters"):
        raise ValueError(
            f"{type(strategy).__name__} has no halo exchange; use strategy='gnn_ddp' (GNNStrategy)"
        )
    return strategy, trainer.datamodule.store


class CommunicationMonitor(Callback):
    """Logs, per training epoch, the halo traffic of every layer and direction.

    For each ``(layer, direction)`` it logs under ``comm/<layer>/<direction>/``: ``bytes_total``
    (summed over ranks), ``bytes_avg`` and ``bytes_max`` (per rank), ``predicted_bytes_total``
    (from the partition metrics and the exchange mode), ``messages_avg``/``messages_max`` and
    ``seconds_max`` (time waiting for the exchange). Per epoch it also logs
    ``comm/seconds_avg``/``comm/seconds_max`` and ``comm/compute_seconds_avg`` (training step time
    minus exchange wait). Values are gathered from all ranks and written by rank 0 to every
    logger of the Trainer (CSV, TensorBoard, ...), step = epoch; :attr:`last_logged` holds them. :attr:`history` keeps one row per layer, direction
    and epoch; :meth:`table` renders the last epoch.

    Args:
        print_table (bool): print the last epoch's table on rank 0 when training ends.
            (default: ``False``)
    """

    def __init__(self, print_table: bool = False) -> None:
        self.print_table = print_table
        self.history: list[dict[str, Any]] = []
        self.last_logged: dict[str, float] = {}
        self._step_seconds = 0.0

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        strategy, _ = _strategy_and_store(trainer)
        strategy.comm_counters["train"].reset()
        self._step_seconds = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._step_start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._step_seconds += time.perf_counter() - self._step_start

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        strategy, store = _strategy_and_store(trainer)
        items = strategy.comm_counters["train"].items()
        local = torch.tensor(
            [[getattr(t, f) for f in _FIELDS] for _, _, t in items] or [[0.0] * len(_FIELDS)],
            dtype=torch.float64,
        )
        local = torch.cat(
            [local.flatten(), torch.tensor([self._step_seconds], dtype=torch.float64)]
        )
        gathered = (
            pl_module.all_gather(local.to(pl_module.device)).cpu().view(trainer.world_size, -1)
        )
        step_seconds = gathered[:, -1]
        stats = gathered[:, :-1].view(trainer.world_size, -1, len(_FIELDS))
        mode = strategy.graph_context.exchange  # its predicted_rows_sent knows the mode
        metrics = store.metrics
        comm_seconds = torch.zeros(trainer.world_size, dtype=torch.float64)
        logged: dict[str, float] = {}
        for i, (layer, direction, traffic) in enumerate(items):
            per_rank = {f: stats[:, i, k] for k, f in enumerate(_FIELDS)}
            predicted = (
                mode.predicted_rows_sent(metrics, direction) * traffic.width * 4 * traffic.calls
            )
            row = {
                "epoch": trainer.current_epoch,
                "layer": layer,
                "direction": direction,
                "width": traffic.width,
                "bytes_total": int(per_rank["bytes_sent"].sum()),
                "predicted_bytes_total": int(np.sum(predicted)),
                "bytes_avg": float(per_rank["bytes_sent"].mean()),
                "bytes_max": int(per_rank["bytes_sent"].max()),
                "messages_avg": float(per_rank["messages_sent"].mean()),
                "messages_max": int(per_rank["messages_sent"].max()),
                "seconds_max": float(per_rank["seconds"].max()),
            }
            comm_seconds += per_rank["seconds"]
            self.history.append(row)
            for key in (
                "bytes_total",
                "predicted_bytes_total",
                "bytes_avg",
                "bytes_max",
                "messages_avg",
                "messages_max",
                "seconds_max",
            ):
                logged[f"comm/{layer}/{direction}/{key}"] = float(row[key])
        logged["comm/seconds_avg"] = float(comm_seconds.mean())
        logged["comm/seconds_max"] = float(comm_seconds.max())
        logged["comm/compute_seconds_avg"] = float(
            (step_seconds - comm_seconds).clamp(min=0).mean()
        )
        self.last_logged = logged
        if trainer.is_global_zero:  # values are already global: no per-key sync needed
            for logger in trainer.loggers:
                logger.log_metrics(logged, step=trainer.current_epoch)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.print_table:
            self._print()

    def last_epoch(self) -> list[dict[str, Any]]:
        """Rows of the most recent epoch."""
        if not self.history:
            return []
        epoch = self.history[-1]["epoch"]
        return [r for r in self.history if r["epoch"] == epoch]

    def table(self) -> Table:
        """Rich table of the last epoch: measured vs predicted bytes per layer and direction."""
        table = Table(title="halo exchange per training epoch (all ranks)")
        for header in (
            "layer",
            "direction",
            "width",
            "bytes total",
            "predicted",
            "match",
            "bytes max/rank",
            "msgs max/rank",
            "wait s max",
        ):
            table.add_column(
                header, justify="left" if header in ("layer", "direction") else "right"
            )
        for r in self.last_epoch():
            table.add_row(
                r["layer"],
                r["direction"],
                str(r["width"]),
                f"{r['bytes_total']:,}",
                f"{r['predicted_bytes_total']:,}",
                "yes" if r["bytes_total"] == r["predicted_bytes_total"] else "NO",
                f"{r['bytes_max']:,}",
                str(r["messages_max"]),
                f"{r['seconds_max']:.4f}",
            )
        return table

    @rank_zero_only
    def _print(self) -> None:
        _console().print(self.table())


class PartitionReport(Callback):
    """At fit start, logs the partition's metrics (``partition/<key>``) and prints them on rank 0.

    Args:
        print_table (bool): print a table on rank 0. (default: ``True``)
    """

    def __init__(self, print_table: bool = True) -> None:
        self.print_table = print_table

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        store = trainer.datamodule.store
        summary = store.metrics.summary()
        summary["seconds"] = store.meta["seconds"]
        for logger in trainer.loggers:
            logger.log_metrics({f"partition/{k}": float(v) for k, v in summary.items()}, step=0)
        if self.print_table and trainer.is_global_zero:
            from lightning_gnn_dist.partition.report import metrics_table

            settings = store.meta["settings"]
            _console().print(
                metrics_table(
                    summary,
                    f"partition {store.meta.get('dataset')} ({settings['method']}, P = {settings['num_parts']})",
                )
            )


class PredictionWriter(BasePredictionWriter):
    """Writes each rank's ``predict_step`` output, keyed by global vertex id, to
    ``<output_dir>/predictions-rank<r>.pt`` (``{"global_ids": [n] int64, "logits": [n, C]}``),
    atomically. :func:`load_predictions` reassembles them.

    Args:
        output_dir (str): directory to write into. (default: ``"predictions"``)
    """

    def __init__(self, output_dir: str = "predictions") -> None:
        super().__init__(write_interval="batch")
        self.output_dir = Path(output_dir)

    def write_on_batch_end(
        self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx=0
    ) -> None:
        self.output_dir.mkdir(parents=True, exist_ok=True)
        target = self.output_dir / f"predictions-rank{trainer.global_rank:05d}.pt"
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        torch.save({k: v.detach().cpu() for k, v in prediction.items()}, tmp)
        os.replace(tmp, target)


def load_predictions(output_dir: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """``(global_ids [N], logits [N, C])`` from all ranks' files, sorted by global id. On a vertex
    cut every copy of a split vertex is written; one row per vertex is kept (the copies agree
    under ``cd-0``)."""
    files = sorted(Path(output_dir).glob("predictions-rank*.pt"))
    if not files:
        raise FileNotFoundError(f"no predictions-rank*.pt files in {output_dir}")
    parts = [torch.load(f, weights_only=True) for f in files]
    ids = torch.cat([p["global_ids"] for p in parts])
    logits = torch.cat([p["logits"] for p in parts])
    order = torch.argsort(ids, stable=True)
    ids, logits = ids[order], logits[order]
    first = torch.ones_like(ids, dtype=torch.bool)
    first[1:] = ids[1:] != ids[:-1]
    return ids[first], logits[first]

"""``BatchCommunicationMonitor``: per-batch halo traffic of ``loader="subgraph"`` training,
measured and predicted from the batch's plan."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch

from lightning_gnn_dist.comm.base import EXCHANGE_MODES, traffic_row_bytes
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.lightning.compat import LightningNeutral
from lightning_gnn_dist.partition.metrics import PartitionMetrics


def plan_metrics(view: LocalPartition, send_counts_all: np.ndarray) -> PartitionMetrics:
    """:class:`PartitionMetrics` of a batch from the ranks' batch plans.

    Args:
        view: this rank's completed batch view (``part_offsets`` hold every part's batch rows).
        send_counts_all: ``[P, P]`` rows each rank's plan sends to each peer (the ``send_counts``
            of every rank's view, gathered).
    """
    offsets = view.part_offsets.cpu().numpy()
    return PartitionMetrics(
        num_parts=view.num_parts,
        num_nodes=int(offsets[-1]),
        peer_rows=np.asarray(send_counts_all, dtype=np.int64),
        part_sizes=np.diff(offsets).astype(np.int64),
        part_nnz=np.zeros(view.num_parts, dtype=np.int64),
        edge_cut=0,
    )


class BatchCommunicationMonitor(LightningNeutral, lightning_base="callbacks.Callback"):
    """Records, for every training batch with a batch plan (``batch.local_partition``), the rows
    and bytes each rank's halo exchange sent per layer and direction, next to what the exchange
    mode predicts from the batch plans of all ranks.

    :attr:`history` holds one row per batch, layer and direction: ``step``, ``layer``,
    ``direction``, ``width`` and per-rank lists ``rows_sent``, ``predicted_rows_sent``,
    ``bytes_sent``, ``predicted_bytes_sent`` and ``rows_received`` (rank order). Every rank holds
    the same history.
    """

    def __init__(self) -> None:
        self.history: list[dict[str, Any]] = []
        self._before: dict[tuple[str, str], tuple[int, int, int, int]] = {}

    def _snapshot(self, trainer: pl.Trainer) -> dict[tuple[str, str], tuple[int, int, int, int]]:
        counter = trainer.strategy.comm_counters["train"]
        return {
            (layer, d): (t.rows_sent, t.bytes_sent, t.calls, t.rows_received)
            for layer, d, t in counter.items()
        }

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._before = self._snapshot(trainer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        view = getattr(batch, "local_partition", None)
        if view is None:
            return
        counter = trainer.strategy.comm_counters["train"]
        widths = {(layer, d): t.width for layer, d, t in counter.items()}
        row_bytes = {(layer, d): traffic_row_bytes(t) for layer, d, t in counter.items()}
        now = self._snapshot(trainer)
        keys = sorted(now)
        mode = EXCHANGE_MODES[trainer.strategy.exchange_mode]
        send_all = pl_module.all_gather(view.send_counts.to(pl_module.device)).cpu()
        metrics = plan_metrics(view, send_all.view(view.num_parts, view.num_parts).numpy())
        rank = trainer.global_rank
        local = []
        for key in keys:
            rows, nbytes, calls, received = (
                a - b for a, b in zip(now[key], self._before.get(key, (0, 0, 0, 0)), strict=True)
            )
            predicted = int(mode.predicted_rows_sent(metrics, key[1])[rank]) * calls
            bytes_predicted = predicted * row_bytes[key]  # the codec's bytes per row
            local.append([rows, predicted, nbytes, bytes_predicted, received])
        table = torch.tensor(local or [[0] * 5], dtype=torch.long)
        gathered = pl_module.all_gather(table.to(pl_module.device)).cpu()
        gathered = gathered.view(trainer.world_size, -1, 5)
        for i, (layer, direction) in enumerate(keys):
            self.history.append(
                {
                    "step": trainer.global_step,
                    "layer": layer,
                    "direction": direction,
                    "width": widths[(layer, direction)],
                    "rows_sent": gathered[:, i, 0].tolist(),
                    "predicted_rows_sent": gathered[:, i, 1].tolist(),
                    "bytes_sent": gathered[:, i, 2].tolist(),
                    "predicted_bytes_sent": gathered[:, i, 3].tolist(),
                    "rows_received": gathered[:, i, 4].tolist(),
                }
            )

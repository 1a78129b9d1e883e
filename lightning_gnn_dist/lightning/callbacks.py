"""Callbacks: communication volume and time, the partition report, prediction writing."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from lightning_utilities.core.rank_zero import rank_zero_only  # what both namespaces use
from rich.console import Console
from rich.table import Table

from lightning_gnn_dist.comm.base import traffic_row_bytes
from lightning_gnn_dist.comm.cached import STATISTIC_FIELDS
from lightning_gnn_dist.lightning.compat import LightningNeutral
from lightning_gnn_dist.nn.hetero import relation_of_module
from lightning_gnn_dist.partition.placement import Topology
from lightning_gnn_dist.partition.types import stored_relation_metrics
from lightning_gnn_dist.partition.vertex_cut import VertexCutMetrics

if TYPE_CHECKING:  # annotations only; the classes work with either namespace
    import pytorch_lightning as pl

_CACHE_KEYS = ("rounds_sent", "rounds_skipped", "bytes_avoided", "age_max", "age_mean")
_FIELDS = (
    "rows_sent",
    "rows_received",
    "bytes_sent",
    "bytes_received",
    "messages_sent",
    "messages_received",
    "seconds",
    "inter_node_bytes_sent",  # not a Traffic field: bytes_sent_to summed over other nodes' ranks
)
_SPLIT_KEYS = (
    "inter_node_bytes_total",
    "intra_node_bytes_total",
    "predicted_inter_node_bytes_total",
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


def _topology(trainer) -> Topology | None:
    """Nodes × ranks per node of a launch on several nodes (``None`` on one node)."""
    nodes = int(getattr(trainer, "num_nodes", 1) or 1)
    world = trainer.world_size
    if nodes <= 1 or world % nodes:
        return None
    return Topology(nodes, world // nodes)


def _inter_node_bytes(traffic, rank: int, topology: Topology | None) -> float:
    """Bytes of ``traffic`` this rank sent to ranks on other nodes (``-1``: not split)."""
    if topology is None:
        return 0.0
    if traffic.bytes_sent_to is None:
        return -1.0
    node = topology.node_of_rank()
    return float(np.asarray(traffic.bytes_sent_to)[node != node[rank]].sum())


def _training_traffic(trainer: pl.Trainer):
    """``(counter, exchange, graph_store)`` of the training traffic: the halo exchange's counter
    and mode, or with ``loader="neighbor"`` the loader's (sampling requests and responses,
    feature rows fetched; no exchange runs in the model, so there is no prediction) and its
    graph store (cache hits)."""
    strategy, _ = _strategy_and_store(trainer)
    loaders = getattr(trainer.datamodule, "neighbor_loaders", None)
    if getattr(strategy, "data_parallel", False) and loaders is not None:
        return loaders.store.counter, None, loaders.store
    return strategy.comm_counters["train"], strategy.graph_context.exchange, None


def rank_timing(compute_seconds: np.ndarray, wait_seconds: np.ndarray) -> dict[str, float]:
    """The critical path of one epoch from every rank's seconds: ``comm/compute_seconds_max``,
    ``comm/compute_seconds_mean``, ``comm/wait_seconds_max``, ``comm/wait_seconds_mean`` and
    ``comm/critical_path_ratio`` (max ÷ mean compute seconds; 1.0 when perfectly balanced, and
    when no rank computed). The slowest rank sets the epoch's pace, so the max is what to watch.

    Args:
        compute_seconds: ``[P]`` training-step seconds minus exchange wait, per rank.
        wait_seconds: ``[P]`` seconds waiting for the halo exchange, per rank.
    """
    mean = float(compute_seconds.mean())
    return {
        "comm/compute_seconds_max": float(compute_seconds.max()),
        "comm/compute_seconds_mean": mean,
        "comm/wait_seconds_max": float(wait_seconds.max()),
        "comm/wait_seconds_mean": float(wait_seconds.mean()),
        "comm/critical_path_ratio": float(compute_seconds.max()) / mean if mean > 0 else 1.0,
    }


class CommunicationMonitor(LightningNeutral, lightning_base="callbacks.Callback"):
    """Logs, per training epoch, the halo traffic of every layer and direction.

    For each ``(layer, direction)`` it logs under ``comm/<layer>/<direction>/``: ``bytes_total``
    (summed over ranks; bytes on the wire, encoded by the strategy's ``codec``),
    ``fp32_bytes_total`` (what the same rows would move as fp32; the table shows the ratio),
    ``bytes_avg`` and ``bytes_max`` (per rank), ``predicted_bytes_total`` (from the partition
    metrics, the exchange mode and the codec; ``-1`` with ``loader="subgraph"``, whose
    batches have plans of their own: use
    :class:`~lightning_gnn_dist.lightning.batch_monitor.BatchCommunicationMonitor` there),
    ``messages_avg``/``messages_max`` and
    ``seconds_max`` (time waiting for the exchange). Per epoch it also logs
    ``comm/seconds_avg``/``comm/seconds_max`` and ``comm/compute_seconds_avg`` (training step time
    minus exchange wait) and, from every rank's seconds, the critical path:
    ``comm/compute_seconds_max``/``_mean``, ``comm/wait_seconds_max``/``_mean`` and
    ``comm/critical_path_ratio`` (max ÷ mean compute; see :func:`rank_timing`). On several nodes
    (``Trainer(num_nodes > 1)``) each record also has ``inter_node_bytes_total``,
    ``intra_node_bytes_total`` (bytes sent to ranks on other nodes and on the sender's own node;
    ``-1`` when the mode does not count bytes per receiving rank) and
    ``predicted_inter_node_bytes_total``, logged and shown in the table. Values are
    gathered from all ranks and written by rank 0 to every logger of the Trainer (CSV,
    TensorBoard, ...), step = epoch, with an ``epoch`` key as in Lightning's own rows;
    :attr:`last_logged` holds them. :attr:`history` keeps one row per layer, direction and
    epoch; :meth:`table` renders the last epoch. :attr:`rank_history` keeps, per epoch, the
    per-rank arrays the plots draw (bytes per rank pair, measured and predicted; rows sent and
    received; compute and exchange-wait seconds) and the launch's ``topology`` (``None`` on one
    node).

    With :class:`~lightning_gnn_dist.lightning.link_datamodule.LinkDataModule` (full batch) the
    score exchange adds its rows beside the layers': ``score`` ``forward``/``backward`` (the
    far endpoints' embedding rows and their gradients), ``score.ids`` ``request`` (their ids)
    and ``score`` ``control`` (the per-step request counts), each predicted from the step's
    pairs (:mod:`~lightning_gnn_dist.comm.score`).
    On a typed graph (``HeteroData``) the layers of ``to_hetero``/``HeteroConv``/``HGTConv``
    exchange per relation: each record is one relation's (``relation`` in :attr:`history`, the
    relation key ending the layer's name) and its ``predicted_bytes_total`` comes from that
    relation's metrics in the store; layers on the homogeneous view (RGCN) are predicted from
    the part's homogeneous metrics.

    With ``exchange="rdm"`` the records are redistributions (``forward``/``backward``) and panel
    exchanges (``forward-panel``/``backward-panel``) of each layer, their ``rows`` are elements,
    and ``predicted_bytes_total`` is the plan's prediction of the orders that ran.
    With ``loader="neighbor"`` the traffic is the loader's, per rank: ``sampling``
    request/response (the frontiers sent to their owners and the sampled edges back),
    ``features`` request/response (remote rows fetched; ``features.ids`` their ids and labels),
    ``control`` (per-peer sizes), and ``comm/features/cache_hit_rows_total``/``_max`` (rows the
    loader's cache served); ``predicted_bytes_total`` is ``-1`` (sampling has no prediction).

    With the ``cached`` exchange, ``predicted_bytes_total`` is what the exact base mode would
    move, direction ``control`` holds the flag all-reduce, and per layer and direction it also
    logs ``cache/<layer>/<direction>/``: ``rounds_sent``/``rounds_skipped`` (summed over ranks),
    ``bytes_avoided`` (summed), ``age_max`` and ``age_mean`` (epochs), plus
    ``cache/bytes_avoided_fraction`` (feature bytes avoided ÷ exact feature bytes) per epoch.

    Args:
        print_table (bool): print the last epoch's table on rank 0 when training ends.
            (default: ``False``)
        plot_dir (str, optional): when training ends, rank 0 writes ``comm_matrix.png``,
            ``balance.png`` and ``comm_vs_compute.png`` (and, when ``num_nodes > 1``,
            ``node_traffic.png``: each node's bytes sent to other nodes and within the node; see
            :mod:`lightning_gnn_dist.plots`; needs the ``plot`` extra) into this folder and adds the same figures to every logger
            that has ``add_figure`` (TensorBoard) under ``comm/<name>``. (default: ``None``)
    """

    def __init__(self, print_table: bool = False, plot_dir: str | None = None) -> None:
        self.print_table = print_table
        self.plot_dir = plot_dir
        if plot_dir is not None:
            from lightning_gnn_dist.plots import require_matplotlib

            require_matplotlib()  # fail at construction, with the install hint, not after training
        self.rank_history: list[dict[str, Any]] = []
        self.history: list[dict[str, Any]] = []
        self.last_logged: dict[str, float] = {}
        self._step_seconds = 0.0

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        counter, exchange, graph_store = _training_traffic(trainer)
        counter.reset()
        reset = getattr(exchange, "reset_statistics", None)
        if reset is not None:
            reset()
        if graph_store is not None:
            self._cache_hits_before = graph_store.cache_hit_rows
        self._step_seconds = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._step_start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._step_seconds += time.perf_counter() - self._step_start

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        _, store = _strategy_and_store(trainer)
        counter, mode, graph_store = _training_traffic(trainer)
        items = counter.items()
        topology = _topology(trainer)
        local = torch.tensor(
            [
                [getattr(t, f) for f in _FIELDS[:-1]]
                + [_inter_node_bytes(t, trainer.global_rank, topology)]
                for _, _, t in items
            ]
            or [[0.0] * len(_FIELDS)],
            dtype=torch.float64,
        )
        world = trainer.world_size
        peer_bytes = torch.zeros(world, dtype=torch.float64)
        per_peer = all(t.bytes_sent_to is not None for _, _, t in items)
        for _, _, t in items:
            if t.bytes_sent_to is not None:
                peer_bytes += torch.tensor(t.bytes_sent_to, dtype=torch.float64)
        local = torch.cat(
            [local.flatten(), peer_bytes, torch.tensor([self._step_seconds], dtype=torch.float64)]
        )
        gathered = pl_module.all_gather(local.to(pl_module.device)).cpu().view(world, -1)
        step_seconds = gathered[:, -1]
        peer_matrix = gathered[:, -1 - world : -1]
        stats = gathered[:, : -1 - world].view(world, -1, len(_FIELDS))
        metrics = store.metrics
        relations = stored_relation_metrics(store.meta)  # a typed graph's, per relation
        comm_seconds = torch.zeros(trainer.world_size, dtype=torch.float64)
        predicted_matrix = np.zeros((world, world))
        logged: dict[str, float] = {}
        for i, (layer, direction, traffic) in enumerate(items):
            per_rank = {f: stats[:, i, k] for k, f in enumerate(_FIELDS)}
            relation = relation_of_module(layer, relations) if relations else None
            layer_metrics = metrics if relation is None else relations[relation]
            # rdm records its prediction as it runs (it depends on the order in use)
            recorded = None if mode is None else counter.predicted_peer_bytes(layer, direction)
            if mode is None or getattr(trainer.datamodule, "loader", "full") == "subgraph":
                # Sampled traffic has no prediction; a subgraph batch has a plan of its own
                # (BatchCommunicationMonitor predicts per batch).
                predicted = np.array([-1])
            elif recorded is not None:
                predicted = recorded.sum(axis=1)
            else:
                predicted = mode.predicted_bytes_sent(layer_metrics, layer, direction, traffic)
            # what the same rows would have moved as fp32 (4 bytes per element)
            fp32_bytes = int(per_rank["rows_sent"].sum()) * traffic.width * 4
            if direction == "control":  # flags and codec agreement: never encoded
                fp32_bytes = int(per_rank["bytes_sent"].sum())
            row = {
                "epoch": trainer.current_epoch,
                "layer": layer,
                "direction": direction,
                "width": traffic.width,
                "codec": traffic.codec or "fp32",
                "bytes_total": int(per_rank["bytes_sent"].sum()),
                "fp32_bytes_total": fp32_bytes,
                "predicted_bytes_total": int(np.sum(predicted)),
                "bytes_avg": float(per_rank["bytes_sent"].mean()),
                "bytes_max": int(per_rank["bytes_sent"].max()),
                "messages_avg": float(per_rank["messages_sent"].mean()),
                "messages_max": int(per_rank["messages_sent"].max()),
                "seconds_max": float(per_rank["seconds"].max()),
            }
            if relations:  # a typed graph: the relation a layer's rows belong to (or None)
                row["relation"] = relation
            comm_seconds += per_rank["seconds"]
            pair_rows = None if mode is None else mode.predicted_peer_rows(layer_metrics, direction)
            if topology is not None:  # several nodes: the bytes per level
                row.update(_split(per_rank, recorded, pair_rows, traffic, topology))
            if recorded is not None and predicted_matrix is not None:
                predicted_matrix = predicted_matrix + recorded
            elif pair_rows is None or traffic.bytes_sent_to is None:
                predicted_matrix = None
            elif predicted_matrix is not None:
                predicted_matrix = (
                    predicted_matrix + pair_rows * traffic_row_bytes(traffic) * traffic.calls
                )
            self.history.append(row)
            for key in (
                "bytes_total",
                "fp32_bytes_total",
                "predicted_bytes_total",
                "bytes_avg",
                "bytes_max",
                "messages_avg",
                "messages_max",
                "seconds_max",
                *(k for k in _SPLIT_KEYS if k in row),
            ):
                logged[f"comm/{layer}/{direction}/{key}"] = float(row[key])
        logged["comm/seconds_avg"] = float(comm_seconds.mean())
        logged["comm/seconds_max"] = float(comm_seconds.max())
        compute_seconds = (step_seconds - comm_seconds).clamp(min=0)
        logged["comm/compute_seconds_avg"] = float(compute_seconds.mean())
        logged.update(rank_timing(compute_seconds.numpy(), comm_seconds.numpy()))
        self.rank_history.append(
            {
                "epoch": trainer.current_epoch,
                # None when the exchange mode does not split its bytes by receiving rank
                "peer_bytes": peer_matrix.numpy() if per_peer else None,
                "predicted_peer_bytes": predicted_matrix,
                "topology": topology,  # None on one node
                "bytes_sent": float(stats[:, :, _FIELDS.index("bytes_sent")].sum()),
                "rows_sent": stats[:, :, _FIELDS.index("rows_sent")].sum(1).numpy(),
                "rows_received": stats[:, :, _FIELDS.index("rows_received")].sum(1).numpy(),
                "wait_seconds": comm_seconds.numpy(),
                "compute_seconds": compute_seconds.numpy(),
            }
        )
        logged.update(self._cache_statistics(trainer, pl_module, mode))
        if graph_store is not None:
            logged.update(self._cache_hits(trainer, pl_module, graph_store))
        self.last_logged = logged
        if trainer.is_global_zero:  # values are already global: no per-key sync needed
            # with the epoch, as Lightning's own rows have it (metrics.csv's epoch column)
            row = logged | {"epoch": trainer.current_epoch}
            for logger in trainer.loggers:
                logger.log_metrics(row, step=trainer.current_epoch)

    def _cache_hits(self, trainer, pl_module, graph_store) -> dict[str, float]:
        """Neighbour loader: feature rows served from each rank's cache this epoch
        (``comm/features/cache_hit_rows_total``, ``_max`` per rank)."""
        hits = graph_store.cache_hit_rows - getattr(self, "_cache_hits_before", 0)
        local = torch.tensor([float(hits)], dtype=torch.float64, device=pl_module.device)
        gathered = pl_module.all_gather(local).cpu().view(trainer.world_size)
        self.rank_history[-1]["cache_hit_rows"] = gathered.numpy()
        return {
            "comm/features/cache_hit_rows_total": float(gathered.sum()),
            "comm/features/cache_hit_rows_max": float(gathered.max()),
        }

    def _cache_statistics(self, trainer, pl_module, exchange) -> dict[str, float]:
        """Cache statistics of every rank (``cached`` mode), merged; ``{}`` for exact modes."""
        rows_of = getattr(exchange, "statistics_rows", None)
        if rows_of is None:
            return {}
        rows = rows_of()
        local = torch.tensor(
            [[r[f] for f in STATISTIC_FIELDS] for r in rows] or [[0.0] * len(STATISTIC_FIELDS)],
            dtype=torch.float64,
        )
        gathered = pl_module.all_gather(local.to(pl_module.device)).cpu()
        gathered = gathered.view(trainer.world_size, -1, len(STATISTIC_FIELDS))
        logged: dict[str, float] = {}
        avoided = 0.0
        this_epoch = {
            (r["layer"], r["direction"]): r
            for r in self.history
            if r["epoch"] == trainer.current_epoch
        }
        for i, row in enumerate(rows):
            per_rank = {f: gathered[:, i, k] for k, f in enumerate(STATISTIC_FIELDS)}
            merged = {f: float(per_rank[f].sum()) for f in STATISTIC_FIELDS}
            merged["age_max"] = float(per_rank["age_max"].max())
            merged["age_mean"] = (
                merged["age_sum"] / merged["age_count"] if merged["age_count"] else 0.0
            )
            avoided += merged["bytes_avoided"]
            prefix = f"cache/{row['layer']}/{row['direction']}/"
            for key in _CACHE_KEYS:
                logged[prefix + key] = merged[key]
            this_epoch[(row["layer"], row["direction"])].update({k: merged[k] for k in _CACHE_KEYS})
        moved = sum(r["bytes_total"] for (_, d), r in this_epoch.items() if d != "control")
        logged["cache/bytes_avoided_fraction"] = (
            avoided / (moved + avoided) if moved + avoided else 0.0
        )
        return logged

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.print_table:
            self._print()
        if self.plot_dir is not None and trainer.is_global_zero and self.rank_history:
            _, store = _strategy_and_store(trainer)
            self._write_figures(trainer, self.figures(store.metrics))

    def figures(self, metrics) -> dict[str, Any]:
        """``{"comm_matrix", "node_traffic", "balance", "comm_vs_compute"}`` matplotlib figures:
        the last epoch's bytes per rank pair (measured next to predicted) and, on several nodes,
        the same bytes split per node into inter- and intra-node (both left out when the exchange
        mode does not count bytes per receiving rank); per-rank balance (``metrics`` gives owned
        vertices and non-zeros, or a vertex cut's vertex copies and edges); and seconds and
        bytes over all epochs."""
        from lightning_gnn_dist.plots import partition as plots

        last = self.rank_history[-1]
        epoch = last["epoch"]
        figures = {}
        if last["peer_bytes"] is not None:
            figures["comm_matrix"] = plots.communication_matrix_figure(
                last["peer_bytes"], last["predicted_peer_bytes"], f"halo exchange, epoch {epoch}"
            )
            if last.get("topology") is not None:
                figures["node_traffic"] = plots.node_traffic_figure(
                    last["peer_bytes"],
                    last["predicted_peer_bytes"],
                    last["topology"],
                    f"halo exchange by node, epoch {epoch}",
                )
        sizes, loads, size_label, load_label = _part_loads(metrics)
        return figures | {
            "balance": plots.balance_figure(
                sizes,
                loads,
                last["rows_sent"],
                last["rows_received"],
                last["compute_seconds"],
                last["wait_seconds"],
                f"per-rank balance, epoch {epoch}",
                size_label=size_label,
                load_label=load_label,
            ),
            "comm_vs_compute": plots.comm_compute_figure(
                np.stack([r["compute_seconds"] for r in self.rank_history]),
                np.stack([r["wait_seconds"] for r in self.rank_history]),
                np.array([r["bytes_sent"] for r in self.rank_history]),
            ),
        }

    def _write_figures(self, trainer: pl.Trainer, figures: dict[str, Any]) -> None:
        from lightning_gnn_dist.plots import save_figure

        for name, figure in figures.items():
            save_figure(figure, Path(self.plot_dir) / f"{name}.png")
            for logger in trainer.loggers:
                add_figure = getattr(getattr(logger, "experiment", None), "add_figure", None)
                if add_figure is not None:  # TensorBoard's SummaryWriter
                    add_figure(f"comm/{name}", figure, trainer.current_epoch, close=False)

    def last_epoch(self) -> list[dict[str, Any]]:
        """Rows of the most recent epoch."""
        if not self.history:
            return []
        epoch = self.history[-1]["epoch"]
        return [r for r in self.history if r["epoch"] == epoch]

    def table(self) -> Table:
        """Rich table of the last epoch: measured vs predicted bytes per layer and direction
        (the loader's sampling and feature traffic with ``loader="neighbor"``)."""
        hits = self.last_logged.get("comm/features/cache_hit_rows_total")
        table = Table(
            title="halo exchange per training epoch (all ranks)"
            if hits is None
            else "neighbour loader traffic per training epoch (all ranks)",
            caption=None if hits is None else f"feature rows served from the cache: {hits:,.0f}",
        )
        rows = self.last_epoch()
        split = any("inter_node_bytes_total" in r for r in rows)  # several nodes
        levels = ("inter-node", "predicted inter", "intra-node") if split else ()
        for header in (
            "layer",
            "direction",
            "width",
            "codec",
            "bytes total",
            "÷ fp32",
            "predicted",
            "match",
            *levels,
            "bytes max/rank",
            "msgs max/rank",
            "wait s max",
        ):
            table.add_column(
                header, justify="left" if header in ("layer", "direction", "codec") else "right"
            )
        for r in rows:
            fp32 = r.get("fp32_bytes_total", 0)
            predicted = r["predicted_bytes_total"]  # -1: sampled traffic, no prediction
            cells = [
                "-" if r.get(k, -1) < 0 else f"{r[k]:,}"
                for k in (
                    "inter_node_bytes_total",
                    "predicted_inter_node_bytes_total",
                    "intra_node_bytes_total",
                )
            ]
            table.add_row(
                r["layer"],
                r["direction"],
                str(r["width"]),
                r.get("codec", "fp32"),
                f"{r['bytes_total']:,}",
                f"{r['bytes_total'] / fp32:.3f}" if fp32 else "-",
                f"{predicted:,}" if predicted >= 0 else "-",
                "-" if predicted < 0 else "yes" if r["bytes_total"] == predicted else "NO",
                *(cells if split else ()),
                f"{r['bytes_max']:,}",
                str(r["messages_max"]),
                f"{r['seconds_max']:.4f}",
            )
        return table

    @rank_zero_only
    def _print(self) -> None:
        _console().print(self.table())


def _part_loads(metrics) -> tuple[np.ndarray, np.ndarray, str, str]:
    """``([P] sizes, [P] loads, size label, load label)`` of the balance figure: owned vertices
    and non-zeros of ``Â`` for a vertex partition; vertex copies and edges for a vertex cut
    (:class:`~lightning_gnn_dist.partition.vertex_cut.VertexCutMetrics`, whose parts own
    edges, not rows)."""
    if isinstance(metrics, VertexCutMetrics):
        return metrics.part_vertices, metrics.part_edges, "vertex copies", "edges"
    return metrics.part_sizes, metrics.part_nnz, "owned vertices (rows)", "non-zeros of Â"


def _split(per_rank, recorded, pair_rows, traffic, topology: Topology) -> dict[str, int]:
    """Measured inter- and intra-node bytes of one record (summed over ranks; ``-1`` when the
    mode does not count bytes per receiving rank) and the predicted inter-node bytes (``-1``
    without a per-pair prediction)."""
    inter = per_rank["inter_node_bytes_sent"]
    measured = -1 if bool((inter < 0).any()) else int(inter.sum())
    total = int(per_rank["bytes_sent"].sum())
    node = topology.node_of_rank()
    cross = node[:, None] != node[None, :]
    if recorded is not None:
        predicted = int(np.asarray(recorded)[cross].sum())
    elif pair_rows is not None and pair_rows.shape == cross.shape:
        predicted = int(pair_rows[cross].sum()) * traffic_row_bytes(traffic) * traffic.calls
    else:
        predicted = -1
    return {
        "inter_node_bytes_total": measured,
        "intra_node_bytes_total": total - measured if measured >= 0 else -1,
        "predicted_inter_node_bytes_total": predicted,
    }


class PartitionReport(LightningNeutral, lightning_base="callbacks.Callback"):
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
        row = {f"partition/{k}": float(v) for k, v in summary.items()}
        row["epoch"] = trainer.current_epoch  # as Lightning's own rows have it
        for logger in trainer.loggers:
            logger.log_metrics(row, step=0)
        if self.print_table and trainer.is_global_zero:
            from lightning_gnn_dist.partition.report import metrics_table

            settings = store.meta["settings"]
            # dataset and settings on lines of their own: a long dataset spec wraps alone
            title = (
                f"partition of {store.meta.get('dataset')}\n"
                f"{settings['method']}, P = {settings['num_parts']}"
            )
            _console().print(metrics_table(summary, title))


class PredictionWriter(LightningNeutral, lightning_base="callbacks.BasePredictionWriter"):
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

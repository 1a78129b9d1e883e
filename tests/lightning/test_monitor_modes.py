"""Every option of ``CommunicationMonitor`` in every mode (issue 29, item 4).

One tiny fit per mode (full-batch ``p2p``, ``broadcast``, ``cached``, ``rdm``, ``hierarchical``
on 2 nodes x 2 ranks, the vertex cut's ``cd-0``/``cd-2``/``0c``, subgraph and neighbour
mini-batches) with everything on at once: ``print_table``, ``plot_dir``, a CSV and a TensorBoard
logger, and ``PartitionReport`` beside it. Each run must end well, print both tables, write the
figures the mode has (PNG files and TensorBoard images), log every epoch's rows with their epoch
into ``metrics.csv``, and keep rows whose bytes equal the prediction where the mode predicts.
"""

from __future__ import annotations

import csv
import json
import multiprocessing as mp
import os
import socket
import traceback
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv

from lightning_gnn_dist import (
    CommunicationMonitor,
    GNNStrategy,
    GraphPartitionDataModule,
    PartitionReport,
)

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "vertex_cut.md"
DATASET = "sbm?num_nodes=120&num_classes=3&avg_degree=6&features=8&seed=2"
EPOCHS = 2
VERTEX_CUT = {"method": "vertex-cut"}
# mode: (strategy options, datamodule options, SAGE aggregation, nodes)
MODES = {
    "p2p": ({"exchange": "p2p"}, {}, "mean", 1),
    "broadcast": ({"exchange": "broadcast"}, {}, "mean", 1),
    "cached": ({"exchange": "cached", "staleness_bound": 0.5}, {}, "mean", 1),
    "rdm": ({"exchange": "rdm"}, {}, "mean", 1),
    "hierarchical": ({"exchange": "hierarchical"}, {}, "mean", 2),
    # max: its backward rows are twice the forward width (docs/guide/vertex_cut.md)
    "cd-0": ({"exchange": "cd-0"}, VERTEX_CUT, "max", 1),
    "cd-2": ({"exchange": "cd-2"}, VERTEX_CUT, "mean", 1),
    "0c": ({"exchange": "0c"}, VERTEX_CUT, "mean", 1),
    "subgraph": (
        {"exchange": "p2p"},
        {"loader": "subgraph", "subgraph_size": 0.5, "steps_per_epoch": 2},
        "mean",
        1,
    ),
    "neighbor": (
        {"exchange": "p2p"},
        {"loader": "neighbor", "num_neighbors": [3, 3], "batch_size": 40, "cache_size": 10},
        "mean",
        1,
    ),
}
PREDICTED = {"p2p", "broadcast", "rdm", "hierarchical", "cd-0", "cd-2", "0c"}  # bytes = predicted
SAMPLED = {"subgraph", "neighbor"}  # no prediction per epoch (-1)
NO_PAIR_BYTES = {"cd-0", "cd-2"}  # no bytes per receiving rank (0c moves none: zeros drawn)


class TinySAGE(pl.LightningModule):
    """Plain single-process PyG code (two SAGE layers); in neighbour mode the loss is over the
    batch's seed rows, else over ``train_mask``."""

    def __init__(self, aggr: str) -> None:
        super().__init__()
        self.conv1, self.conv2 = SAGEConv(8, 8, aggr=aggr), SAGEConv(8, 3, aggr=aggr)

    def training_step(self, batch, batch_idx):
        out = self.conv2(self.conv1(batch.x, batch.edge_index).relu(), batch.edge_index)
        seeds = getattr(batch, "batch_size", None)
        mask = slice(0, seeds) if seeds is not None else batch.train_mask
        return F.cross_entropy(out[mask], batch.y[mask])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Recorder(pl.Callback):
    """Rank 0 writes what the monitor kept (after the monitor's own ``on_train_end``)."""

    def __init__(self, monitor: CommunicationMonitor, path: Path) -> None:
        self.monitor, self.path = monitor, path

    def on_train_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            last = self.monitor.rank_history[-1]
            result = {
                "history": self.monitor.history,
                "last_logged": self.monitor.last_logged,
                "epochs": [r["epoch"] for r in self.monitor.rank_history],
                "peer_bytes": None if last["peer_bytes"] is None else last["peer_bytes"].tolist(),
            }
            self.path.write_text(json.dumps(result))


def _datamodule(mode: str, stores: Path) -> GraphPartitionDataModule:
    options = {"method": "random"} | MODES[mode][1]
    return GraphPartitionDataModule(DATASET, root=str(stores), **options)


def _fit(mode: str, stores: Path, out: Path) -> None:
    strategy_options, _, aggr, nodes = MODES[mode]
    pl.seed_everything(0)
    monitor = CommunicationMonitor(print_table=True, plot_dir=str(out / "plots"))
    trainer = pl.Trainer(
        strategy=GNNStrategy(start_method="fork", **strategy_options),
        accelerator="cpu",
        devices=2,
        num_nodes=nodes,
        max_epochs=EPOCHS,
        logger=[
            pl.loggers.CSVLogger(out, name="csv"),
            pl.loggers.TensorBoardLogger(out, name="tb"),
        ],
        callbacks=[monitor, PartitionReport(print_table=True), Recorder(monitor, out / "r.json")],
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(TinySAGE(aggr), datamodule=_datamodule(mode, stores))


def _node(mode, stores, out, node_rank, port):
    os.environ.update(NODE_RANK=str(node_rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        _fit(mode, stores, out)
    except BaseException:
        traceback.print_exc()  # to the captured stderr the failing test shows
        os._exit(1)
    os._exit(0)  # not pytest's exit handlers: this is a forked copy of the test process


def _fit_on_two_nodes(mode: str, stores: Path, out: Path) -> None:
    """Two emulated nodes of 2 ranks on this host: one forked process per node, each running the
    Trainer with its ``NODE_RANK`` (Lightning's fork launcher starts the node's ranks)."""
    dm = _datamodule(mode, stores)  # the store placed for 2 nodes, made once here
    dm.trainer = SimpleNamespace(num_nodes=2, world_size=4, global_rank=0)
    dm.prepare_data()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ctx = mp.get_context("fork")
    nodes = [ctx.Process(target=_node, args=(mode, stores, out, n, port)) for n in (0, 1)]
    for node in nodes:
        node.start()
    for node in nodes:
        node.join(timeout=120)
    codes = [node.exitcode for node in nodes]
    for node in nodes:
        if node.is_alive():
            node.kill()
            node.join()
    assert codes == [0, 0], f"node exit codes {codes}"


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    return tmp_path_factory.mktemp("stores")


@pytest.mark.parametrize("mode", list(MODES))
def test_every_monitor_option_works_in_every_mode(mode, stores, tmp_path, capfd):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    nodes = MODES[mode][3]
    (_fit_on_two_nodes if nodes > 1 else _fit)(mode, stores, tmp_path)
    result = json.loads((tmp_path / "r.json").read_text())
    printed = capfd.readouterr().out

    # print_table: both tables, the partition's title unbroken
    sampled_title = "neighbour loader traffic" if mode == "neighbor" else "halo exchange"
    assert f"{sampled_title} per training epoch" in printed
    assert "partition of " + DATASET in printed

    # the rows of every epoch, their bytes predicted where the mode predicts
    assert result["epochs"] == list(range(EPOCHS))
    rows = result["history"]
    if mode != "0c":  # 0c moves nothing: no rows
        assert {r["epoch"] for r in rows} == set(range(EPOCHS))
        assert sum(r["bytes_total"] for r in rows) > 0
    for r in rows:
        if mode in PREDICTED:
            assert r["bytes_total"] == r["predicted_bytes_total"], r
        if mode in SAMPLED:
            assert r["predicted_bytes_total"] == -1, r
        if nodes > 1:
            assert r["inter_node_bytes_total"] + r["intra_node_bytes_total"] == r["bytes_total"]
    logged = result["last_logged"]
    assert logged["comm/seconds_max"] >= 0 and logged["comm/critical_path_ratio"] >= 1
    if mode == "cached":
        assert "cache/bytes_avoided_fraction" in logged
    if mode == "neighbor":
        assert "comm/features/cache_hit_rows_total" in logged
    if mode == "cd-0":  # max: gradient and tie counts travel together (docs/guide/vertex_cut.md)
        widths = {(r["layer"], r["direction"]): r["width"] for r in rows}
        assert widths[("conv2", "backward")] == 2 * widths[("conv2", "forward")]
        assert "sends **twice its width backward**" in GUIDE.read_text()  # and users are told

    # plot_dir: the figures of the mode, as PNG files and as TensorBoard images
    figures = {"balance", "comm_vs_compute"}
    if mode not in NO_PAIR_BYTES:
        figures.add("comm_matrix")
    if nodes > 1:
        figures.add("node_traffic")
    written = {p.stem for p in (tmp_path / "plots").iterdir()}
    assert written == figures
    for name in figures:
        assert (tmp_path / "plots" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    events = EventAccumulator(str(next((tmp_path / "tb").rglob("events.out.tfevents*")).parent))
    events.Reload()
    assert set(events.Tags()["images"]) == {f"comm/{name}" for name in figures}
    assert "comm/seconds_max" in events.Tags()["scalars"]

    # the loggers: every communication row of metrics.csv with its epoch
    with open(next((tmp_path / "csv").rglob("metrics.csv"))) as file:
        csv_rows = list(csv.DictReader(file))
    comm = [r for r in csv_rows if r.get("comm/seconds_max")]
    assert [int(r["epoch"]) for r in comm] == list(range(EPOCHS))
    assert any(r.get("partition/num_parts") and r["epoch"] == "0" for r in csv_rows)

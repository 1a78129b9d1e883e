"""Plots show the numbers they are given (figure content, not just files), the training callback
plots exactly its counters and the partition's predictions, and ``partition-compare --plot``
draws every method per rank."""

import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import pytorch_lightning as pl
from pytorch_lightning.loggers import TensorBoardLogger

from lightning_gnn_dist import CommunicationMonitor, GraphPartitionDataModule, NodeClassifier, plots
from lightning_gnn_dist.cli import main
from lightning_gnn_dist.costmodel.plan import store_folder
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.metrics import partition_metrics
from lightning_gnn_dist.partition.placement import Topology, node_traffic, partition_label
from tests.helpers import random_graph

DATASET = "sbm?num_nodes=120&num_classes=3&avg_degree=6&features=8&seed=2"


def _bar_heights(ax, label=None):
    containers = [
        c for c in ax.containers if label is None or c.get_label().split(" (")[0] == label
    ]
    return np.concatenate([[bar.get_height() for bar in c] for c in containers])


def test_communication_matrix_shows_measured_next_to_predicted():
    measured = np.array([[0, 400, 0], [80, 0, 1600], [0, 0, 0]])
    fig = plots.communication_matrix_figure(measured, measured.copy(), "t")
    measured_ax, predicted_ax = fig.axes[:2]
    np.testing.assert_array_equal(measured_ax.images[0].get_array(), measured)
    np.testing.assert_array_equal(predicted_ax.images[0].get_array(), measured)
    assert measured_ax.get_title().startswith("measured: 2.1 kB")
    assert predicted_ax.get_title().startswith("predicted")
    assert (measured_ax.get_xlabel(), measured_ax.get_ylabel()) == (
        "receiving rank",
        "sending rank",
    )
    assert "measured equals predicted" in fig._suptitle.get_text()
    assert fig.axes[2].get_ylabel() == "bytes per epoch"  # the colour bar, with its unit
    texts = {t.get_text() for t in measured_ax.texts}  # values written in the cells
    assert {"400 B", "80 B", "1.6 kB"} <= texts
    other = measured.copy()
    other[0, 1] += 4
    assert "DIFFERS" in plots.communication_matrix_figure(measured, other)._suptitle.get_text()


def _drawn_extent(fig):
    """``(x0, y0, x1, y1)``: what the axes draw (labels and colour bar included), as fractions
    of the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    boxes = [ax.get_tightbbox(renderer) for ax in fig.axes]
    width, height = fig.bbox.width, fig.bbox.height
    return (
        min(b.x0 for b in boxes) / width,
        min(b.y0 for b in boxes) / height,
        max(b.x1 for b in boxes) / width,
        max(b.y1 for b in boxes) / height,
    )


@pytest.mark.parametrize("ranks", [2, 4, 16, 64])
@pytest.mark.parametrize("with_prediction", [True, False])
def test_communication_matrix_fills_its_figure(ranks, with_prediction):
    """One panel (no prediction) sat in the right half of a figure sized for two, and the
    two panels' axis labels fell below the figure (issue 29)."""
    matrix = np.arange(ranks * ranks).reshape(ranks, ranks)
    fig = plots.communication_matrix_figure(matrix, matrix if with_prediction else None)
    x0, y0, x1, y1 = _drawn_extent(fig)
    assert x1 - x0 > 0.75  # no blank half
    assert 0 <= x0 and x1 <= 1 and 0 <= y0 and y1 <= 1  # nothing cut off


def test_figures_stay_legible_with_64_ranks():
    rng = np.random.default_rng(0)
    matrix = rng.integers(0, 1000, (64, 64))
    ax = plots.communication_matrix_figure(matrix, None).axes[0]
    assert len(ax.get_xticks()) <= plots.MAX_TICKS and len(ax.get_yticks()) <= plots.MAX_TICKS
    assert not ax.texts  # no per-cell numbers at this size
    ones = np.ones(64)
    fig = plots.balance_figure(ones, ones, ones, ones, ones, ones)
    assert len(fig.axes[-1].get_xticks()) <= plots.MAX_TICKS


def test_balance_figure_plots_each_per_rank_array():
    owned, nnz = np.array([10, 12, 9]), np.array([50, 61, 40])
    sent, received = np.array([3, 0, 5]), np.array([2, 4, 2])
    compute, wait = np.array([0.5, 0.25, 0.75]), np.array([0.125, 0.5, 0.0])
    fig = plots.balance_figure(owned, nnz, sent, received, compute, wait)
    ax_size, ax_nnz, ax_rows, ax_time = fig.axes
    np.testing.assert_array_equal(_bar_heights(ax_size), owned)
    np.testing.assert_array_equal(_bar_heights(ax_nnz), nnz)
    np.testing.assert_array_equal(_bar_heights(ax_rows, "sent"), sent)
    np.testing.assert_array_equal(_bar_heights(ax_rows, "received"), received)
    np.testing.assert_array_equal(_bar_heights(ax_time, "compute"), compute)
    wait_bars = next(c for c in ax_time.containers if c.get_label() == "exchange wait")
    np.testing.assert_array_equal([b.get_y() for b in wait_bars], compute)  # stacked on compute
    np.testing.assert_array_equal([b.get_height() for b in wait_bars], wait)
    assert ax_size.lines[0].get_ydata()[0] == pytest.approx(owned.mean())
    assert [ax.get_ylabel() for ax in fig.axes] == [
        "owned vertices (rows)",
        "non-zeros of Â",
        "rows per epoch,\nall exchanges",
        "seconds per epoch",
    ]
    # issue 18, item 19: the sum over exchanges cannot be mistaken for the table's per-exchange rows
    assert ax_rows.get_title(loc="left") == plots.partition.ROWS_SUMMED


def test_comm_compute_figure_plots_mean_and_max_per_epoch():
    compute = np.array([[1.0, 3.0], [2.0, 2.0], [0.5, 1.5]])
    wait = compute / 4
    fig = plots.comm_compute_figure(compute, wait, np.array([10.0, 20.0, 30.0]))
    lines = {line.get_label(): line.get_ydata() for ax in fig.axes for line in ax.lines}
    np.testing.assert_array_equal(lines["compute, mean"], compute.mean(1))
    np.testing.assert_array_equal(lines["exchange wait, max"], wait.max(1))
    np.testing.assert_array_equal(lines["bytes sent, all ranks"], [10, 20, 30])
    assert fig.axes[0].get_xlabel() == "epoch"


def test_partition_comparison_draws_every_method_per_rank():
    data = random_graph(60, 240, seed=4)
    metrics = {
        method: partition_metrics(data, get_partitioner(method).partition(data, 4), 4)
        for method in ("metis", "random")
    }
    fig = plots.partition_comparison_figure(metrics)
    for ax, field in zip(fig.axes, ("send_rows", "recv_rows", "part_nnz"), strict=True):
        for method, m in metrics.items():
            np.testing.assert_array_equal(_bar_heights(ax, method), getattr(m, field))
    # issue 18, item 19: random's rows next to METIS's on a log axis, and as ratios to random
    assert [ax.get_yscale() for ax in fig.axes] == ["symlog", "symlog", "linear"]
    ratio = metrics["metis"].send_rows.mean() / metrics["random"].send_rows.mean()
    labels = [c.get_label() for c in fig.axes[0].containers]
    assert labels == [f"metis ({ratio:.2f}x random)", "random (1.00x random)"]


@pytest.mark.parametrize("parts, nodes", [(3, 1), (4, 2)])
def test_partition_compare_cli_writes_the_plot(tmp_path, capsys, parts, nodes):
    target = tmp_path / "compare.png"
    code = main(
        ["partition-compare", "--dataset", DATASET, "-p", str(parts), "--nodes", str(nodes)]
        + ["--seed", "2", "--methods", "metis", "random", "--json", "--plot", str(target)]
    )
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["method"] for row in rows if row.get("placement", "naive") == "naive"] == [
        "metis",
        "random",
    ]
    per_node = sorted(p.name for p in tmp_path.glob("compare-nodes-*.png"))
    # with --nodes: one per row, the placed variants' too (compare-nodes-random-mapped.png)
    names = [store_folder(partition_label(r["method"], r.get("placement", "naive"))) for r in rows]
    assert per_node == ([] if nodes == 1 else sorted(f"compare-nodes-{n}.png" for n in names))
    assert nodes == 1 or "compare-nodes-random-mapped.png" in per_node
    for path in [target, *tmp_path.glob("compare-nodes-*.png")]:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_matplotlib_gives_the_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ModuleNotFoundError, match=r"lightning-gnn-dist\[plot\]"):
        CommunicationMonitor(plot_dir="plots")


class PlotChecker(pl.Callback):
    """On rank 0 after the monitor: the figures' arrays equal the monitor's counters."""

    def __init__(self, monitor, path):
        self.monitor, self.path = monitor, path

    def on_train_end(self, trainer, pl_module):
        if not trainer.is_global_zero:
            return
        metrics = trainer.datamodule.store.metrics
        last = self.monitor.rank_history[-1]
        figures = self.monitor.figures(metrics)
        shown = figures["comm_matrix"].axes[0].images[0].get_array()
        predicted = figures["comm_matrix"].axes[1].images[0].get_array()
        balance = figures["balance"].axes
        self.path.write_text(
            json.dumps(
                {
                    "shown_equals_counters": bool(np.array_equal(shown, last["peer_bytes"])),
                    "shown_equals_predicted": bool(np.array_equal(shown, predicted)),
                    "shown_total": float(np.sum(shown)),
                    "counted_total": sum(r["bytes_total"] for r in self.monitor.last_epoch()),
                    "owned": _bar_heights(balance[0]).tolist(),
                    "part_sizes": metrics.part_sizes.tolist(),
                    "rows_sent": _bar_heights(balance[2], "sent").tolist(),
                    "predicted_rows": int(metrics.send_rows.sum()),
                    "epochs": len(figures["comm_vs_compute"].axes[0].lines[0].get_ydata()),
                }
            )
        )


def test_monitor_writes_pngs_and_tensorboard_figures_of_its_counters(tmp_path):
    # p2p only: the per-pair counters of every mode are checked in tests/comm.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from lightning_gnn_dist import GNNStrategy

    pl.seed_everything(0)
    monitor = CommunicationMonitor(plot_dir=str(tmp_path / "plots"))
    trainer = pl.Trainer(
        strategy=GNNStrategy(start_method="fork"),
        accelerator="cpu",
        devices=3,
        max_epochs=2,
        logger=TensorBoardLogger(tmp_path, name="tb"),
        callbacks=[monitor, PlotChecker(monitor, tmp_path / "check.json")],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    datamodule = GraphPartitionDataModule(DATASET, method="random", root=str(tmp_path / "parts"))
    trainer.fit(NodeClassifier(in_channels=8, num_classes=3), datamodule=datamodule)

    check = json.loads((tmp_path / "check.json").read_text())
    assert check["shown_equals_counters"] and check["shown_equals_predicted"]
    assert check["shown_total"] == check["counted_total"] > 0
    assert check["owned"] == check["part_sizes"]
    assert check["epochs"] == 2
    # two layers; the first one's input needs no gradient: 3 exchanges per epoch
    assert sum(check["rows_sent"]) == 3 * check["predicted_rows"]
    for name in ("comm_matrix", "balance", "comm_vs_compute"):
        assert (tmp_path / "plots" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "plots" / "node_traffic.png").exists()  # one node: no split
    events = EventAccumulator(str(next((tmp_path / "tb").rglob("events.out.tfevents*")).parent))
    events.Reload()
    assert {"comm/comm_matrix", "comm/balance", "comm/comm_vs_compute"} <= set(
        events.Tags()["images"]
    )


def test_monitor_leaves_out_the_matrix_when_a_mode_does_not_count_per_rank_pair():
    data = random_graph(30, 90, seed=2)
    metrics = partition_metrics(data, get_partitioner("random").partition(data, 2), 2)
    monitor = CommunicationMonitor()
    epoch = {
        "epoch": 0,
        "peer_bytes": None,
        "predicted_peer_bytes": None,
        "bytes_sent": 96.0,
        "rows_sent": np.array([4, 2]),
        "rows_received": np.array([2, 4]),
        "wait_seconds": np.array([0.1, 0.2]),
        "compute_seconds": np.array([1.0, 1.0]),
    }
    monitor.rank_history = [epoch]
    assert set(monitor.figures(metrics)) == {"balance", "comm_vs_compute"}
    epoch["peer_bytes"] = np.array([[0, 64], [32, 0]])
    matrix = monitor.figures(metrics)["comm_matrix"]
    np.testing.assert_array_equal(matrix.axes[0].images[0].get_array(), epoch["peer_bytes"])


def test_monitor_draws_a_vertex_cuts_balance_from_its_copies_and_edges():
    """A vertex cut's metrics have no owned rows (``part_sizes``): the balance figure crashed
    after training (issue 29); it shows the parts' vertex copies and edges."""
    from lightning_gnn_dist.partition.vertex_cut import vertex_cut_metrics

    data = random_graph(30, 90, seed=2)
    edge_parts = get_partitioner("vertex-cut", seed=1).partition(data, 2)
    metrics = vertex_cut_metrics(data, edge_parts, 2, seed=1)
    monitor = CommunicationMonitor()
    monitor.rank_history = [
        {
            "epoch": 0,
            "peer_bytes": None,
            "predicted_peer_bytes": None,
            "bytes_sent": 96.0,
            "rows_sent": np.array([4, 2]),
            "rows_received": np.array([2, 4]),
            "wait_seconds": np.array([0.1, 0.2]),
            "compute_seconds": np.array([1.0, 1.0]),
        }
    ]
    balance = monitor.figures(metrics)["balance"]
    copies, edges = balance.axes[:2]
    assert (copies.get_ylabel(), edges.get_ylabel()) == ("vertex copies", "edges")
    np.testing.assert_array_equal(_bar_heights(copies), metrics.part_vertices)
    np.testing.assert_array_equal(_bar_heights(edges), metrics.part_edges)


def _node_split(matrix, topology):
    """Per node: bytes its ranks send to other nodes and inside it, by ``node_traffic``."""
    levels = node_traffic(matrix, topology)
    shape = (topology.num_nodes, topology.ranks_per_node)
    return levels.inter_rows.reshape(shape).sum(1), levels.intra_rows.reshape(shape).sum(1)


def _lines(ax):
    return {line.get_label(): line.get_ydata() for line in ax.lines}


def test_node_traffic_figure_splits_each_nodes_bytes_into_inter_and_intra():
    pytest.importorskip("matplotlib")
    topology = Topology(3, 2)
    rng = np.random.default_rng(1)
    measured = rng.integers(0, 5000, (6, 6))
    np.fill_diagonal(measured, 0)  # a rank sends nothing to itself
    predicted = measured.copy()
    predicted[0, 5] += 800  # one crossing pair mispredicted
    fig = plots.node_traffic_figure(measured, predicted, topology)
    assert fig.canvas.manager is None  # built without pyplot: no global figure registry
    ax_bars, ax_map = fig.axes[:2]
    inter, intra = _node_split(measured, topology)
    assert (inter != intra).all()  # a swap of the levels would show
    np.testing.assert_array_equal(_bar_heights(ax_bars, "inter-node, measured"), inter)
    np.testing.assert_array_equal(_bar_heights(ax_bars, "intra-node, measured"), intra)
    predicted_inter, predicted_intra = _node_split(predicted, topology)
    lines = _lines(ax_bars)
    np.testing.assert_array_equal(lines["inter-node, predicted"], predicted_inter)
    np.testing.assert_array_equal(lines["intra-node, predicted"], predicted_intra)
    # node x node: the bytes between nodes, diagonal (intra-node) blank; rows sum to the bars
    between = ax_map.images[0].get_array()
    assert between.mask.tolist() == np.eye(3, dtype=bool).tolist()
    assert between[0, 2] == measured[0:2, 4:6].sum()
    np.testing.assert_array_equal(between.sum(axis=1), inter)
    assert (ax_map.get_xlabel(), ax_map.get_ylabel()) == ("receiving node", "sending node")
    assert ax_bars.get_title() == (
        f"inter-node {plots.human_bytes(inter.sum())}, intra-node {plots.human_bytes(intra.sum())}"
    )
    assert ax_bars.get_ylabel() == fig.axes[2].get_ylabel() == "bytes per epoch"
    assert "DIFFERS" in fig._suptitle.get_text()
    same = plots.node_traffic_figure(measured, measured.copy(), topology)
    assert "measured equals predicted" in same._suptitle.get_text()


def test_node_traffic_figure_refuses_a_matrix_of_another_world_size():
    with pytest.raises(ValueError, match=r"measured has shape \(6, 6\).*2 nodes x 2 ranks = 4"):
        plots.node_traffic_figure(np.zeros((6, 6)), None, Topology(2, 2))
    with pytest.raises(ValueError, match=r"predicted has shape \(4,\).*\[4, 4\]"):
        plots.node_traffic_figure(np.zeros((4, 4)), np.zeros(4), Topology(2, 2))


def test_node_traffic_figure_stays_legible_with_256_ranks_on_32_nodes():
    pytest.importorskip("matplotlib")
    matrix = np.random.default_rng(0).integers(0, 1000, (256, 256))
    fig = plots.node_traffic_figure(matrix, None, Topology(32, 8), unit="rows per exchange")
    ax_bars, ax_map = fig.axes[:2]
    for ticks in (ax_bars.get_xticks(), ax_map.get_xticks(), ax_map.get_yticks()):
        assert len(ticks) <= plots.MAX_TICKS
    assert not ax_map.texts  # no per-cell numbers at this size
    assert not ax_bars.lines  # no prediction, no markers
    assert ax_bars.get_ylabel() == "rows per exchange"
    assert ax_bars.yaxis.get_major_formatter()(25000, 0) == "25,000"  # counts, not bytes


def test_monitor_draws_the_node_split_of_its_last_epoch_on_several_nodes(tmp_path):
    pytest.importorskip("matplotlib")
    data = random_graph(30, 90, seed=2)
    metrics = partition_metrics(data, get_partitioner("random").partition(data, 4), 4)
    peer_bytes = np.array([[0, 8, 64, 0], [8, 0, 0, 32], [16, 0, 0, 4], [0, 48, 4, 0]])
    epoch = {
        "epoch": 1,
        "peer_bytes": peer_bytes,
        "predicted_peer_bytes": peer_bytes.copy(),
        "topology": None,  # one node: no split
        "bytes_sent": float(peer_bytes.sum()),
        "rows_sent": np.ones(4),
        "rows_received": np.ones(4),
        "wait_seconds": np.full(4, 0.1),
        "compute_seconds": np.ones(4),
    }
    monitor = CommunicationMonitor(plot_dir=str(tmp_path / "plots"))
    monitor.rank_history = [dict(epoch, epoch=0, peer_bytes=None), epoch]
    assert "node_traffic" not in monitor.figures(metrics)
    epoch["topology"] = Topology(2, 2)
    added = []
    logger = SimpleNamespace(
        experiment=SimpleNamespace(add_figure=lambda tag, fig, step, close: added.append(tag))
    )
    trainer = SimpleNamespace(
        strategy=SimpleNamespace(comm_counters={}),
        datamodule=SimpleNamespace(store=SimpleNamespace(metrics=metrics)),
        is_global_zero=True,
        loggers=[logger],
        current_epoch=1,
    )
    monitor.on_train_end(trainer, None)
    assert (tmp_path / "plots" / "node_traffic.png").read_bytes()[:4] == b"\x89PNG"
    assert "comm/node_traffic" in added
    figure = monitor.figures(metrics)["node_traffic"]
    inter, intra = _node_split(peer_bytes, epoch["topology"])  # of the last epoch
    np.testing.assert_array_equal(_bar_heights(figure.axes[0], "inter-node, measured"), inter)
    np.testing.assert_array_equal(_bar_heights(figure.axes[0], "intra-node, measured"), intra)
    assert figure._suptitle.get_text().startswith(
        "halo exchange by node, epoch 1 — measured equals"
    )
    epoch["peer_bytes"] = None  # the mode does not count bytes per receiving rank
    assert "node_traffic" not in monitor.figures(metrics)

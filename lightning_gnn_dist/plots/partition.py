"""Figures of the communication and the partition (matplotlib, the optional ``plot`` extra).

Every function takes plain numpy arrays and returns a :class:`matplotlib.figure.Figure` built
without ``pyplot`` (no global state, no display needed); :func:`save_figure` writes a PNG. The
callbacks (:class:`~lightning_gnn_dist.lightning.callbacks.CommunicationMonitor` with ``plot_dir``) and
``partition-compare --plot`` call them. Axes stay legible up to hundreds of ranks: at most
:data:`MAX_TICKS` rank labels per axis, values in human units (B, kB, MB, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from lightning_gnn_dist.partition.metrics import PartitionMetrics
    from lightning_gnn_dist.partition.placement import Topology

MAX_TICKS = 16
ROWS_SUMMED = (
    "rows of every exchange of the epoch summed (each layer, forward and backward): "
    "layers x directions times the partition table's rows per exchange"
)
_LEGEND_OUTSIDE = {"loc": "upper left", "bbox_to_anchor": (1.0, 1.0), "fontsize": "small"}
_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")


def require_matplotlib():
    """Import matplotlib or raise ``ModuleNotFoundError`` with the install hint."""
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError as err:  # optional dependency
        raise ModuleNotFoundError(
            "plots need matplotlib: pip install 'lightning-gnn-dist[plot]' (or matplotlib>=3.7)"
        ) from err
    return matplotlib, Figure


def _new_figure(width: float, height: float, layout: str = "constrained") -> Figure:
    """A figure of ``width`` x ``height`` inches; ``layout="compressed"`` for panels of a fixed
    aspect (heat maps): the constrained layout sizes their boxes before the aspect shrinks
    them, which left labels outside the figure and blank bands beside the panels."""
    _, figure_cls = require_matplotlib()
    return figure_cls(figsize=(width, height), dpi=100, layout=layout)


def human_bytes(value: float) -> str:
    """``1536`` → ``"1.5 kB"`` (powers of 1000)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def _rank_ticks(ax: Axes, num_ranks: int, axis: str = "x") -> None:
    step = max(1, math.ceil(num_ranks / MAX_TICKS))
    ticks = np.arange(0, num_ranks, step)
    (ax.set_xticks if axis == "x" else ax.set_yticks)(ticks)


def _value_formatter(human: Callable[[float], str] = human_bytes):
    """Axis and colour-bar ticks written by ``human`` (bytes in human units by default)."""
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: human(v))


def communication_matrix_figure(
    measured: np.ndarray, predicted: np.ndarray | None, title: str = "halo exchange"
) -> Figure:
    """Heat maps of bytes per (sending rank, receiving rank) in one epoch, measured next to
    predicted.

    Args:
        measured: ``[P, P]`` bytes rank ``p`` (row) sent to rank ``q`` (column), from the counters.
        predicted: ``[P, P]`` the same from the partition metrics, or ``None`` when the exchange
            mode has no per-pair prediction.
        title: figure title.
    """
    measured = np.asarray(measured, dtype=np.float64)
    panels = [("measured", measured)]
    if predicted is not None:
        panels.append(("predicted from the partition", np.asarray(predicted, dtype=np.float64)))
    side = min(7.0, 3.5 + 0.06 * measured.shape[0])
    # as wide as the panels and the colour bar (a fixed minimum left a lone panel beside a
    # blank half), and wide enough for the two-line title
    fig = _new_figure(max(5.5, (side + 0.4) * len(panels) + 1.4), side + 1.2, "compressed")
    vmax = max(float(p.max()) for _, p in panels) or 1.0
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (name, matrix) in zip(axes, panels, strict=True):
        image = _heat_map(ax, matrix, vmax, "rank")
        ax.set_title(f"{name}: {human_bytes(matrix.sum())} in total")
    _colour_bar(fig, image, list(axes), "bytes per epoch")
    verdict = _verdict(panels[0][1], panels[1][1] if predicted is not None else None)
    fig.suptitle(f"{title}{verdict}\nbytes per rank pair, forward + backward, all layers")
    return fig


def _heat_map(ax: Axes, matrix: np.ndarray, vmax: float, what: str, human: Callable = human_bytes):
    """Draw ``[n, n]`` traffic, sender per row and receiver per column (masked cells blank), with
    at most :data:`MAX_TICKS` labels per axis and each non-zero value written in its cell up to
    ``8 × 8``; returns the image (for :func:`_colour_bar`)."""
    size = matrix.shape[0]
    image = ax.imshow(matrix, cmap="viridis", vmin=0, vmax=vmax, interpolation="nearest")
    ax.set_xlabel(f"receiving {what}")
    ax.set_ylabel(f"sending {what}")
    _rank_ticks(ax, size, "x")
    _rank_ticks(ax, size, "y")
    if size <= 8:
        blank = np.ma.getmaskarray(matrix)
        for (row, col), value in np.ndenumerate(np.ma.getdata(matrix)):
            if value and not blank[row, col]:
                colour = "black" if value > 0.6 * vmax else "white"
                ax.text(col, row, human(value), ha="center", va="center", color=colour)
    return image


def _colour_bar(fig: Figure, image, axes, label: str, human: Callable = human_bytes) -> None:
    colourbar = fig.colorbar(image, ax=axes, shrink=0.85)
    colourbar.set_label(label)
    colourbar.formatter = _value_formatter(human)
    colourbar.update_ticks()


def _verdict(measured: np.ndarray, predicted: np.ndarray | None) -> str:
    """Title suffix: whether the measured matrix equals the prediction (``""`` without one)."""
    if predicted is None:
        return ""
    if np.array_equal(measured, predicted):
        return " — measured equals predicted"
    return " — MEASURED DIFFERS FROM PREDICTED"


def node_traffic_figure(
    measured: np.ndarray,
    predicted: np.ndarray | None,
    topology: Topology,
    title: str = "halo exchange by node",
    *,
    unit: str = "bytes per epoch",
    measured_label: str = "measured",
) -> Figure:
    """The traffic of a launch on several nodes split by level: per node, what its ranks send to
    ranks on other nodes (inter-node, over the slow link) and to the other ranks of their own node
    (intra-node), as bars, with the prediction as markers beside them; and a node × node heat map
    of the inter-node traffic (sending node, receiving node; the diagonal, intra-node, is left
    blank). Ranks run node by node (rank ``r`` on node ``r // ranks_per_node``), the numbering of
    Lightning and torchrun.

    Args:
        measured: ``[P, P]`` bytes rank ``p`` (row) sent to rank ``q`` (column) in one epoch
            (forward + backward, all layers), from the counters; ``P = topology.world_size``.
        predicted: ``[P, P]`` the same from the partition metrics, or ``None`` when the exchange
            mode has no per-pair prediction.
        topology: nodes × ranks per node of the launch.
        title: figure title.
        unit: what the matrices count, shown on the axes; values are written in human bytes
            (B, kB, MB, ...) when it names bytes, as plain counts otherwise (e.g.
            ``"rows per exchange"`` for the partition metrics' ``peer_rows``).
        measured_label: legend name of the bars (``"measured"``; the prediction's markers are
            ``"predicted"``).

    Raises:
        ValueError: a matrix that is not ``[P, P]`` for the topology's ``P`` ranks.
    """
    for name, matrix in (("measured", measured), ("predicted", predicted)):
        shape = None if matrix is None else np.shape(matrix)
        if shape is not None and shape != (topology.world_size,) * 2:
            raise ValueError(
                f"{name} has shape {shape}, but the topology has {topology.num_nodes} nodes x "
                f"{topology.ranks_per_node} ranks = {topology.world_size} ranks: give the "
                f"[{topology.world_size}, {topology.world_size}] traffic per rank pair of a "
                "launch on that topology (or the Topology it ran on)"
            )
    human = human_bytes if "bytes" in unit else "{:,.0f}".format
    nodes, per_node = topology.num_nodes, topology.ranks_per_node
    inter, intra = _node_levels(measured, topology)
    width = min(10.0, 3.0 + 0.35 * nodes)
    side = min(6.0, 3.0 + 0.1 * nodes)
    fig = _new_figure(max(9.0, width + side + 1.5), side + 1.0)
    ax_bars, ax_map = fig.subplots(1, 2, width_ratios=[width, side])
    x = np.arange(nodes)
    bar = 0.4
    levels = (
        ("inter-node", inter, -bar / 2, _COLOURS[3]),
        ("intra-node", intra, bar / 2, _COLOURS[0]),
    )
    for name, values, offset, colour in levels:
        ax_bars.bar(x + offset, values, bar, color=colour, label=f"{name}, {measured_label}")
    if predicted is not None:
        for (name, _, offset, colour), values in zip(
            levels, _node_levels(predicted, topology), strict=True
        ):
            ax_bars.plot(
                x + offset,
                values,
                linestyle="none",
                marker="D",
                markerfacecolor=colour,
                markeredgecolor="black",
                label=f"{name}, predicted",
            )
    ax_bars.set_xlabel(f"sending node ({per_node} ranks each)")
    ax_bars.set_ylabel(unit)
    ax_bars.set_ylim(bottom=0)
    ax_bars.yaxis.set_major_formatter(_value_formatter(human))
    _rank_ticks(ax_bars, nodes)
    ax_bars.set_title(f"inter-node {human(inter.sum())}, intra-node {human(intra.sum())}")
    # ranks run node by node: the rank-pair matrix summed over each node's block of ranks
    between = np.asarray(measured, dtype=np.float64).reshape(nodes, per_node, nodes, per_node)
    between = between.sum(axis=(1, 3))
    shown = np.ma.masked_array(between, mask=np.eye(nodes, dtype=bool))
    vmax = float(shown.max()) if shown.count() and shown.max() > 0 else 1.0
    image = _heat_map(ax_map, shown, vmax, "node", human)
    ax_map.set_title(f"inter-node by node pair ({measured_label})")
    _colour_bar(fig, image, ax_map, unit, human)
    verdict = _verdict(
        np.asarray(measured, dtype=np.float64),
        None if predicted is None else np.asarray(predicted, dtype=np.float64),
    )
    fig.legend(loc="outside lower center", ncols=4, fontsize="small")
    fig.suptitle(
        f"{title}{verdict}\n{unit} by node ({nodes} nodes x {per_node} ranks): "
        "sent to other nodes (inter) and within the node (intra)"
    )
    return fig


def _node_levels(matrix: np.ndarray, topology: Topology) -> tuple[np.ndarray, np.ndarray]:
    """``([N], [N])``: what each node's ranks send to other nodes and inside the node, from a
    ``[P, P]`` matrix of traffic per rank pair: ``node_traffic`` per rank
    (:mod:`lightning_gnn_dist.partition.placement`), summed over each node's ranks."""
    from lightning_gnn_dist.partition.placement import node_traffic

    levels = node_traffic(np.asarray(matrix, dtype=np.float64), topology)
    node_of_rank = topology.node_of_rank()
    return tuple(
        np.bincount(node_of_rank, weights=rows, minlength=topology.num_nodes)
        for rows in (levels.inter_rows, levels.intra_rows)
    )


def balance_figure(
    owned_vertices: np.ndarray,
    nonzeros: np.ndarray,
    rows_sent: np.ndarray,
    rows_received: np.ndarray,
    compute_seconds: np.ndarray,
    wait_seconds: np.ndarray,
    title: str = "per-rank balance",
    *,
    size_label: str = "owned vertices (rows)",
    load_label: str = "non-zeros of Â",
) -> Figure:
    """Four panels over the ranks: owned vertices, non-zeros of ``Â`` (or, for a vertex cut,
    vertex copies and edges: see the labels), rows sent and received per epoch, and compute vs
    exchange-wait seconds per epoch (stacked). Dashed lines mark means.

    The rows panel sums every exchange of the epoch (each layer, forward and backward; the
    loader's requests and responses with ``loader="neighbor"``), so it reads
    ``layers × directions`` times the partition table's rows per exchange; its title says so.

    Args:
        owned_vertices, nonzeros: ``[P]`` from the partition metrics (rows, non-zeros; a
            vertex cut's vertex copies and edges).
        rows_sent, rows_received: ``[P]`` halo rows per epoch, all layers and directions.
        compute_seconds, wait_seconds: ``[P]`` seconds per epoch: training step minus exchange
            wait, and exchange wait.
        title: figure title.
        size_label, load_label: the axis labels of the first two panels.
    """
    num_ranks = len(owned_vertices)
    ranks = np.arange(num_ranks)
    fig = _new_figure(min(16.0, max(7.0, 2.5 + 0.14 * num_ranks)), 9.0)
    ax_size, ax_nnz, ax_rows, ax_time = fig.subplots(4, 1, sharex=True)
    for ax, values, label in (
        (ax_size, owned_vertices, size_label),
        (ax_nnz, nonzeros, load_label),
    ):
        ax.bar(ranks, values, color=_COLOURS[0])
        ax.axhline(float(np.mean(values)), color="black", linestyle="--", linewidth=1, label="mean")
        ax.set_ylabel(label)
        ax.legend(**_LEGEND_OUTSIDE)
    width = 0.4
    ax_rows.bar(ranks - width / 2, rows_sent, width, label="sent", color=_COLOURS[1])
    ax_rows.bar(ranks + width / 2, rows_received, width, label="received", color=_COLOURS[2])
    ax_rows.set_ylabel("rows per epoch,\nall exchanges")
    # Not comparable with the partition table's rows *per exchange*: say what is summed.
    ax_rows.set_title(ROWS_SUMMED, fontsize="small", loc="left")
    ax_rows.legend(**_LEGEND_OUTSIDE)
    ax_time.bar(ranks, compute_seconds, label="compute", color=_COLOURS[0])
    ax_time.bar(
        ranks, wait_seconds, bottom=compute_seconds, label="exchange wait", color=_COLOURS[3]
    )
    ax_time.set_ylabel("seconds per epoch")
    ax_time.set_xlabel("rank")
    ax_time.legend(**_LEGEND_OUTSIDE)
    _rank_ticks(ax_time, num_ranks)
    fig.suptitle(title)
    return fig


def comm_compute_figure(
    compute_seconds: np.ndarray,
    wait_seconds: np.ndarray,
    bytes_sent: np.ndarray | None = None,
    title: str = "communication vs compute per epoch",
) -> Figure:
    """Per epoch: mean and max over ranks of compute and exchange-wait seconds, and (right axis)
    the bytes sent by all ranks.

    Args:
        compute_seconds, wait_seconds: ``[epochs, P]`` seconds.
        bytes_sent: ``[epochs]`` bytes sent by all ranks, or ``None``.
        title: figure title.
    """
    compute_seconds = np.asarray(compute_seconds, dtype=np.float64)
    wait_seconds = np.asarray(wait_seconds, dtype=np.float64)
    epochs = np.arange(compute_seconds.shape[0])
    fig = _new_figure(8.0, 4.5)
    ax = fig.subplots()
    for values, name, colour in (
        (compute_seconds, "compute", _COLOURS[0]),
        (wait_seconds, "exchange wait", _COLOURS[3]),
    ):
        ax.plot(epochs, values.mean(axis=1), marker="o", color=colour, label=f"{name}, mean")
        ax.plot(epochs, values.max(axis=1), linestyle=":", color=colour, label=f"{name}, max")
    ax.set_xlabel("epoch")
    ax.set_ylabel("seconds per rank")
    ax.set_ylim(bottom=0)
    ax.set_xticks(epochs[:: max(1, math.ceil(len(epochs) / MAX_TICKS))])
    handles, labels = ax.get_legend_handles_labels()
    if bytes_sent is not None:
        right = ax.twinx()
        right.plot(epochs, bytes_sent, color="grey", linestyle="--", label="bytes sent, all ranks")
        right.set_ylabel("bytes sent per epoch")
        right.set_ylim(bottom=0)
        right.yaxis.set_major_formatter(_value_formatter())
        more_handles, more_labels = right.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize="small")
    ax.set_title(title)
    return fig


def partition_comparison_figure(
    metrics: Mapping[str, PartitionMetrics], title: str = "partitioners per rank"
) -> Figure:
    """Methods side by side per rank: rows sent, rows received (per exchange) and non-zeros.

    Methods differ by orders of magnitude (random partitioning sends ~10x what the hypergraph
    model does), so the row panels use a logarithmic axis, and each method's legend entry gives
    its mean rows per rank as a ratio to random's when random is among them (paper 000 Table 2
    normalises the same way).

    Args:
        metrics: method name → its :class:`PartitionMetrics` (same ``num_parts``).
        title: figure title.
    """
    names = list(metrics)
    num_ranks = metrics[names[0]].num_parts
    ranks = np.arange(num_ranks)
    fig = _new_figure(min(18.0, max(8.0, 2.5 + 0.1 * num_ranks * len(names))), 8.0)
    axes = fig.subplots(3, 1, sharex=True)
    width = 0.8 / len(names)
    panels: Sequence[tuple[str, str]] = (
        ("send_rows", "rows sent per exchange"),
        ("recv_rows", "rows received per exchange"),
        ("part_nnz", "non-zeros of Â"),
    )
    for ax, (field, label) in zip(axes, panels, strict=True):
        baseline = float(np.mean(metrics["random"].send_rows)) if "random" in metrics else 0.0
        for i, name in enumerate(names):
            values = getattr(metrics[name], field)
            offset = (i - (len(names) - 1) / 2) * width
            legend = name
            if field == "send_rows" and baseline > 0:
                legend = f"{name} ({float(np.mean(values)) / baseline:.2f}x random)"
            ax.bar(ranks + offset, values, width, label=legend, color=_COLOURS[i % len(_COLOURS)])
        if field != "part_nnz":
            ax.set_yscale("symlog", linthresh=1)  # 0 stays drawable; 10 vs 1000 legible
            label += " (log)"
        ax.set_ylabel(label)
    axes[0].legend(**_LEGEND_OUTSIDE)
    axes[-1].set_xlabel("rank (part)")
    _rank_ticks(axes[-1], num_ranks)
    fig.suptitle(title)
    return fig


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as PNG (parent folders created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path

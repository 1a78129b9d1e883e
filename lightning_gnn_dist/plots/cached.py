"""Plot of the ``cached`` exchange's send log: which rank sent in which epoch (paper 004
Figure 24). Needs matplotlib (``pip install matplotlib``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path


def plot_send_epochs(
    send_logs: Mapping[str, Sequence[tuple[int, str, Sequence[int]]]],
    path: str | Path,
    layer: str | None = None,
) -> Path:
    """One panel per setting; a dot at ``(epoch, rank)`` when ``rank`` sent its rows.

    Args:
        send_logs: per setting label, a :attr:`CachedExchange.send_log
            <lightning_gnn_dist.comm.cached.CachedExchange.send_log>` (``(epoch, layer,
            senders)`` per training round).
        path: the image file to write (PNG, SVG, ... by suffix).
        layer: the layer to show. (default: the first layer in each log)

    Returns:
        ``path``.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:  # optional dependency
        raise ImportError("plot_send_epochs needs matplotlib: pip install matplotlib") from error
    if not send_logs:
        raise ValueError("send_logs is empty: pass at least one setting's send log")
    fig, axes = plt.subplots(
        len(send_logs), 1, figsize=(9, 0.9 + 0.8 * len(send_logs)), sharex=True, squeeze=False
    )
    for ax, (label, log) in zip(axes[:, 0], send_logs.items(), strict=True):
        shown = layer if layer is not None else (log[0][1] if log else None)
        points = [(e, r) for e, name, senders in log if name == shown for r in senders]
        ranks = 1 + max((int(r) for _, _, s in log for r in s), default=0)
        if points:
            epochs, senders = zip(*points, strict=True)
            ax.scatter(epochs, senders, s=6, marker="s")
        ax.set_ylim(-0.5, ranks - 0.5)
        ax.set_yticks(range(ranks))
        ax.set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8)
        ax.tick_params(axis="y", labelsize=6)
    axes[-1, 0].set_xlabel("epoch (dot: the rank sent its rows of the first layer)")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

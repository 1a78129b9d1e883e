"""``cached`` exchange (SANCUS): communication avoided against accuracy kept.

    python -m benchmarks.cached            # default configuration: 168 fits (~1 h on 2 cores)
    python -m benchmarks.cached --quick    # smoke configuration: 18 fits (~1 min)

The committed default run took 62 min on the shared 2-core machine (load average 9–18 from
parallel work, 10–20 s per fit): well over the project's ~10-minute target, so trim
``CONFIGS["default"]`` (seeds, bounds) or pass ``--repeats 1`` when time matters.

For each task (``digits``: the scikit-learn digits kNN graph; ``sbm``: a stochastic block model
with class-informative features), each world size and each base pattern (``p2p``,
``broadcast``), it trains the same 2-layer GCN with the exact base exchange and with every
staleness bound at 2–3 values. One round per seed (model initialisation and dropout) runs the
exact fit and every bound's fit, interleaved (forwards, then backwards for the next seed).
Reported per setting, against the exact run of the same seed in the same invocation:

* feature bytes avoided (forward + backward, and forward only) = 1 − cached ÷ exact bytes, as
  measured by ``CommunicationMonitor``;
* control bytes (the flag all-reduce) ÷ exact feature bytes;
* training step time ÷ exact (pooled medians over the steps after the first, range over seeds);
* final test accuracy − exact (points, mean and standard deviation over seeds), computed after
  training with the exact exchange (evaluation never uses the cache).

A backward comparison runs ``cache_backward="fresh"`` against the main grid's ``"drop"`` (p2p
base). Figures: validation accuracy per epoch (exact vs each bound) and the paper's Figure 24
(which rank sent in which epoch).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
import torch.distributed as dist

from benchmarks.common.fits import fit as lightning_fit
from benchmarks.common.fits import quiet
from benchmarks.harness import Benchmark, Run, figure_path, log, ratio, ratio_cell, run_rounds
from lightning_gnn_dist.lightning.callbacks import CommunicationMonitor
from lightning_gnn_dist.lightning.datamodule import GraphPartitionDataModule
from lightning_gnn_dist.lightning.module import NodeClassifier
from lightning_gnn_dist.lightning.strategy import GNNStrategy
from lightning_gnn_dist.plots.cached import plot_send_epochs

MODEL = {"hidden": 32, "lr": 0.01, "weight_decay": 5e-4, "dropout": 0.5}
TASKS = {
    "digits": "digits",
    "sbm": "sbm?num_nodes=2000&num_classes=5&avg_degree=8&features=32&p_ratio=4&seed=0",
}
BOUNDS = {
    "epoch-fixed": [1, 2, 3],
    "epoch-adaptive": [1, 3],
    "variation-gap": [0.02, 0.05, 0.1],
}
CONFIGS = {
    "default": {
        "epochs": 60,
        "seeds": {"p2p": [0, 1, 2], "broadcast": [0]},
        "world_sizes": [2, 4],
        "bounds": BOUNDS,
        # the main grid drops the gradients of cached rows; this compares returning them
        "backward_main": "drop",
        "backward_compare": [("epoch-fixed", 1), ("variation-gap", 0.05)],
    },
    "quick": {
        "epochs": 20,
        "seeds": {"p2p": [0], "broadcast": [0]},
        "world_sizes": [2],
        "bounds": {k: v[:1] for k, v in BOUNDS.items()},
        "backward_main": "drop",
        "backward_compare": [("epoch-fixed", 1)],
    },
}
EXACT = ("exact", None, "fresh")


def _test_accuracy(trainer, pl_module) -> dict:
    """Every rank: test accuracy with the exact exchange; rank 0 also returns the send log."""
    batch = trainer.datamodule.batch
    pl_module.eval()
    with torch.no_grad(), trainer.strategy._in_graph("test"):
        out = pl_module(batch.x, batch.edge_index)
    mask = batch.test_mask
    counts = torch.tensor(
        [float((out[mask].argmax(-1) == batch.y[mask]).sum()), float(mask.sum())],
        dtype=torch.float64,
    )
    dist.all_reduce(counts)
    exchange = trainer.strategy.graph_context.exchange
    return {"test_acc": float(counts[0] / counts[1]), "send_log": getattr(exchange, "send_log", [])}


def fit(task: str, world: int, root: Path, seed: int, epochs: int, options: dict) -> dict:
    """One training run; ``options`` are ``GNNStrategy`` arguments (``exchange`` included)."""
    datamodule = GraphPartitionDataModule(
        TASKS[task], method="metis", num_parts=world, root=str(root)
    )
    pl.seed_everything(seed, verbose=False)
    module = NodeClassifier(
        "gcn",
        hidden_channels=MODEL["hidden"],
        dropout=MODEL["dropout"],
        lr=MODEL["lr"],
        weight_decay=MODEL["weight_decay"],
    )
    strategy = GNNStrategy(start_method="fork", timeout=300, **options)
    record = lightning_fit(
        module, datamodule, strategy, world, epochs, CommunicationMonitor(), _test_accuracy
    )
    return {
        "test_acc": record["test_acc"],
        "val_acc": record["val_acc"],
        "bytes": {
            d: sum(r["bytes_total"] for r in record["traffic"] if r["direction"] == d)
            for d in ("forward", "backward", "control")
        },
        "step_seconds": record["step_seconds"][1:],
        "send_log": record["send_log"],
    }


def summarise(runs: list[dict], exact: list[dict]) -> dict:
    """Mean and spread over seeds of the comparisons with the exact run of the same seed (both
    lists in seed order); the step time ratio of pooled medians, with its range over seeds."""

    def feature(r: dict) -> int:
        return r["bytes"]["forward"] + r["bytes"]["backward"]

    pairs = list(zip(runs, exact, strict=True))
    time_ratio = ratio([r["step_seconds"] for r in runs], [e["step_seconds"] for e in exact])
    delta = [100 * (r["test_acc"] - e["test_acc"]) for r, e in pairs]
    return {
        "avoided": float(np.mean([1 - feature(r) / feature(e) for r, e in pairs])),
        "forward_avoided": float(
            np.mean([1 - r["bytes"]["forward"] / e["bytes"]["forward"] for r, e in pairs])
        ),
        "control_ratio": float(np.mean([r["bytes"]["control"] / feature(e) for r, e in pairs])),
        "time_ratio": time_ratio.value,
        "time_ratio_per_seed": list(time_ratio.per_round),
        "acc": float(np.mean([r["test_acc"] for r in runs])),
        "delta_acc_mean": float(np.mean(delta)),
        "delta_acc_std": float(np.std(delta)),
    }


def _options(base: str, staleness: str, bound, backward: str) -> dict:
    if staleness == "exact":
        return {"exchange": base}
    return {
        "exchange": "cached",
        "cache_base": base,
        "staleness": staleness,
        "staleness_bound": bound,
        "cache_backward": backward,
    }


def run_group(r: Run, cfg: dict, task: str, world: int, base: str) -> None:
    """Exact and every setting of one (task, world, base) in one round per seed."""
    settings = [EXACT] + [
        (s, b, cfg["backward_main"]) for s, bs in cfg["bounds"].items() for b in bs
    ]
    if base == "p2p":
        other = "fresh" if cfg["backward_main"] == "drop" else "drop"
        settings += [(s, b, other) for s, b in cfg["backward_compare"]]
    seeds = cfg["seeds"][base]

    def variant(setting: tuple):
        def measure(round_index: int) -> dict:
            seed = seeds[round_index]
            result = fit(task, world, r.cache_dir, seed, cfg["epochs"], _options(base, *setting))
            log(f"{task} P={world} {base} {' '.join(map(str, setting))} seed={seed}: "
                f"acc={result['test_acc']:.3f} bytes={result['bytes']}")  # fmt: skip
            return result

        return measure

    results = run_rounds({s: variant(s) for s in settings}, len(seeds))
    key = {"task": task, "world": world, "base": base}
    figure = (task, world, base) == ("digits", max(cfg["world_sizes"]), "p2p")
    for (staleness, bound, backward), runs in results.items():
        names = {"staleness": staleness, "bound": bound, "backward": backward}
        if staleness != "exact":
            r.report["summary"].append({**key, **names, **summarise(runs, results[EXACT])})
            if figure and backward == cfg["backward_main"]:
                r.report["send_logs"][f"{staleness} {bound}"] = runs[0]["send_log"]
        for seed, x in zip(seeds, runs, strict=True):
            kept = {k: v for k, v in x.items() if k not in ("step_seconds", "send_log")}
            step_ms = 1e3 * float(np.median(x["step_seconds"]))
            r.report["runs"].append({**key, **names, "seed": seed, **kept, "step_ms": step_ms})
    acc = float(np.mean([x["test_acc"] for x in results[EXACT]]))
    r.report["exact_acc"][f"{task}/{world}/{base}"] = acc


def run(r: Run) -> None:
    quiet()
    cfg = CONFIGS["quick" if r.quick else "default"]
    if r.args.repeats:
        cfg = dict(cfg, seeds={base: list(range(r.args.repeats)) for base in cfg["seeds"]})
    r.report.update(config=cfg, tasks=TASKS, model=MODEL, summary=[], exact_acc={}, runs=[])
    r.report["time_statistic"] = "ratio of the medians pooled over seeds, range over seeds"
    r.report["send_logs"] = {}
    for task in TASKS:
        for world in cfg["world_sizes"]:
            for base in cfg["seeds"]:
                run_group(r, cfg, task, world, base)
                r.report["fits"] = len(r.report["runs"])
                r.save()


def render(report: dict) -> str:
    cfg, model = report["config"], report["model"]
    lines = [
        "# `cached` exchange (SANCUS) benchmark",
        "",
        f"{report['fits']} fits of {cfg['epochs']} epochs, seeds {cfg['seeds']}, GCN 2 layers "
        f"hidden {model['hidden']}, dropout {model['dropout']}, Adam lr {model['lr']}, METIS "
        "partition. Ratios against the exact base mode of the same seed in the same invocation "
        f"(step time: {report['time_statistic']}); accuracy is the final test accuracy with an "
        "exact evaluation exchange.",
        "",
        "Exact accuracy (mean over seeds): "
        + ", ".join(f"{k.replace('/', ' P=', 1)}: {v:.3f}" for k, v in report["exact_acc"].items()),
        "",
        "| task | P | base | bound | ε | backward | feature bytes avoided | forward avoided | "
        "control ÷ exact bytes | step time ÷ exact | Δ test acc (points, mean ± sd) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["summary"]:
        time_ratio = ratio_cell(r["time_ratio"], r.get("time_ratio_per_seed", []))
        lines.append(
            f"| {r['task']} | {r['world']} | {r['base']} | {r['staleness']} | {r['bound']} | "
            f"{r['backward']} | {100 * r['avoided']:.1f} % | {100 * r['forward_avoided']:.1f} % | "
            f"{100 * r['control_ratio']:.2f} % | {time_ratio} | "
            f"{r['delta_acc_mean']:+.2f} ± {r['delta_acc_std']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def draw(report: dict, stem: Path) -> None:
    """Convergence (validation accuracy per epoch, mean over seeds, exact vs each bound, p2p,
    largest P) and, when the report holds send logs, which rank sent in which epoch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = report["config"]
    world = max(cfg["world_sizes"])
    fig, axes = plt.subplots(1, len(TASKS), figsize=(6 * len(TASKS), 4), squeeze=False)
    for ax, task in zip(axes[0], TASKS, strict=True):
        curves: dict[tuple, list] = {}
        for x in report["runs"]:
            exact = x["staleness"] == "exact"
            if (x["task"], x["world"], x["base"]) == (task, world, "p2p") and (
                exact or x["backward"] == cfg["backward_main"]
            ):
                curves.setdefault((x["staleness"], x["bound"]), []).append(x["val_acc"])
        for (staleness, bound), values in curves.items():
            exact = staleness == "exact"
            ax.plot(
                np.mean(values, axis=0),
                label="exact" if exact else f"{staleness} {bound}",
                linewidth=2.5 if exact else 1,
                color="black" if exact else None,
            )
        ax.set_title(f"{task}, P = {world}, p2p base")
        ax.set_xlabel("epoch")
        ax.set_ylabel("validation accuracy")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(figure_path(stem, "convergence"), dpi=110)
    plt.close(fig)
    if report.get("send_logs"):  # reports written before the harness did not keep them
        plot_send_epochs(report["send_logs"], figure_path(stem, "sends"), layer=None)


BENCHMARK = Benchmark("cached", __doc__, run, render, repeats=3, quick_repeats=1, draw=draw)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())

"""The full-batch benchmark's markdown, from its report alone."""

from __future__ import annotations

import statistics

from benchmarks.harness import ratio_cell


def wait_cell(run: dict) -> str:
    """The broadcast exchange blocks inside its collectives when it posts, so the monitor's
    wait time (measured around ``wait()``) is always 0 for it: not comparable, not shown."""
    return "n/a" if run["exchange"] == "broadcast" else f"{run['exchange_wait_ms']:.1f}"


def stock_delta(d: dict) -> str:
    """`` (rank 0: +N MiB)``: what the stock ``prepare_data`` adds to rank 0's peak."""
    runs = {(r["kind"], r["world_size"]): r for r in d["distributed"]}
    for (kind, world), stock in runs.items():
        prebuilt = runs.get(("dist", world))
        if kind == "dist-stock" and prebuilt is not None:
            delta = stock["ranks"][0]["peak_rss_mib"] - prebuilt["ranks"][0]["peak_rss_mib"]
            return f" (rank 0 at {world} ranks: {delta:+.0f} MiB)"
    return ""


def _all_match(report: dict) -> bool:
    runs = [row[e] for row in report.get("b", []) for e in ("p2p", "broadcast")]
    runs += report.get("c", [])
    return all(run["bytes_match"] for run in runs)


def _ms_list(values: list[float]) -> str:
    return ", ".join(f"{v:.0f}" for v in values)


def section_c_markdown(report: dict, world: int) -> list[str]:
    c = report["c"]
    lines = [
        "",
        f"## (c) partitioners and vertex weights at {world} ranks (p2p exchange)",
        "",
        "`method:weight` is the partitioner with `vertex_weight=weight` "
        "(`lightning_gnn_dist.partition.weights`): `nnz` the row non-zeros of Â (paper 000), "
        "`work` the cost model's per-vertex layer work for this model's widths, `nnz+rows` "
        "non-zeros and rows as two METIS constraints. Time ratios: pooled medians, in "
        "parentheses the range over repeat blocks.",
        "",
        "| method | volume (rows/exchange) | nnz imb. | rows imb. | owned vertices per rank | "
        "bytes / random | epoch time (ms) | time / random | time / METIS | exchange wait (ms) "
        "| partitioning (s, not in epoch) |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in c:
        part = report["partitions"][f"{r['method']}-p{r['world_size']}"]
        sizes = ", ".join(f"{s:,}" for s in part["part_sizes"])
        over_metis = (
            ratio_cell(r["time_ratio_over_metis"], r["time_ratio_over_metis_per_repeat"])
            if "time_ratio_over_metis" in r
            else "–"
        )
        lines.append(
            f"| {r['method']} | {part['total_volume_rows']:,} | {part['imbalance']:.3f} "
            f"| {part.get('rows_imbalance', max(part['part_sizes']) * len(part['part_sizes']) / sum(part['part_sizes'])):.3f} "
            f"| {sizes} | {r['bytes_ratio_over_random']:.3f} | {r['epoch_ms']:.1f} "
            f"| {ratio_cell(r['time_ratio_over_random'], r['time_ratio_over_random_per_repeat'])} "
            f"| {over_metis} | {wait_cell(r)} | {part['partition_seconds']:.1f} |"
        )
    lines += [
        "",
        "Per rank (medians over the measured epochs of all fits, ms): 'compute' is "
        "`CommunicationMonitor`'s step time minus exchange wait (wall clock, so on this "
        "oversubscribed machine it also counts time a rank waits for a core), 'wait' its "
        "exchange wait, 'CPU' the process CPU time of the training step (`time.process_time`, "
        "which does not count waiting for a core or for peers: the rank's own work). "
        "'Predicted' is the cost model (`costmodel.predict_epoch`, compute calibrated in this "
        "run, loopback network, compute scaled by ranks / cores). 'One core per rank' is the "
        "same model without that scaling and with the costs the `work` weight was fitted with "
        "(`weights.reference_costs()`): model output for a machine where the ranks do not "
        "share cores, not measured.",
        "",
        "| method | compute per rank | max/mean compute | wait per rank | CPU per rank | "
        "max/mean CPU | max CPU / random's | max CPU / METIS's | predicted compute per rank | "
        "predicted max/mean | predicted epoch / random's | one core per rank: "
        "predicted epoch / random's | / METIS's |",
        "|---|---|---:|---|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in c:
        over_metis = (
            f"{r['cpu_max_ratio_over_metis']:.2f}" if "cpu_max_ratio_over_metis" in r else "–"
        )
        lines.append(
            f"| {r['method']} | {_ms_list(r['rank_compute_seconds_ms'])} "
            f"| {r['compute_max_over_mean']:.2f} | {_ms_list(r['rank_wait_seconds_ms'])} "
            f"| {_ms_list(r['rank_cpu_seconds_ms'])} | {r['cpu_max_over_mean']:.2f} "
            f"| {r['cpu_max_ratio_over_random']:.2f} | {over_metis} "
            f"| {_ms_list(r['predicted_compute_ms'])} "
            f"| {r['predicted_compute_max_over_mean']:.2f} "
            f"| {r['predicted_ratio_over_random']:.2f} "
            f"| {r['dedicated_predicted_ratio_over_random']:.2f} "
            f"| {r.get('dedicated_predicted_ratio_over_metis', float('nan')):.2f} |"
        )
    lines += [
        "",
        "Measured bytes equal the predicted bytes in every run of (b) and (c): "
        + ("**yes**." if _all_match(report) else "**NO**."),
        "'nnz imb.' and 'rows imb.' are max / mean over the parts of the non-zeros of Â and of "
        "the owned vertices: balancing non-zeros alone leaves the per-row (dense, element-wise) "
        "work and the feature memory unbalanced on a power-law graph.",
    ]
    return lines


def render(report: dict) -> str:
    m, g, cfg, mdl = report["machine"], report["graph"], report["config"], report["model"]
    threads = m.get("threads") or {}
    lines = [
        "# Full-batch training benchmark",
        "",
        f"{report['mode'].capitalize()} mode. CPU only, "
        f"OMP_NUM_THREADS={threads.get('OMP_NUM_THREADS')} (torch threads per process), gloo on "
        f"`{threads.get('GLOO_SOCKET_IFNAME')}`.",
        "",
        f"Graph: `{g['spec']}`: {g['num_nodes']:,} vertices, {g['num_edges']:,} directed edges "
        f"after canonicalisation, {g['num_features']} features, {g['num_classes']} classes, "
        f"{g['train_vertices']:,} training vertices. Model: GCNConv({g['num_features']}, {mdl['hidden_channels']}) "
        f"→ ReLU → dropout {mdl['dropout']} → GCNConv({mdl['hidden_channels']}, {g['num_classes']}), "
        f"Adam (lr {mdl['lr']}, weight decay {mdl['weight_decay']}), one full-batch step per epoch. "
        f"Each fit runs "
        f"{cfg['epochs']} epochs, the first is a warm-up and is dropped; each configuration is fit "
        f"{cfg['repeats']} time(s) (section (a): at least twice), interleaved with the "
        "configurations it is compared with (A B B A A B ...), and times are medians over the "
        "pooled epochs. A time ratio is the ratio of pooled medians; in parentheses, the smallest "
        "and largest ratio between fits of the same repeat block, which shows how much the "
        "machine's load moved it.",
        "",
        "## How to read",
        "",
        "Every comparison is a ratio of runs made in this invocation, so the speed of the machine "
        "and slow drifts in its load cancel; absolute numbers only show the scale. A ratio below 1 "
        "means the configuration in the row is cheaper than the baseline named in the column. "
        "Epoch time is rank 0's wall time from `on_train_epoch_start` to `on_train_epoch_end`: the "
        "step, the halo exchange, the gradient all-reduce and Lightning's per-step work "
        "(validation, sanity checks, checkpointing, progress bars and loggers are off; "
        "partitioning happens before, its time is listed separately). Bytes are the halo-exchange "
        "bytes of one epoch summed over layers, forward and backward, and ranks, as counted by "
        "`CommunicationMonitor`; 'predicted' is computed from the partition alone (p2p: the rows of "
        "the send plans; broadcast: (P−1)·N rows per layer and direction) times the exchanged "
        f"width (GCN exchanges min(in, out) = {report['widths']} columns per layer) times 4 bytes. "
        "'Exchange wait' is `CommunicationMonitor`'s time spent waiting for halo rows, summed "
        "over layers and directions, of the slowest rank, for p2p; it includes waiting for a "
        "slower peer to reach the exchange. The broadcast mode runs its collectives "
        "synchronously before the point where the monitor times the wait, so it always "
        "reports 0 there (n/a). "
        f"**Oversubscription:** the machine has {m['logical_cores']} cores, so 4 ranks "
        "time-share them (and 2 ranks share them with anything else running): multi-rank epoch "
        "times are not speed-ups over one process, and epoch times of different world sizes "
        "should not be compared with each other (when other processes load the machine, more "
        "ranks also get a larger share of it). The ratios still compare like with like, "
        "because both sides of every ratio in (b) and (c) run the same number of ranks on the "
        "same cores, interleaved in time.",
        "",
    ]
    if "a" in report:
        lines += _section_a(report["a"])
    if "b" in report:
        lines += _section_b(report["b"])
    if "c" in report:
        lines += section_c_markdown(report, cfg["methods_world_size"])
    if "d" in report:
        lines += _section_d(report["d"], g, cfg)
    return "\n".join(lines)


def _section_a(a: dict) -> list[str]:
    return [
        "## (a) GNNStrategy with one process vs a plain PyG loop",
        "",
        "| configuration | epoch time (ms) | ratio to plain |",
        "|---|---:|---:|",
        f"| plain PyG loop, whole graph, `GCNConv` (default, normalisation recomputed every call) "
        f"| {a['plain_epoch_ms']:.1f} | 1.00 |",
        f"| plain PyG loop, `GCNConv(cached=True)` | {a['plain_cached_epoch_ms']:.1f} "
        f"| {ratio_cell(a['ratio_plain_cached_over_plain'], a['ratio_plain_cached_over_plain_per_repeat'])} |",
        f"| Lightning + GNNStrategy, 1 process (`gnn_ddp_fork`, devices=1) "
        f"| {a['gnn_strategy_epoch_ms']:.1f} "
        f"| {ratio_cell(a['ratio_gnn_strategy_over_plain'], a['ratio_gnn_strategy_over_plain_per_repeat'])} |",
        "",
        "GNNStrategy over the cached plain loop: "
        f"{a['ratio_gnn_strategy_over_plain_cached']:.2f}. The distributed GCN layer computes the "
        "normalised adjacency once per partition (with global degrees) and reuses it, like "
        "`cached=True`; the default `GCNConv` recomputes it in every forward pass. Epochs measured "
        "per configuration: "
        + ", ".join(f"{k} {v}" for k, v in a["epochs_measured"].items())
        + ".",
        "",
    ]


def _section_b(b: list[dict]) -> list[str]:
    lines = [
        "## (b) p2p vs broadcast halo exchange (hypergraph partition)",
        "",
        "| ranks | exchange | bytes/epoch measured | bytes/epoch predicted | match | "
        "epoch time (ms) | exchange wait (ms) | bytes p2p/broadcast | time p2p/broadcast |",
        "|---:|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for row in b:
        for ex in ("p2p", "broadcast"):
            r = row[ex]
            time_ratio = ratio_cell(
                row["time_ratio_p2p_over_broadcast"],
                row["time_ratio_p2p_over_broadcast_per_repeat"],
            )
            ratios = (
                f"{row['bytes_ratio_p2p_over_broadcast']:.3f} | {time_ratio}"
                if ex == "p2p"
                else " | "
            )
            lines.append(
                f"| {row['world_size']} | {ex} | {r['bytes_measured']:,} | {r['bytes_predicted']:,} "
                f"| {'yes' if r['bytes_match'] else 'NO'} | {r['epoch_ms']:.1f} | "
                f"{wait_cell(r)} | {ratios} |"
            )
    return lines


def _section_d(d: dict, g: dict, cfg: dict) -> list[str]:
    lines = []
    lines += [
        "",
        "## (d) peak memory per rank vs one process on the whole graph",
        "",
        "| configuration | ranks | owned vertices per rank | peak RSS per rank (MiB) | "
        "after-import RSS (MiB) | max peak / single | max (peak − after-import) / single |",
        "|---|---:|---|---|---:|---:|---:|",
    ]
    single = d["single"]["ranks"][0]
    lines.append(
        f"| one process, whole graph, plain PyG loop | 1 | {g['num_nodes']:,} | "
        f"{single['peak_rss_mib']:.0f} | {single['baseline_rss_mib']:.0f} | 1.00 | 1.00 |"
    )
    for run in d["distributed"]:
        label = (
            "GNNStrategy, stock `GraphPartitionDataModule`"
            if run["kind"] == "dist-stock"
            else "GNNStrategy, stores prebuilt, `prepare_data` skipped"
        )
        ranks = sorted(run["ranks"], key=lambda r: r["rank"])
        peaks = ", ".join(f"{r['peak_rss_mib']:.0f}" for r in ranks)
        sizes = ", ".join(f"{s:,}" for s in run["owned_vertices"])
        base = statistics.mean(r["baseline_rss_mib"] for r in ranks)
        lines.append(
            f"| {label} | {run['world_size']} | {sizes} | {peaks} | {base:.0f} | "
            f"{run['max_peak_ratio_over_single']:.2f} | "
            f"{run['max_above_baseline_ratio_over_single']:.2f} |"
        )
    lines += [
        "",
        f"Single process: peak {single['peak_rss_mib']:.0f} MiB, of which "
        f"{single['peak_above_baseline_mib']:.0f} MiB above the after-import RSS.",
        "",
        "Method: every configuration runs in fresh interpreters: the benchmark's worker process "
        '(`benchmarks.full_batch.worker`) started with `subprocess`, and for several ranks `GNNStrategy(start_method="popen")`, '
        "Lightning's subprocess launcher, which starts ranks 1.. as new `python` processes. No "
        "rank is a fork of a process that held the graph, so copy-on-write pages cannot hide or "
        "double-count memory. Each process reports `VmHWM` from `/proc/self/status` (its RSS "
        "high-water mark since `exec`) after `fit` (or after the plain loop) to a file of its own. "
        "`ru_maxrss` from `getrusage` is recorded in the JSON but not used: Linux folds the "
        "address space a process had before `exec` into it, and `subprocess` starts children "
        "with `vfork`, whose pre-`exec` address space is the parent's, so rank 0 (started by "
        "this driver) reports the driver's peak. 'After-import RSS' is measured once torch, "
        "Lightning, PyG and the package are imported, before any graph data exists; every process "
        "pays it (about 0.4 GiB here), so the last column compares only what the graph and "
        "training add. In the 'prebuilt' rows the datamodule skips `prepare_data` because the "
        "stores exist, so no rank ever holds the whole graph. The stock "
        "`GraphPartitionDataModule.prepare_data` loads the whole dataset on local rank 0 (to "
        "fingerprint it against the store) even when the store exists; compare rank 0 in the "
        f"'stock' row with the 'prebuilt' row of the same size{stock_delta(d)}. Training ran "
        f"{cfg['memory_epochs']} epochs"
        + (
            "; the configurations ran concurrently (memory readings do not depend on CPU "
            "contention)."
            if d["parallel"]
            else "; the configurations ran one after another."
        ),
        "",
    ]
    return lines

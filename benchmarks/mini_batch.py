"""Data-parallel mini-batches: the neighbour sampler, remote fetches, ranks, prefetch.

    python -m benchmarks.mini_batch            # default configuration (~6 min on 2 cores)
    python -m benchmarks.mini_batch --quick    # smoke configuration (< 1 min)

Graph: a directed R-MAT graph (default ``scale=16, edge_factor=17``: 65,536 vertices, ~1.01 M
edges, 100 features, 16 classes); model: PyG ``GraphSAGE`` with 2 layers of width 256; sampler
``[25, 10]``, 1024 seeds per step and rank. Every figure is a ratio against a baseline measured
in the same invocation (absolute numbers are given alongside); the runs compared with and
without prefetch alternate in ``--repeats`` interleaved rounds. Sections:

(a) sampler throughput (sampled edges/s, one process, whole graph) and the sampling share of a
    training step: ``(sample + feature gather) / step`` without prefetch, and the time a step
    still waits for its batch with prefetch;
(b) remote traffic per step at 4 ranks for hypergraph, METIS, ``gnn-blocks`` and random
    partitions, normalised to random: feature rows fetched from other ranks, their bytes, and
    sampling request/response bytes; plus the bytes a cache of hot remote rows saves;
(c) time per step and peak memory per rank at 1, 2 and 4 ranks against one process training on
    the whole graph with the same sampler (2 cores here: 4 ranks oversubscribe them);
(d) prefetch gain: time per step with the next batch sampled in a background thread, against
    without, at 1 and 2 ranks;
(e) the alternative to owner sampling: replicating the in-edges of every rank's halo vertices
    (enough for 2-hop sampling, whose second-hop frontier is owned or halo) — the edges a rank
    would hold, against its own, per partition method.

Every measurement runs in a forked child of a parent that never loads the graph, so each peak
RSS is that process's own.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch_geometric.nn import GraphSAGE

from benchmarks.common.processes import call_in_child, peak_rss_bytes, rss_bytes, run_ranks
from benchmarks.common.stores import build_store, store_path
from benchmarks.harness import Benchmark, Run, log, ratio, ratio_cell, run_rounds
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.loaders import LocalGraphStore, NeighborLoader, PartitionedGraphStore
from lightning_gnn_dist.partition.store import PartitionStore

FANOUT, BATCH, HIDDEN = [25, 10], 1024, 256
METHODS = ("random", "metis", "hypergraph", "gnn-blocks")
CACHE_ROWS = 4096


def _model(data_features: int, classes: int):
    torch.manual_seed(0)
    return GraphSAGE(data_features, HIDDEN, 2, classes)


def _epochs(loader):
    """Batches of epoch after epoch (every rank runs the same steps per epoch)."""
    while True:
        yield from loader


def _train_steps(loader, model, steps: int, world: int) -> dict:
    """Time ``steps`` training steps after one warm-up step; split batch wait vs compute."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    params = list(model.parameters())
    wait, total = [], []
    iterator = _epochs(loader)
    for step in range(steps + 1):
        start = time.perf_counter()
        batch = next(iterator)
        got = time.perf_counter()
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[: batch.batch_size]
        F.cross_entropy(out, batch.y[: batch.batch_size]).backward()
        if world > 1:
            flat = torch.cat([p.grad.flatten() for p in params])
            dist.all_reduce(flat)
            flat /= world
            offset = 0
            for p in params:
                p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
                offset += p.numel()
        optimizer.step()
        if step:
            wait.append(got - start)
            total.append(time.perf_counter() - start)
    return {"step_s": statistics.median(total), "wait_s": statistics.median(wait)}


# -- (a) ------------------------------------------------------------------------------------------
def sampler_section(spec: str, steps: int, repeats: int) -> dict:
    start_rss = rss_bytes()
    data = load_dataset(spec)
    store = LocalGraphStore(data)
    loader = NeighborLoader(store, FANOUT, data.train_mask, batch_size=BATCH, shuffle=True)
    positions = loader.batches()[: steps + 1]
    sample_s, fetch_s, edges = [], [], 0
    for step, pos in enumerate(positions):
        seeds = loader._seeds[pos]
        t0 = time.perf_counter()
        graph = loader.neighbor_sampler.sample(seeds, step, store.sample_hop)
        t1 = time.perf_counter()
        store.fetch(graph.n_id)
        t2 = time.perf_counter()
        if step:
            sample_s.append(t1 - t0)
            fetch_s.append(t2 - t1)
            edges += graph.edge_index.size(1)
    model = _model(data.num_features, int(data.y.max()) + 1)

    def train(prefetch: bool) -> dict:
        loader.prefetch = prefetch
        return _train_steps(loader, model, steps, 1)

    runs = run_rounds({"plain": lambda r: train(False), "prefetch": lambda r: train(True)}, repeats)
    step_s = {k: statistics.median(x["step_s"] for x in v) for k, v in runs.items()}
    gain = ratio(*([[x["step_s"]] for x in runs[k]] for k in ("plain", "prefetch")))
    wait_prefetch = statistics.median(x["wait_s"] for x in runs["prefetch"])
    sample = statistics.median(sample_s)
    batch_s = sample + statistics.median(fetch_s)
    return {
        "num_nodes": data.num_nodes,
        "num_edges": int(data.edge_index.size(1)),
        "steps_per_epoch": loader.num_steps,
        "sampled_edges_per_step": edges / len(sample_s),
        "sample_s": sample,
        "sampled_edges_per_s": edges / sum(sample_s),
        "batch_s": batch_s,
        "step_s": step_s["plain"],
        "sampling_share": batch_s / step_s["plain"],
        "step_s_prefetch": step_s["prefetch"],
        "prefetch_gain_per_round": list(gain.per_round),
        "visible_sampling_share_prefetch": wait_prefetch / step_s["prefetch"],
        "peak_above_start_mib": (peak_rss_bytes() - start_rss) / 2**20,
    }


# -- (b)-(d) --------------------------------------------------------------------------------------
def partition(spec: str, method: str, parts: int, root: Path) -> str:
    """The store of ``method`` with ``parts`` (built, or reused from ``root``); its folder."""
    build_store(load_dataset(spec), spec, root, method, parts)
    return str(store_path(spec, root, method, parts))


def _rank_run(rank, world, store_path, steps, cache_size, prefetch, train):
    start_rss = rss_bytes()
    part = PartitionStore.open(store_path).load_part(rank)
    group = dist.new_group(backend="gloo") if prefetch else None
    store = PartitionedGraphStore(part, group=group, cache_size=cache_size)
    counts = PartitionStore.open(store_path).meta["mask_counts"]["train_mask"]
    loader = NeighborLoader(
        store,
        FANOUT,
        part.train_mask,
        batch_size=BATCH,
        shuffle=True,
        num_steps=-(-max(counts) // BATCH),
        prefetch=prefetch,
    )
    result = {}
    if train:
        model = _model(part.x.size(1), 16)
        for p in model.parameters():
            dist.broadcast(p.data, 0)
        store.counter.reset()
        result.update(_train_steps(loader, model, steps, world))
        steps += 1  # the warm-up step moved bytes too
    else:
        store.counter.reset()
        for _ in zip(range(steps), _epochs(loader), strict=False):
            pass
    traffic = {(t["layer"], t["direction"]): t for t in store.counter.as_dicts()}

    def got(layer, direction, key):
        return traffic.get((layer, direction), {}).get(key, 0) / steps

    result.update(
        remote_rows_per_step=got("features", "request", "rows_sent"),
        feature_bytes_per_step=got("features", "response", "bytes_received")
        + got("features.ids", "response", "bytes_received")
        + got("features", "request", "bytes_sent"),
        sampling_bytes_per_step=got("sampling", "request", "bytes_sent")
        + got("sampling", "response", "bytes_received")
        + got("control", "request", "bytes_sent")
        + got("control", "response", "bytes_received"),
        cache_hit_rows_per_step=store.cache_hit_rows / steps,
        row_bytes=part.x.size(1) * part.x.element_size(),
        steps_per_epoch=loader.num_steps,
        peak_above_start_mib=(peak_rss_bytes() - start_rss) / 2**20,
    )
    return result


def halo_structure(store_path: str) -> dict:
    """Per rank: own in-edges, and the in-edges of its halo vertices it would have to replicate."""
    store = PartitionStore.open(store_path)
    own, halo = [], []
    for rank in range(store.num_parts):
        part = store.load_part(rank)
        own.append(int(part.edge_index.size(1)))
        halo.append(int(part.in_degree[part.num_owned :].sum()))
    return {"own_edges": own, "halo_in_edges": halo}


def _ranks(world: int, path: str, steps: int, cache: int, prefetch: bool, train: bool) -> dict:
    """Every rank's results of one forked run, averaged over ranks (and the peak's max)."""
    results = run_ranks(_rank_run, world, path, steps, cache, prefetch, train)
    mean = {k: statistics.fmean(r[k] for r in results) for k in results[0]}
    mean["peak_above_start_mib_max"] = max(r["peak_above_start_mib"] for r in results)
    return mean


def _median_over_rounds(runs: list[dict]) -> dict:
    return {k: statistics.median(run[k] for run in runs) for k in runs[0]}


def run(r: Run) -> None:
    scale, steps = (13, 3) if r.quick else (16, 6)
    spec = f"rmat?scale={scale}&edge_factor=17&features=100&classes=16"
    root = r.cache_dir
    report = r.report
    report.update(graph=spec, fanout=FANOUT, batch_size=BATCH, hidden=HIDDEN, steps=steps)
    report.update(repeats=r.repeats, cache_rows=CACHE_ROWS)

    log("(a) sampler and sampling share")
    report["sampler"] = call_in_child(sampler_section, spec, steps, r.repeats)

    log("(b) remote traffic per partition method at 4 ranks")
    stores = {m: call_in_child(partition, spec, m, 4, root) for m in METHODS}
    traffic = {m: _ranks(4, path, steps, 0, False, False) for m, path in stores.items()}
    traffic["metis+cache"] = _ranks(4, stores["metis"], steps, CACHE_ROWS, False, False)
    for t in traffic.values():
        del t["peak_above_start_mib_max"]
    report["traffic"] = traffic
    report["halo_structure"] = {m: call_in_child(halo_structure, p) for m, p in stores.items()}

    log("(c, d) steps and memory at 1, 2, 4 ranks; prefetch")
    scaling = {}
    for world in (2, 4):
        path = stores["metis"] if world == 4 else call_in_child(partition, spec, "metis", 2, root)
        variants = {str(world): lambda i, p=path, w=world: _ranks(w, p, steps, 0, False, True)}
        if world == 2:
            variants["2+prefetch"] = lambda i, p=path: _ranks(2, p, steps, 0, True, True)
        runs = run_rounds(variants, r.repeats)
        scaling.update({key: _median_over_rounds(v) for key, v in runs.items()})
        if world == 2:
            gain = ratio(*([[x["step_s"]] for x in runs[k]] for k in ("2", "2+prefetch")))
            scaling["2+prefetch"]["prefetch_gain_per_round"] = list(gain.per_round)
    report["scaling"] = scaling


def render(r: dict) -> str:
    s = r["sampler"]
    lines = [
        "# Mini-batch (neighbour loader) benchmark",
        "",
        f"Graph `{r['graph']}` ({s['num_nodes']:,} vertices, {s['num_edges']:,} edges), GraphSAGE 2 x {r['hidden']}, "
        f"fan-out {r['fanout']}, {r['batch_size']} seeds per step and rank; medians over {r['steps']} steps "
        f"after one warm-up; {r['repeats']} interleaved round(s) of the runs compared (ranges over rounds "
        "in parentheses).",
        "",
        "## (a) Sampler, one process",
        "",
        "| sampled edges / step | sample (ms) | sampled edges / s | sample + gather (ms) | step (ms) | sampling share of step | step with prefetch (ms) | share still waited with prefetch |",
        "|---|---|---|---|---|---|---|---|",
        f"| {s['sampled_edges_per_step']:,.0f} | {1e3 * s['sample_s']:.1f} | {s['sampled_edges_per_s']:,.0f} | "
        f"{1e3 * s['batch_s']:.1f} | {1e3 * s['step_s']:.1f} | **{s['sampling_share']:.1%}** | "
        f"{1e3 * s['step_s_prefetch']:.1f} | {s['visible_sampling_share_prefetch']:.1%} |",
        "",
        "## (b) Remote traffic per step and rank, 4 ranks (normalised to random)",
        "",
        "| partition | remote feature rows | feature bytes | sampling bytes | cache hits (rows) |",
        "|---|---|---|---|---|",
    ]
    base = r["traffic"]["random"]
    for method, t in r["traffic"].items():
        lines.append(
            f"| {method} | {t['remote_rows_per_step']:,.0f} ({t['remote_rows_per_step'] / base['remote_rows_per_step']:.2f}) | "
            f"{t['feature_bytes_per_step'] / 2**20:.2f} MiB ({t['feature_bytes_per_step'] / base['feature_bytes_per_step']:.2f}) | "
            f"{t['sampling_bytes_per_step'] / 2**10:.0f} KiB ({t['sampling_bytes_per_step'] / max(1, base['sampling_bytes_per_step']):.2f}) | "
            f"{t['cache_hit_rows_per_step']:,.0f} |"
        )
    lines += [
        "",
        f"`metis+cache`: {r['cache_rows']} hot remote rows per rank (halo vertices with the most local in-edges) "
        "fetched once; the rows they serve are not requested again.",
        "",
        "## (c, d) Time per step and memory per rank (METIS), against one process on the whole graph",
        "",
        "Epoch time = steps per epoch x step time (every rank runs the same steps; P ranks "
        "each take 1024 seeds per step, so an epoch has about 1/P of the single process's steps).",
        "",
        "| run | steps / epoch | step (ms) | step / single | epoch (s) | epoch / single | peak RSS above start, max over ranks (MiB) | / single |",
        "|---|---|---|---|---|---|---|---|",
        f"| 1 process, whole graph | {s['steps_per_epoch']} | {1e3 * s['step_s']:.1f} | 1.00 | "
        f"{s['step_s'] * s['steps_per_epoch']:.2f} | 1.00 | {s['peak_above_start_mib']:.0f} | 1.00 |",
    ]
    single_epoch = s["step_s"] * s["steps_per_epoch"]
    for key, t in r["scaling"].items():
        peak = t.get("peak_above_start_mib_max", t["peak_above_start_mib"])
        lines.append(
            f"| {key} ranks | {t['steps_per_epoch']:.0f} | {1e3 * t['step_s']:.1f} | {t['step_s'] / s['step_s']:.2f} | "
            f"{t['step_s'] * t['steps_per_epoch']:.2f} | {t['step_s'] * t['steps_per_epoch'] / single_epoch:.2f} | "
            f"{peak:.0f} | {peak / s['peak_above_start_mib']:.2f} |"
        )
    lines += [
        "",
        "## (e) Replicated halo structure instead of owner sampling (4 ranks)",
        "",
        "In-edges of the halo vertices a rank would store to sample 2 hops locally, against its own "
        "in-edges (max over ranks), and the owner-sampling traffic it would save per step.",
        "",
        "| partition | own in-edges (max) | halo in-edges (max) | halo / own (max) | sampling bytes per step avoided |",
        "|---|---|---|---|---|",
    ]
    for method, h in r["halo_structure"].items():
        ratio = max(b / max(1, a) for a, b in zip(h["own_edges"], h["halo_in_edges"], strict=True))
        lines.append(
            f"| {method} | {max(h['own_edges']):,} | {max(h['halo_in_edges']):,} | {ratio:.2f} | "
            f"{r['traffic'][method]['sampling_bytes_per_step'] / 2**10:.0f} KiB |"
        )
    two, pre = r["scaling"]["2"], r["scaling"]["2+prefetch"]
    lines += [
        "",
        f"Prefetch gain: 1 process {ratio_cell(s['step_s'] / s['step_s_prefetch'], s.get('prefetch_gain_per_round', []))}x, "
        f"2 ranks {ratio_cell(two['step_s'] / pre['step_s'], pre.get('prefetch_gain_per_round', []))}x (step time without / with).",
        "",
    ]
    return "\n".join(lines)


BENCHMARK = Benchmark(
    "mini_batch", __doc__, run, render, repeats=1, packages=("pymetis", "mtkahypar")
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())

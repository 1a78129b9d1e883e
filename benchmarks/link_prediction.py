"""Distributed link prediction (issue 32): what local negatives cost, and CPU against DGL.

    python -m benchmarks.link_prediction                 # both sections (~10 min on 2 busy cores)
    python -m benchmarks.link_prediction --quick         # smoke run (~2 min)
    python -m benchmarks.link_prediction --sections negatives

Not part of ``make test``. Two sections on stochastic block models with strong communities
(``p_ratio=200``: an edge joins two vertices of the same block 200 times more often than two
others), edges split 70/10/20 (``RandomLinkSplit`` semantics), GraphSAGE 2×64 encoder, dot
decoder, BCE with ``k`` negatives per positive:

* **negatives** — full-batch training at 2 and 4 ranks on hypergraph (Mt-KaHyPar), METIS and
  random partitions with ``global`` negatives (uniform over all vertices: the single-process
  stream, exact) against ``local`` ones (from the rank's own part: no negative's row travels),
  and one process as the reference. Per cell: test MRR against 100 global negatives per
  positive (ogbl-citation2's protocol, the same negatives for every cell), test Hits@20
  (ogbl-collab's), and the bytes per epoch of the halo exchange and of the score exchange (the
  far endpoints' rows, ids and gradients), each equal to its prediction (checked). On a
  partition that follows the communities, local negatives are mostly same-community vertices:
  harder than uniform ones, and not what the test ranks against — the accuracy cost that none
  of the peers publishes, measured here per partitioner.
* **peer** — CPU seconds per epoch at one process, full-batch and mini-batch (fan-out 10, 5;
  batch 1024; each batch's positive edges excluded from its sampled graph), against DGL 2.1's
  link prediction on the same graph (``dgl.dataloading.negative_sampler.Uniform``,
  ``as_edge_prediction_sampler(exclude="reverse_id")``, ``u_dot_v`` scores), in its own venv
  (``bash benchmarks/peer_dgl/env.sh``), in interleaved rounds; the first epoch is not timed.
  The goal is ≤ 1.0× DGL's CPU on the user's path (``lightning``: ``LinkDataModule`` and
  ``LinkPredictor`` under ``Trainer(strategy="gnn_ddp")``); ``ours``, the same in a plain loop,
  is an extra row.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import (
    REPO,
    Benchmark,
    Run,
    log,
    markdown_table,
    pooled,
    pooled_median,
    ratio,
    ratio_cell,
    run_rounds,
)

GRAPHS = {
    "negatives": "sbm?num_nodes=3000&num_classes=30&avg_degree=10&p_ratio=200&features=32",
    "peer": "sbm?num_nodes=20000&num_classes=100&avg_degree=16&p_ratio=200&features=64",
}
QUICK_GRAPHS = {
    "negatives": "sbm?num_nodes=1000&num_classes=10&avg_degree=8&p_ratio=200&features=16",
    "peer": "sbm?num_nodes=4000&num_classes=20&avg_degree=10&p_ratio=200&features=32",
}
METHODS = ("hypergraph", "metis", "random")
NEGATIVES = ("global", "local")
HIDDEN, EVAL_K, HITS = 64, 100, 20
WORKER = Path(__file__).with_name("link_worker.py")


def add_arguments(parser) -> None:
    parser.add_argument("--dgl-python", default="/tmp/lgd-dgl-venv/bin/python")
    parser.add_argument("--epochs", type=int, default=100, help="training epochs, negatives")
    parser.add_argument("--peer-epochs", type=int, default=4, help="epochs per peer run")
    parser.add_argument("--negatives", type=int, default=2, help="negatives per positive (k)")


def _split_store(spec: str, root: Path, method: str, parts: int):
    """The split graph's partition store (kept in ``--cache-dir``) and the split."""
    from lightning_gnn_dist.data import load_dataset
    from lightning_gnn_dist.data.links import random_link_split
    from lightning_gnn_dist.partition import get_partitioner
    from lightning_gnn_dist.partition.store import partition_to_store

    data = load_dataset(spec)
    split = random_link_split(data, 0.1, 0.2, seed=0)
    digest = hashlib.sha256(spec.encode()).hexdigest()[:10]
    path = root / f"link-{digest}-{method}-p{parts}"
    store = partition_to_store(
        split.message_passing_graph(data), get_partitioner(method, seed=0), parts, path,
        dataset=spec, link=split,
    )  # fmt: skip
    return store, split


def _train_rank(rank, world_size, path, negatives, epochs, k):
    """One rank of full-batch training (the strategy's steps on a direct gloo group); returns
    the test metrics, bytes per epoch by exchange, and whether every byte met its prediction."""
    import torch
    import torch.distributed as dist
    from torch_geometric.data import Data

    from lightning_gnn_dist.comm import CommCounter, make_exchange
    from lightning_gnn_dist.comm.score import VertexDirectory
    from lightning_gnn_dist.loaders.link import FullLinkLoader, LinkPairs, NegativeSampler
    from lightning_gnn_dist.nn import distribute
    from lightning_gnn_dist.nn.context import make_graph_context, use_graph_context
    from lightning_gnn_dist.nn.link import link_loss, loss_terms, make_decoder, pair_scores
    from lightning_gnn_dist.nn.link_metrics import LinkRankMetrics
    from lightning_gnn_dist.nn.models import build_model
    from lightning_gnn_dist.partition.store import PartitionStore

    store = PartitionStore.open(path)
    part, meta = store.load_part(rank), store.meta["link"]
    num_nodes = int(store.meta["num_nodes"])
    torch.manual_seed(0)
    model = build_model("sage", part.x.size(1), HIDDEN, HIDDEN, num_layers=2, dropout=0.0)
    decoder = make_decoder("dot", HIDDEN)
    counter = CommCounter()
    exchange = make_exchange("p2p", part, counter)
    context = make_graph_context(part, exchange)
    distribute(model)
    directory = VertexDirectory.from_owner(store.assignment(), world_size)
    base = Data(x=part.x, edge_index=part.edge_index, num_nodes=part.num_owned)
    loaders = {}
    for split, kind, count in (("train", negatives, k), ("test", "global", EVAL_K)):
        pairs = LinkPairs.of_part(part, split, meta)
        pairs.counts = meta["counts"][split]
        sampler = NegativeSampler(kind, count, num_nodes, 0, pool=part.global_ids)
        loaders[split] = FullLinkLoader(base, pairs, sampler, split, directory, 5000)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    halo = score = 0
    mismatched = 0
    start = time.perf_counter()
    for epoch in range(epochs):
        counter.reset()
        batch = loaders["train"].make_batch(epoch)
        n, kk = batch.num_positives, batch.num_negatives
        optimizer.zero_grad()
        with use_graph_context(context):
            h = model(batch.x, batch.edge_index)
            scores = pair_scores(decoder, h, batch.edge_label_index, directory)
            total, _ = link_loss("bce", scores[:n], scores[n:].view(n, kk))
            (total / loss_terms("bce", batch.num_positives_global, kk)).backward()
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        dist.all_reduce(flat)
        offset = 0
        for p in model.parameters():
            p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        optimizer.step()
        for layer, direction, traffic in counter.items():
            recorded = counter.predicted_peer_bytes(layer, direction)
            predicted = (
                recorded.sum(1)[rank]
                if recorded is not None
                else exchange.predicted_bytes_sent(store.metrics, layer, direction, traffic)[rank]
            )
            mismatched += int(predicted != traffic.bytes_sent)
            if layer.startswith("score"):
                score += traffic.bytes_sent
            else:
                halo += traffic.bytes_sent
    seconds = time.perf_counter() - start
    metrics = LinkRankMetrics(["mrr", f"hits@{HITS}"])
    batch = loaders["test"].make_batch(0)
    n, kk = batch.num_positives, batch.num_negatives
    exchange.begin_round(None)
    with torch.no_grad(), use_graph_context(context):
        h = model(batch.x, batch.edge_index)
        for rows in torch.tensor_split(torch.arange(n), batch.link_chunks):
            negative = n + (rows.unsqueeze(1) * kk + torch.arange(kk)).reshape(-1)
            pairs = torch.cat(
                [batch.edge_label_index[:, rows], batch.edge_label_index[:, negative]], 1
            )
            out = pair_scores(decoder, h, pairs, directory)
            metrics.update(out[: rows.numel()], out[rows.numel() :].view(-1, kk))
    values = metrics.compute()
    totals = torch.tensor([halo, score, mismatched], dtype=torch.float64)
    dist.all_reduce(totals)
    return {
        "mrr": values["mrr"],
        "hits": values[f"hits@{HITS}"],
        "halo_bytes_per_epoch": float(totals[0]) / epochs,
        "score_bytes_per_epoch": float(totals[1]) / epochs,
        "mismatched_records": int(totals[2]),
        "seconds_per_epoch": seconds / epochs,
    }


def run_negatives(r: Run, spec: str, epochs: int, k: int) -> list[dict]:
    from benchmarks.common.processes import run_ranks

    cells = [(1, "random", "global")]
    cells += [(p, m, neg) for p in (2, 4) for m in METHODS for neg in NEGATIVES]
    rows = []
    for parts, method, negatives in cells:
        store, _ = _split_store(spec, r.cache_dir, method, parts)
        results = run_ranks(_train_rank, parts, str(store.path), negatives, epochs, k)
        row = {"ranks": parts, "method": method, "negatives": negatives, **results[0]}
        log(f"{parts} x {method} / {negatives}: MRR {row['mrr']:.4f}")
        rows.append(row)
        r.report["negatives"] = {"rows": rows, "graph": spec, "epochs": epochs, "k": k}
        r.save()
    return rows


def _prepare_peer(workdir: Path, spec: str, cache: Path) -> None:
    """The graph as ``.npz`` for both venvs (training graph, pairs, fixed validation
    negatives) and this project's one-part store."""
    import numpy as np
    import torch

    from lightning_gnn_dist.data import load_dataset
    from lightning_gnn_dist.data.negatives import draw_negatives

    store, split = _split_store(spec, cache, "random", 1)
    data = load_dataset(spec)
    mp = split.message_passing_graph(data)
    val = split.label_index["val"]
    negatives = draw_negatives("global", val[1], torch.arange(val.size(1)), EVAL_K,
                               num_nodes=data.num_nodes, seed=0, epoch=0, stream=1)  # fmt: skip
    np.savez(
        workdir / "graph.npz",
        edge_index=mp.edge_index.numpy(),
        x=mp.x.numpy(),
        num_nodes=np.array(data.num_nodes),
        train_pairs=split.label_index["train"].numpy(),
        val_pairs=val.numpy(),
        val_negatives=negatives.numpy(),
    )
    (workdir / "store").write_text(str(store.path))


def run_peer(r: Run, spec: str, epochs: int, k: int) -> list[dict]:
    python = {"dgl": r.args.dgl_python, "ours": sys.executable, "lightning": sys.executable}
    if not Path(python["dgl"]).exists():
        raise SystemExit(f"no DGL venv at {python['dgl']}: bash benchmarks/peer_dgl/env.sh")
    systems = ("dgl", "lightning", "ours")
    variants = [(task, system) for task in ("full", "mini") for system in systems]
    details: dict[str, list] = {}
    with tempfile.TemporaryDirectory(prefix="link_peer_") as tmp:
        workdir = Path(tmp)
        _prepare_peer(workdir, spec, r.cache_dir)
        store = (workdir / "store").read_text()

        def measure(task, system):
            def call(round_index: int) -> list[float]:
                out = workdir / f"{system}-{task}.json"
                command = [python[system], str(WORKER), "--worker", f"{system}:{task}"]
                command += [
                    "--data",
                    str(workdir / "graph.npz"),
                    "--store",
                    store,
                    "--out",
                    str(out),
                    "--spec",
                    spec,
                ]
                command += ["--epochs", str(epochs), "--negatives", str(k)]
                env = {**os.environ, "PYTHONPATH": str(REPO) if system != "dgl" else ""}
                subprocess.run(command, check=True, env=env)
                result = json.loads(out.read_text())
                details.setdefault(f"{task} | {system}", []).append(result)
                cpu = [rec["cpu"] for rec in result["records"][1:]]
                log(f"round {round_index}: {task} | {system}: {cpu[-1]:.3f} s CPU")
                return cpu

            return call

        samples = run_rounds({f"{t} | {s}": measure(t, s) for t, s in variants}, r.repeats)
    rows = []
    for task, system in variants:
        key, peer = f"{task} | {system}", f"{task} | dgl"
        runs = details[key]
        over = ratio(samples[key], samples[peer])
        rows.append(
            {
                "setting": "full-batch" if task == "full" else "mini-batch",
                "system": system,
                "cpu_s": pooled_median(samples[key]),
                "wall_s": pooled_median(
                    [[rec["wall"] for rec in run["records"][1:]] for run in runs]
                ),
                "cpu_over_dgl": over.value,
                "cpu_over_dgl_per_round": list(over.per_round),
                "steps_per_epoch": runs[0]["records"][0]["steps"],
                "val_mrr": pooled_median([[run["mrr"]] for run in runs]),
                "torch": runs[0]["torch"],
                "epochs_timed": len(pooled(samples[key])),
            }
        )
    return rows


def run(r: Run) -> None:
    graphs = QUICK_GRAPHS if r.quick else GRAPHS
    k = r.args.negatives
    if r.wants("negatives"):
        with r.section("negatives"):
            run_negatives(r, graphs["negatives"], 5 if r.quick else r.args.epochs, k)
    if r.wants("peer"):
        with r.section("peer"):
            rows = run_peer(r, graphs["peer"], 3 if r.quick else r.args.peer_epochs, k)
            r.report["peer"] = {"rows": rows, "graph": graphs["peer"], "k": k}
    r.save(final=True)


def render(report: dict) -> str:
    out = ["# Distributed link prediction (issue 32)\n"]
    negatives = report.get("negatives")
    if negatives:
        rows = [
            {
                "ranks": row["ranks"],
                "partition": row["method"],
                "negatives": row["negatives"],
                "test MRR": f"{row['mrr']:.4f}",
                f"test Hits@{HITS}": f"{row['hits']:.4f}",
                "halo MB/epoch": f"{row['halo_bytes_per_epoch'] / 1e6:.3f}",
                "score MB/epoch": f"{row['score_bytes_per_epoch'] / 1e6:.3f}",
                "= predicted": "yes" if row["mismatched_records"] == 0 else "NO",
                "s/epoch": f"{row['seconds_per_epoch']:.3f}",
            }
            for row in negatives["rows"]
        ]
        out.append(
            "## Global against local negatives\n\n"
            f"`{negatives['graph']}`; {negatives['epochs']} full-batch epochs, "
            f"{negatives['k']} negatives per positive, p2p halo exchange; test MRR against "
            f"{EVAL_K} global negatives per positive (the same for every row), Hits@{HITS} over "
            "their pool. Bytes: all ranks per epoch (halo: the encoder's layers; score: far "
            "endpoints' rows and gradients, their ids and the per-step counts). `global` is "
            "exact: its rows equal the 1-rank row up to float rounding of the sums.\n\n"
            + markdown_table(rows, list(rows[0]))
        )
    peer = report.get("peer")
    if peer:
        rows = [
            {
                "setting": row["setting"],
                "system": row["system"],
                "CPU s/epoch": f"{row['cpu_s']:.3f}",
                "wall s/epoch": f"{row['wall_s']:.3f}",
                "CPU ÷ DGL": ratio_cell(row["cpu_over_dgl"], row["cpu_over_dgl_per_round"]),
                "steps/epoch": row["steps_per_epoch"],
                "val MRR": f"{row['val_mrr']:.4f}",
                "torch": row["torch"],
            }
            for row in peer["rows"]
        ]
        out.append(
            "## CPU per epoch against DGL 2.1, one process\n\n"
            f"`{peer['graph']}`; GraphSAGE 2×{HIDDEN}, dot decoder, BCE with {peer['k']} uniform "
            "negatives per positive; mini-batch fan-out 10, 5, batch 1024, positives' edges "
            "excluded. CPU ÷ DGL: pooled median of per-epoch CPU seconds over DGL's in the same "
            "rounds (per-round range); val MRR after the timed epochs, against the same "
            f"{EVAL_K} negatives per positive for every system.\n\nSystems: `dgl`: DGL 2.1's "
            "link prediction in a plain loop; `lightning`: **the user's path** — "
            '`LinkDataModule` and `LinkPredictor` under `Trainer(strategy="gnn_ddp")`, as the '
            "link-prediction guide shows (one process, no validation during training); `ours`: "
            "the same model, loader and negatives in a plain loop (not the user's path).\n\n"
            + markdown_table(rows, list(rows[0]))
        )
    return "\n".join(out)


BENCHMARK = Benchmark(
    "link_prediction",
    __doc__,
    run,
    render,
    add_arguments=add_arguments,
    sections=("negatives", "peer"),
    repeats=3,
    quick_repeats=1,
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())

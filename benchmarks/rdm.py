"""RDM (paper 003) against p2p and broadcast, and the order model against measurement.

    python -m benchmarks.rdm            # R-MAT and a mesh, 2 and 4 ranks
    python -m benchmarks.rdm --quick    # smoke configuration

Per configuration (graph × ranks) one forked gloo group (loopback, one thread per rank) trains a
2-layer GCN full-batch with every variant, interleaved over rounds (``run_rounds``): ``p2p`` on a
hypergraph partition (the baseline), ``p2p`` on a random partition, ``broadcast``, **all 16 RDM
orders**, and RDM's model pick computing the gradient of the input features as the paper does
(``+ G⁰``; without it is what RDM does). Before the rounds the exchange's own
``rdm_order="auto"`` procedure runs (one warm-up step, three timed steps per Pareto order) and its
choice is recorded. A sample is one training step — forward, loss, backward, gradient
all-reduce, optimiser step — timed as the slowest rank's wall seconds; each variant runs
``steps`` steps per round after one warm-up step. Ratios are against the baseline (pooled medians,
per-round range). Bytes are the per-step counters summed over ranks (RDM's are checked against
the plan's prediction on every step). Memory per rank: the graph structure a rank holds (RDM:
``Â``/``Âᵀ`` CSR and the static features' column slice; p2p: its ``LocalPartition`` without
features, labels and masks) and the rank's peak RSS.

Table VIII check: is the model's pick the measured fastest order, or within 10% of it?
"""

from __future__ import annotations

import time
from dataclasses import fields
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch_geometric.nn import GCNConv

from benchmarks.common.graphs import load_graph, missing
from benchmarks.common.processes import peak_rss_bytes, run_ranks
from benchmarks.common.stores import build_store
from benchmarks.harness import (
    Benchmark,
    Run,
    log,
    markdown_table,
    pooled_median,
    ratio,
    ratio_cell,
    run_rounds,
)
from lightning_gnn_dist.comm import make_exchange
from lightning_gnn_dist.comm.rdm_plan import (
    LayerShape,
    RDMLayout,
    all_orders,
    order_costs,
    pareto,
    plan_network,
)
from lightning_gnn_dist.costmodel import gcn_layers
from lightning_gnn_dist.nn import distribute, use_graph_context
from lightning_gnn_dist.nn.context import make_graph_context
from lightning_gnn_dist.partition.metrics import projected_epoch_bytes
from lightning_gnn_dist.partition.store import PartitionStore

CONFIGS = {  # graph: (dataset spec, hidden width)
    "full": {
        "graphs": {
            # power-law; 128-16-8 has four Pareto orders (like the paper's Reddit): auto chooses
            "rmat": ("rmat?scale=15&edge_factor=16&features=128&classes=8", 16),
            # a triangulated 200 × 200 grid (FE-like mesh), 32 features, a wide hidden layer
            "mesh": ("grid:200", 128),
        },
        "ranks": [2, 4],
        "bytes_ranks": [2, 4, 8, 16],
        "steps": 5,
    },
    "quick": {
        "graphs": {"rmat": ("rmat?scale=10&edge_factor=8&features=16&classes=4", 4)},
        "ranks": [2],
        "bytes_ranks": [2, 4],
        "steps": 2,
    },
}
BASELINE = "p2p hypergraph"
HALO = (("p2p", "hypergraph"), ("p2p", "random"), ("broadcast", "random"))


class Net(torch.nn.Module):
    def __init__(self, dims: list[int]) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.convs = torch.nn.ModuleList([GCNConv(dims[0], dims[1]), GCNConv(dims[1], dims[2])])

    def forward(self, x, edge_index):
        return self.convs[1](torch.relu(self.convs[0](x, edge_index)), edge_index)


def structure_bytes(part) -> int:
    """Bytes of a ``LocalPartition``'s structure and plans (not features, labels, masks)."""
    skip = {"x", "y", "train_mask", "val_mask", "test_mask", "global_ids"}
    values = (getattr(part, f.name) for f in fields(part) if f.name not in skip)
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def rank_main(rank: int, world: int, stores: dict, dims: list[int], steps: int, rounds: int):
    """Every variant on this rank; rank 0's samples are the slowest rank's step seconds."""
    parts = {m: PartitionStore.open(p).load_part(rank) for m, p in stores.items()}
    count = torch.tensor([float(parts["random"].train_mask.sum())], dtype=torch.float64)
    dist.all_reduce(count)
    model = distribute(Net(dims))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # timing only: weights stay
    contexts = {
        f"{mode} {method}": make_graph_context(parts[method], make_exchange(mode, parts[method]))
        for mode, method in HALO
    }
    rdm = make_graph_context(
        parts["random"], make_exchange("rdm", parts["random"], rdm_order="auto")
    )
    rdm.prepare(model)
    model_pick = rdm.exchange.candidates[0].order

    def step(context, x) -> tuple[float, float, int]:
        context.exchange.counter.reset()
        start, cpu = time.perf_counter(), time.process_time()
        model.zero_grad()
        with use_graph_context(context):
            out = model(x, context.partition.edge_index)
        mask = context.partition.train_mask
        loss = F.cross_entropy(out[mask], context.partition.y[mask], reduction="sum")
        (loss / float(count)).backward()
        dist.all_reduce(torch.cat([p.grad.flatten() for p in model.parameters()]))
        optimizer.step()
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        counter = context.exchange.counter
        sent = sum(t.bytes_sent for _, _, t in counter.items())
        if context is rdm:
            predicted = sum(int(b[rank].sum()) for _, _, b in counter.predicted_items())
            assert sent == predicted, (context.exchange.order, sent, predicted)
        return seconds, cpu, sent

    epoch = 0  # the exchange's own auto procedure, as in training
    while epoch == 0 or rdm.exchange.tuning:
        rdm.exchange.begin_round(epoch)
        step(rdm, parts["random"].x)
        epoch += 1
    auto = {"pick": rdm.exchange.order, "seconds": rdm.exchange.measured}
    sent: dict[str, int] = {}

    def measure(name: str, context, order: str | None, grad: bool):
        def run(_round: int) -> list[tuple[float, float]]:
            if order is not None:
                context.exchange.order = order
            x = context.partition.x.detach().requires_grad_(grad)
            step(context, x)  # warm-up
            samples = []
            for _ in range(steps):
                seconds, cpu, nbytes = step(context, x)
                reduced = torch.tensor([seconds, cpu], dtype=torch.float64)
                dist.all_reduce(reduced, op=dist.ReduceOp.MAX)
                samples.append((float(reduced[0]), float(reduced[1])))
            total = torch.tensor([nbytes], dtype=torch.float64)
            dist.all_reduce(total)
            sent[name] = int(total)
            return samples

        return run

    variants = {name: measure(name, c, None, False) for name, c in contexts.items()}
    for order in all_orders(2):
        variants[f"rdm {order}"] = measure(f"rdm {order}", rdm, order, False)
    variants["rdm model pick + G⁰"] = measure("rdm model pick + G⁰", rdm, model_pick, True)
    panels = None
    if world >= 4:  # Â in row panels shared by two ranks: half the structure, panel exchanges
        exchange = make_exchange("rdm", parts["random"], rdm_order=model_pick, replication=2)
        panels = make_graph_context(parts["random"], exchange)
        panels.prepare(model)
        variants["rdm model pick, R_A = 2"] = measure(
            "rdm model pick, R_A = 2", panels, None, False
        )
    timed = run_rounds(variants, rounds)
    samples = {
        kind: {n: [[s[i] for s in r] for r in rs] for n, rs in timed.items()}
        for i, kind in enumerate(("wall", "cpu"))
    }
    memory = {
        "rdm_structure_bytes": sum(rdm.memory_bytes().values()),
        "rdm_panel_structure_bytes": sum(panels.memory_bytes().values()) if panels else None,
        "p2p_structure_bytes": structure_bytes(parts["hypergraph"]),
        "peak_rss_bytes": peak_rss_bytes(),
    }
    candidates = [c.__dict__ for c in rdm.exchange.candidates]
    return {
        "samples": samples,
        "bytes": sent,
        "memory": memory,
        "auto": auto,
        "pareto": candidates,
        "model_seconds": rdm.exchange.model_seconds,
    }


def summarise(graph: str, spec: str, world: int, ranks: list[dict], data) -> dict:
    first = ranks[0]
    rows = []
    for name in first["samples"]["wall"]:
        row = {"variant": name, "bytes_per_step": first["bytes"][name]}
        for kind in ("wall", "cpu"):
            values = first["samples"][kind]
            over = ratio(values[name], values[BASELINE])
            row[f"{kind}_ms"] = 1e3 * pooled_median(values[name])
            row[f"{kind}_ratio"] = over.value
            row[f"{kind}_ratio_per_round"] = list(over.per_round)
        rows.append(row)
    pareto = [c["order"] for c in first["pareto"]]
    model_pick, auto_pick = pareto[0], first["auto"]["pick"]
    summary = {
        "graph": graph,
        "dataset": spec,
        "ranks": world,
        "vertices": data.num_nodes,
        "edges": data.edge_index.size(1),
        "rows": rows,
        "pareto": first["pareto"],
        "model_pick": model_pick,
        "auto_pick": auto_pick,
        "auto_seconds": first["auto"]["seconds"],
        "model_seconds": first["model_seconds"],
        "memory_per_rank": [r["memory"] for r in ranks],
    }
    for kind in ("wall", "cpu"):
        by_order = {r["variant"][4:]: r[f"{kind}_ratio"] for r in rows if len(r["variant"]) == 8}
        fastest = min(by_order, key=by_order.get)
        summary[kind] = {
            "fastest": fastest,
            "worst": max(by_order, key=by_order.get),
            "model_pick_vs_fastest": by_order[model_pick] / by_order[fastest],
            "auto_pick_vs_fastest": by_order[auto_pick] / by_order[fastest],
            "best_pareto_vs_fastest": min(by_order[o] for o in pareto) / by_order[fastest],
            "best_non_pareto_vs_fastest": min(
                (v for o, v in by_order.items() if o not in pareto), default=None
            )
            and min(v for o, v in by_order.items() if o not in pareto) / by_order[fastest],
        }
    return summary


def bytes_by_ranks(data, spec: str, dims: list[int], cache: Path, ranks: list[int]) -> list[dict]:
    """Bytes per training step at more ranks than this machine runs, from the two exact
    predictions (the project's invariant, checked at 2 and 4 ranks by the timed runs): ``p2p``
    from the hypergraph partition's volume, RDM from the plan of its fewest-bytes order."""
    rows = []
    shapes = [LayerShape(layer.d_in, layer.d_out) for layer in gcn_layers(dims)]
    for world in ranks:
        metrics = build_store(data, spec, cache, "hypergraph", world).metrics
        widths = [(layer.forward_width, layer.backward_width) for layer in gcn_layers(dims)]
        p2p = sum(
            b.forward_bytes_total + b.backward_bytes_total
            for b in projected_epoch_bytes(metrics, widths)
        )
        offsets = np.concatenate([[0], np.cumsum(metrics.part_sizes)])
        layout = RDMLayout(tuple(int(v) for v in offsets), world)
        costs = order_costs(shapes, layout, int(metrics.part_nnz.sum()))
        pick = min(pareto(costs), key=lambda c: (c.comm_elements, c.sparse_ops)).order
        rdm = 4 * sum(
            int(sum(m.sum() for m in layout.pass_elements(pas)))
            for plan in plan_network(shapes, pick)
            for pas in (plan.forward, plan.backward)
        )
        rows.append({"ranks": world, "p2p_bytes": p2p, "rdm_bytes": rdm, "rdm_order": pick})
    return rows


def run(r: Run) -> None:
    cfg = CONFIGS["quick" if r.quick else "full"]
    r.report.update(config=cfg, baseline=BASELINE, configs=[], bytes_by_ranks={})
    for graph, (spec, hidden) in cfg["graphs"].items():
        reason = missing(spec.partition("?")[0])
        if reason:
            r.report.setdefault("skipped", {})[graph] = reason
            continue
        data = load_graph(spec)
        dims = [data.x.size(1), hidden, int(data.y.max()) + 1]
        r.report["bytes_by_ranks"][graph] = bytes_by_ranks(
            data, spec, dims, r.cache_dir, cfg["bytes_ranks"]
        )
        for world in cfg["ranks"]:
            stores = {
                m: str(build_store(data, spec, r.cache_dir, m, world).path)
                for m in ("random", "hypergraph")
            }
            log(f"{graph}, {world} ranks: {len(all_orders(2)) + 4} variants × {r.repeats} rounds")
            ranks = run_ranks(rank_main, world, stores, dims, cfg["steps"], r.repeats)
            summary = summarise(graph, spec, world, ranks, data)
            summary["dims"] = dims
            predicted = next(b for b in r.report["bytes_by_ranks"][graph] if b["ranks"] == world)
            measured = {row["variant"]: row["bytes_per_step"] for row in summary["rows"]}
            assert measured[BASELINE] == predicted["p2p_bytes"], (measured, predicted)
            assert measured[f"rdm {predicted['rdm_order']}"] == predicted["rdm_bytes"]
            r.report["configs"].append(summary)
            r.save()
            wall = summary["wall"]
            log(
                f"model pick {summary['model_pick']} = {wall['model_pick_vs_fastest']:.2f}× "
                f"the fastest ({wall['fastest']}); auto pick {summary['auto_pick']}"
            )


def render(report: dict) -> str:
    base = report["baseline"]
    lines = ["# RDM against p2p and broadcast; the order model against measurement", ""]
    lines.append(
        "2-layer GCN (widths per graph below). A sample is one training step: the "
        "slowest rank's wall seconds, and the largest process CPU seconds of a rank; ratios are "
        f"pooled medians against `{base}` with the range over rounds. RDM uses the random "
        "partition's rows (its bytes do not depend on the partition); `+ G⁰` also computes the "
        "input features' gradient, as the paper does; `R_A = 2` holds Â in row panels shared by "
        "two ranks. Bytes: per step, summed over ranks."
    )
    checks = []
    for c in report["configs"]:
        wall, cpu = c["wall"], c["cpu"]
        lines += [
            "",
            f"## {c['graph']}: {c['vertices']} vertices, {c['edges']} edges, {c['ranks']} ranks, "
            f"widths {'-'.join(str(d) for d in c['dims'])}",
            "",
            "Calibrated model: {:.3g} s per element sent, {:.3g} s per SpMM multiply-add, "
            "{:.3g} s per collective. ".format(*c["model_seconds"])
            + f"Pareto set {', '.join(p['order'] for p in c['pareto'])}; model pick "
            f"**{c['model_pick']}**, auto pick **{c['auto_pick']}**. Fastest order by wall time "
            f"{wall['fastest']} (model pick {wall['model_pick_vs_fastest']:.2f}× it), by CPU time "
            f"{cpu['fastest']} (model pick {cpu['model_pick_vs_fastest']:.2f}×); slowest "
            f"{wall['worst']} / {cpu['worst']}.",
            "",
        ]
        shown = {base, "p2p random", "broadcast random", "rdm model pick + G⁰"}
        shown |= {"rdm model pick, R_A = 2", f"rdm {c['model_pick']}", f"rdm {c['auto_pick']}"}
        shown |= {f"rdm {c[k][j]}" for k in ("wall", "cpu") for j in ("fastest", "worst")}
        rows = [dict(r) for r in c["rows"] if r["variant"] in shown]
        for row in rows:
            for kind in ("wall", "cpu"):
                row[f"{kind} vs {base}"] = ratio_cell(
                    row[f"{kind}_ratio"], row[f"{kind}_ratio_per_round"]
                )
        rows.sort(key=lambda row: row["wall_ratio"])
        columns = ["variant", "wall_ms", f"wall vs {base}", "cpu_ms", f"cpu vs {base}"]
        lines.append(markdown_table(rows, [*columns, "bytes_per_step"]))
        memory = c["memory_per_rank"]
        panel = [m["rdm_panel_structure_bytes"] for m in memory if m["rdm_panel_structure_bytes"]]
        lines.append(
            "\nMemory per rank, MB: RDM structure "
            + ", ".join(f"{m['rdm_structure_bytes'] / 1e6:.2f}" for m in memory)
            + (f" (R_A = 2: {', '.join(f'{b / 1e6:.2f}' for b in panel)})" if panel else "")
            + "; p2p structure (hypergraph part) "
            + ", ".join(f"{m['p2p_structure_bytes'] / 1e6:.2f}" for m in memory)
            + "; peak RSS "
            + ", ".join(f"{m['peak_rss_bytes'] / 1e6:.0f}" for m in memory)
            + "."
        )
        for kind in ("cpu", "wall"):
            ratio_ = c[kind]["model_pick_vs_fastest"]
            checks.append(
                {
                    "graph": c["graph"],
                    "ranks": c["ranks"],
                    "time": kind,
                    "model pick": c["model_pick"],
                    "fastest": c[kind]["fastest"],
                    "model ÷ fastest": ratio_,
                    "within 10%": "yes" if ratio_ <= 1.10 else "no",
                }
            )
    lines += ["", "## Bytes per step by ranks: where RDM moves fewer than p2p on hypergraph", ""]
    lines.append(
        "From the exact predictions (equal to the counters at the ranks timed above): `p2p` on "
        "the hypergraph partition's volume, RDM's order that moves the fewest bytes from its "
        "plan."
    )
    for graph, rows in report["bytes_by_ranks"].items():
        table = [
            {
                "graph": graph,
                "ranks": b["ranks"],
                "p2p hypergraph MB": b["p2p_bytes"] / 1e6,
                "rdm MB": b["rdm_bytes"] / 1e6,
                "rdm ÷ p2p": b["rdm_bytes"] / b["p2p_bytes"],
                "rdm order": b["rdm_order"],
            }
            for b in rows
        ]
        columns = ["graph", "ranks", "p2p hypergraph MB", "rdm MB", "rdm ÷ p2p", "rdm order"]
        lines += ["", markdown_table(table, columns)]
    lines += ["", "## Table VIII check: the model's pick against every order", ""]
    columns = ["graph", "ranks", "time", "model pick", "fastest", "model ÷ fastest", "within 10%"]
    lines.append(markdown_table(checks, columns))
    return "\n".join(lines) + "\n"


BENCHMARK = Benchmark("rdm", __doc__, run, render, repeats=5, quick_repeats=1)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())

"""GPU check (issue 35): every one-rank mode on the device equals the CPU run; time against PyG.

    python -m benchmarks.gpu_check --device cuda --out benchmarks/results/gpu_check   # ~2-4 min
    python -m benchmarks.gpu_check --device cpu --quick --out /tmp/gpu_check          # seconds

One process, the package's own layers, graph contexts and exchanges on the chosen device, exactly
as ``GNNStrategy`` places them (every tensor of the partition on the device); no Lightning needed:

(equality) full-batch ``p2p``, ``rdm``, ``cached`` and ``p2p`` with the ``int8`` codec, the
    ``neighbor`` mini-batch (sampled on the CPU into pinned memory, copied asynchronously) and the
    ``subgraph`` mini-batch, each trained for a few SGD steps (momentum 0.9) on the device and on
    the CPU from the same weights and batches: the largest difference of losses and parameters
    must be at most 1e-4 (fp32). Not Adam: it divides each step by the gradient's own size, so
    a parameter whose gradient is near its ``eps`` moves by up to the learning rate on a rounding
    difference (an H100 run showed 2.3e-4 on ``subgraph`` with Adam in one process and 1e-6 in
    the next, from the multi-threaded CPU reference's sums); SGD keeps the comparison linear in
    the gradients;
(codecs) every codec encodes the same rows on the device: the decoded rows lie within the
    codec's stated bound (integer codecs: one step of the row's grid; half precision: one unit
    in the last place), and the CPU decodes the device's wire to the same rows, bit for bit;
(time) the epoch time of a 2-layer GCN, plain PyG against the package's layers at one rank on
    the same device (interleaved rounds; ratio of pooled medians), and on CUDA the SpMM kernel's
    time, cuSPARSE (``torch.sparse`` CSR) against ``embedding_bag``;
(host_syncs) device → host round trips per training step
    (:class:`~lightning_gnn_dist.testing.host_sync.HostSyncCounter` on the device's tensors), for
    the full-batch ``p2p`` step and the neighbour step, with the lines that ask for them;
(two_process) two ranks on this one device: NCCL on a GPU (NCCL refuses two ranks on one
    device in most releases: the error is reported as it comes), gloo on the CPU; the ``p2p``
    halo exchange must equal the single-process rows.

``--device cpu`` compares the CPU with itself (a smoke test of the script; the suite runs it with
``--quick``). ``--out`` takes an output stem or a directory (then ``DIR/gpu_check``).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GCNConv

from benchmarks.common.graphs import triangulated_grid
from benchmarks.harness import Benchmark, Run, log, markdown_table, ratio, run_rounds
from lightning_gnn_dist.comm import make_exchange
from lightning_gnn_dist.comm.codec import CODECS, IntCodec
from lightning_gnn_dist.data.local import build_local_partitions, to_device
from lightning_gnn_dist.data.subgraph_sampler import make_sampler
from lightning_gnn_dist.loaders import NeighborLoader, PartitionedGraphStore, SubgraphLoader
from lightning_gnn_dist.nn import distribute, spmm, use_graph_context
from lightning_gnn_dist.nn.context import make_graph_context
from lightning_gnn_dist.nn.sampled import SampledBatchContext
from lightning_gnn_dist.testing.host_sync import HostSyncCounter

TOLERANCE = 1e-4
SECTIONS = ("equality", "codecs", "time", "host_syncs", "two_process")
#: mode → (exchange, options) of the full-batch cases
FULL_BATCH = {
    "p2p": ("p2p", {}),
    "p2p-int8": ("p2p", {"codec": "int8"}),
    "cached": ("cached", {"staleness_bound": 1}),
    "rdm": ("rdm", {"rdm_order": "dsds"}),
}


def _add_arguments(parser) -> None:
    parser.add_argument(
        "--device",
        choices=["cuda", "cpu"],
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="the device checked against the CPU (default: cuda when present)",
    )
    parser.add_argument(
        "--side", type=int, help="grid side of the graph (default: 150; --quick: 12)"
    )
    parser.add_argument("--epochs", type=int, help="training steps per case (default: 5)")


class GCN(nn.Module):
    def __init__(self, d_in: int, hidden: int, classes: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv1, self.conv2 = GCNConv(d_in, hidden), GCNConv(hidden, classes)

    def forward(self, x, edge_index):
        return self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _graph(side: int):
    return triangulated_grid(side, features=32, classes=8)


def _part(data):
    return next(iter(build_local_partitions(data, np.zeros(data.num_nodes, dtype=np.int64), 1)))


# -- (equality) --------------------------------------------------------------------------------
def _full_batch(data, mode: str, device: torch.device, epochs: int, hidden: int) -> dict:
    exchange_mode, options = FULL_BATCH[mode]
    part = to_device(_part(data), device)
    model = distribute(GCN(data.num_features, hidden, 8)).to(device)
    exchange = make_exchange(exchange_mode, part, **options)
    context = make_graph_context(part, exchange)
    context.prepare(model)
    optimizer = _optimizer(model)
    losses = []
    for epoch in range(epochs):
        exchange.begin_round(epoch)
        optimizer.zero_grad()
        with use_graph_context(context):
            out = model(part.x, part.edge_index)
        loss = F.cross_entropy(out[part.train_mask], part.y[part.train_mask])
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return _result(losses, model)


def _optimizer(model: nn.Module) -> torch.optim.Optimizer:
    """The equality cases' optimiser: linear in the gradients (module docstring)."""
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _result(losses, model) -> dict:
    return {
        "losses": torch.stack(losses).cpu(),
        "params": {k: v.detach().cpu() for k, v in model.state_dict().items()},
    }


def _neighbor(data, device: torch.device, epochs: int, hidden: int) -> dict:
    part = _part(data)  # sampling stays on the CPU; batches go to the device
    store = PartitionedGraphStore(part)
    loader = NeighborLoader(
        store,
        [5, 5],
        part.train_mask,
        batch_size=max(16, int(part.train_mask.sum()) // 4),
        shuffle=True,
        num_steps=epochs,
        prefetch=True,
        device=device,
    )
    model = distribute(GCN(data.num_features, hidden, 8), ("neighbor",)).to(device)
    optimizer = _optimizer(model)
    losses = []
    for batch in loader:
        optimizer.zero_grad()
        with use_graph_context(SampledBatchContext.from_batch(batch)):
            out = model(batch.x, batch.edge_index)[: batch.batch_size]
        loss = F.cross_entropy(out, batch.y[: batch.batch_size])
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return _result(losses, model)


def _subgraph(data, device: torch.device, epochs: int, hidden: int) -> dict:
    part = _part(data)
    sampler = make_sampler("uniform", data.num_nodes, max(8, data.num_nodes // 3), seed=0)
    model = distribute(GCN(data.num_features, hidden, 8)).to(device)
    optimizer = _optimizer(model)
    losses = []
    for batch in SubgraphLoader(part, sampler, steps_per_epoch=epochs):
        view = to_device(batch.local_partition, device)
        context = make_graph_context(view, make_exchange("p2p", view))
        optimizer.zero_grad()
        with use_graph_context(context):
            out = model(view.x, view.edge_index)
        mask = view.train_mask
        loss = F.cross_entropy(out[mask], view.y[mask], reduction="sum") / max(1, int(mask.sum()))
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return _result(losses, model)


def _case(data, mode: str, device: torch.device, epochs: int, hidden: int) -> dict:
    if mode == "neighbor":
        return _neighbor(data, device, epochs, hidden)
    if mode == "subgraph":
        return _subgraph(data, device, epochs, hidden)
    return _full_batch(data, mode, device, epochs, hidden)


def _difference(a: dict, b: dict) -> float:
    diffs = [float((a["losses"] - b["losses"]).abs().max())]
    diffs += [float((a["params"][k] - b["params"][k]).abs().max()) for k in a["params"]]
    return max(diffs)


def equality(data, device: torch.device, epochs: int, hidden: int) -> list[dict]:
    rows = []
    for mode in [*FULL_BATCH, "neighbor", "subgraph"]:
        row: dict = {"mode": mode}
        try:
            reference = _case(data, mode, torch.device("cpu"), epochs, hidden)
            start = time.perf_counter()
            checked = _case(data, mode, device, epochs, hidden)
            _sync(device)
            row["seconds"] = time.perf_counter() - start
            row["max_abs_difference"] = _difference(checked, reference)
            row["final_loss"] = float(checked["losses"][-1])
            row["passed"] = row["max_abs_difference"] <= TOLERANCE
        except Exception as error:  # report every case, even when one fails
            row.update(passed=False, error=f"{type(error).__name__}: {error}")
            row["traceback"] = traceback.format_exc(limit=6)
        log(f"equality {mode}: {row.get('max_abs_difference', row.get('error'))}")
        rows.append(row)
    return rows


# -- (codecs) ----------------------------------------------------------------------------------
def _codec_bound(codec, rows: torch.Tensor, wire: torch.Tensor) -> torch.Tensor:
    """``[n, d]`` largest error the codec allows per element (its stated bound)."""
    width = rows.size(1)
    if isinstance(codec, IntCodec):
        scale, _ = codec.header(wire, width)
        return scale[:, None].expand_as(rows) * (1 + 1e-6)
    mantissa = 7 if codec.name == "bf16" else 10
    ulp = torch.exp2(torch.floor(torch.log2(rows.abs().clamp(min=1e-30))) - mantissa)
    if codec.name == "fp16":
        ulp = torch.maximum(ulp, torch.full_like(ulp, 2.0**-24))
    return ulp * (1 + 1e-6)


def codecs(device: torch.device) -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    rows = torch.randn(2048, 48, generator=generator) * torch.logspace(-3, 3, 2048)[:, None]
    rows[::97] = 0.0  # zero rows stay exact
    narrow = torch.randn(512, 5, generator=generator)  # int8's 1-byte header
    out = []
    for name, codec in CODECS.items():
        if codec.lossless:
            continue
        for block in (rows, narrow):
            on_device = block.to(device)
            wire = codec.encode(on_device, torch.Generator(device=device).manual_seed(1))
            decoded = codec.decode(wire, block.size(1))
            error = (decoded - on_device).abs()
            bound = _codec_bound(codec, on_device, wire)
            cpu_decoded = codec.decode(wire.cpu(), block.size(1))
            out.append(
                {
                    "codec": name,
                    "width": block.size(1),
                    "max_error_over_bound": float((error / bound.clamp(min=1e-30)).max()),
                    "zeros_exact": bool((decoded[block.abs().sum(1) == 0] == 0).all()),
                    "cpu_decode_equal": bool(torch.equal(cpu_decoded, decoded.cpu())),
                    "wire_bytes_per_row": wire.size(1),
                }
            )
            row = out[-1]
            row["passed"] = (
                row["max_error_over_bound"] <= 1 and row["zeros_exact"] and row["cpu_decode_equal"]
            )
    return out


# -- (time) ------------------------------------------------------------------------------------
def epoch_times(data, device: torch.device, hidden: int, repeats: int, steps: int) -> dict:
    x, y = data.x.to(device), data.y.to(device)
    edge_index, mask = data.edge_index.to(device), data.train_mask.to(device)
    plain = GCN(data.num_features, hidden, 8).to(device)
    part = to_device(_part(data), device)
    ours = distribute(GCN(data.num_features, hidden, 8)).to(device)
    context = make_graph_context(part, make_exchange("p2p", part))

    def step(model, inputs, edges, labels, train, graph=None) -> None:
        model.zero_grad()
        if graph is None:
            out = model(inputs, edges)
        else:
            with use_graph_context(graph):
                out = model(inputs, edges)
        F.cross_entropy(out[train], labels[train]).backward()

    def timed(run) -> list[float]:
        run()  # warm-up (kernels, caches)
        _sync(device)
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            run()
            _sync(device)
            times.append(time.perf_counter() - start)
        return times

    variants = {
        "plain_pyg": lambda _: timed(lambda: step(plain, x, edge_index, y, mask)),
        "package_p2p": lambda _: timed(
            lambda: step(ours, part.x, part.edge_index, part.y, part.train_mask, context)
        ),
    }
    results = run_rounds(variants, repeats)
    report = {
        "seconds": {k: [float(np.median(r)) for r in v] for k, v in results.items()},
        "package_over_plain": ratio(results["package_p2p"], results["plain_pyg"]).as_dict(),
    }
    if device.type == "cuda":
        report["spmm"] = _spmm_times(part, hidden, device, repeats, steps)
    return report


def _spmm_times(part, hidden: int, device, repeats: int, steps: int) -> dict:
    from lightning_gnn_dist.data.csr import CSRAdjacency

    src, dst = part.edge_index
    adj = CSRAdjacency.from_edge_index(torch.stack([src, dst]), part.num_owned, part.num_owned)
    dense = torch.randn(part.num_owned, hidden, device=device)
    times = {}
    for kernel in spmm.CUDA_KERNELS:
        previous, spmm.CUDA_KERNEL = spmm.CUDA_KERNEL, kernel
        try:
            matrix = spmm.SparseMatrix(adj)
            spmm.spmm(matrix, dense)
            _sync(device)
            samples = []
            for _ in range(repeats * steps):
                start = time.perf_counter()
                spmm.spmm(matrix, dense)
                _sync(device)
                samples.append(time.perf_counter() - start)
            times[kernel] = float(np.median(samples))
        finally:
            spmm.CUDA_KERNEL = previous
    return times


# -- (host_syncs) ------------------------------------------------------------------------------
def host_syncs(data, device: torch.device, hidden: int) -> dict:
    kind = device.type if device.type != "cpu" else None
    part = to_device(_part(data), device)
    model = distribute(GCN(data.num_features, hidden, 8)).to(device)
    context = make_graph_context(part, make_exchange("p2p", part))
    report = {}
    weights = None
    for step in range(2):  # the first step builds the graph's caches
        with HostSyncCounter(kind) as counter:  # the layers only: a fixed output gradient
            with use_graph_context(context):
                out = model(part.x, part.edge_index)
            weights = torch.ones_like(out) if weights is None else weights
            out.backward(weights)
        report[f"full_batch_p2p_step{step}"] = counter.report()
    store = PartitionedGraphStore(_part(data))
    loader = NeighborLoader(
        store, [5, 5], store.partition.train_mask, batch_size=64, num_steps=2, device=device
    )
    sampled = distribute(GCN(data.num_features, hidden, 8), ("neighbor",)).to(device)
    for step, batch in enumerate(loader):
        with HostSyncCounter(kind) as counter:
            with use_graph_context(SampledBatchContext.from_batch(batch)):
                out = sampled(batch.x, batch.edge_index)
            out.backward(torch.ones_like(out))
        report[f"neighbor_step{step}"] = counter.report()
    return report


# -- (two_process) ---------------------------------------------------------------------------
def _two_rank(rank: int, world_size: int, init_file: str, side: int, device_type: str, queue):
    """One rank of the two-process run."""
    import datetime

    import torch.distributed as dist

    try:
        if device_type == "cuda":
            torch.cuda.set_device(0)  # both ranks on the one GPU
        dist.init_process_group(
            "nccl" if device_type == "cuda" else "gloo",
            init_method=f"file://{init_file}",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=60),
        )
        data = _graph(side)
        assignment = (np.arange(data.num_nodes) * world_size) // data.num_nodes
        parts = list(build_local_partitions(data, assignment, world_size))
        device = torch.device("cuda", 0) if device_type == "cuda" else torch.device("cpu")
        part = to_device(parts[rank], device)
        halo = make_exchange("p2p", part)(part.x, "features")
        relabelled = torch.cat([p.x for p in parts])  # rows in the relabelled order
        expected = relabelled[parts[rank].halo_ids]
        queue.put(
            (
                rank,
                "ok",
                {"equal": bool(torch.equal(halo.cpu(), expected)), "halo_rows": int(halo.size(0))},
            )
        )
        dist.destroy_process_group()
    except BaseException:
        queue.put((rank, "error", traceback.format_exc()[-1500:]))


def two_process(side: int, device: torch.device, timeout: float = 120) -> dict:
    backend = "nccl" if device.type == "cuda" else "gloo"
    # CUDA: spawned ranks (a forked child cannot use CUDA once the parent has); CPU: forked.
    context = multiprocessing.get_context("spawn" if device.type == "cuda" else "fork")
    queue = context.Queue()
    results, errors = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        procs = [
            context.Process(
                target=_two_rank, args=(r, 2, init_file, side, device.type, queue), daemon=True
            )
            for r in range(2)
        ]
        for proc in procs:
            proc.start()
        deadline = time.monotonic() + timeout
        try:
            for _ in procs:
                rank, status, value = queue.get(timeout=max(1.0, deadline - time.monotonic()))
                (results if status == "ok" else errors)[rank] = value
        except Exception:  # a hang: NCCL waits instead of failing
            errors.setdefault(-1, f"no answer within {timeout} s (a hang)")
        finally:
            for proc in procs:
                proc.join(timeout=5)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
    if errors:
        return {"backend": backend, "ran": False, "passed": None, "errors": errors}
    ranks = [results[r] for r in range(2)]
    return {
        "backend": backend,
        "ran": True,
        "ranks": ranks,
        "passed": all(r["equal"] for r in ranks),
    }


# -- the benchmark -----------------------------------------------------------------------------
def no_cuda_message() -> str:
    """The one line ``--device cuda`` stops with where torch sees no GPU."""
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU-only build"
    return (
        f"--device cuda: torch {torch.__version__} ({build}) sees no CUDA device here; run the "
        "check on a GPU machine (benchmarks/README.md) or pass --device cpu"
    )


def run(r: Run) -> None:
    device = torch.device(r.args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(no_cuda_message())
    side = r.args.side or (12 if r.quick else 150)
    epochs = r.args.epochs or (3 if r.quick else 5)
    hidden = 16 if r.quick else 128
    data = _graph(side)
    r.report["setup"] = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "graph": f"triangulated grid {side}x{side}",
        "num_nodes": int(data.num_nodes),
        "num_edges": int(data.edge_index.size(1)),
        "hidden": hidden,
        "epochs": epochs,
        "tolerance": TOLERANCE,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    if r.wants("equality"):
        with r.section("equality"):
            r.report["equality"] = equality(data, device, epochs, hidden)
        r.save()
    if r.wants("codecs"):
        with r.section("codecs"):
            r.report["codecs"] = codecs(device)
        r.save()
    if r.wants("time"):
        with r.section("time"):
            steps = 3 if r.quick else 10
            r.report["time"] = epoch_times(data, device, hidden, r.repeats, steps)
        r.save()
    if r.wants("host_syncs"):
        with r.section("host_syncs"):
            r.report["host_syncs"] = host_syncs(data, device, hidden)
        r.save()
    if r.wants("two_process"):
        with r.section("two_process"):
            r.report["two_process"] = two_process(min(side, 40), device)
    checks = [row.get("passed") for row in r.report.get("equality", [])]
    checks += [row.get("passed") for row in r.report.get("codecs", [])]
    r.report["passed"] = all(c is not False for c in checks)
    r.save(final=True)


def render(report: dict) -> str:
    setup = report.get("setup", {})
    lines = [
        "# GPU check: one-rank modes on the device against the CPU",
        "",
        f"Device: **{setup.get('device_name')}** ({setup.get('device')}), torch "
        f"{setup.get('torch')} (CUDA {setup.get('cuda')}); graph {setup.get('graph')} "
        f"({setup.get('num_nodes')} vertices, {setup.get('num_edges')} edges), GCN hidden "
        f"{setup.get('hidden')}, {setup.get('epochs')} steps per case. Overall: "
        f"**{'passed' if report.get('passed') else 'FAILED'}**.",
        "",
    ]
    if "equality" in report:
        lines += [
            f"## Equality with the CPU run (tolerance {setup.get('tolerance')})",
            "",
            markdown_table(
                report["equality"],
                ["mode", "max_abs_difference", "final_loss", "seconds", "passed", "error"],
            ),
            "",
        ]
    if "codecs" in report:
        lines += [
            "## Codecs on the device (error ÷ stated bound ≤ 1; CPU decodes the same wire)",
            "",
            markdown_table(
                report["codecs"],
                [
                    "codec",
                    "width",
                    "max_error_over_bound",
                    "zeros_exact",
                    "cpu_decode_equal",
                    "wire_bytes_per_row",
                    "passed",
                ],
            ),  # fmt: skip
            "",
        ]
    if "time" in report:
        t = report["time"]
        cell = t["package_over_plain"]
        lines += [
            "## Step time against plain PyG on the same device",
            "",
            "Not the user's path: both sides are a plain training loop without Lightning (the "
            "package's distributed layers and graph context against plain PyG's `GCNConv`).",
            "",
            f"Package (p2p, one rank) ÷ plain PyG: **{cell['ratio']:.2f}** "
            f"(per round {', '.join(f'{v:.2f}' for v in cell['per_round'])}); medians per round "
            + "; ".join(
                f"{k}: {', '.join(f'{s * 1e3:.2f} ms' for s in v)}" for k, v in t["seconds"].items()
            )
            + ".",
            "",
        ]
        if "spmm" in t:
            lines += [
                "SpMM kernel on the device: "
                + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in t["spmm"].items()),
                "",
            ]
    if "host_syncs" in report:
        rows = [
            {
                "step": step,
                "total": r["total"],
                "where": "; ".join(f"{k} ×{v}" for k, v in r["by_site"].items()) or "–",
            }
            for step, r in report["host_syncs"].items()
        ]
        lines += [
            "## Device → host round trips per step (forward and backward)",
            "",
            markdown_table(rows, ["step", "total", "where"]),
            "",
        ]
    if "two_process" in report:
        t = report["two_process"]
        if t.get("ran"):
            text = f"ran on {t['backend']}; halo rows equal the single-process rows: {t['passed']}"
        else:
            last = [e.strip().splitlines()[-1] for e in t.get("errors", {}).values() if e.strip()]
            text = f"did not run on {t['backend']}: " + "; ".join(f"`{e}`" for e in last)
        lines += ["## Two processes on this one device", "", text, ""]
    return "\n".join(lines)


BENCHMARK = Benchmark(
    "gpu_check",
    __doc__,
    run,
    render,
    add_arguments=_add_arguments,
    sections=SECTIONS,
    repeats=3,
)


def main(argv: list[str] | None = None) -> int:
    """:meth:`Benchmark.main`, with ``--out DIR`` (an existing directory, or a path ending in
    ``/``) meaning ``DIR/gpu_check``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    for i, arg in enumerate(argv[:-1]):
        if arg == "--out" and (argv[i + 1].endswith(os.sep) or Path(argv[i + 1]).is_dir()):
            Path(argv[i + 1]).mkdir(parents=True, exist_ok=True)
            argv[i + 1] = str(Path(argv[i + 1]) / "gpu_check")
    return BENCHMARK.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())

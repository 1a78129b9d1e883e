"""DistDGL side of :mod:`benchmarks.peer_dgl`: partition, graph server and trainer (DGL's venv).

    python distdgl.py partition --data G.npz --out DIR --parts 2     # METIS, balanced training
    DGL_ROLE=server ... python distdgl.py server --config DIR/rmat.json
    DGL_ROLE=client ... python distdgl.py trainer --config DIR/rmat.json --data G.npz --out R.json

One host simulates ``P`` machines (DGL's ``tools/launch.py`` is not used): machine ``m`` is a
mount namespace with a private ``/dev/shm`` (DGL names the shared-memory graph by graph name
only, so two servers on one host would collide), holding one graph server and one trainer. DGL
finds a trainer's machine by matching its IP against ``ip_config``, where every line is
127.0.0.1, so the trainer sets its machine id from ``DGL_MACHINE_ID`` instead. Trainers run
``DistNodeDataLoader`` + ``NeighborSampler`` (local part sampled in the trainer, remote requests
served by the servers), pull features from the distributed KV store, and synchronise gradients
with ``DistributedDataParallel`` (gloo), as DGL's ``examples/distributed/graphsage`` does.

A trainer's epoch CPU includes its own server's CPU over the epoch (the ``server`` phase: remote
sampling and feature pulls are served there). Data memory is the trainer's (peak RSS − RSS after
imports, before evaluation); the server's peak RSS is reported apart. Accuracy: rank 0 evaluates
the trained weights with full neighbourhoods on the whole graph, as the 1-process DGL variant
does (after timing and memory are taken).
"""

# ruff: noqa: E402  (the environment must be set before torch is imported)
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from worker import _DGLStack, accuracy_of, dgl_batches, rss_bytes, train  # noqa: I001

GRAPH_NAME = "rmat"


def partition(args) -> None:
    import dgl
    import numpy as np
    import torch

    arrays = np.load(args.data)
    data = {k: torch.from_numpy(arrays[k]) for k in arrays.files}
    src, dst = data["edge_index"]
    graph = dgl.graph((src, dst), num_nodes=data["x"].size(0))
    graph.ndata["feat"] = data["x"]
    graph.ndata["label"] = data["y"]
    graph.ndata["train_mask"] = data["train_mask"].to(torch.uint8)
    dgl.distributed.partition_graph(
        graph,
        GRAPH_NAME,
        args.parts,
        args.out,
        part_method="metis",
        balance_ntypes=graph.ndata["train_mask"],
        balance_edges=True,
    )


def server(args) -> None:
    import dgl

    dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])  # serves until the trainers exit


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) * 1024
    return 0


def trainer(args) -> None:
    import torch

    torch.set_num_threads(1)
    import dgl
    import dgl.distributed.rpc_client as rpc_client
    import torch.distributed as dist
    from dgl.nn import SAGEConv

    machine = int(os.environ["DGL_MACHINE_ID"])
    rpc_client.get_local_machine_id = lambda _namebook: machine  # every machine is 127.0.0.1
    torch.manual_seed(0)
    after_imports = rss_bytes()
    dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=machine, world_size=world_size)
    graph = dgl.distributed.DistGraph(GRAPH_NAME, part_config=args.config)
    train_nid = dgl.distributed.node_split(
        graph.ndata["train_mask"], graph.get_partition_book(), force_even=True
    )
    sampler = dgl.dataloading.NeighborSampler(list(reversed(args.fanout)))
    loader = dgl.dataloading.DistNodeDataLoader(
        graph, train_nid, sampler, batch_size=args.batch_size, shuffle=True, drop_last=False
    )
    model = _DGLStack(
        lambda i, o: SAGEConv(i, o, "mean"), [args.in_channels, args.hidden, 16], args.dropout
    )
    model = torch.nn.parallel.DistributedDataParallel(model)
    server_pid = int(os.environ["DGL_SERVER_PID"])

    batches = dgl_batches(loader, model, graph.ndata["feat"], graph.ndata["label"])
    records = train(
        args, None, model, batches, args.epochs, server_cpu=lambda: _cpu_seconds(server_pid)
    )
    trained = records[-1]["peak_rss_bytes"] - after_imports
    result = {
        "records": records,
        "data_memory_bytes": trained,  # measured before the evaluation
        "train_memory_bytes": trained,
        "server_peak_bytes": _peak_rss(server_pid),
        "steps": records[-1]["steps"],
        "torch": torch.__version__,
        "accuracy": None,
    }
    dist.barrier()
    if machine == 0:
        result["accuracy"] = _evaluate(args, model.module)
    Path(args.out).write_text(json.dumps(result))
    dist.barrier()


def _evaluate(args, model) -> float:
    import dgl
    import numpy as np
    import torch

    arrays = np.load(args.data)
    src, dst = torch.from_numpy(arrays["edge_index"])
    x = torch.from_numpy(arrays["x"])
    graph = dgl.graph((src, dst), num_nodes=x.size(0))
    mask, y = torch.from_numpy(arrays["test_mask"]), torch.from_numpy(arrays["y"])
    model.eval()
    with torch.no_grad():
        return accuracy_of(model(graph, x)[mask], y[mask])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("role", choices=["partition", "server", "trainer"])
    parser.add_argument("--data")
    parser.add_argument("--out")
    parser.add_argument("--config")
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--in-channels", type=int, default=100)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--fanout", type=int, nargs="+", default=[25, 10])
    args = parser.parse_args()
    {"partition": partition, "server": server, "trainer": trainer}[args.role](args)


if __name__ == "__main__":
    main()

"""Child process that runs one hypergraph partition (started by ``backends/_child.py``).

KaHyPar can end the process that calls it (exit 255 on a missing or incomplete ``.ini``,
``exit(0)`` after a stdin prompt when a ``Context`` is reused, endless loops on some incomplete
``.ini`` files), and Mt-KaHyPar's default preset is reproducible only in a fresh process (a second
call in one process, same seed, returned a different partition). So every call runs here, in a
process of its own; the caller turns any exit status other than 0, a timeout or a missing output
file into a ``RuntimeError``.

Usage::

    python _worker.py kahypar   HYPERGRAPH.npz OUTPUT.npy NUM_PARTS EPSILON SEED CONFIG.ini
    python _worker.py mtkahypar HYPERGRAPH.npz OUTPUT.npy NUM_PARTS EPSILON SEED PRESET THREADS
    python _worker.py kaminpar  GRAPH.parhip   OUTPUT.npy NUM_PARTS EPSILON SEED CONTEXT THREADS
    python _worker.py metis     GRAPH_FOLDER   OUTPUT.npy NUM_PARTS UFACTOR SEED

``GRAPH.parhip`` is a graph in ParHIP's binary format (``backends/kaminpar.py`` writes it);
``CONTEXT`` a KaMinPar context name (``default``, ``fast``, ``terapart``...). ``PRESET`` is a
member of ``mtkahypar.PresetType`` (``DEFAULT``) or the path of an ``.ini`` file.
``GRAPH_FOLDER`` holds ``xadj.npy``, ``adjncy.npy`` and ``vwgt.npy`` in METIS' index type
(``partition/metis.py`` writes them; memory-mapped here), partitioned by METIS 5.2 with its coarse
levels in files of the working directory (``backends/metis_library.py``).

``HYPERGRAPH.npz`` holds ``net_offsets``, ``pins``, ``vertex_weights`` and optionally
``net_weights`` (int64, the fields of ``ColumnNetHypergraph``; unit net weights when absent); ``OUTPUT.npy`` receives the ``[num_vertices] int64`` assignment and is
written only after the partitioner returned (atomically: written to a temporary name, then
renamed). Exit status 2: bad arguments or unreadable input, with a message on stderr. The script
imports only ``numpy`` and the partitioner (no torch), so it starts in well under a second.

When ``LGD_PARTITION_PARENT_PID`` is set, the worker asks Linux to ``SIGKILL`` it when that
parent dies (``PR_SET_PDEATHSIG``), so a killed ``partition`` command leaves no worker running.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path

if __name__ == "__main__" and sys.path and sys.path[0]:
    # Run as a script, this file's folder is sys.path[0]; it holds our backend modules
    # ``kahypar.py`` and ``mtkahypar.py``, which would shadow the libraries below.
    if Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]

import numpy as np  # noqa: E402

USAGE = (
    "BACKEND INPUT OUTPUT.npy NUM_PARTS EPSILON SEED [CONFIG.ini | PRESET THREADS | CONTEXT THREADS]"
    " (metis: BACKEND INPUT OUTPUT.npy NUM_PARTS UFACTOR SEED)"
)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent() -> None:
    """SIGKILL this process when its parent dies (Linux; elsewhere a no-op)."""
    parent = os.environ.get("LGD_PARTITION_PARENT_PID")
    if not parent or not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    except (OSError, AttributeError, ValueError):
        return
    if str(os.getppid()) != parent:  # the parent died before the request took effect
        os._exit(1)


def _fail(message: str) -> int:
    print(f"partition worker: {message}", file=sys.stderr)
    return 2


def _net_weights(arrays: dict, num_nets: int) -> list[int]:
    weights = arrays.get("net_weights")
    return [1] * num_nets if weights is None else weights.tolist()


def _kahypar(arrays: dict, num_parts: int, epsilon: float, seed: int, config: Path) -> np.ndarray:
    import kahypar

    num_vertices = len(arrays["vertex_weights"])
    num_nets = len(arrays["net_offsets"]) - 1
    hypergraph = kahypar.Hypergraph(
        num_vertices,
        num_nets,
        arrays["net_offsets"].tolist(),
        arrays["pins"].tolist(),
        num_parts,
        _net_weights(arrays, num_nets),
        arrays["vertex_weights"].tolist(),
    )
    context = kahypar.Context()  # fresh per process: a reused Context ends the process
    context.loadINIconfiguration(str(config))
    context.setK(num_parts)
    context.setEpsilon(epsilon)
    context.setSeed(seed)
    context.suppressOutput(True)
    kahypar.partition(hypergraph, context)
    return np.fromiter(
        (hypergraph.blockID(v) for v in range(num_vertices)), dtype=np.int64, count=num_vertices
    )


def _mtkahypar(
    arrays: dict, num_parts: int, epsilon: float, seed: int, preset: str, threads: int
) -> np.ndarray:
    import mtkahypar

    offsets = arrays["net_offsets"].tolist()
    flat_pins = arrays["pins"].tolist()
    num_nets = len(offsets) - 1
    # The Python API takes nets as a list of lists (no array entry point in 1.x).
    nets = [flat_pins[offsets[j] : offsets[j + 1]] for j in range(num_nets)]
    initializer = mtkahypar.initialize(threads)
    if preset.endswith(".ini"):
        context = initializer.context_from_file(preset)
    else:
        context = initializer.context_from_preset(getattr(mtkahypar.PresetType, preset))
    context.set_partitioning_parameters(num_parts, epsilon, mtkahypar.Objective.KM1)
    context.logging = False
    mtkahypar.set_seed(seed)
    hypergraph = initializer.create_hypergraph(
        context,
        len(arrays["vertex_weights"]),
        num_nets,
        nets,
        arrays["vertex_weights"].tolist(),
        _net_weights(arrays, num_nets),
    )
    partitioned = hypergraph.partition(context)
    return np.asarray(partitioned.get_partition(), dtype=np.int64)


def _kaminpar(
    path: Path, num_parts: int, epsilon: float, seed: int, context: str, threads: int
) -> np.ndarray:
    import kaminpar

    graph = kaminpar.load_graph(str(path), kaminpar.GraphFileFormat.PARHIP)
    kaminpar.reseed(seed)
    solver = kaminpar.KaMinPar(threads, kaminpar.context_by_name(context))
    return np.asarray(solver.compute_partition(graph, num_parts, epsilon), dtype=np.int64)


def _metis(folder: Path, num_parts: int, ufactor: int, seed: int) -> np.ndarray:
    import importlib.util

    # By path: importing it through the package would import torch (and take seconds).
    spec = importlib.util.spec_from_file_location(
        "lgd_metis_library", Path(__file__).with_name("metis_library.py")
    )
    library = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(library)
    # Copy-on-write maps: METIS reads them in place, and a write would stay private.
    xadj, adjncy, vwgt = (
        np.load(folder / f"{n}.npy", mmap_mode="c") for n in ("xadj", "adjncy", "vwgt")
    )
    return library.part_graph_kway(xadj, adjncy, vwgt, num_parts, seed, ufactor, on_disk=True)


def main(argv: list[str] | None = None) -> int:
    _die_with_parent()
    args = sys.argv[1:] if argv is None else argv
    backend = args[0] if args else None
    expected = {"kahypar": 7, "mtkahypar": 8, "kaminpar": 8, "metis": 6}
    if backend not in expected or len(args) != expected[backend]:
        return _fail(f"expected arguments {USAGE} (got {args!r})")
    input_path, output_path = Path(args[1]), Path(args[2])
    try:
        num_parts, epsilon, seed = int(args[3]), float(args[4]), int(args[5])
    except ValueError as error:
        return _fail(f"bad NUM_PARTS/EPSILON/SEED {args[3:6]!r}: {error}")
    if backend == "metis":
        if not all((input_path / f"{n}.npy").is_file() for n in ("xadj", "adjncy", "vwgt")):
            return _fail(f"cannot read the graph {str(input_path)!r}: no xadj/adjncy/vwgt.npy")
        return _save(_metis(input_path, num_parts, int(epsilon), seed), output_path)
    config = Path(args[6]) if backend == "kahypar" else None
    if config is not None and not config.is_file():
        return _fail(f"KaHyPar configuration file {str(config)!r} does not exist")
    if backend == "kaminpar":
        try:
            threads = int(args[7])
        except ValueError as error:
            return _fail(f"bad THREADS {args[7]!r}: {error}")
        if not input_path.is_file():
            return _fail(f"cannot read the graph {str(input_path)!r}: no such file")
        assignment = _kaminpar(input_path, num_parts, epsilon, seed, args[6], threads)
        return _save(assignment, output_path)
    if backend == "mtkahypar":
        preset = args[6]
        if preset.endswith(".ini") and not Path(preset).is_file():
            return _fail(f"Mt-KaHyPar configuration file {preset!r} does not exist")
        try:
            threads = int(args[7])
        except ValueError as error:
            return _fail(f"bad THREADS {args[7]!r}: {error}")
    try:
        with np.load(input_path) as stored:
            arrays = {k: stored[k] for k in ("net_offsets", "pins", "vertex_weights")}
            if "net_weights" in stored:
                arrays["net_weights"] = stored["net_weights"]
    except (OSError, KeyError, ValueError) as error:
        return _fail(f"cannot read the hypergraph {str(input_path)!r}: {error}")

    if config is not None:
        assignment = _kahypar(arrays, num_parts, epsilon, seed, config)
    else:
        assignment = _mtkahypar(arrays, num_parts, epsilon, seed, preset, threads)
    return _save(assignment, output_path)


def _save(assignment: np.ndarray, output_path: Path) -> int:
    """Write the assignment atomically (a temporary name, then a rename); exit status 0.

    With ``LGD_PARTITION_PEAK_FILE`` set, also appends this process's peak resident memory
    (``VmHWM``, bytes) to that file: the parent's ``RUSAGE_CHILDREN`` counts the parent's own
    memory at the fork, so benchmarks read the child's peak here.
    """
    partial = output_path.with_name(output_path.name + ".partial.npy")
    np.save(partial, assignment)
    os.replace(partial, output_path)
    peak_file = os.environ.get("LGD_PARTITION_PEAK_FILE")
    if peak_file:
        with open("/proc/self/status") as status:
            line = next(line for line in status if line.startswith("VmHWM"))
        with open(peak_file, "a") as file:
            file.write(f"{int(line.split()[1]) * 1024}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

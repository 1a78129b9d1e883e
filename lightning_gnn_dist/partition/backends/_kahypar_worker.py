"""Child process that runs one KaHyPar partition (started by ``backends/kahypar.py``).

KaHyPar can end the process that calls it: a missing or incomplete ``.ini`` exits with 255, a
reused ``Context`` prompts on stdin and calls ``exit(0)``, an incomplete ``.ini`` can also make it
loop. So every call runs here, in a process of its own, with a fresh ``Context``; the caller turns
any exit status other than 0, a timeout or a missing output file into a ``RuntimeError``.

Usage::

    python _kahypar_worker.py HYPERGRAPH.npz OUTPUT.npy CONFIG.ini NUM_PARTS EPSILON SEED

``HYPERGRAPH.npz`` holds ``net_offsets``, ``pins`` and ``vertex_weights`` (int64, the fields of
``ColumnNetHypergraph``); ``OUTPUT.npy`` receives the ``[num_vertices] int64`` assignment and is
written only after KaHyPar returned (atomically: written to a temporary name, then renamed).
Exit status 2: bad arguments or unreadable input, with a message on stderr. The script imports
only ``numpy`` and ``kahypar`` (no torch), so it starts in well under a second.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__" and sys.path and sys.path[0]:
    # Run as a script, this file's folder is sys.path[0]; it holds our backend module
    # ``kahypar.py``, which would shadow the library below.
    if Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]

import numpy as np  # noqa: E402


def _fail(message: str) -> int:
    print(f"kahypar worker: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 6:
        return _fail(
            f"expected 6 arguments HYPERGRAPH.npz OUTPUT.npy CONFIG.ini NUM_PARTS EPSILON SEED "
            f"(got {len(args)})"
        )
    input_path, output_path, config_path = (Path(a) for a in args[:3])
    try:
        num_parts, epsilon, seed = int(args[3]), float(args[4]), int(args[5])
    except ValueError as error:
        return _fail(f"bad NUM_PARTS/EPSILON/SEED {args[3:]!r}: {error}")
    if not config_path.is_file():
        return _fail(f"KaHyPar configuration file {str(config_path)!r} does not exist")
    try:
        with np.load(input_path) as arrays:
            net_offsets = arrays["net_offsets"]
            pins = arrays["pins"]
            vertex_weights = arrays["vertex_weights"]
    except (OSError, KeyError, ValueError) as error:
        return _fail(f"cannot read the hypergraph {str(input_path)!r}: {error}")

    import kahypar

    num_vertices = len(vertex_weights)
    num_nets = len(net_offsets) - 1
    hypergraph = kahypar.Hypergraph(
        num_vertices,
        num_nets,
        net_offsets.tolist(),
        pins.tolist(),
        num_parts,
        [1] * num_nets,
        vertex_weights.tolist(),
    )
    context = kahypar.Context()  # fresh per process: a reused Context ends the process
    context.loadINIconfiguration(str(config_path))
    context.setK(num_parts)
    context.setEpsilon(epsilon)
    context.setSeed(seed)
    context.suppressOutput(True)
    kahypar.partition(hypergraph, context)

    assignment = np.fromiter(
        (hypergraph.blockID(v) for v in range(num_vertices)), dtype=np.int64, count=num_vertices
    )
    partial = output_path.with_name(output_path.name + ".partial.npy")
    np.save(partial, assignment)
    os.replace(partial, output_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

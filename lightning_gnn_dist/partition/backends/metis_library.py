"""METIS 5.2 through ``ctypes``: the library of the ``cmeel-metis`` wheel (32-bit ids).

This module imports only the standard library and numpy (no torch): the METIS worker
(``_worker.py metis``) loads it by its path, in a process that starts in a fraction of a second.

Why METIS 5.2 and not pymetis' 5.1 (issue 34, R-MAT scale 20, 1 M vertices, 31 M adjacency
entries, ``python -m benchmarks.scaling``): METIS keeps every coarsening level, and the levels of
a power-law graph keep almost all their edges (seven levels of 29-31 M entries each). With
pymetis' 64-bit ids they took 4.4 GB besides the graph, 1.2x DGL's whole partition step; with
32-bit ids 2.5 GB, and with METIS 5.2's ``ONDISK`` option, which writes each finer level to a
file while the coarser ones are built, 0.6 GB, for the same assignment (the option changes where
the levels live, not what METIS computes; checked bit for bit at scale 20, P = 2 and 4).
``ONDISK`` writes ``metis<pid>.<level>`` files into the working directory, which is why it is
used only in the worker, whose working directory is a private temporary folder.
"""

from __future__ import annotations

import ctypes
import re
from functools import cache
from importlib import metadata
from pathlib import Path

import numpy as np

#: The distribution that ships the library (``pip install cmeel-metis``).
DISTRIBUTION = "cmeel-metis"
#: ``METIS_NOPTIONS`` of METIS 5.2 (and 5.1).
NOPTIONS = 40
#: Indices of METIS 5.2's ``moptions_et`` (``metis.h``; 5.1's differ from ``NIPARTS`` on).
OPTION = {"ctype": 2, "dbglvl": 5, "niparts": 6, "niter": 7, "ncuts": 8, "seed": 9,
          "no2hop": 10, "ondisk": 11, "ufactor": 18, "numbering": 19, "dropedges": 20}  # fmt: skip
_STATUS = {-2: "bad input", -3: "out of memory", -4: "error"}
_LIBRARY_NAME = re.compile(r"lib(metis|GKlib)\.(so|dylib)(\.\d+)*$")


def _installed_files() -> dict[str, Path]:
    """``{"metis": ..., "GKlib": ..., "header": ...}`` of the installed cmeel packages."""
    found: dict[str, Path] = {}
    for distribution in (DISTRIBUTION, "cmeel-gklib"):
        try:
            files = metadata.files(distribution) or []
        except metadata.PackageNotFoundError:
            continue
        for file in files:
            name = Path(str(file)).name
            match = _LIBRARY_NAME.match(name)
            if match:
                found.setdefault(match.group(1), Path(file.locate()))
            elif name == "metis.h":
                found.setdefault("header", Path(file.locate()))
    return found


@cache
def load() -> tuple[ctypes.CDLL, np.dtype]:
    """The METIS library and its index type (``int32`` or ``int64``, read from ``metis.h``).

    Raises:
        ImportError: ``cmeel-metis`` is not installed (or lacks its library or header).
    """
    files = _installed_files()
    missing = [key for key in ("metis", "header") if key not in files]
    if missing:
        raise ImportError(
            f"method='metis' needs METIS 5.2 from the {DISTRIBUTION} package "
            f"(not found: {', '.join(missing)}): pip install {DISTRIBUTION}, "
            "or use method='kaminpar'"
        )
    width = re.search(r"#define\s+IDXTYPEWIDTH\s+(\d+)", files["header"].read_text())
    if width is None or width.group(1) not in ("32", "64"):
        raise ImportError(f"cannot read IDXTYPEWIDTH from {files['header']}")
    if "GKlib" in files:  # libmetis names libGKlib without a path: load it first, globally
        ctypes.CDLL(str(files["GKlib"]), mode=ctypes.RTLD_GLOBAL)
    library = ctypes.CDLL(str(files["metis"]))
    return library, np.dtype(np.int32 if width.group(1) == "32" else np.int64)


def index_dtype() -> np.dtype:
    """METIS' ``idx_t`` as a numpy type."""
    return load()[1]


def fit_weights(weights: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``[N, ncon]`` vertex weights as ``dtype``, each column divided (rounding up) by the
    smallest integer that keeps its total within a quarter of ``dtype``'s range.

    METIS adds the weights of a part in ``idx_t``: 32-bit ids overflow once a column's total
    passes ``2**31`` (the ``"work"`` weights of R-MAT scale 23). Dividing keeps the balance to
    within one unit of the divisor per vertex; columns that fit are unchanged.
    """
    weights = np.asarray(weights, dtype=np.int64)
    limit = np.iinfo(dtype).max // 4
    totals = weights.sum(axis=0)
    divisors = np.maximum(1, -(-totals // limit))  # ceil
    if (divisors > 1).any():
        weights = -(-weights // divisors)
    return np.ascontiguousarray(weights, dtype=dtype)


def part_graph_kway(
    xadj: np.ndarray,
    adjncy: np.ndarray,
    vwgt: np.ndarray,
    num_parts: int,
    seed: int,
    ufactor: int,
    on_disk: bool = False,
) -> np.ndarray:
    """``METIS_PartGraphKway`` of the CSR graph ``(xadj, adjncy)`` (symmetric, no self loops).

    Args:
        xadj: ``[N + 1]`` row offsets, METIS' index type.
        adjncy: ``[nnz]`` neighbours, METIS' index type.
        vwgt: ``[N, ncon]`` (or ``[N]``) vertex weights, METIS' index type.
        num_parts: P.
        seed: METIS' seed.
        ufactor: allowed imbalance in thousandths.
        on_disk: METIS' ``ONDISK``: levels written to files in the working directory.

    Returns:
        ``[N] int64`` part ids.

    Raises:
        RuntimeError: METIS returned an error status.
    """
    library, idx = load()
    options = {"seed": seed, "ufactor": ufactor, "ondisk": int(bool(on_disk))}
    return kway(library, idx, OPTION, xadj, adjncy, vwgt, num_parts, options)


def kway(
    library: ctypes.CDLL,
    idx: np.dtype,
    option_index: dict[str, int],
    xadj: np.ndarray,
    adjncy: np.ndarray,
    vwgt: np.ndarray,
    num_parts: int,
    options: dict[str, int],
) -> np.ndarray:
    """``METIS_PartGraphKway`` of any METIS build reached through ``ctypes`` (this module's 5.2,
    or the 5.1 pymetis bundles): ``library``, its ``idx_t`` and the positions of its options
    (``option_index``, by name); ``options`` set by name over METIS' defaults, with 0-based
    numbering. Arrays as :func:`part_graph_kway`; returns ``[N] int64`` part ids.

    Raises:
        RuntimeError: METIS returned an error status.
    """
    c_idx = {4: ctypes.c_int32, 8: ctypes.c_int64}[idx.itemsize]
    num_nodes = len(xadj) - 1
    vwgt = np.asarray(vwgt).reshape(num_nodes, -1)
    ncon = vwgt.shape[1]
    arrays = [np.ascontiguousarray(a, dtype=idx) for a in (xadj, adjncy, vwgt.reshape(-1))]
    values = np.zeros(NOPTIONS, dtype=idx)
    part = np.zeros(num_nodes, dtype=idx)

    def ptr(array: np.ndarray):
        return array.ctypes.data_as(ctypes.POINTER(c_idx))

    library.METIS_SetDefaultOptions(ptr(values))
    for name, value in {**options, "numbering": 0}.items():
        values[option_index[name]] = value
    nvtxs, nconstraints, nparts, edgecut = c_idx(num_nodes), c_idx(ncon), c_idx(num_parts), c_idx()
    status = library.METIS_PartGraphKway(
        ctypes.byref(nvtxs), ctypes.byref(nconstraints), ptr(arrays[0]), ptr(arrays[1]),
        ptr(arrays[2]), None, None, ctypes.byref(nparts), None, None, ptr(values),
        ctypes.byref(edgecut), ptr(part),
    )  # fmt: skip
    if status != 1:  # METIS_OK
        raise RuntimeError(
            f"METIS_PartGraphKway failed with status {status} ({_STATUS.get(status, 'unknown')}) "
            f"for {num_nodes} vertices, {num_parts} parts and {ncon} constraint(s)"
        )
    return part.astype(np.int64)

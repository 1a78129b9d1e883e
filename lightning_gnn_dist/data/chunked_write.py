"""Writers of the chunked graph format (:mod:`.chunked`): an in-memory graph
(:func:`write_chunked`) and a synthetic R-MAT graph generated chunk by chunk
(:func:`write_rmat_chunked`), which benchmarks and tests use to make graphs of tens of millions
of edges without ever holding them twice.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

from .attributes import graph_attributes
from .chunked import (
    HOMOGENEOUS_EDGE_TYPE,
    HOMOGENEOUS_NODE_TYPE,
    MASKS,
    NpyFile,
    write_npy_header,
)
from .errors import DatasetError

__all__ = ["write_chunked", "write_rmat_chunked"]

WRITE_FORMATS = ("numpy", "csv")


def _bounds(total: int, num_chunks: int) -> list[tuple[int, int]]:
    """``num_chunks`` consecutive ranges covering ``[0, total)``, sizes differing by at most 1
    (DGL's chunking)."""
    sizes = [total // num_chunks + (i < total % num_chunks) for i in range(num_chunks)]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
    return list(zip(starts[:-1], starts[1:], strict=True))


def _write_file(path: Path, array: np.ndarray, fmt: str, delimiter: str = ",") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "numpy":
        np.save(path, np.ascontiguousarray(array))
        return
    array = array.reshape(array.shape[0], -1)
    number = "%d" if array.dtype.kind in "iub" else "%.9g"
    np.savetxt(
        path, array.astype(np.int64) if array.dtype.kind == "b" else array, number, delimiter
    )


def _spec(files: list[str], fmt: str, delimiter: str = ",", dtype: str | None = None) -> dict:
    format_ = {"name": fmt} if fmt == "numpy" else {"name": fmt, "delimiter": delimiter}
    if dtype is not None and fmt != "numpy":  # a CSV file does not say its dtype
        format_["dtype"] = dtype
    return {"format": format_, "data": files}


def _metadata(
    directory: Path,
    name: str,
    node_counts: list[int],
    edge_counts: list[int],
    edges: dict,
    node_data: dict,
    edge_data: dict,
) -> Path:
    meta = {
        "graph_name": name,
        "node_type": [HOMOGENEOUS_NODE_TYPE],
        "num_nodes_per_chunk": [node_counts],
        "edge_type": [HOMOGENEOUS_EDGE_TYPE],
        "num_edges_per_chunk": [edge_counts],
        "edges": {HOMOGENEOUS_EDGE_TYPE: edges},
        "node_data": {HOMOGENEOUS_NODE_TYPE: node_data},
        "edge_data": {HOMOGENEOUS_EDGE_TYPE: edge_data} if edge_data else {},
    }
    path = directory / "metadata.json"
    path.write_text(json.dumps(meta, indent=1))
    return path


def write_chunked(
    data: Data,
    directory: str | os.PathLike,
    num_chunks: int = 2,
    edge_format: str = "numpy",
    node_format: str = "numpy",
) -> Path:
    """Write ``data`` (in memory) in the chunked graph format: every array in ``num_chunks``
    files of consecutive rows. Returns the ``metadata.json``.

    Args:
        data: a graph with ``edge_index``, ``x`` and ``y`` (masks and other node and edge
            attributes are written too).
        directory: created if missing.
        num_chunks: files per array.
        edge_format: ``"numpy"`` (``[n, 2] int64``) or ``"csv"`` (``source target`` lines).
        node_format: ``"numpy"`` or ``"csv"`` (comma-separated rows) for node and edge data.

    Raises:
        ValueError: an unknown format or ``num_chunks < 1``.
    """
    for fmt in (edge_format, node_format):
        if fmt not in WRITE_FORMATS:
            raise ValueError(f"unknown chunked format {fmt!r}; choose one of {WRITE_FORMATS}")
    if not isinstance(num_chunks, int) or num_chunks < 1:
        raise ValueError(f"num_chunks must be an integer >= 1 (got {num_chunks!r})")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    suffix = {"numpy": ".npy", "csv": ".csv"}
    edge_index = data.edge_index.numpy()
    num_nodes, num_edges = int(data.num_nodes), edge_index.shape[1]
    node_bounds, edge_bounds = _bounds(num_nodes, num_chunks), _bounds(num_edges, num_chunks)

    def arrays(key: str, value: np.ndarray, bounds, fmt: str, delimiter: str = ",") -> dict:
        files = []
        for number, (start, stop) in enumerate(bounds):
            file = f"{key}/part-{number}{suffix[fmt]}"
            _write_file(directory / file, value[start:stop], fmt, delimiter)
            files.append(file)
        return _spec(files, fmt, delimiter, str(value.dtype))

    edges = arrays("edges", edge_index.T, edge_bounds, edge_format, " ")
    attributes = graph_attributes(data)
    node_keys = [k for k in ("x", "y", *MASKS) if getattr(data, k, None) is not None]
    node_data = {
        key: arrays(key, data[key].numpy(), node_bounds, node_format)
        for key in (*node_keys, *attributes.node)
    }
    edge_data = {
        key: arrays(f"edge-{key}", data[key].numpy(), edge_bounds, node_format)
        for key in attributes.edge
    }
    name = data.name if isinstance(getattr(data, "name", None), str) else "graph"
    return _metadata(
        directory,
        name,
        [b - a for a, b in node_bounds],
        [b - a for a, b in edge_bounds],
        edges,
        node_data,
        edge_data,
    )


def rmat_memory_bytes(scale: int, edge_factor: int, features: int, classes: int) -> float:
    """Estimated peak memory of :func:`write_rmat_chunked`: 21 bytes per edge draw while the
    edges are made and deduplicated, then the teacher labels' ``float64`` rows (three
    ``[classes, N]`` arrays) beside the keys (the features are never whole in memory)."""
    num_nodes = 2**scale
    draws = edge_factor * num_nodes
    return max(21.0 * draws, 8.0 * draws + 3 * 8.0 * classes * num_nodes + 8.0 * num_nodes)


def _rmat_keys(scale: int, edge_factor: int, a: float, b: float, c: float, seed: int):
    """The sorted distinct keys ``src << scale | dst`` of
    :func:`~lightning_gnn_dist.data.synthetic.rmat_edge_index` (the same draws), deduplicated
    in place."""
    from .synthetic import _STREAM_GRAPH, _STREAM_PERMUTATION, _rng

    num_nodes = 1 << scale
    num_draws = edge_factor * num_nodes
    rng = _rng(seed, _STREAM_GRAPH)
    dtype = np.int32 if scale <= 30 else np.int64
    src = np.zeros(num_draws, dtype=dtype)
    dst = np.zeros(num_draws, dtype=dtype)
    r = np.empty(num_draws, dtype=np.float32)
    a32, ab, abc = np.float32(a), np.float32(a + b), np.float32(a + b + c)
    for _ in range(scale):  # as rmat_edge_index: one pass per bit level over all draws
        rng.random(out=r, dtype=np.float32)
        np.left_shift(src, 1, out=src)
        np.bitwise_or(src, r >= ab, out=src)
        np.left_shift(dst, 1, out=dst)
        np.bitwise_or(dst, (r >= a32) & ((r < ab) | (r >= abc)), out=dst)
    del r
    permutation = _rng(seed, _STREAM_PERMUTATION).permutation(num_nodes).astype(dtype)
    src = permutation[src]
    dst = permutation[dst]
    del permutation
    keep = src != dst
    keys = src[keep].astype(np.int64)
    del src
    keys <<= scale
    keys |= dst[keep]
    del dst, keep
    keys.sort()
    if keys.size:
        first = np.empty(keys.size, dtype=bool)
        first[0] = True
        np.not_equal(keys[1:], keys[:-1], out=first[1:])
        kept = int(np.count_nonzero(first))
        keys[:kept] = keys[first]
        keys = keys[:kept]
    return keys


def _teacher_labels(
    x_file: Path, keys: np.ndarray, scale: int, classes: int, seed: int
) -> np.ndarray:
    """``argmax(Â Â x W)`` of :func:`~lightning_gnn_dist.data.synthetic.add_synthetic_features`,
    bit for bit: one ``x @ W`` over the memory-mapped features (BLAS blocks rows differently for
    other shapes), then each hop's sums accumulated edge by edge in the same order as SciPy's
    CSC product (``np.add.at``, sequential), class by class."""
    from .chunked_ingest import EDGE_CHUNK
    from .synthetic import _STREAM_TEACHER, _rng

    num_nodes = 1 << scale
    x = np.load(x_file, mmap_mode="r")
    weight = _rng(seed, _STREAM_TEACHER).standard_normal((x.shape[1], classes))
    projected = (x @ weight.astype(np.float32)).astype(np.float64)
    del x
    h = np.ascontiguousarray(projected.T)  # [classes, N]
    del projected
    degree = np.zeros(num_nodes, dtype=np.int64)
    for start in range(0, keys.size, EDGE_CHUNK):
        degree += np.bincount(
            keys[start : start + EDGE_CHUNK] & (num_nodes - 1), minlength=num_nodes
        )
    inverse_degree = 1.0 / (degree + 1.0)
    del degree
    for _ in range(2):
        total = np.zeros_like(h)
        for start in range(0, keys.size, EDGE_CHUNK):
            chunk = keys[start : start + EDGE_CHUNK]
            src, dst = chunk >> scale, chunk & (num_nodes - 1)
            for k in range(classes):
                np.add.at(total[k], dst, h[k][src])
        total += h
        total *= inverse_degree
        h = total
    return np.argmax(h, axis=0).astype(np.int64)


def write_rmat_chunked(
    directory: str | os.PathLike,
    scale: int = 14,
    edge_factor: int = 16,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    features: int = 32,
    classes: int = 8,
    seed: int = 0,
    num_chunks: int = 4,
) -> Path:
    """Write ``rmat?scale=...&features=...`` (the same edges, features, labels and split as
    :func:`~lightning_gnn_dist.data.synthetic.rmat`, bit for bit) in the chunked graph format,
    generating it chunk by chunk: the edges are held once as ``int64`` keys, the features go
    straight to disk. Returns the ``metadata.json`` (load it with ``chunked:PATH``).

    Args:
        directory: created if missing.
        scale: ``log2`` of the number of vertices, ``1..30``. (default: ``14``)
        edge_factor: edge draws per vertex. (default: ``16``)
        a: probability of the top-left quadrant. (default: ``0.57``)
        b: probability of the top-right quadrant. (default: ``0.19``)
        c: probability of the bottom-left quadrant. (default: ``0.19``)
        features: feature width. (default: ``32``)
        classes: number of classes of the teacher labels. (default: ``8``)
        seed: seed of graph, features, labels and split. (default: ``0``)
        num_chunks: files per array. (default: ``4``)

    Raises:
        DatasetError: the generation cannot fit in the available memory.
        ValueError: a bad argument.
    """
    from lightning_gnn_dist.utils.progress import note, status, track

    from . import limits
    from .synthetic import _STREAM_FEATURES, _check_finite, _check_int, _rng, random_split_masks

    scale = _check_int("scale", scale, 1, 30)
    edge_factor = _check_int("edge_factor", edge_factor, 1)
    features = _check_int("features", features, 1)
    classes = _check_int("classes", classes, 1)
    num_chunks = _check_int("num_chunks", num_chunks, 1)
    _check_finite(a=a, b=b, c=c)
    if min(a, b, c) < 0 or a + b + c > 1 + 1e-12:
        raise ValueError(
            f"R-MAT probabilities must be >= 0 with a + b + c <= 1 (got a={a}, b={b}, c={c})"
        )
    needed = rmat_memory_bytes(scale, edge_factor, features, classes)
    available = limits.available_memory_bytes()
    if needed > available:
        raise DatasetError(
            f"rmat scale={scale}, edge_factor={edge_factor}: writing it needs about "
            f"{limits.describe_bytes(needed)} of memory but {limits.describe_bytes(available)} "
            "is available"
        )
    note(f"writing R-MAT scale {scale} (about {limits.describe_bytes(needed)} of memory)")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    num_nodes = 1 << scale
    with status(
        f"drawing {edge_factor * num_nodes:,} R-MAT edges", 3e-8 * edge_factor * num_nodes * scale
    ):
        keys = _rmat_keys(scale, edge_factor, a, b, c, seed)
    edge_bounds = _bounds(keys.size, num_chunks)
    edge_files = []
    for number, (start, stop) in enumerate(track(edge_bounds, "writing edges")):
        chunk = keys[start:stop]
        file = f"edges/part-{number}.npy"
        _write_file(
            directory / file, np.stack([chunk >> scale, chunk & (num_nodes - 1)], 1), "numpy"
        )
        edge_files.append(file)

    # The features in one file first: the teacher's x @ W must be one BLAS call to be exact.
    whole = directory / ".x-whole.npy"
    rng = _rng(seed, _STREAM_FEATURES)
    rows = max(1, (1 << 25) // (4 * features))
    with open(whole, "wb") as handle:
        write_npy_header(handle, np.dtype(np.float32), (num_nodes, features))
        for start in track(range(0, num_nodes, rows), "drawing features"):
            count = min(rows, num_nodes - start)
            rng.standard_normal((count, features), dtype=np.float32).tofile(handle)
    with status("teacher labels (two mean aggregations)"):
        y = _teacher_labels(whole, keys, scale, classes, seed)
    del keys
    node_bounds = _bounds(num_nodes, num_chunks)
    source = NpyFile.open(whole)
    x_files = []
    (directory / "x").mkdir(exist_ok=True)
    for number, (start, stop) in enumerate(node_bounds):
        file = f"x/part-{number}.npy"
        with open(directory / file, "wb") as handle:
            write_npy_header(handle, np.dtype(np.float32), (stop - start, features))
            for begin in range(start, stop, rows):
                source.read(begin, min(begin + rows, stop)).tofile(handle)
        x_files.append(file)
    whole.unlink()
    labelled = torch.from_numpy(y >= 0)
    masks = [mask & labelled for mask in random_split_masks(num_nodes, seed)]
    node_data = {"x": _spec(x_files, "numpy")}
    for key, value in (("y", y), *zip(MASKS, (m.numpy() for m in masks), strict=True)):
        files = []
        for number, (start, stop) in enumerate(node_bounds):
            file = f"{key}/part-{number}.npy"
            _write_file(directory / file, value[start:stop], "numpy")
            files.append(file)
        node_data[key] = _spec(files, "numpy")
    return _metadata(
        directory,
        "rmat",
        [b - a for a, b in node_bounds],
        [b - a for a, b in edge_bounds],
        _spec(edge_files, "numpy"),
        node_data,
        {},
    )


def ogb_chunked(name: str, root: str | os.PathLike | None = None) -> Path:
    """A chunked-graph ``metadata.json`` for an OGB node-property dataset already on disk in
    OGB's raw layout (``root/ogbn_arxiv/raw/*.csv.gz``, ``split/<scheme>/*.csv.gz``): ingestion
    (``chunked:PATH``) then reads OGB's own CSV files chunk by chunk instead of ``ogb``'s loader
    reading everything at once. The split becomes three mask files (one byte per vertex)
    beside the metadata, in ``root/<dataset>/lgd-chunked/``. The result equals ``ogb:NAME``
    (:func:`~lightning_gnn_dist.data.ogb.load_ogb`) for the datasets this covers: homogeneous,
    CSV raw files, node features (``ogbn-arxiv``, ``ogbn-products``); OGB's inverse edges
    (``add_inverse_edge``) are added at ingestion.

    Raises:
        ImportError: ``ogb`` is not installed (its table of datasets is read).
        ValueError: an unknown, heterogeneous, binary-raw (``ogbn-papers100M``) or featureless
            (``ogbn-proteins``) dataset.
        FileNotFoundError: the raw files are not under ``root``.
    """
    from .ogb import DEFAULT_OGB_ROOT, _import_ogb, _master_table, _targets

    master = _master_table(_import_ogb())
    if name not in master:
        raise ValueError(f"unknown OGB node-property dataset {name!r}; known: {sorted(master)}")
    meta = master[name]
    unsupported = {
        "is hetero": "it is heterogeneous",
        "binary": "its raw files are one .npz (convert its arrays to .npy files first)",
    }
    for key, why in unsupported.items():
        if meta.get(key) == "True":
            raise ValueError(f"{name} cannot be read chunk by chunk: {why}; use 'ogb:{name}'")
    if meta.get("has_node_attr") != "True":
        raise ValueError(
            f"{name} has no node features (its x is made from edge features); use 'ogb:{name}'"
        )
    directory = Path(root or DEFAULT_OGB_ROOT) / name.replace("-", "_")
    raw = directory / "raw"
    if not (raw / "edge.csv.gz").is_file():
        raise FileNotFoundError(
            f"{raw}/edge.csv.gz does not exist; download the dataset first (ogb:{name} does)"
        )

    def first_number(file: str) -> int:
        return int(np.loadtxt(raw / file, dtype=np.int64, ndmin=1)[0])

    num_nodes, num_edges = (
        first_number("num-node-list.csv.gz"),
        first_number("num-edge-list.csv.gz"),
    )
    labels = np.loadtxt(raw / "node-label.csv.gz", delimiter=",", ndmin=2)
    _, labelled = _targets(torch.from_numpy(labels), meta.get("task type", ""))
    out = directory / "lgd-chunked"
    out.mkdir(parents=True, exist_ok=True)
    split = directory / "split" / meta["split"]
    node_data = {
        "x": _spec(["../raw/node-feat.csv.gz"], "csv", ",", "float32"),
        "y": _spec(["../raw/node-label.csv.gz"], "csv", ","),
    }
    for key, file in zip(MASKS, ("train", "valid", "test"), strict=True):
        mask = np.zeros(num_nodes, dtype=bool)
        mask[np.loadtxt(split / f"{file}.csv.gz", dtype=np.int64, ndmin=1)] = True
        np.save(out / f"{key}.npy", mask & labelled.numpy())
        node_data[key] = _spec([f"{key}.npy"], "numpy")
    for key in meta.get("additional node files", "None").split(","):
        if key != "None":  # [N, 1], as ogb's loader keeps them
            node_data[key] = {**_spec([f"../raw/{key}.csv.gz"], "csv", ",")}
            node_data[key]["format"]["squeeze"] = False
    edges = {**_spec(["../raw/edge.csv.gz"], "csv", ","),
             "add_reverse": meta.get("add_inverse_edge") == "True"}  # fmt: skip
    edge_data = {}
    if meta.get("has_edge_attr") == "True":
        edge_data["edge_attr"] = _spec(["../raw/edge-feat.csv.gz"], "csv", ",", "float32")
    return _metadata(out, name, [num_nodes], [num_edges], edges, node_data, edge_data)

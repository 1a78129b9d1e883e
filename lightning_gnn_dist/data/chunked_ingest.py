"""Ingestion of a chunked graph into its canonical copy (:mod:`.chunked`): every input chunk is
read once; the edges are sorted in memory as one ``int64`` key per edge, everything else passes
through in row blocks.

The canonical copy (one ``.npy`` file per array) holds exactly what
:func:`~lightning_gnn_dist.data.datasets.load_dataset` returns for the same graph in memory:
``edge_index [2, E] int64`` sorted by ``(source, target)`` (stably: parallel edges and their
edge data keep the input order), ``x [N, d] float32``, ``y`` in its task's canonical form, the
three masks ``[N] bool`` and every other attribute as given; its fingerprint is streamed from
those files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from . import limits
from .attributes import RESERVED_NAMES
from .chunked import (
    MASKS,
    ArraySpec,
    ChunkedGraph,
    NpyFile,
    _current,
    _input_stamps,
    canonical_dir,
    open_canonical,
    read_chunks,
    read_metadata,
    write_npy_header,
)
from .errors import DatasetError

#: Edges sorted, written or permuted per chunk (4 Mi: 32 MiB of keys).
EDGE_CHUNK = 1 << 22


def _listed_edges(graph: ChunkedGraph) -> int:
    """The edges the files list: declared, or (``.npy`` files) read from their headers."""
    if graph.num_edges >= 0:
        return graph.num_edges
    if graph.edges.format != "numpy":
        raise DatasetError(
            f"{graph.path}: declare num_edges_per_chunk for {graph.edges.format} edge files "
            "(the edges are sorted in one array of that size)"
        )
    return sum(NpyFile.open(file).num_rows for file in graph.edges.files)


def _read_keys(graph: ChunkedGraph, num_edges: int) -> np.ndarray:
    """``src * N + dst`` of every listed edge, in input order, checked against ``N``; then (with
    ``add_reverse``) those of the reversed edges."""
    from lightning_gnn_dist.utils.progress import track

    num_nodes = graph.num_nodes
    keys = np.empty(num_edges * (2 if graph.add_reverse else 1), dtype=np.int64)
    at = 0
    row_in_file: dict[Path, int] = {}
    blocks = read_chunks(graph.edges, np.dtype(np.int64))
    for file, block in track(blocks, f"reading the edges of {graph.name}"):
        first = row_in_file.get(file, 0)
        row_in_file[file] = first + block.shape[0]
        if block.dtype.kind not in "iu":
            raise DatasetError(f"{file}: edge ids must be integers (got {block.dtype})")
        block = block.astype(np.int64, copy=False)
        if block.ndim != 2 or block.shape[1] != 2:
            raise DatasetError(
                f"{file}: edge rows must be 'source target' pairs, shape [n, 2] (got "
                f"{tuple(block.shape)})"
            )
        if block.size and (block.min() < 0 or block.max() >= num_nodes):
            bad = np.flatnonzero(((block < 0) | (block >= num_nodes)).any(axis=1))[0]
            raise DatasetError(
                f"{file}: row {first + bad + 1}: vertex id {block[bad].tolist()} is out of range "
                f"[0, {num_nodes}); ids are 0-based and below num_nodes"
            )
        if at + block.shape[0] > num_edges:
            raise DatasetError(f"{file}: more edges than the declared {num_edges}")
        np.multiply(block[:, 0], num_nodes, out=keys[at : at + block.shape[0]])
        keys[at : at + block.shape[0]] += block[:, 1]
        at += block.shape[0]
    if at != num_edges:
        raise DatasetError(f"{graph.path}: the edge files hold {at} edges, not {num_edges}")
    if graph.add_reverse:
        for start in range(0, num_edges, EDGE_CHUNK):
            forward = keys[start : min(start + EDGE_CHUNK, num_edges)]
            reverse = keys[num_edges + start : num_edges + start + forward.size]
            np.remainder(forward, num_nodes, out=reverse)
            reverse *= num_nodes
            reverse += forward // num_nodes
    return keys


def _write_edges(folder: Path, keys: np.ndarray, order: np.ndarray | None, num_nodes: int):
    with open(folder / "edge_index.npy", "wb") as handle:
        write_npy_header(handle, np.dtype(np.int64), (2, keys.size))
        for row in (0, 1):
            for start in range(0, keys.size, EDGE_CHUNK):
                chunk = slice(start, start + EDGE_CHUNK)
                part = keys[chunk] if order is None else keys[order[chunk]]
                (part // num_nodes if row == 0 else part % num_nodes).tofile(handle)


def _stream(
    spec: ArraySpec, file: Path, rows: int, convert, label: str
) -> tuple[np.dtype, tuple[int, ...]]:
    """Write every block of ``spec`` (through ``convert(block, first_row)``) into one ``.npy``
    file of ``rows`` rows; returns its dtype and shape."""
    handle = None
    at = 0
    dtype, trailing = None, None
    try:
        for source, block in read_chunks(spec):
            block = convert(np.asarray(block), at, source)
            if handle is None:
                dtype, trailing = block.dtype, block.shape[1:]
                handle = open(file, "wb")
                write_npy_header(handle, dtype, (rows, *trailing))
            elif block.shape[1:] != trailing:
                raise DatasetError(
                    f"{source}: {label} rows have shape {block.shape[1:]}, the earlier files' "
                    f"{trailing}"
                )
            if at + block.shape[0] > rows:
                raise DatasetError(f"{source}: {label} has more than {rows} rows")
            block.astype(dtype, copy=False).tofile(handle)
            at += block.shape[0]
    finally:
        if handle is not None:
            handle.close()
    if at != rows:
        raise DatasetError(f"{spec.files[0].parent}: {label} has {at} rows, not {rows}")
    return dtype, (rows, *trailing)


def _features(block: np.ndarray, first: int, source: Path) -> np.ndarray:
    if block.ndim == 1:
        block = block[:, None]
    if block.ndim != 2:
        raise DatasetError(f"{source}: x rows must be [d] numbers (got shape {block.shape[1:]})")
    block = block.astype(np.float32, copy=False)
    bad = ~np.isfinite(block)
    if bad.any():
        row, column = np.argwhere(bad)[0]
        raise DatasetError(
            f"{source}: x holds {block[row, column]} at vertex {first + row}, column {column}; "
            "features must be finite: fill missing values first"
        )
    return block


def _gathered(spec: ArraySpec, rows: int, label: str) -> np.ndarray:
    blocks = [np.asarray(block) for _, block in read_chunks(spec)]
    array = np.concatenate(blocks) if blocks else np.empty(0)
    if array.shape[0] != rows:
        raise DatasetError(f"{spec.files[0]}: {label} has {array.shape[0]} rows, not {rows}")
    return array


def _masks(graph: ChunkedGraph, y: torch.Tensor, seed: int) -> dict[str, np.ndarray]:
    from .synthetic import random_split_masks

    num_nodes = graph.num_nodes
    if MASKS[0] not in graph.node_data:
        if y.is_floating_point():
            labelled = ~torch.isnan(y.reshape(num_nodes, -1)).all(1)
        else:
            labelled = y.reshape(num_nodes, -1)[:, 0] >= 0
        split = random_split_masks(num_nodes, seed)
        return {key: (mask & labelled).numpy() for key, mask in zip(MASKS, split, strict=True)}
    masks = {}
    for key in MASKS:
        mask = _gathered(graph.node_data[key], num_nodes, key)
        if mask.ndim == 2 and mask.shape[1] == 1:
            mask = mask[:, 0]
        if mask.ndim != 1:
            raise DatasetError(f"{graph.path}: {key} must be [N] (got shape {mask.shape})")
        if mask.dtype != np.bool_:
            if not np.isin(mask, (0, 1)).all():
                raise DatasetError(f"{graph.path}: {key} must hold only 0/1 or True/False values")
            mask = mask.astype(bool)
        masks[key] = mask
    return masks


def _file_fingerprint(folder: Path) -> str:
    """:func:`~lightning_gnn_dist.data.graph.graph_fingerprint` of the canonical copy in
    ``folder``, computed from its files by ordinary reads (nothing stays in memory)."""
    from .graph import _fingerprinted

    data = open_canonical(folder)  # its recorded fingerprint is still empty
    digest = hashlib.sha256()
    digest.update(f"num_nodes={data.num_nodes}".encode())
    for key, tensor in _fingerprinted(data):
        source = data._lgd_files[key][0]
        digest.update(f"{key}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        with open(source.path, "rb") as handle:
            handle.seek(source.offset)
            remaining = tensor.numel() * tensor.element_size()
            while remaining:
                block = handle.read(min(remaining, 1 << 24))
                if not block:
                    raise DatasetError(f"{source.path}: the file is truncated")
                digest.update(block)
                remaining -= len(block)
    return digest.hexdigest()


def write_canonical(graph: ChunkedGraph, folder: Path, seed: int) -> dict[str, Any]:
    """Write the canonical copy of ``graph`` into ``folder``; return its ``canonical.json``
    record (without ``inputs``)."""
    import json

    from lightning_gnn_dist.utils.progress import note, status, track

    from .targets import canonical_targets

    start = time.perf_counter()
    num_nodes = graph.num_nodes
    listed = _listed_edges(graph)
    num_edges = listed * (2 if graph.add_reverse else 1)
    limits.check_graph_fits(str(graph.path), num_nodes, 0, what="the vertex count")
    needed = limits.ingest_memory_bytes(num_nodes, num_edges, bool(graph.edge_data))
    note(
        f"ingesting {graph.name} ({num_nodes:,} vertices, {num_edges:,} edges): about "
        f"{limits.describe_bytes(needed)} of memory"
    )
    limits.check_ingest_fits(str(graph.path), num_nodes, num_edges, bool(graph.edge_data))
    for name in (*graph.node_data, *graph.edge_data):
        if name in RESERVED_NAMES:
            raise DatasetError(
                f"{graph.path}: array {name!r} has a name the loaders set themselves; rename it"
            )

    keys = _read_keys(graph, listed)
    with status(f"sorting {num_edges:,} edges", 1e-7 * num_edges):
        if graph.edge_data:
            order = np.argsort(keys, kind="stable")
        else:
            keys.sort()
            order = None
    _write_edges(folder, keys, order, num_nodes)
    del keys
    arrays = {"edge_index": "edge_index.npy"}

    for key, spec in track(list(graph.edge_data.items()), "permuting edge data"):
        raw = folder / f"edge-{key}.raw.npy"
        _stream(spec, raw, listed, lambda block, first, source: block, key)
        source = np.load(raw, mmap_mode="r")
        with open(folder / f"edge-{key}.npy", "wb") as handle:
            write_npy_header(handle, source.dtype, (num_edges, *source.shape[1:]))
            for begin in range(0, num_edges, EDGE_CHUNK):
                rows = order[begin : begin + EDGE_CHUNK] % listed  # a reversed edge: its own row
                np.ascontiguousarray(source[rows]).tofile(handle)
        del source
        raw.unlink()
        arrays[key] = f"edge-{key}.npy"
    del order

    y, task = canonical_targets(
        torch.from_numpy(_gathered(graph.node_data["y"], num_nodes, "y")),
        num_nodes,
        str(graph.path),
    )
    np.save(folder / "y.npy", y.numpy())
    arrays["y"] = "y.npy"
    for key, mask in _masks(graph, y, seed).items():
        np.save(folder / f"{key}.npy", mask)
        arrays[key] = f"{key}.npy"
    del y
    for key, spec in track(list(graph.node_data.items()), "writing node data"):
        if key == "y" or key in MASKS:
            continue
        convert = _features if key == "x" else (lambda block, first, source: block)
        _stream(spec, folder / f"node-{key}.npy", num_nodes, convert, key)
        arrays[key] = f"node-{key}.npy"

    record = {
        "version": 1,
        "name": graph.name,
        "num_nodes": num_nodes,
        "num_edges": num_edges,
        "task": task,
        "seed": seed,
        "arrays": arrays,
        "fingerprint": "",
    }
    (folder / "canonical.json").write_text(json.dumps(record))
    with status("fingerprinting the canonical graph"):
        record["fingerprint"] = _file_fingerprint(folder)
    record["seconds"] = time.perf_counter() - start
    return record


def ingest_chunked(
    path: str | os.PathLike, cache: str | os.PathLike | None = None, seed: int = 0
) -> Path:
    """Write the canonical copy of the chunked graph at ``path`` (its ``metadata.json``) unless
    an up-to-date one exists; return its folder (module docstring). Every input chunk is read
    once.

    Args:
        path: the ``metadata.json`` (or its folder).
        cache: folder of the canonical copy. (default: ``lgd-canonical`` beside the metadata)
        seed: seed of the 60/20/20 split when the graph has no masks.

    Raises:
        DatasetError: malformed metadata or files (the message names the file and row), or a
            graph that cannot be ingested in the available memory.
    """
    graph = read_metadata(path)
    folder = canonical_dir(graph, cache)
    if _current(folder, graph, seed) is not None:
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{folder.name}.tmp-{os.getpid()}-{time.monotonic_ns()}"
    tmp.mkdir()
    try:
        record = write_canonical(graph, tmp, seed)
        record["inputs"] = _input_stamps(graph)
        (tmp / "canonical.json").write_text(json.dumps(record, indent=1))
        if folder.exists():
            shutil.rmtree(folder)
        os.rename(tmp, folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if _current(folder, graph, seed) is not None:  # a concurrent ingestion won
            return folder
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def load_chunked(
    path: str | os.PathLike, cache: str | os.PathLike | None = None, seed: int = 0
) -> Data:
    """:func:`ingest_chunked` (when needed), then :func:`open_canonical`: the canonical graph,
    memory-mapped, as :func:`~lightning_gnn_dist.data.datasets.load_dataset` returns it."""
    return open_canonical(ingest_chunked(path, cache, seed))

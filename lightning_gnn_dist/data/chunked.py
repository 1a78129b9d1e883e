"""Graphs in chunked files, ingested once into a memory-mapped canonical copy (issue 34).

The input is DGL's *chunked graph format* for one node type and one edge type: a
``metadata.json`` naming the vertex and edge counts and, per array, its format and its files
(several files per array, each a chunk of consecutive rows)::

    {
      "graph_name": "rmat22",
      "node_type": ["_N"],
      "num_nodes_per_chunk": [[2097152, 2097152]],
      "edge_type": ["_N:_E:_N"],
      "num_edges_per_chunk": [[33554432, 33554432]],
      "edges": {"_N:_E:_N": {"format": {"name": "numpy"},
                             "data": ["edges/part-0.npy", "edges/part-1.npy"]}},
      "node_data": {"_N": {"x": {"format": {"name": "numpy"},
                                 "data": ["x/part-0.npy", "x/part-1.npy"]},
                           "y": {...}, "train_mask": {...}, "val_mask": {...}, ...}},
      "edge_data": {"_N:_E:_N": {"edge_weight": {...}}}
    }

Formats: ``numpy`` (``.npy``, read in row blocks), ``csv`` (``{"name": "csv", "delimiter":
" "}``, ``.gz`` too) and ``parquet`` (needs ``pyarrow``); a format may name the ``"dtype"`` its
values are cast to and ``"squeeze": false`` to keep a one-column CSV or Parquet file ``[n, 1]``
(this library's additions: a CSV file reads as ``int64`` or ``float64``, one column as ``[n]``). An edge file holds ``[n, 2]`` rows
``source target`` (0-based ids); a node or edge data file holds ``[n]`` or ``[n, d]`` rows.
Paths are relative to the ``metadata.json`` (or absolute). ``"add_reverse": true`` in the
edges' entry (this library's addition, what OGB's ``add_inverse_edge`` does) appends every
edge reversed, with its edge data, after the listed ones. Node data ``x`` (DGL's ``feat``) and
``y`` (``label``) are required; ``train_mask``, ``val_mask`` and ``test_mask`` are all given or
none (then a seeded 60/20/20 split of the labelled vertices); any other array is a node or edge
attribute of its own name.

``load_dataset("chunked:/data/g/metadata.json")`` reads every chunk once and writes the
canonical graph beside it (``lgd-canonical/``, or ``?cache=DIR``): ``edge_index.npy`` sorted by
``(source, target)`` (what :func:`~lightning_gnn_dist.data.graph.canonicalize` gives), each node
and edge array as one ``.npy`` file, and ``canonical.json`` with the graph's fingerprint
(streamed from the files) and the size and modification time of every input file. Later loads
memory-map that copy (nothing of the graph is read until used) and reuse the recorded
fingerprint, so checking a partition store against the dataset reads nothing; a changed input
file is ingested again. Ingestion holds 8 bytes per edge (the sort keys; 16 with edge data) and
the targets; the features pass through in row blocks.

A partition step on such a graph reads node attributes through :func:`file_rows` (row blocks
read from the file, never the whole array in memory).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from .errors import DatasetError

__all__ = [
    "CANONICAL_DIR",
    "ChunkedGraph",
    "NpyFile",
    "file_rows",
    "read_metadata",
]

#: Folder of the canonical copy, beside the ``metadata.json`` (``?cache=DIR`` elsewhere).
CANONICAL_DIR = "lgd-canonical"
#: Version of the canonical copy's layout (another version is ingested again).
CANONICAL_VERSION = 1
#: Bytes per block of rows read or written at once (32 MiB).
BLOCK_BYTES = 1 << 25
HOMOGENEOUS_NODE_TYPE = "_N"
HOMOGENEOUS_EDGE_TYPE = "_N:_E:_N"
#: DGL's conventional names for the features and labels.
ALIASES = {"feat": "x", "label": "y"}
MASKS = ("train_mask", "val_mask", "test_mask")
FORMATS = ("numpy", "csv", "parquet")


# --------------------------------------------------------------------------------------------
# .npy files read by file reads (no memory map): row blocks and gathered rows


@dataclass(frozen=True)
class NpyFile:
    """A C-ordered ``.npy`` file read in row blocks by ordinary file reads, so no more of it
    than one block is ever in this process's memory (a memory map would keep every page read
    resident).

    Attributes:
        path: the file.
        offset: byte offset of the data (after the header).
        dtype: element type.
        shape: the array's shape.
    """

    path: Path
    offset: int
    dtype: np.dtype
    shape: tuple[int, ...]

    @classmethod
    def open(cls, path: str | os.PathLike) -> NpyFile:
        """Read the header of ``path``.

        Raises:
            DatasetError: not a ``.npy`` file, or a Fortran-ordered or object array.
        """
        path = Path(path)
        try:
            with open(path, "rb") as handle:
                version = np.lib.format.read_magic(handle)
                if version == (1, 0):
                    header = np.lib.format.read_array_header_1_0(handle)
                elif version == (2, 0):
                    header = np.lib.format.read_array_header_2_0(handle)
                else:  # 3.0 (utf-8 field names): no public reader
                    header = np.lib.format._read_array_header(handle, version)
                shape, fortran, dtype = header
                offset = handle.tell()
        except ValueError as error:
            raise DatasetError(f"{path}: not a .npy file ({error})") from None
        if fortran and len(shape) > 1:
            raise DatasetError(
                f"{path}: a Fortran-ordered array; save it C-ordered (np.ascontiguousarray)"
            )
        if dtype.hasobject:
            raise DatasetError(f"{path}: an array of Python objects; save numbers")
        return cls(path, offset, np.dtype(dtype), tuple(int(s) for s in shape))

    @property
    def num_rows(self) -> int:
        return self.shape[0] if self.shape else 1

    @property
    def row_items(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64))

    @property
    def block_rows(self) -> int:
        """Rows per block of at most :data:`BLOCK_BYTES` bytes."""
        return max(1, BLOCK_BYTES // max(1, self.row_items * self.dtype.itemsize))

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)``."""
        count = max(0, stop - start) * self.row_items
        with open(self.path, "rb") as handle:
            handle.seek(self.offset + start * self.row_items * self.dtype.itemsize)
            flat = np.fromfile(handle, dtype=self.dtype, count=count)
        if flat.size != count:
            raise DatasetError(f"{self.path}: the file is truncated (rows {start}..{stop})")
        return flat.reshape((stop - start, *self.shape[1:]))

    def blocks(self) -> Iterator[np.ndarray]:
        """Every row, block by block."""
        for start in range(0, self.num_rows, self.block_rows):
            yield self.read(start, min(start + self.block_rows, self.num_rows))

    def rows(self, index: np.ndarray) -> np.ndarray:
        """Rows ``index`` (any order, repeats allowed), read block by block in file order."""
        index = np.asarray(index, dtype=np.int64)
        out = np.empty((index.size, *self.shape[1:]), dtype=self.dtype)
        if index.size == 0:
            return out
        ascending = bool((index[1:] >= index[:-1]).all())
        order = None if ascending else np.argsort(index, kind="stable")
        wanted = index if order is None else index[order]
        at = 0
        while at < wanted.size:
            first = int(wanted[at])
            end = int(np.searchsorted(wanted, first + self.block_rows, side="left"))
            block = self.read(first, int(wanted[end - 1]) + 1)
            if order is None:
                out[at:end] = block[wanted[at:end] - first]
            else:
                out[order[at:end]] = block[wanted[at:end] - first]
            at = end
        return out

    def memmap(self) -> Tensor:
        """The whole array as a tensor on a private (copy-on-write) memory map: nothing is
        read until used, and writes stay in this process."""
        if int(np.prod(self.shape, dtype=np.int64)) == 0:  # an empty file cannot be mapped
            return torch.from_numpy(np.empty(self.shape, dtype=self.dtype))
        array = np.memmap(self.path, self.dtype, "c", self.offset, self.shape)
        return torch.from_numpy(array)


def file_rows(data: Data, key: str, index: np.ndarray) -> Tensor | None:
    """Rows ``index`` of attribute ``key`` of ``data`` read from its file when ``data`` came
    from :func:`load_chunked` and still holds that file's tensor under ``key``; ``None``
    otherwise (the caller indexes the tensor)."""
    files = getattr(data, "_lgd_files", None)
    if not files or key not in files:
        return None
    source, address = files[key]
    value = getattr(data, key, None)
    if not isinstance(value, Tensor) or value.data_ptr() != address:
        return None
    return torch.from_numpy(source.rows(index))


def write_npy_header(handle, dtype: np.dtype, shape: tuple[int, ...]) -> None:
    """Write the header of a C-ordered ``.npy`` array; the caller writes its rows after it."""
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False}
    np.lib.format.write_array_header_2_0(handle, {**header, "shape": tuple(shape)})


# --------------------------------------------------------------------------------------------
# the metadata


@dataclass(frozen=True)
class ArraySpec:
    """One array of a chunked graph: its format (``numpy``, ``csv`` or ``parquet``), the CSV
    delimiter, its files (chunks of consecutive rows), the declared rows of each file
    (``None``: not declared) and the dtype its values are cast to (``None``: as read; a CSV
    file gives ``int64`` or ``float64``); ``squeeze``: a CSV or Parquet file of one column is
    ``[n]`` (``False``: ``[n, 1]``)."""

    name: str
    format: str
    delimiter: str
    files: tuple[Path, ...]
    rows: tuple[int, ...] | None = None
    dtype: np.dtype | None = None
    squeeze: bool = True


@dataclass(frozen=True)
class ChunkedGraph:
    """A parsed ``metadata.json`` (:func:`read_metadata`)."""

    path: Path
    name: str
    num_nodes: int
    num_edges: int
    edges: ArraySpec
    node_data: dict[str, ArraySpec]
    edge_data: dict[str, ArraySpec]
    add_reverse: bool = False

    def input_files(self) -> list[Path]:
        """The ``metadata.json`` and every file it names."""
        specs = [self.edges, *self.node_data.values(), *self.edge_data.values()]
        return [self.path, *(file for spec in specs for file in spec.files)]


def _problem(path: Path, text: str) -> DatasetError:
    return DatasetError(f"{path}: {text}")


def _counts(path: Path, meta: dict, key: str) -> tuple[int, ...] | None:
    value = meta.get(key)
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 1
        or not isinstance(value[0], list)
        or not all(isinstance(v, int) and v >= 0 for v in value[0])
    ):
        raise _problem(
            path, f"{key} must be [[rows of each file]] for the one type (got {value!r})"
        )
    return tuple(value[0])


def _array_spec(path: Path, name: str, entry: Any, rows: tuple[int, ...] | None) -> ArraySpec:
    where = f"array {name!r}"
    if not isinstance(entry, dict) or "data" not in entry:
        raise _problem(path, f"{where} needs {{'format': {{'name': ...}}, 'data': [files]}}")
    fmt = entry.get("format", {"name": "numpy"})
    if isinstance(fmt, str):
        fmt = {"name": fmt}
    kind = str(fmt.get("name", "")).lower()
    if kind not in FORMATS:
        raise _problem(
            path, f"{where} has format {fmt.get('name')!r}; use one of {', '.join(FORMATS)}"
        )
    files = entry["data"]
    if isinstance(files, str):
        files = [files]
    if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
        raise _problem(path, f"{where}: 'data' must be a non-empty list of file paths")
    resolved = []
    for file in files:
        full = Path(file) if os.path.isabs(file) else path.parent / file
        if not full.is_file():
            raise FileNotFoundError(f"{path}: {where} names {file}, which does not exist")
        resolved.append(full)
    if rows is not None and len(rows) != len(resolved):
        raise _problem(
            path, f"{where} has {len(resolved)} files but the metadata counts {len(rows)} chunks"
        )
    delimiter = fmt.get("delimiter", ",")
    try:
        dtype = None if fmt.get("dtype") is None else np.dtype(fmt["dtype"])
    except TypeError:
        raise _problem(path, f"{where} has dtype {fmt['dtype']!r}, not a numpy dtype") from None
    squeeze = fmt.get("squeeze", True)
    if not isinstance(squeeze, bool):
        raise _problem(path, f"{where} has squeeze={squeeze!r}; use true or false")
    return ArraySpec(name, kind, str(delimiter), tuple(resolved), rows, dtype, squeeze)


def _single(path: Path, meta: dict, key: str, default: str) -> str:
    types = meta.get(key, [default])
    if not isinstance(types, list) or len(types) != 1:
        raise _problem(
            path,
            f"{key} lists {types!r}; chunked graphs with one node type and one edge type are "
            "supported (heterogeneous ones: merge the types first)",
        )
    return str(types[0])


def read_metadata(path: str | os.PathLike) -> ChunkedGraph:
    """Parse and check a chunked graph's ``metadata.json`` (module docstring).

    Raises:
        FileNotFoundError: the metadata or a file it names does not exist.
        DatasetError: malformed metadata (the message names the key and the fix).
    """
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / "metadata.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; give the path of a metadata.json")
    try:
        meta = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _problem(path, f"not valid JSON ({error})") from None
    if not isinstance(meta, dict):
        raise _problem(path, "the metadata must be a JSON object")
    node_type = _single(path, meta, "node_type", HOMOGENEOUS_NODE_TYPE)
    edge_type = _single(path, meta, "edge_type", HOMOGENEOUS_EDGE_TYPE)
    node_rows = _counts(path, meta, "num_nodes_per_chunk")
    edge_rows = _counts(path, meta, "num_edges_per_chunk")
    num_nodes = meta.get("num_nodes", None if node_rows is None else sum(node_rows))
    if not isinstance(num_nodes, int) or num_nodes < 1:
        raise _problem(
            path, f"num_nodes_per_chunk (or num_nodes) must give >= 1 vertex (got {num_nodes!r})"
        )
    edges = meta.get("edges", {})
    if not isinstance(edges, dict) or len(edges) != 1:
        raise _problem(path, f"'edges' must hold one edge type (got {list(edges)!r})")
    edge_entry = next(iter(edges.values()))
    edge_spec = _array_spec(path, "edges", edge_entry, edge_rows)
    add_reverse = edge_entry.get("add_reverse", False) if isinstance(edge_entry, dict) else False
    if not isinstance(add_reverse, bool):
        raise _problem(path, f"'add_reverse' must be true or false (got {add_reverse!r})")
    node_data = _typed(path, meta, "node_data", node_type, node_rows)
    edge_data = _typed(path, meta, "edge_data", edge_type, edge_rows)
    for name in ("x", "y"):
        if name not in node_data:
            raise _problem(
                path,
                f"node_data has no {name!r} (DGL's {'feat' if name == 'x' else 'label'!r}); "
                "chunked graphs need features and labels",
            )
    masks = [m for m in MASKS if m in node_data]
    if masks and len(masks) != len(MASKS):
        raise _problem(path, f"node_data has {', '.join(masks)} but not all three masks")
    num_edges = -1 if edge_rows is None else sum(edge_rows)
    name = str(meta.get("graph_name") or path.parent.name or "chunked")
    return ChunkedGraph(
        path, name, num_nodes, num_edges, edge_spec, node_data, edge_data, add_reverse
    )


def _typed(
    path: Path, meta: dict, key: str, type_name: str, rows: tuple[int, ...] | None
) -> dict[str, ArraySpec]:
    section = meta.get(key) or {}
    if not isinstance(section, dict) or len(section) > 1:
        raise _problem(path, f"{key!r} must hold the arrays of one type (got {list(section)!r})")
    arrays = next(iter(section.values())) if section else {}
    if not isinstance(arrays, dict):
        raise _problem(path, f"{key!r}[{type_name!r}] must map array names to specs")
    specs = {}
    for raw, entry in arrays.items():
        name = ALIASES.get(raw, raw) if key == "node_data" else raw
        if name in specs:
            raise _problem(path, f"{key} names {name!r} twice ({raw!r} is an alias of it)")
        specs[name] = _array_spec(path, name, entry, rows)
    return specs


# --------------------------------------------------------------------------------------------
# reading chunks


def read_chunks(
    spec: ArraySpec, dtype: np.dtype | None = None
) -> Iterator[tuple[Path, np.ndarray]]:
    """``(file, rows)`` blocks of every file of ``spec`` in order, each at most about
    :data:`BLOCK_BYTES` (a CSV or Parquet file in the reader's own blocks).

    Raises:
        DatasetError: a file that does not parse, or whose rows differ from the declared count.
        ImportError: a Parquet file without ``pyarrow``.
    """
    for number, file in enumerate(spec.files):
        rows = 0
        for block in _file_blocks(spec, file, dtype):
            if spec.dtype is not None:
                block = block.astype(spec.dtype, copy=False)
            if spec.format != "numpy" and spec.squeeze and block.ndim == 2 and block.shape[1] == 1:
                block = block[:, 0]
            rows += block.shape[0]
            yield file, block
        if spec.rows is not None and rows != spec.rows[number]:
            raise DatasetError(
                f"{file}: {rows} rows, but the metadata declares {spec.rows[number]} for it"
            )


def _file_blocks(spec: ArraySpec, file: Path, dtype: np.dtype | None) -> Iterator[np.ndarray]:
    if spec.format == "numpy":
        source = NpyFile.open(file)
        for block in source.blocks():
            yield block if source.shape else block.reshape(1)
        return
    if spec.format == "parquet":
        try:
            import pyarrow.parquet as parquet
        except ImportError as error:
            raise ImportError(
                f"{file}: reading Parquet needs pyarrow (pip install pyarrow), or convert the "
                "files to .npy"
            ) from error
        for batch in parquet.ParquetFile(file).iter_batches(batch_size=1 << 20):
            columns = [column.to_numpy(zero_copy_only=False) for column in batch.columns]
            block = np.column_stack(columns)
            yield block if dtype is None else block.astype(dtype, copy=False)
        return
    yield from _csv_blocks(file, spec.delimiter, dtype)


def _csv_blocks(file: Path, delimiter: str, dtype: np.dtype | None) -> Iterator[np.ndarray]:
    try:
        import pandas
    except ImportError:  # pragma: no cover - pandas comes with ogb; numpy reads it slowly
        yield np.loadtxt(file, delimiter=None if delimiter == " " else delimiter, ndmin=2)
        return
    sep = r"\s+" if delimiter in (" ", "\t") else delimiter
    try:
        reader = pandas.read_csv(
            file, sep=sep, header=None, chunksize=1 << 20, dtype=dtype, comment="#"
        )
        for frame in reader:
            yield frame.to_numpy()
    except (ValueError, pandas.errors.ParserError) as error:
        raise DatasetError(f"{file}: cannot parse the CSV file ({error})") from None


# --------------------------------------------------------------------------------------------
# ingestion: chunks -> canonical copy


def canonical_dir(graph: ChunkedGraph, cache: str | os.PathLike | None = None) -> Path:
    """Where the canonical copy of ``graph`` lives."""
    return Path(cache).expanduser() if cache else graph.path.parent / CANONICAL_DIR


def _input_stamps(graph: ChunkedGraph) -> dict[str, list[int]]:
    stamps = {}
    for file in graph.input_files():
        stat = file.stat()
        stamps[str(file.resolve())] = [stat.st_size, stat.st_mtime_ns]
    return stamps


def _current(folder: Path, graph: ChunkedGraph, seed: int) -> dict[str, Any] | None:
    """The canonical copy's record if it is complete and made from these files and seed."""
    try:
        record = json.loads((folder / "canonical.json").read_text())
    except (OSError, ValueError):
        return None
    if (
        record.get("version") != CANONICAL_VERSION
        or record.get("inputs") != _input_stamps(graph)
        or record.get("seed") != seed
    ):
        return None
    for name in record["arrays"].values():
        if not (folder / name).is_file():
            return None
    return record


def open_canonical(folder: str | os.PathLike) -> Data:
    """The canonical graph in ``folder`` (written by
    :func:`~lightning_gnn_dist.data.chunked_ingest.ingest_chunked`), every array on a
    copy-on-write memory map, with its recorded fingerprint
    (:func:`~lightning_gnn_dist.data.graph.remember_fingerprint`) and ``task``."""
    from .graph import remember_fingerprint

    folder = Path(folder)
    record = json.loads((folder / "canonical.json").read_text())
    data = Data(num_nodes=int(record["num_nodes"]))
    files = {}
    for key, name in record["arrays"].items():
        source = NpyFile.open(folder / name)
        tensor = source.memmap()
        data[key] = tensor
        files[key] = (source, tensor.data_ptr())
    data._lgd_files = files
    data.task = record["task"]
    data.name = record["name"]
    remember_fingerprint(data, record["fingerprint"])
    return data

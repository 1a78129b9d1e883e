"""Readers for graph files: METIS ``.graph``, Matrix Market ``.mtx`` and plain edge lists.

Every reader returns a :class:`~torch_geometric.data.Data` with ``edge_index`` (``[2, E] int64``,
row 0 = source ``j``, row 1 = target ``i``, the convention of :mod:`.graph`), ``num_nodes`` and
``name`` (the file name without extensions), with the edges *as listed in the file* (not yet
coalesced). :func:`~lightning_gnn_dist.data.datasets.load_dataset` canonicalises them and adds
features, labels and masks.

A file whose name ends in ``.gz`` is decompressed on the fly; a missing ``PATH`` is also looked
up as ``PATH.gz``. Parsing is vectorised (one ``str.split`` per file, a byte scan for the count
of numbers per line, one ``numpy`` conversion for all numbers), so the 258k-vertex METIS mesh
``mdual.graph`` loads in about half a second. A malformed file raises :class:`DatasetError`
whose message starts with ``path:line:`` (1-based line numbers).

Sizes are checked before anything of that size is allocated (:mod:`.limits`): the file's own
size, the declared size (METIS header, Matrix Market size line, ``num_nodes``) and the largest
vertex id of an edge list; a graph that cannot fit in the available memory, or with more
vertices than the partitioners' 32-bit ids allow, raises :class:`DatasetError` with the estimate.
"""

from __future__ import annotations

import gzip
import itertools
import operator
import os
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

from . import limits
from .errors import DatasetError
from .graph import distinct_edges

__all__ = ["DatasetError", "read_edgelist", "read_metis", "read_mtx"]


# --------------------------------------------------------------------------------------------
# shared helpers


def _resolve(path: str | os.PathLike) -> Path:
    """Return the file to read: ``path`` itself, else ``path.gz``; raise if neither exists."""
    path = Path(path).expanduser()
    if path.is_file():
        return path
    gz = path.with_name(path.name + ".gz")
    if path.suffix != ".gz" and gz.is_file():
        return gz
    if path.exists():
        raise DatasetError(
            f"{path}: not a regular file (a directory?); give the path of a graph file"
        )
    raise FileNotFoundError(f"{path}: no such file (also looked for {gz.name}); check the path")


def _read_lines(path: str | os.PathLike) -> tuple[Path, list[str]]:
    """Read ``path`` (``.gz`` transparently) and return it with its lines (as ``fgets`` sees them).

    Bytes that are not UTF-8 become U+FFFD, so they surface as a bad number with a line number.
    """
    resolved = _resolve(path)
    if resolved.suffix != ".gz":  # a .gz file's own size says little about its text
        limits.check_file_fits(resolved, resolved.stat().st_size)
    opener = gzip.open if resolved.suffix == ".gz" else open
    try:
        with opener(resolved, "rb") as handle:
            raw = handle.read()
    except (OSError, EOFError) as error:  # e.g. a truncated or non-gzip ``.gz`` file
        raise DatasetError(f"{resolved}: cannot read the file ({error})") from error
    lines = raw.decode("utf-8", errors="replace").split("\n")
    if lines[-1] == "":  # the newline ending the last line does not start another line
        lines.pop()
    return resolved, lines


def _graph_name(path: Path) -> str:
    """``/x/4elt.graph.gz`` -> ``"4elt"``."""
    name = path.name
    if name.endswith(".gz"):
        name = name[:-3]
    stem = name.rsplit(".", 1)[0] if "." in name.lstrip(".") else name
    return stem or name


def _content_rows(lines: list[str], markers: tuple[str, ...], keep_blank: bool) -> list[int]:
    """Indices of the lines that are not comments (first non-blank character in ``markers``)."""
    if keep_blank:
        return [i for i, line in enumerate(lines) if not line.lstrip().startswith(markers)]
    return [
        i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith(markers)
    ]


# Bytes that ``str.split()`` treats as whitespace in ASCII text.
_ASCII_SPACE = np.zeros(256, dtype=bool)
_ASCII_SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True


def _tokenize(selected: list[str], commas: bool = False) -> tuple[list[str], np.ndarray]:
    """Split ``selected`` lines into one flat token list and the token count of each line.

    Vectorised for ASCII text: one ``str.split`` over the joined lines and a byte scan for the
    per-line counts; otherwise (or if the two disagree) one ``split`` per line.
    """
    text = "\n".join(selected)
    if commas:
        text = text.replace(",", " ")
    if text.isascii():
        tokens = text.split()
        raw = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
        space = _ASCII_SPACE[raw]
        starts = ~space
        starts[1:] &= space[:-1]
        line_of_byte = np.cumsum(raw == 10)
        counts = np.bincount(line_of_byte[starts], minlength=len(selected)).astype(np.int64)
        if counts.size == len(selected) and int(counts.sum()) == len(tokens):
            return tokens, counts
    split = [line.split() for line in text.split("\n")] if selected else []
    counts = np.fromiter(map(len, split), dtype=np.int64, count=len(split))
    return list(itertools.chain.from_iterable(split)), counts


def _pick(tokens: list[str], index: np.ndarray) -> list[str]:
    """``[tokens[k] for k in index]`` at C speed."""
    if index.size == 0:
        return []
    if index.size == 1:
        return [tokens[int(index[0])]]
    return list(operator.itemgetter(*index.tolist())(tokens))


def _to_numbers(
    tokens: list[str],
    token_lines: np.ndarray,
    path: Path,
    dtype: type,
    what: str,
) -> np.ndarray:
    """Convert ``tokens`` to a ``dtype`` array; on failure name the first bad token and its line.

    ``token_lines[k]`` is the 1-based file line of ``tokens[k]``.
    """
    try:
        return np.array(tokens, dtype=dtype)
    except (ValueError, OverflowError):
        pass
    convert = int if dtype is np.int64 else float
    for k, token in enumerate(tokens):
        try:
            value = convert(token)
            if dtype is np.int64 and not -(2**63) <= value < 2**63:
                raise OverflowError
        except (ValueError, OverflowError):
            raise DatasetError(f"{path}:{int(token_lines[k])}: {token!r} is not {what}") from None
    raise DatasetError(f"{path}: cannot parse the numbers as {what}")  # pragma: no cover


def _edge_data(
    src: np.ndarray,
    dst: np.ndarray,
    num_nodes: int,
    path: Path,
    weight: np.ndarray | None = None,
) -> Data:
    edge_index = torch.from_numpy(np.stack([src, dst]).astype(np.int64, copy=False))
    data = Data(edge_index=edge_index, num_nodes=int(num_nodes))
    if weight is not None:
        data.edge_weight = torch.from_numpy(weight.astype(np.float32))
    data.name = _graph_name(path)
    return data


# --------------------------------------------------------------------------------------------
# METIS


def read_metis(path: str | os.PathLike) -> Data:
    """Read an undirected graph in METIS format (the input of ``gpmetis``).

    Format: ``%`` lines are comments. The header is ``n m [fmt [ncon]]`` (``n`` vertices, ``m``
    undirected edges). It is followed by exactly ``n`` vertex lines (a blank line is a vertex
    without neighbours); line ``i`` lists ``[size] [w_1 .. w_ncon] v_1 [e_1] v_2 [e_2] ...`` with
    1-based neighbour ids ``v``. ``fmt`` is up to three binary digits ``abc``: ``a`` = vertex
    sizes, ``b`` = vertex weights (``ncon`` of them, default 1), ``c`` = edge weights; so
    ``fmt`` 0, 1, 10, 11 (and 100..111) are supported. Sizes and weights are parsed and checked
    for shape, then ignored. Every edge must be listed at both endpoints, once, and the number
    of listed neighbours must be ``2 * m``.

    Args:
        path (str or os.PathLike): the ``.graph`` file (``.gz`` allowed).

    Returns:
        ``Data`` with ``edge_index`` ``[2, 2m] int64`` holding both directions of every edge
        (``edge_index[0]`` = the listed neighbour, ``edge_index[1]`` = the vertex of the line,
        0-based), ``num_nodes = n`` and ``name`` = the file name without extensions.

    Raises:
        FileNotFoundError: ``path`` (and ``path.gz``) do not exist.
        DatasetError: malformed file; the message is ``path:line: what is wrong``.
    """
    path, lines = _read_lines(path)
    content = _content_rows(lines, ("%",), keep_blank=True)
    # The header is the first non-comment, non-blank line.
    while content and not lines[content[0]].strip():
        content.pop(0)
    if not content:
        raise DatasetError(f"{path}: no header line; a METIS file starts with 'n m [fmt [ncon]]'")
    header_line = content[0] + 1
    num_nodes, num_edges, fmt, ncon = _metis_header(lines[content[0]], path, header_line)
    limits.check_graph_fits(
        f"{path}:{header_line}", num_nodes, 2 * num_edges, what="the header's size"
    )
    has_size, has_vwgt, has_ewgt = (c == "1" for c in fmt)
    if not has_vwgt:
        ncon = 0

    vertex_rows = content[1 : 1 + num_nodes]
    if len(vertex_rows) < num_nodes:
        raise DatasetError(
            f"{path}:{header_line}: the header says n={num_nodes} vertices but the file has only "
            f"{len(vertex_rows)} vertex lines after it"
        )
    for extra in content[1 + num_nodes :]:
        if lines[extra].strip():
            raise DatasetError(
                f"{path}:{extra + 1}: unexpected line after the {num_nodes} vertex lines declared "
                f"in the header (line {header_line}); fix n in the header or remove the line"
            )
    vertex_lines = np.asarray(vertex_rows, dtype=np.int64) + 1  # 1-based file line per vertex

    tokens, counts = _tokenize([lines[i] for i in vertex_rows])
    values = _to_numbers(tokens, np.repeat(vertex_lines, counts), path, np.int64, "an integer")

    lead = int(has_size) + ncon  # numbers before the adjacency list
    stride = 2 if has_ewgt else 1  # (neighbour, edge weight) pairs
    bad = (counts < lead) | ((counts - lead) % stride != 0)
    if bad.any():
        v = int(np.flatnonzero(bad)[0])
        if counts[v] < lead:
            problem = (
                f"expected {lead} vertex size/weight number(s) before the neighbours "
                f"(fmt={fmt}, ncon={ncon}) but found {counts[v]} number(s)"
            )
        else:
            problem = (
                f"expected (neighbour, edge weight) pairs after the vertex weights (fmt={fmt}) "
                f"but found an odd number ({counts[v] - lead}) of them"
            )
        raise DatasetError(f"{path}:{vertex_lines[v]}: {problem}")

    degree = (counts - lead) // stride
    starts = np.cumsum(counts) - counts
    position = np.arange(values.size, dtype=np.int64) - np.repeat(starts, counts)
    is_neighbour = (position >= lead) & ((position - lead) % stride == 0)
    neighbour = values[is_neighbour]  # 1-based
    vertex = np.repeat(np.arange(num_nodes, dtype=np.int64), degree)  # 0-based

    out_of_range = (neighbour < 1) | (neighbour > num_nodes)
    if out_of_range.any():
        k = int(np.flatnonzero(out_of_range)[0])
        raise DatasetError(
            f"{path}:{vertex_lines[vertex[k]]}: vertex id {neighbour[k]} out of range 1..{num_nodes}"
        )
    neighbour = neighbour - 1
    loops = neighbour == vertex
    if loops.any():
        k = int(np.flatnonzero(loops)[0])
        raise DatasetError(
            f"{path}:{vertex_lines[vertex[k]]}: vertex {vertex[k] + 1} lists itself as a "
            "neighbour; METIS graphs must not contain self loops"
        )
    _check_metis_symmetry(vertex, neighbour, num_nodes, vertex_lines, path)
    if neighbour.size != 2 * num_edges:
        raise DatasetError(
            f"{path}:{header_line}: the header says m={num_edges} undirected edges but the vertex "
            f"lines list {neighbour.size // 2} ({neighbour.size} neighbour entries, expected "
            f"2*m = {2 * num_edges}); fix m in the header"
        )
    return _edge_data(neighbour, vertex, num_nodes, path)


def _metis_header(line: str, path: Path, lineno: int) -> tuple[int, int, str, int]:
    """Parse ``n m [fmt [ncon]]`` -> ``(n, m, fmt as 3 binary digits, ncon)``."""
    fields = line.split()
    usage = "expected 'n m [fmt [ncon]]'"
    if not 2 <= len(fields) <= 4:
        raise DatasetError(f"{path}:{lineno}: bad METIS header {line.strip()!r}; {usage}")
    try:
        num_nodes, num_edges = int(fields[0]), int(fields[1])
        ncon = int(fields[3]) if len(fields) == 4 else 1
    except ValueError:
        raise DatasetError(
            f"{path}:{lineno}: bad METIS header {line.strip()!r}; {usage} with integers"
        ) from None
    if num_nodes < 0 or num_edges < 0:
        raise DatasetError(
            f"{path}:{lineno}: bad METIS header {line.strip()!r}; n and m must be >= 0"
        )
    fmt = fields[2] if len(fields) >= 3 else "0"
    if len(fmt) > 3 or set(fmt) - {"0", "1"}:
        raise DatasetError(
            f"{path}:{lineno}: unsupported METIS fmt {fmt!r}; fmt is up to three binary digits "
            "(vertex sizes, vertex weights, edge weights), e.g. 0, 1, 10, 11"
        )
    if ncon < 1:
        raise DatasetError(f"{path}:{lineno}: ncon must be >= 1 (got {ncon})")
    return num_nodes, num_edges, fmt.zfill(3), ncon


def _check_metis_symmetry(
    vertex: np.ndarray, neighbour: np.ndarray, num_nodes: int, vertex_lines: np.ndarray, path: Path
) -> None:
    """Every pair listed once per line and at both endpoints (vectorised)."""
    key = vertex * num_nodes + neighbour
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    repeated = np.flatnonzero(sorted_key[1:] == sorted_key[:-1])
    if repeated.size:
        k = int(order[repeated[0] + 1])
        raise DatasetError(
            f"{path}:{vertex_lines[vertex[k]]}: vertex {vertex[k] + 1} lists neighbour "
            f"{neighbour[k] + 1} more than once"
        )
    reverse = neighbour * num_nodes + vertex
    if np.array_equal(np.sort(reverse), sorted_key):  # fast path: the pair sets are equal
        return
    where = np.searchsorted(sorted_key, reverse)
    found = sorted_key[np.minimum(where, max(sorted_key.size - 1, 0))] == reverse
    if not found.all():
        k = int(np.flatnonzero(~found)[0])
        u, v = int(vertex[k]), int(neighbour[k])
        raise DatasetError(
            f"{path}:{vertex_lines[u]}: vertex {u + 1} lists neighbour {v + 1} but vertex {v + 1} "
            f"(line {vertex_lines[v]}) does not list {u + 1}; METIS graphs list every edge at "
            "both endpoints"
        )


# --------------------------------------------------------------------------------------------
# Matrix Market

_MTX_FIELDS = {"real": 1, "integer": 1, "double": 1, "pattern": 0, "complex": 2}
_MTX_SYMMETRIES = ("general", "symmetric", "skew-symmetric", "hermitian")


def read_mtx(path: str | os.PathLike, *, weights: bool = False) -> Data:
    """Read a square sparse matrix in Matrix Market coordinate format (SuiteSparse ``.mtx``).

    The banner is ``%%MatrixMarket matrix coordinate FIELD SYMMETRY`` with ``FIELD`` one of
    ``real``, ``integer``, ``pattern`` (and ``complex``) and ``SYMMETRY`` one of ``general``,
    ``symmetric`` (also ``skew-symmetric``, ``hermitian``). Then ``%`` comments, the size line
    ``rows cols entries`` and one ``i j [value]`` line per entry with 1-based indices.

    An entry ``A[i, j] != 0`` is the edge ``j -> i`` (row ``i`` of ``A`` aggregates column ``j``,
    the convention of :mod:`.graph`); explicit zeros are dropped, ``pattern`` entries are all
    edges. For a symmetric file (only one triangle stored) both directions are added. Diagonal
    entries become self loops.

    Args:
        path (str or os.PathLike): the ``.mtx`` file (``.gz`` allowed).
        weights (bool): keep the values of a ``real`` or ``integer`` matrix as ``edge_weight``
            (``A[i, j]`` is the weight of ``j -> i``; the mirrored entry of a skew-symmetric
            file is negated). (default: ``False``)

    Returns:
        ``Data`` with ``edge_index`` ``[2, E] int64`` (0-based), ``num_nodes = rows``,
        ``edge_weight [E] float32`` (with ``weights``) and ``name`` = the file name without
        extensions.

    Raises:
        FileNotFoundError: ``path`` (and ``path.gz``) do not exist.
        DatasetError: malformed file, dense ``array`` format or a non-square matrix; the message
            is ``path:line: what is wrong``.
    """
    path, lines = _read_lines(path)
    if not any(line.strip() for line in lines):
        raise DatasetError(
            f"{path}: the file is empty; a Matrix Market file starts with a banner line "
            "'%%MatrixMarket matrix coordinate ...' followed by 'rows cols entries'"
        )
    banner = lines[0].split()
    expected = "'%%MatrixMarket matrix coordinate <real|integer|pattern> <general|symmetric>'"
    if len(banner) != 5 or banner[0].lower() != "%%matrixmarket" or banner[1].lower() != "matrix":
        raise DatasetError(
            f"{path}:1: not a Matrix Market banner {lines[0].strip()!r}; expected {expected}"
        )
    layout, field, symmetry = (word.lower() for word in banner[2:])
    if layout != "coordinate":
        raise DatasetError(
            f"{path}:1: Matrix Market layout {layout!r} is not supported; only sparse "
            f"'coordinate' files are (convert the dense 'array' file to coordinate format)"
        )
    if field not in _MTX_FIELDS:
        raise DatasetError(f"{path}:1: unknown Matrix Market field {field!r}; expected {expected}")
    if symmetry not in _MTX_SYMMETRIES:
        raise DatasetError(
            f"{path}:1: unknown Matrix Market symmetry {symmetry!r}; expected {expected}"
        )
    if weights and _MTX_FIELDS[field] != 1:
        raise DatasetError(
            f"{path}:1: weights=true takes the values of a 'real' or 'integer' matrix, but the "
            f"file is {field!r}; drop weights"
        )

    content = [i + 1 for i in _content_rows(lines[1:], ("%",), keep_blank=False)]
    if not content:
        raise DatasetError(f"{path}: no size line 'rows cols entries' after the banner")
    size_line = content[0] + 1
    size = lines[content[0]].split()
    try:
        num_rows, num_cols, num_entries = (int(s) for s in size)
    except ValueError:
        raise DatasetError(
            f"{path}:{size_line}: bad size line {lines[content[0]].strip()!r}; expected three "
            "integers 'rows cols entries'"
        ) from None
    if min(num_rows, num_cols, num_entries) < 0:
        raise DatasetError(
            f"{path}:{size_line}: bad size line {lines[content[0]].strip()!r}; rows, cols and "
            "entries must be >= 0"
        )
    if num_rows != num_cols:
        raise DatasetError(
            f"{path}:{size_line}: the matrix is {num_rows} x {num_cols}; a graph needs a square "
            "adjacency matrix"
        )
    symmetric_copies = 1 if symmetry == "general" else 2
    limits.check_graph_fits(
        f"{path}:{size_line}",
        num_rows,
        symmetric_copies * num_entries,
        what="the size line's matrix",
    )
    entry_rows = content[1:]
    if len(entry_rows) != num_entries:
        raise DatasetError(
            f"{path}:{size_line}: the size line says {num_entries} entries but the file has "
            f"{len(entry_rows)} entry lines"
        )

    width = 2 + _MTX_FIELDS[field]
    tokens, counts = _tokenize([lines[i] for i in entry_rows])
    entry_lines = np.asarray(entry_rows, dtype=np.int64) + 1
    if (counts != width).any():
        k = int(np.flatnonzero(counts != width)[0])
        raise DatasetError(
            f"{path}:{entry_lines[k]}: expected {width} numbers per entry for a {field!r} matrix "
            f"('i j{' value' * (width - 2)}') but found {counts[k]}"
        )
    entry_start = np.arange(len(entry_rows), dtype=np.int64) * width
    flat = (
        tokens if width == 2 else _pick(tokens, np.stack([entry_start, entry_start + 1], 1).ravel())
    )
    index = _to_numbers(flat, np.repeat(entry_lines, 2), path, np.int64, "an integer index")
    rows, cols = index[0::2], index[1::2]
    out_of_range = (rows < 1) | (rows > num_rows) | (cols < 1) | (cols > num_cols)
    if out_of_range.any():
        k = int(np.flatnonzero(out_of_range)[0])
        bad = rows[k] if not 1 <= rows[k] <= num_rows else cols[k]
        raise DatasetError(f"{path}:{entry_lines[k]}: vertex id {bad} out of range 1..{num_rows}")
    if width > 2:
        value_index = (entry_start[:, None] + np.arange(2, width)).ravel()
        value_lines = np.repeat(entry_lines, width - 2)
        values = _to_numbers(_pick(tokens, value_index), value_lines, path, np.float64, "a number")
        values = values.reshape(-1, width - 2)
        nonzero = (values != 0).any(axis=1)
        rows, cols, values = rows[nonzero], cols[nonzero], values[nonzero, 0]
    src, dst = cols - 1, rows - 1  # A[i, j] != 0  <=>  edge j -> i
    weight = values if weights else None
    if symmetry != "general":
        off = src != dst
        src, dst = np.concatenate([src, dst[off]]), np.concatenate([dst, src[off]])
        if weight is not None:
            mirrored = -weight[off] if symmetry == "skew-symmetric" else weight[off]
            weight = np.concatenate([weight, mirrored])
    return _edge_data(src, dst, num_rows, path, weight)


# --------------------------------------------------------------------------------------------
# edge lists


def read_edgelist(
    path: str | os.PathLike,
    *,
    directed: bool = True,
    num_nodes: int | None = None,
    weights: bool = False,
) -> Data:
    """Read an edge list: one ``src dst`` pair of 0-based vertex ids per line, with
    ``weights`` a third field, the edge's weight.

    Fields are separated by whitespace or commas; further fields on a line (timestamps, and
    weights unless ``weights``) are ignored. Blank lines and lines starting with ``#`` or ``%``
    are skipped (comment out a CSV header line).

    Args:
        path (str or os.PathLike): the file (``.gz`` allowed).
        directed (bool): if ``False``, the graph is the simple undirected graph of the listed
            pairs: every edge in both directions, each direction once. A directed list keeps
            repeated lines as parallel edges. (default: ``True``)
        num_nodes (int, optional): the number of vertices; ids must be ``< num_nodes``. If
            ``None``, it is the largest id plus one. (default: ``None``)
        weights (bool): read the third field of every line as the edge's ``edge_weight``
            (undirected: both directions get it; a pair listed again keeps its first line's
            weight). (default: ``False``)

    Returns:
        ``Data`` with ``edge_index`` ``[2, E] int64`` (row 0 = ``src``, row 1 = ``dst``),
        ``num_nodes``, ``edge_weight [E] float32`` (with ``weights``) and ``name`` = the file
        name without extensions.

    Raises:
        FileNotFoundError: ``path`` (and ``path.gz``) do not exist.
        DatasetError: a line without two non-negative integer ids, or an id ``>= num_nodes``;
            the message is ``path:line: what is wrong``.
    """
    if num_nodes is not None and num_nodes < 0:
        raise DatasetError(
            f"{path}: num_nodes must be >= 0 (got {num_nodes}); omit it to use max id + 1"
        )
    if num_nodes is not None:
        limits.check_graph_fits(f"{path}", num_nodes, 0, what=f"num_nodes={num_nodes}")
    path, lines = _read_lines(path)
    rows = _content_rows(lines, ("#", "%"), keep_blank=False)
    tokens, counts = _tokenize([lines[i] for i in rows], commas=True)
    edge_lines = np.asarray(rows, dtype=np.int64) + 1
    if (counts < 2).any():
        k = int(np.flatnonzero(counts < 2)[0])
        raise DatasetError(
            f"{path}:{edge_lines[k]}: expected 'src dst' (two vertex ids) but found "
            f"{lines[rows[k]].strip()!r}"
        )
    if weights and (counts < 3).any():
        k = int(np.flatnonzero(counts < 3)[0])
        raise DatasetError(
            f"{path}:{edge_lines[k]}: weights=true needs 'src dst weight' but found "
            f"{lines[rows[k]].strip()!r}"
        )
    weight = None
    if (counts == 2).all():
        flat = tokens
    else:  # ignore the extra fields (weights unless asked for, timestamps)
        starts = np.cumsum(counts) - counts
        flat = _pick(tokens, np.stack([starts, starts + 1], axis=1).reshape(-1))
        if weights:
            weight = _to_numbers(
                _pick(tokens, starts + 2), edge_lines, path, np.float64, "a number"
            )
            if not np.isfinite(weight).all():
                k = int(np.flatnonzero(~np.isfinite(weight))[0])
                raise DatasetError(f"{path}:{edge_lines[k]}: weight {weight[k]} is not finite")
    ids = _to_numbers(flat, np.repeat(edge_lines, 2), path, np.int64, "a vertex id (integer)")
    if ids.size and ids.min() < 0:
        k = int(np.flatnonzero(ids < 0)[0])
        raise DatasetError(
            f"{path}:{edge_lines[k // 2]}: vertex id {ids[k]} is negative; ids start at 0"
        )
    if ids.size and ids.max() >= limits.MAX_NUM_NODES:
        k = int(np.flatnonzero(ids >= limits.MAX_NUM_NODES)[0])
        limits.check_vertex_id(path, int(edge_lines[k // 2]), int(ids[k]))
    if num_nodes is None:
        num_nodes = int(ids.max()) + 1 if ids.size else 0
        line = int(edge_lines[int(np.argmax(ids)) // 2]) if ids.size else 0
        limits.check_graph_fits(
            f"{path}:{line}",
            num_nodes,
            ids.size // 2 * (1 if directed else 2),
            what=f"the largest vertex id ({num_nodes - 1})",
        )
    elif ids.size and ids.max() >= num_nodes:
        k = int(np.flatnonzero(ids >= num_nodes)[0])
        raise DatasetError(
            f"{path}:{edge_lines[k // 2]}: vertex id {ids[k]} out of range 0..{num_nodes - 1} "
            f"(num_nodes={num_nodes}); raise num_nodes or fix the id"
        )
    src, dst = ids[0::2], ids[1::2]
    if not directed and weight is None:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        src, dst = distinct_edges(src, dst, max(num_nodes, 1))
    elif not directed:  # both directions of line i at 2i and 2i + 1: the first line wins
        src, dst = np.stack([src, dst], 1).ravel(), np.stack([dst, src], 1).ravel()
        key = src * max(num_nodes, 1) + dst
        order = np.argsort(key, kind="stable")
        first = np.ones(order.size, dtype=bool)
        first[1:] = key[order[1:]] != key[order[:-1]]
        keep = order[first]
        src, dst, weight = src[keep], dst[keep], np.repeat(weight, 2)[keep]
    return _edge_data(src, dst, num_nodes, path, weight)

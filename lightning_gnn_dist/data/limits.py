"""Up-front refusal of graphs that cannot be loaded: too many vertices, or too little memory.

A declared size (a file header, ``num_nodes=``, a generator's parameters) is checked *before*
anything of that size is allocated, so a graph that cannot fit ends at once with a
:class:`~lightning_gnn_dist.data.errors.DatasetError` quoting the estimate and what the machine
has, instead of a ``MemoryError`` traceback minutes later.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import DatasetError

#: Largest supported vertex count: METIS, KaHyPar and Mt-KaHyPar index vertices with 32-bit
#: integers (and ``coalesce`` packs ``src * N + dst`` into an ``int64``).
MAX_NUM_NODES = 2**31

#: Peak bytes per vertex per feature while loading: ``x`` itself (float32) plus the float64
#: aggregates of the synthetic teacher labels (two of them).
_BYTES_PER_FEATURE = 4 + 2 * 8
#: Peak bytes per vertex besides features: labels (int64), three masks, ids and degrees.
_BYTES_PER_NODE = 8 + 3 + 2 * 8
#: Peak bytes per edge: ``[2, E] int64`` edge_index, its coalesce key and sort permutation.
_BYTES_PER_EDGE = 16 * 3
#: Peak bytes per byte of a text graph file while parsing it: the raw bytes, the decoded text,
#: its lines, and one Python ``str`` (~50 bytes) per number of ~6 digits and a separator.
_PARSE_BYTES_PER_FILE_BYTE = 12


def graph_memory_bytes(num_nodes: float, num_edges: float, features: float = 0) -> float:
    """Estimated peak memory of loading a graph in bytes (the canonical ``Data`` and the
    temporary arrays of canonicalisation and synthetic features).

    Args:
        num_nodes: vertices ``N``.
        num_edges: directed edges ``E`` (both directions of an undirected edge count).
        features: feature width ``d`` of ``x`` (``0`` when ``x`` is not built).

    Floats, because a generator's parameters can ask for more edges than an ``int64`` holds.
    """
    per_node = _BYTES_PER_NODE + _BYTES_PER_FEATURE * float(features)
    return float(num_nodes) * per_node + float(num_edges) * _BYTES_PER_EDGE


def available_memory_bytes() -> int:
    """Bytes this process can still allocate: the least of ``MemAvailable`` (``/proc/meminfo``;
    ``psutil`` where ``/proc`` is missing), the headroom under its address-space limit
    (``RLIMIT_AS``, ``ulimit -v``) and what its cgroups (v2 ``memory.max``, every level up to
    the root; v1 ``memory.limit_in_bytes``) still allow."""
    candidates = [_mem_available(), _address_space_headroom(), *_cgroup_headroom()]
    known = [c for c in candidates if c is not None]
    return max(0, min(known)) if known else 1 << 62


def _mem_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:  # pragma: no cover - psutil is a dependency of our dependencies
        return None


def _address_space_headroom() -> int | None:
    """``RLIMIT_AS`` minus the address space already mapped (``VmSize``); ``None`` unlimited."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    mapped = 0
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                mapped = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        try:
            import psutil

            mapped = int(psutil.Process().memory_info().vms)
        except ImportError:  # pragma: no cover
            pass
    return soft - mapped


def _cgroup_headroom(root: Path = Path("/sys/fs/cgroup")) -> list[int]:
    """``limit − usage`` of every cgroup level of this process that has a memory limit: its own
    cgroup and each ancestor, v2 (``memory.max``/``memory.current``) and v1 (the ``memory``
    controller's ``memory.limit_in_bytes``/``memory.usage_in_bytes``)."""
    paths = {"v2": "/", "v1": "/"}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":
                paths["v2"] = path
            elif "memory" in controllers.split(","):
                paths["v1"] = path
    except (OSError, ValueError):
        pass
    found = []
    for mount, path, files in (
        (root, paths["v2"], ("memory.max", "memory.current")),
        (root / "memory", paths["v1"], ("memory.limit_in_bytes", "memory.usage_in_bytes")),
    ):
        level = mount / path.strip("/")
        if not level.is_dir():  # a cgroup namespace shows its own root as the mount point
            level = mount
        while True:
            limit, usage = _read_int(level / files[0]), _read_int(level / files[1])
            if limit is not None and usage is not None and limit < 1 << 60:
                found.append(limit - usage)
            if level == mount or mount not in level.parents:
                break
            level = level.parent
    return found


def _read_int(file: Path) -> int | None:
    """The integer in ``file``; ``None`` if absent or not a number (``max``)."""
    try:
        text = file.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _size(num_bytes: float) -> str:
    """``3.2 GiB``, ``12.0 MiB``, ``512 bytes``."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.1f} {unit}"
    return f"{num_bytes:.0f} bytes"


def check_graph_fits(
    source: str, num_nodes: float, num_edges: float, features: float = 0, what: str = "the graph"
) -> None:
    """Raise :class:`DatasetError` unless a graph of this size is supported and fits in memory.

    Args:
        source: where the size comes from, for the message (``"g.mtx:3"``, ``"'sbm?...'"``).
        num_nodes: vertices ``N`` (may be a float from a generator's parameters).
        num_edges: directed edges ``E``.
        features: feature width ``d``.
        what: how the message calls the graph (``"the declared size"``...).

    Raises:
        DatasetError: the estimate of :func:`graph_memory_bytes` above
            :func:`available_memory_bytes`, or ``N`` above :data:`MAX_NUM_NODES`.
    """
    needed = graph_memory_bytes(num_nodes, num_edges, features)
    available = available_memory_bytes()
    size = f"{num_nodes:.0f} vertices, {num_edges:.0f} edges, {features:.0f} features"
    if needed > available:
        raise DatasetError(
            f"{source}: {what} ({size}) needs about {_size(needed)} of memory but "
            f"{_size(available)} is available; use a smaller graph or a machine with more memory"
        )
    if num_nodes > MAX_NUM_NODES:
        raise DatasetError(
            f"{source}: {what} ({size}) has more than the supported {MAX_NUM_NODES} vertices "
            "(the partitioners use 32-bit vertex ids); use a smaller graph"
        )


def check_file_fits(path: str | os.PathLike, num_bytes: int) -> None:
    """Raise :class:`DatasetError` if parsing a text file of ``num_bytes`` cannot fit in memory.

    Args:
        path: the file, for the message.
        num_bytes: its size in bytes (uncompressed).
    """
    needed = float(num_bytes) * _PARSE_BYTES_PER_FILE_BYTE
    available = available_memory_bytes()
    if needed > available:
        raise DatasetError(
            f"{path}: parsing this {_size(num_bytes)} file needs about {_size(needed)} of memory "
            f"but {_size(available)} is available; convert it to a binary format or use a "
            "machine with more memory"
        )


def check_vertex_id(path: str | os.PathLike, line: int, vertex_id: int) -> None:
    """Raise :class:`DatasetError` (``path:line: ...``) if ``vertex_id`` is beyond
    :data:`MAX_NUM_NODES`."""
    if vertex_id >= MAX_NUM_NODES:
        raise DatasetError(
            f"{path}:{line}: vertex id {vertex_id} is beyond the supported range "
            f"0..{MAX_NUM_NODES - 1} (the partitioners use 32-bit vertex ids); renumber the "
            "vertices densely from 0"
        )


#: Peak bytes per directed edge of the partition step by method, on top of the graph already in
#: memory (measured on R-MAT scale 20, 16 M edges, ``python -m benchmarks.partition_speed
#: --scales``, and ``benchmarks.scaling``): METIS 5.1 in this process keeps every coarsening
#: level of a power-law graph (64-bit ids: ~290 bytes per edge, 4.2 GiB at scale 20); from
#: :data:`METIS_ON_DISK_MIN_ENTRIES` adjacency entries METIS 5.2 runs in a worker with its levels
#: on disk (the parent's CSR, the worker's 32-bit CSR and METIS: ~70 bytes per edge,
#: :data:`_METIS_ON_DISK_BYTES_PER_EDGE`); KaMinPar's 32-bit graph lives in its worker while the
#: parent holds the refinement's ``int32`` pins; Mt-KaHyPar's Python input is a list of lists.
#: Methods not listed get :data:`_PARTITION_BYTES_PER_EDGE_OTHER`.
_PARTITION_BYTES_PER_EDGE = {
    "metis": 300.0,
    "kaminpar": 48.0,
    "random": 0.0,
    "hypergraph": 400.0,
    "hypergraph-mtkahypar": 400.0,
    "hypergraph-kahypar": 400.0,
}
#: ``method="metis"`` (``on_disk=None``) runs METIS 5.2 in a worker with its levels on disk from
#: this many adjacency entries of ``A + Aᵀ`` on (16 Mi, about R-MAT scale 20 at edge factor 8,
#: where METIS 5.1's levels would take ~2 GB), METIS 5.1 in-process below
#: (``partition/metis.py``).
METIS_ON_DISK_MIN_ENTRIES = 1 << 24
_METIS_ON_DISK_BYTES_PER_EDGE = 80.0


def metis_on_disk(on_disk: bool | None, adjacency_entries: float) -> bool:
    """Whether ``method="metis"`` runs METIS 5.2 out of core: ``on_disk`` when given, else from
    :data:`METIS_ON_DISK_MIN_ENTRIES` adjacency entries of ``A + Aᵀ`` on."""
    if on_disk is not None:
        return bool(on_disk)
    return adjacency_entries >= METIS_ON_DISK_MIN_ENTRIES


_PARTITION_BYTES_PER_EDGE_OTHER = 200.0
#: From 8 parts on, ``kaminpar`` also lowers the busiest part's send volume on the column-net
#: hypergraph (about 50 bytes per edge more, measured at scale 20).
_PARTITION_BYTES_PER_EDGE_MANY_PARTS = {"kaminpar": 90.0}
_MANY_PARTS = 8
#: Per vertex: weights, assignments, degree counts (int64) and the metrics' net masks.
_PARTITION_BYTES_PER_NODE = 64.0
#: Per vertex and part: the volume refinement's pin-count table (``int32``).
_PARTITION_BYTES_PER_NODE_PART = {"kaminpar": 4.0}


def partition_memory_bytes(
    method: str,
    num_nodes: float,
    num_edges: float,
    num_parts: int = 2,
    on_disk: bool | None = None,
) -> float:
    """Estimated extra peak memory, in bytes, of partitioning a graph already in memory with
    ``method`` into ``num_parts`` parts and computing its metrics (the store is not included).

    Args:
        method: a partition method name (``"metis"``, ``"kaminpar"``...).
        num_nodes: vertices ``N``.
        num_edges: directed edges ``E``.
        num_parts: P.
        on_disk: ``metis``'s ``on_disk`` (``None``: by the graph's size, as the partitioner
            picks).
    """
    per_edge = _PARTITION_BYTES_PER_EDGE.get(method, _PARTITION_BYTES_PER_EDGE_OTHER)
    if method == "metis" and metis_on_disk(on_disk, 2 * float(num_edges)):
        per_edge = _METIS_ON_DISK_BYTES_PER_EDGE
    if num_parts >= _MANY_PARTS:
        per_edge = _PARTITION_BYTES_PER_EDGE_MANY_PARTS.get(method, per_edge)
    per_node = _PARTITION_BYTES_PER_NODE + _PARTITION_BYTES_PER_NODE_PART.get(method, 0.0) * (
        num_parts
    )
    return float(num_edges) * per_edge + float(num_nodes) * per_node


def check_partition_fits(
    method: str,
    num_nodes: float,
    num_edges: float,
    num_parts: int = 2,
    on_disk: bool | None = None,
) -> float:
    """Raise ``MemoryError`` (one line: the estimate, what is available, what to do) when the
    partition step's estimate (:func:`partition_memory_bytes`) exceeds
    :func:`available_memory_bytes`; return the estimate otherwise."""
    needed = partition_memory_bytes(method, num_nodes, num_edges, num_parts, on_disk)
    available = available_memory_bytes()
    if needed > available:
        lean = partition_memory_bytes("kaminpar", num_nodes, num_edges, num_parts)
        advice = (
            f"use method='kaminpar' (about {_size(lean)}), "
            if method != "kaminpar" and lean <= available
            else ""
        )
        raise MemoryError(
            f"partitioning {num_nodes:.0f} vertices and {num_edges:.0f} edges with "
            f"method={method!r} needs about {_size(needed)} of memory besides the graph but "
            f"{_size(available)} is available; {advice}free memory or use a machine with more"
        )
    return needed


#: Peak bytes per edge of writing a store (:class:`~lightning_gnn_dist.data.local.PartBuilder`):
#: the part id of both ends of every edge (``uint8`` up to 255 parts), and per in-edge of the
#: part being built its positions, ids, sort order and local ``edge_index`` (``int64``).
_STORE_BYTES_PER_EDGE = 2.0
_STORE_BYTES_PER_PART_EDGE = 72.0
#: Per vertex: the relabelling both ways, degrees and self loops (``int64``).
_STORE_BYTES_PER_NODE = 48.0
#: A part's share of the edges is at most this much above ``E / P`` (balance, halo edges).
_PART_EDGE_SHARE = 1.25


def store_memory_bytes(
    num_nodes: float,
    num_edges: float,
    num_parts: int,
    node_row_bytes: float = 0.0,
    edge_row_bytes: float = 0.0,
) -> float:
    """Estimated peak memory, in bytes, of writing the parts of a partitioned graph one at a
    time (the graph itself, e.g. memory-mapped, not included).

    Args:
        num_nodes: vertices ``N``.
        num_edges: directed edges ``E``.
        num_parts: P.
        node_row_bytes: bytes of one vertex's node attributes (``x``, ``y``, masks, ...).
        edge_row_bytes: bytes of one edge's edge attributes.
    """
    part_edges = min(float(num_edges), _PART_EDGE_SHARE * float(num_edges) / max(num_parts, 1))
    part_nodes = min(float(num_nodes), _PART_EDGE_SHARE * float(num_nodes) / max(num_parts, 1))
    return (
        float(num_edges) * _STORE_BYTES_PER_EDGE
        + float(num_nodes) * _STORE_BYTES_PER_NODE
        + part_edges * (_STORE_BYTES_PER_PART_EDGE + edge_row_bytes)
        + part_nodes * node_row_bytes
    )


def check_partition_step_fits(
    method: str,
    num_nodes: float,
    num_edges: float,
    num_parts: int,
    node_row_bytes: float = 0.0,
    edge_row_bytes: float = 0.0,
) -> float:
    """Raise ``MemoryError`` (one line: the estimate, what is available, what to do) when the
    whole partition step does not fit: partitioning (:func:`partition_memory_bytes`), then
    writing the parts one at a time (:func:`store_memory_bytes`); return the larger of the two
    (the steps run one after the other)."""
    partition = partition_memory_bytes(method, num_nodes, num_edges, num_parts)
    store = store_memory_bytes(num_nodes, num_edges, num_parts, node_row_bytes, edge_row_bytes)
    available = available_memory_bytes()
    if store > available:
        raise MemoryError(
            f"writing {num_parts} parts of {num_nodes:.0f} vertices and {num_edges:.0f} edges "
            f"needs about {_size(store)} of memory besides the graph but {_size(available)} is "
            "available; use more parts (each part is built alone), free memory or use a "
            "machine with more"
        )
    check_partition_fits(method, num_nodes, num_edges, num_parts)
    return max(partition, store)


#: Peak bytes per edge of ingesting a chunked graph (:mod:`.chunked`): one ``int64`` sort key;
#: with edge data also the ``int64`` stable sort order and its merge buffer.
_INGEST_BYTES_PER_EDGE = 8.0
_INGEST_BYTES_PER_EDGE_WITH_DATA = 24.0
#: Per vertex: the targets and masks read whole (``int64`` ``y``, the split's permutation).
_INGEST_BYTES_PER_NODE = 32.0
_INGEST_BLOCKS = 4 * (1 << 25)


def ingest_memory_bytes(num_nodes: float, num_edges: float, edge_data: bool = False) -> float:
    """Estimated peak memory, in bytes, of ingesting a chunked graph of ``num_nodes`` vertices
    and ``num_edges`` edges (``edge_data``: with edge attributes to permute)."""
    per_edge = _INGEST_BYTES_PER_EDGE_WITH_DATA if edge_data else _INGEST_BYTES_PER_EDGE
    return float(num_edges) * per_edge + float(num_nodes) * _INGEST_BYTES_PER_NODE + _INGEST_BLOCKS


def check_ingest_fits(
    source: str, num_nodes: float, num_edges: float, edge_data: bool = False
) -> float:
    """Raise :class:`DatasetError` unless :func:`ingest_memory_bytes` fits in
    :func:`available_memory_bytes`; return the estimate."""
    needed = ingest_memory_bytes(num_nodes, num_edges, edge_data)
    available = available_memory_bytes()
    if needed > available:
        raise DatasetError(
            f"{source}: ingesting {num_nodes:.0f} vertices and {num_edges:.0f} edges needs about "
            f"{_size(needed)} of memory (the edges are sorted in memory) but {_size(available)} "
            "is available; use a machine with more memory"
        )
    return needed


def describe_bytes(num_bytes: float) -> str:
    """``3.2 GiB``, ``12.0 MiB``, ``512 bytes``."""
    return _size(num_bytes)

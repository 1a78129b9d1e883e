"""The on-disk partition store (design §2).

A store is a directory::

    meta.json          format version, dataset fingerprint, settings, library versions,
                       metrics, seconds, sha256 and size of every other file, and the sha256 of
                       its own canonical content (``meta_sha256``); what was partitioned
                       (format 3: every attribute's dtype, shape and role, the target's task,
                       per-part mask and label counts; :mod:`.store_meta`; a typed graph's
                       types, per-part type counts and relation metrics, :mod:`.types`)
    assignment.npy     [num_nodes] int64 part of each (original) vertex; for a vertex cut
                       (meta "kind": "vertex-cut") [num_edges] int64 part of each edge
    part-00000.pt ...  one LocalPartition (vertex cut: VertexCutPart) per part; a rank loads
                       only its own

It is written into a temporary sibling directory and renamed into place, so a crash leaves either
nothing or a complete store; the temporary folders of killed runs are removed by the next run.
A store whose fingerprint differs from the requested dataset and settings is refused, never
silently reused. Integrity is checked at three costs: :meth:`PartitionStore.open` checks
``meta.json`` against its own checksum (every edit is caught), :meth:`PartitionStore.verify`
hashes every file (``full=False``: ``assignment.npy`` only, the parts' sizes), and
:meth:`PartitionStore.load_part` hashes the one part a rank loads. ``force=True`` rebuilds a store; the old one is replaced atomically, only
after the new one is complete.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from torch_geometric.data import Data

from lightning_gnn_dist.data.graph import graph_fingerprint
from lightning_gnn_dist.data.links import LinkSplit
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.data.vertex_cut import VertexCutPart
from lightning_gnn_dist.partition.base import Partitioner, check_num_parts
from lightning_gnn_dist.partition.metrics import PartitionMetrics, partition_metrics
from lightning_gnn_dist.partition.placement import (
    PLACEMENTS,
    Topology,
    mapped_part_to_rank,
    places_parts,
    two_level_assignment,
)
from lightning_gnn_dist.partition.store_meta import (
    attribute_meta,
    label_counts,
    mask_counts,
    target_meta,
)
from lightning_gnn_dist.partition.types import typed_store_meta
from lightning_gnn_dist.partition.vertex_cut import VertexCutMetrics
from lightning_gnn_dist.utils.progress import status, track
from lightning_gnn_dist.utils.tempdirs import make_owned_dir, remove_stale

FORMAT_VERSION = 3
READABLE_FORMATS = (2, 3)
"""Format versions :meth:`PartitionStore.open` reads: a format-2 store is a homogeneous graph with
``x``, an integer ``y``, the masks and no other attribute in its ``meta.json``."""
_STORE_FILE = re.compile(r"meta\.json|assignment\.npy|part-\d{5}\.pt")
_LIBRARIES = ("torch", "torch-geometric", "pymetis", "cmeel-metis", "mtkahypar", "kahypar", "numpy")


class PartitionStoreError(ValueError):
    """A store exists but cannot be used: other dataset or settings, or corrupt files."""


def _rebuild_hint(path: Path) -> str:
    return (
        f"rebuild it with `python -m lightning_gnn_dist partition --force --out {path} ...` or "
        f"GraphPartitionDataModule(force=True), or delete {path} and partition again"
    )


def _corrupt(file: Path, store: Path, problem: str) -> PartitionStoreError:
    return PartitionStoreError(f"{file} {problem}; the store is corrupt: {_rebuild_hint(store)}")


def _meta_checksum(meta: dict[str, Any]) -> str:
    """sha256 of ``meta`` without its ``meta_sha256`` field, as canonical JSON."""
    content = {key: value for key, value in meta.items() if key != "meta_sha256"}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class PartitionStore:
    """A complete partition store on disk (open one with :func:`partition_to_store` or
    :meth:`open`)."""

    path: Path
    meta: dict[str, Any]

    @classmethod
    def open(cls, path: str | Path) -> PartitionStore:
        """Open an existing store and check ``meta.json`` against its checksum.

        Raises:
            FileNotFoundError: ``path`` has no ``meta.json``.
            PartitionStoreError: ``meta.json`` is unreadable, edited, or of another format.
        """
        path = Path(path)
        meta_path = path / "meta.json"
        if not meta_path.is_file():
            if _looks_like_store(path) and any(path.iterdir()):
                raise _corrupt(meta_path, path, "is missing")
            raise FileNotFoundError(
                f"{path} is not a partition store (no meta.json); create it with "
                "`python -m lightning_gnn_dist partition --out DIR ...`"
            )
        try:
            meta = json.loads(meta_path.read_text())
            meta["files"], meta["settings"], meta["fingerprint"]  # noqa: B018
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
            raise _corrupt(meta_path, path, f"is unreadable ({err})") from None
        if meta.get("format_version") not in READABLE_FORMATS:
            raise PartitionStoreError(
                f"{path} has store format {meta.get('format_version')}, this version reads "
                f"{' and '.join(map(str, READABLE_FORMATS))}; {_rebuild_hint(path)}"
            )
        if meta.get("meta_sha256") != _meta_checksum(meta):
            raise _corrupt(meta_path, path, "was modified (checksum mismatch)")
        return cls(path, meta)

    @property
    def num_parts(self) -> int:
        return int(self.meta["settings"]["num_parts"])

    @property
    def kind(self) -> str:
        """``"vertex"`` or ``"vertex-cut"``."""
        return self.meta.get("kind", "vertex")

    @property
    def metrics(self) -> PartitionMetrics | VertexCutMetrics:
        if self.kind == "vertex-cut":
            return VertexCutMetrics.from_dict(self.meta["metrics"])
        return PartitionMetrics.from_dict(self.meta["metrics"])

    @property
    def topology(self) -> Topology | None:
        """The nodes × ranks per node the store was placed for (``None``: no placement was
        recorded; part ``p`` runs on rank ``p`` on any launch)."""
        placement = self.meta.get("placement")
        if placement is None:
            return None
        return Topology(int(placement["num_nodes"]), int(placement["ranks_per_node"]))

    def check_topology(self, topology: Topology | None, placement: str | None = None) -> None:
        """Refuse a launch on another topology than the recorded placement, or (``placement``
        given, with a ``topology``) a store placed by another method than ``placement`` (a store
        without a placement counts as ``"naive"``).

        Raises:
            PartitionStoreError: the store was placed for other nodes × ranks per node, or by
                another method (the message says both and how to get a store for this launch).
        """
        placed = self.topology
        if placed is not None and topology is not None and placed != topology:
            raise PartitionStoreError(
                f"the partition store {self.path} was placed ({self.meta['placement']['method']!r})"
                f" for {placed.num_nodes} node(s) x {placed.ranks_per_node} rank(s) per node, but "
                f"this launch has {topology.num_nodes} node(s) x {topology.ranks_per_node} rank(s) "
                f"per node: launch with num_nodes={placed.num_nodes} and "
                f"devices={placed.ranks_per_node}, or partition again for this launch "
                "(force=True / --force, or another store folder)"
            )
        recorded = (self.meta.get("placement") or {}).get("method", "naive")
        if topology is not None and placement is not None and recorded != placement:
            raise PartitionStoreError(
                f"the partition store {self.path} was placed {recorded!r}, but placement="
                f"{placement!r} was requested: pass placement={recorded!r} (--placement "
                f"{recorded}) to use it, or partition again (force=True / --force) or into "
                "another store folder"
            )

    def _verified(self, name: str, full: bool = True) -> Path:
        """``self.path / name`` after checking its size and (``full``) its sha256."""
        file = self.path / name
        expected = self.meta["files"].get(name)
        if expected is None or not file.is_file():
            raise _corrupt(file, self.path, "is missing")
        size = file.stat().st_size
        if size != self.meta["file_bytes"][name]:
            raise _corrupt(
                file, self.path, f"has {size} bytes instead of {self.meta['file_bytes'][name]}"
            )
        if full and _sha256(file) != expected:
            raise _corrupt(file, self.path, "does not match its checksum")
        return file

    def verify(self, full: bool = True) -> None:
        """Check that every file of the store is present with its recorded size and, if
        ``full``, its recorded sha256 (which reads the whole store). ``full=False`` hashes
        ``assignment.npy`` (8 bytes per vertex or edge, read by no rank otherwise) and only
        checks the parts' sizes: each rank hashes the one part it loads.

        Raises:
            PartitionStoreError: naming the first missing or corrupt file and how to rebuild.
        """
        for name in sorted(self.meta["files"]):
            self._verified(name, full or not name.startswith("part-"))

    def assignment(self) -> np.ndarray:
        """``[num_nodes] int64`` part of each original vertex id."""
        return np.load(self._verified("assignment.npy"))

    def load_part(self, part_id: int) -> LocalPartition | VertexCutPart:
        """Load the :class:`LocalPartition` (vertex cut: :class:`VertexCutPart`) of ``part_id``
        only, after checking its size and sha256 (a rank reads only its own part, however large
        the store). Its tensors are memory-mapped from the part file (``torch.load(...,
        mmap=True)``, copy-on-write): a rank's memory holds the pages it uses, once.

        Raises:
            PartitionStoreError: the part is missing, resized or does not match its checksum.
        """
        if not 0 <= part_id < self.num_parts:
            raise ValueError(
                f"part {part_id} does not exist; the store has parts 0..{self.num_parts - 1}"
            )
        cls = VertexCutPart if self.kind == "vertex-cut" else LocalPartition
        return cls.load(self._verified(_part_name(part_id)), mmap=True)

    def check_matches(self, fingerprint: str, settings: dict[str, Any]) -> None:
        """Raise :class:`PartitionStoreError` unless the store was made for this dataset and these
        settings; the message lists what differs."""
        differences = []
        if self.meta["fingerprint"] != fingerprint:
            differences.append(
                f"dataset fingerprint {self.meta['fingerprint'][:12]}… != {fingerprint[:12]}… "
                f"(store made for {self.meta.get('dataset')!r})"
            )
        stored = self.meta["settings"]
        for key in sorted(set(stored) | set(settings)):
            if stored.get(key) != settings.get(key):
                differences.append(
                    f"{key}: stored {stored.get(key)!r}, requested {settings.get(key)!r}"
                )
        if differences:
            raise PartitionStoreError(
                f"the partition store {self.path} was made for another dataset or settings: "
                + "; ".join(differences)
                + ". Use another --out directory or delete this one."
            )


def partition_to_store(
    data: Data,
    partitioner: Partitioner,
    num_parts: int,
    path: str | Path,
    dataset: str | None = None,
    force: bool = False,
    verify: bool = True,
    topology: Topology | None = None,
    placement: str = "naive",
    naive: np.ndarray | None = None,
    link: LinkSplit | None = None,
) -> PartitionStore:
    """Partition ``data`` into ``path``, or reuse the store there if it matches and is intact.

    With a ``topology`` the store records the placement (``meta["placement"]``: ``num_nodes``,
    ``ranks_per_node``, ``method`` and ``part_to_rank``, the rank each part of the partitioner's
    numbering runs on), its metrics hold the ``hierarchical`` exchange's rows, and a launch on
    another topology is refused (:meth:`PartitionStore.check_topology`).

    Args:
        data: canonical graph (``load_dataset`` output).
        partitioner: the method and its settings.
        num_parts: P.
        path: store directory; created atomically.
        dataset: human description of the dataset (spec string) recorded in ``meta.json``.
        force: rebuild even if a store exists (matching or not, intact or not); the old store
            is replaced atomically once the new one is complete. Only a folder that holds
            nothing but store files is replaced.
        verify: hash every file of a reused store (``False``: check sizes only, and leave the
            hashes to :meth:`PartitionStore.load_part`).
        topology: nodes × ranks per node of the launch (``num_nodes × ranks_per_node`` must be
            ``num_parts``). (default: ``None``, nothing recorded)
        placement: with a ``topology``, which parts share a node: ``"naive"`` (part ``p`` on
            rank ``p``), ``"mapped"`` (the partition's parts renumbered so that few rows cross
            nodes; :func:`~lightning_gnn_dist.partition.placement.map_parts_to_nodes`) or
            ``"two-level"`` (hypergraph partitioners only: into nodes first, then each node
            into its ranks; :func:`~lightning_gnn_dist.partition.placement.two_level_assignment`).
            (default: ``"naive"``)
        naive: ``[num_nodes] int64`` this partitioner's own partition of ``data`` when it is
            already computed (e.g. a naive store's :meth:`PartitionStore.assignment`):
            ``"naive"`` and ``"mapped"`` then use it instead of partitioning again (the same
            store as without it for a deterministic partitioner; ``meta["seconds"]`` then counts
            the placement only). The caller vouches that it comes from ``partitioner``'s
            settings. (default: ``None``, partition; see :func:`placed_assignment`)
        link: a link store's edge split (:mod:`~lightning_gnn_dist.data.links`); ``data`` is
            then its message-passing graph. Each part stores the supervision pairs whose source
            it owns, ``meta.json`` the ``link`` key, and the split's settings join the store's
            ``settings`` (a store split another way is refused by name). (default: ``None``)

    Raises:
        PartitionStoreError: ``path`` holds a store for other data or settings, or a corrupt
            one (without ``force``), or ``force`` would replace a folder that is not a store.
        ValueError: invalid ``num_parts``, ``placement`` or ``topology``.
    """
    check_num_parts(num_parts, data.num_nodes)
    _check_placement(partitioner, num_parts, topology, placement)
    path = Path(path)
    fingerprint = graph_fingerprint(data)
    settings = {**partitioner.settings(), "num_parts": int(num_parts)}
    if link is not None:
        settings |= link.settings
    for kind in ("tmp", "old"):  # folders of killed runs
        remove_stale(path.parent, f".{path.name}.{kind}-")
    occupied = path.exists() and not _is_empty_dir(path)
    if occupied and force and not _looks_like_store(path):
        raise PartitionStoreError(
            f"{path} is not a partition store (it holds other files); --force replaces only "
            "partition stores: choose another --out directory"
        )
    if occupied and not force:
        store = PartitionStore.open(path)
        store.check_matches(fingerprint, settings)
        store.check_topology(topology, placement)
        store.verify(full=verify)
        return store

    _announce_step(data, partitioner, num_parts)
    with status(
        f"partitioning {dataset or 'graph'} into {num_parts} parts with {partitioner.name}"
    ):
        start = time.perf_counter()
        assignment, part_to_rank = placed_assignment(
            data, partitioner, num_parts, topology, placement, naive
        )
        seconds = time.perf_counter() - start
    if topology is not None and partitioner.kind == "vertex":
        metrics = partition_metrics(data, assignment, num_parts, topology.ranks_per_node)
    else:
        metrics = partitioner.metrics(data, assignment, num_parts)

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_owned_dir(path.parent, f".{path.name}.tmp-")
    try:
        np.save(tmp / "assignment.npy", assignment)
        owner = partitioner.label_owner(data, assignment, num_parts)
        # One part in memory at a time: each is built when asked for and dropped once written
        # (iterating the parts themselves would keep the last one alive while the next is built).
        parts = iter(partitioner.build_parts(data, assignment, num_parts))
        if link is not None:  # each part stores the pairs whose source it owns
            parts = link.attach(parts, owner, num_parts)
        for _ in track(range(num_parts), "writing parts", total=num_parts):
            part = next(parts)
            part.save(tmp / _part_name(part.part_id))
            del part
        names = ["assignment.npy", *(_part_name(p) for p in range(num_parts))]
        meta = {
            "format_version": FORMAT_VERSION,
            "kind": partitioner.kind,
            "dataset": dataset,
            "fingerprint": fingerprint,
            "num_nodes": int(data.num_nodes),
            "num_edges": int(data.edge_index.size(1)),
            "num_features": int(data.x.size(1)) if getattr(data, "x", None) is not None else 0,
            **target_meta(data),
            **attribute_meta(data),
            "mask_counts": mask_counts(data, owner, num_parts),
            "label_counts": label_counts(data, owner, num_parts),
            **typed_store_meta(data, assignment, num_parts, topology),
            "settings": settings,
            "seconds": seconds,
            "metrics": metrics.to_dict(),
            "versions": _versions(),
            "files": {name: _sha256(tmp / name) for name in names},
            "file_bytes": {name: (tmp / name).stat().st_size for name in names},
        }
        if link is not None:
            meta["link"] = link.meta(owner, num_parts)
        if topology is not None:
            meta["placement"] = {
                "num_nodes": topology.num_nodes,
                "ranks_per_node": topology.ranks_per_node,
                "method": placement,
                "part_to_rank": part_to_rank.tolist(),
            }
        meta["meta_sha256"] = _meta_checksum(meta)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        if occupied:
            _replace_dir(tmp, path)
        else:
            os.rename(tmp, path)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not occupied and path.exists():  # a concurrent writer won: use its store if it fits
            store = PartitionStore.open(path)
            store.check_matches(fingerprint, settings)
            store.check_topology(topology, placement)
            store.verify(full=verify)
            return store
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return PartitionStore(path, meta)


def _row_bytes(data: Data, keys) -> int:
    """Bytes of one row of the tensors ``keys`` of ``data`` (absent ones count nothing)."""
    total = 0
    for key in keys:
        value = getattr(data, key, None)
        if value is not None and value.dim() > 0:
            total += value[:1].numel() * value.element_size()
    return total


def _announce_step(data: Data, partitioner: Partitioner, num_parts: int) -> None:
    """Check the whole partition step's memory estimate (partitioning, then writing one part at
    a time; :func:`~lightning_gnn_dist.data.limits.check_partition_step_fits`) against what the
    machine has, refusing in one line before any work, and print it when progress is shown."""
    from lightning_gnn_dist.data.attributes import CORE_NODE_ATTRS, graph_attributes
    from lightning_gnn_dist.data.limits import check_partition_step_fits, describe_bytes
    from lightning_gnn_dist.utils.progress import note

    attributes = graph_attributes(data)
    num_edges = 0 if data.edge_index is None else int(data.edge_index.size(1))
    needed = check_partition_step_fits(
        partitioner.name,
        data.num_nodes,
        num_edges,
        num_parts,
        _row_bytes(data, (*CORE_NODE_ATTRS, *attributes.node)),
        _row_bytes(data, attributes.edge),
    )
    note(
        f"partition step ({partitioner.name}, {num_parts} parts, parts written one at a time): "
        f"about {describe_bytes(needed)} of memory at its peak besides the graph"
    )


def check_placement(partitioner: Partitioner, placement: str) -> None:
    """Refuse a placement the partitioner cannot make (before anything is partitioned).

    Raises:
        ValueError: an unknown ``placement`` (the valid ones are listed), a placement other
            than ``"naive"`` for a vertex cut, or ``"two-level"`` for a partitioner without the
            hypergraph model.
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; choose one of {', '.join(PLACEMENTS)}")
    if placement != "naive" and partitioner.kind != "vertex":
        raise ValueError(
            f"placement={placement!r} needs a vertex partition (got {partitioner.name})"
        )
    if placement == "two-level" and not hasattr(partitioner, "partition_hypergraph"):
        raise ValueError(
            f"placement='two-level' cuts the hypergraph model twice: use method='hypergraph' "
            f"(got {partitioner.name}); placement='mapped' works with any vertex partitioner"
        )


def _check_placement(
    partitioner: Partitioner, num_parts: int, topology: Topology | None, placement: str
) -> None:
    check_placement(partitioner, placement)
    if topology is None:
        if placement != "naive":
            raise ValueError(f"placement={placement!r} needs the topology (nodes x ranks per node)")
        return
    topology.check_parts(num_parts)
    if placement != "naive" and topology.num_nodes == 1:
        raise ValueError(
            f"placement={placement!r} decides which parts share a node, but the topology has one "
            "node: use placement='naive'"
        )


def placed_assignment(
    data: Data,
    partitioner: Partitioner,
    num_parts: int,
    topology: Topology | None,
    placement: str = "naive",
    naive: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(assignment, part_to_rank)``: the partition with part ``p`` on rank ``p``
    (``[num_nodes] int64``), and the rank of each part of the partitioner's own numbering
    (``[P] int64``; identity unless ``placement="mapped"``). One node, or no ``topology``: the
    partitioner's own assignment.

    ``naive`` (``[num_nodes]`` part of each vertex) is the partitioner's own assignment when it
    is already computed: ``"naive"`` returns it and ``"mapped"`` renumbers it, neither partitions
    again (``"mapped"`` is only a renumbering of the naive partition's parts).

    Raises:
        ValueError: ``naive`` is not one part in ``[0, num_parts)`` per vertex, or is given with
            ``placement="two-level"`` (which partitions into nodes first).
    """
    identity = np.arange(num_parts, dtype=np.int64)
    if naive is not None:
        naive = _checked_assignment(naive, data.num_nodes, num_parts)
    if topology is not None and placement == "two-level" and topology.num_nodes > 1:
        if naive is not None:
            raise ValueError(
                "placement='two-level' partitions into nodes first and cannot reuse a "
                f"{num_parts}-way assignment: drop naive="
            )
        return two_level_assignment(partitioner.hypergraph(data), partitioner, topology), identity
    assignment = partitioner.partition(data, num_parts) if naive is None else naive
    if topology is None or placement == "naive" or topology.num_nodes == 1:
        return assignment, identity
    peer_rows = partition_metrics(data, assignment, num_parts).peer_rows
    part_to_rank = mapped_part_to_rank(peer_rows, topology)
    return part_to_rank[assignment], part_to_rank


def placed_variants(
    partitioner: Partitioner, topology: Topology | None, peer_rows: np.ndarray
) -> list[str]:
    """The placements besides ``"naive"`` that give another partition on ``topology``, for the
    partitioner's own partition with traffic ``peer_rows`` (``[P, P]`` rows per SpMM):
    ``"mapped"`` unless :func:`~lightning_gnn_dist.partition.placement.mapped_part_to_rank`
    keeps the naive groups of parts per node (every part on its rank, or whole nodes swapped:
    the same rows cross nodes as naive), and ``"two-level"`` for a partitioner with the
    hypergraph model. None for a vertex cut or a launch without parts to
    place (:func:`~lightning_gnn_dist.partition.placement.places_parts`). What
    ``method="auto"`` and ``partition-compare --nodes`` build."""
    if not places_parts(topology) or partitioner.kind != "vertex":
        return []
    variants = []
    mapped = mapped_part_to_rank(peer_rows, topology) // topology.ranks_per_node  # node of part
    naive = topology.node_of_rank()
    if ((mapped[:, None] == mapped[None, :]) != (naive[:, None] == naive[None, :])).any():
        variants.append("mapped")
    if hasattr(partitioner, "partition_hypergraph"):
        variants.append("two-level")
    return variants


def _checked_assignment(assignment: np.ndarray, num_vertices: int, num_parts: int) -> np.ndarray:
    assignment = np.asarray(assignment)
    if (
        assignment.shape != (num_vertices,)
        or assignment.dtype.kind not in "iu"
        or (assignment.size and (assignment.min() < 0 or assignment.max() >= num_parts))
    ):
        raise ValueError(
            f"naive must be the [{num_vertices}] int64 part in [0, {num_parts}) of each vertex "
            f"(got shape {assignment.shape}, dtype {assignment.dtype})"
        )
    return assignment.astype(np.int64, copy=False)


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def _looks_like_store(path: Path) -> bool:
    """A folder holding only store files (a store, possibly damaged), which ``force`` may
    replace; anything else is the user's."""
    return path.is_dir() and all(_STORE_FILE.fullmatch(entry.name) for entry in path.iterdir())


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def _replace_dir(new: Path, path: Path) -> None:
    """Put the complete store ``new`` at ``path`` and remove the old store there.

    Linux ``renameat2(RENAME_EXCHANGE)`` swaps the two folders atomically, so ``path`` is always a
    complete store; elsewhere the old store is renamed aside first (``path`` is then briefly
    absent, never incomplete). The old store is deleted only after the new one is in place.
    """
    old = make_owned_dir(path.parent, f".{path.name}.old-")
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        exchanged = (
            libc.renameat2(
                _AT_FDCWD, os.fsencode(new), _AT_FDCWD, os.fsencode(path), _RENAME_EXCHANGE
            )
            == 0
        )
    except (AttributeError, OSError):  # no renameat2 in this libc
        exchanged = False
    if exchanged:
        os.rmdir(old)
        shutil.rmtree(new, ignore_errors=True)  # now the old store
        return
    os.replace(path, old)  # replaces the empty placeholder
    try:
        os.rename(new, path)
    except OSError:
        os.rename(old, path)  # put the old store back
        raise
    shutil.rmtree(old, ignore_errors=True)


def _part_name(part_id: int) -> str:
    return f"part-{part_id:05d}.pt"


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _versions() -> dict[str, str | None]:
    versions = {}
    for name in _LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions

"""The on-disk partition store (design §2).

A store is a directory::

    meta.json          format version, dataset fingerprint, settings, library versions,
                       metrics, seconds, sha256 of every other file
    assignment.npy     [num_nodes] int64 part of each (original) vertex; for a vertex cut
                       (meta "kind": "vertex-cut") [num_edges] int64 part of each edge
    part-00000.pt ...  one LocalPartition (vertex cut: VertexCutPart) per part; a rank loads
                       only its own

It is written into a temporary sibling directory and renamed into place, so a crash leaves either
nothing or a complete store. A store whose fingerprint differs from the requested dataset and
settings is refused, never silently reused; a file whose hash differs is reported as corrupt.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from torch_geometric.data import Data

from lightning_gnn_dist._progress import status, track
from lightning_gnn_dist.data.graph import graph_fingerprint
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.data.vertex_cut import VertexCutPart
from lightning_gnn_dist.partition.base import Partitioner, check_num_parts
from lightning_gnn_dist.partition.metrics import PartitionMetrics
from lightning_gnn_dist.partition.vertex_cut import VertexCutMetrics

FORMAT_VERSION = 1
_LIBRARIES = ("torch", "torch-geometric", "pymetis", "mtkahypar", "kahypar", "numpy")


class PartitionStoreError(ValueError):
    """A store exists but cannot be used: other dataset or settings, or corrupt files."""


@dataclass(frozen=True)
class PartitionStore:
    """A complete partition store on disk (open one with :func:`partition_to_store` or
    :meth:`open`)."""

    path: Path
    meta: dict[str, Any]

    @classmethod
    def open(cls, path: str | Path) -> PartitionStore:
        """Open an existing store and check that its metadata is readable."""
        path = Path(path)
        meta_path = path / "meta.json"
        if not meta_path.is_file():
            raise FileNotFoundError(
                f"{path} is not a partition store (no meta.json); create it with "
                "`python -m lightning_gnn_dist partition --out DIR ...`"
            )
        try:
            meta = json.loads(meta_path.read_text())
            meta["files"], meta["settings"], meta["fingerprint"]  # noqa: B018
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
            raise PartitionStoreError(
                f"{meta_path} is corrupt ({err}); delete {path} and partition again"
            ) from None
        if meta.get("format_version") != FORMAT_VERSION:
            raise PartitionStoreError(
                f"{path} has store format {meta.get('format_version')}, this version reads {FORMAT_VERSION}; "
                f"delete {path} and partition again"
            )
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

    def _verified(self, name: str) -> Path:
        file = self.path / name
        expected = self.meta["files"].get(name)
        if expected is None or not file.is_file():
            raise PartitionStoreError(
                f"{file} is missing from the store; delete {self.path} and partition again"
            )
        if _sha256(file) != expected:
            raise PartitionStoreError(
                f"{file} is corrupt (checksum mismatch); delete {self.path} and partition again"
            )
        return file

    def assignment(self) -> np.ndarray:
        """``[num_nodes] int64`` part of each original vertex id."""
        return np.load(self._verified("assignment.npy"))

    def load_part(self, part_id: int) -> LocalPartition | VertexCutPart:
        """Load (and checksum) the :class:`LocalPartition` (vertex cut: :class:`VertexCutPart`)
        of ``part_id`` only."""
        if not 0 <= part_id < self.num_parts:
            raise ValueError(
                f"part {part_id} does not exist; the store has parts 0..{self.num_parts - 1}"
            )
        cls = VertexCutPart if self.kind == "vertex-cut" else LocalPartition
        return cls.load(self._verified(_part_name(part_id)))

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
) -> PartitionStore:
    """Partition ``data`` into ``path``, or reuse the store there if it matches.

    Args:
        data: canonical graph (``load_dataset`` output).
        partitioner: the method and its settings.
        num_parts: P.
        path: store directory; created atomically.
        dataset: human description of the dataset (spec string) recorded in ``meta.json``.

    Raises:
        PartitionStoreError: ``path`` holds a store for other data or settings, or is corrupt.
        ValueError: invalid ``num_parts``.
    """
    check_num_parts(num_parts, data.num_nodes)
    path = Path(path)
    fingerprint = graph_fingerprint(data)
    settings = {**partitioner.settings(), "num_parts": int(num_parts)}
    if path.exists():
        store = PartitionStore.open(path)
        store.check_matches(fingerprint, settings)
        return store

    with status(
        f"partitioning {dataset or 'graph'} into {num_parts} parts with {partitioner.name}"
    ):
        start = time.perf_counter()
        assignment = partitioner.partition(data, num_parts)
        seconds = time.perf_counter() - start
    metrics = partitioner.metrics(data, assignment, num_parts)

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        files = {}
        np.save(tmp / "assignment.npy", assignment)
        files["assignment.npy"] = _sha256(tmp / "assignment.npy")
        parts = partitioner.build_parts(data, assignment, num_parts)
        for part in track(parts, "writing parts", total=num_parts):
            name = _part_name(part.part_id)
            part.save(tmp / name)
            files[name] = _sha256(tmp / name)
        meta = {
            "format_version": FORMAT_VERSION,
            "kind": partitioner.kind,
            "dataset": dataset,
            "fingerprint": fingerprint,
            "num_nodes": int(data.num_nodes),
            "num_edges": int(data.edge_index.size(1)),
            "num_features": int(data.x.size(1)) if getattr(data, "x", None) is not None else 0,
            "num_classes": int(data.y.max()) + 1 if getattr(data, "y", None) is not None else 0,
            "mask_counts": _mask_counts(
                data, partitioner.label_owner(data, assignment, num_parts), num_parts
            ),
            "settings": settings,
            "seconds": seconds,
            "metrics": metrics.to_dict(),
            "versions": _versions(),
            "files": files,
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        os.rename(tmp, path)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if path.exists():  # another process won the race: use its store if it matches
            store = PartitionStore.open(path)
            store.check_matches(fingerprint, settings)
            return store
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return PartitionStore(path, meta)


def _mask_counts(data: Data, assignment: np.ndarray, num_parts: int) -> dict[str, list[int]]:
    """Per part, how many owned vertices each mask selects (so no rank needs the full graph to
    know the global counts)."""
    counts = {}
    for key in ("train_mask", "val_mask", "test_mask"):
        mask = getattr(data, key, None)
        if mask is not None:
            counts[key] = np.bincount(assignment[mask.numpy()], minlength=num_parts).tolist()
    return counts


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

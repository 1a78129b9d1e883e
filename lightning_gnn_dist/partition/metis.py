"""Graph partitioning (GP) with METIS (paper 000 §4.3.1; multi-constraint balance: 004 §4.1.2).

Two builds of METIS, picked by ``on_disk`` (by default by the graph's size):

* in this process, METIS 5.1 of pymetis (64-bit ids), which keeps every coarsening level in
  memory: graphs below :data:`~lightning_gnn_dist.data.limits.METIS_ON_DISK_MIN_ENTRIES`
  adjacency entries of ``A + Aᵀ``, and ``on_disk=False``.
  pymetis calls METIS with ``ncon = 1`` whatever weights it is given (inducer/pymetis#62 is
  unmerged), so the multi-constraint cases (``balance_masks=True``, ``vertex_weight="nnz+rows"``,
  typed graphs) call ``METIS_PartGraphKway`` of the library pymetis bundles through ``ctypes``;
* in a worker process, METIS 5.2 of ``cmeel-metis`` (32-bit ids, through ``ctypes``:
  :mod:`~lightning_gnn_dist.partition.backends.metis_library`) with its ``ONDISK`` option, which
  keeps the coarse levels in files while this process holds only the graph: larger graphs, and
  ``on_disk=True``. At R-MAT scale 20 (31 M entries) METIS 5.1 took 4.4 GB besides the graph,
  1.2x DGL's whole partition step; the worker's peak is 0.8 GB (``python -m benchmarks.scaling``).

The two builds give different assignments of similar quality (R-MAT volumes within 1 %, the
meshes of ``benchmarks/partition_quality`` 1-7 % higher with 5.2), which is why small graphs
keep 5.1's: the published partitions and quality tables stay as they were.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pymetis
from torch_geometric.data import Data

from lightning_gnn_dist.data.hetero import is_typed
from lightning_gnn_dist.data.limits import metis_on_disk
from lightning_gnn_dist.partition.arrays import EdgeView, symmetric_csr
from lightning_gnn_dist.partition.backends import metis_library
from lightning_gnn_dist.partition.backends._child import run_in_child, worker_command
from lightning_gnn_dist.partition.base import (
    Partitioner,
    estimate_seconds,
    native_seed,
    register_partitioner,
)
from lightning_gnn_dist.partition.types import type_constraints
from lightning_gnn_dist.partition.weights import (
    DEFAULT_VERTEX_WEIGHT,
    check_vertex_weight,
    check_widths,
    vertex_weights,
    weight_settings,
)
from lightning_gnn_dist.utils.checks import check_bool
from lightning_gnn_dist.utils.progress import status

MASK_KEYS: tuple[str, ...] = ("train_mask", "val_mask", "test_mask")


@register_partitioner("metis")
class MetisPartitioner(Partitioner):
    r"""METIS k-way partitioning of the undirected graph :math:`A + A^\top` (graph model).

    Every directed edge becomes an undirected edge of unit cost (self loops dropped), every
    vertex weighs its ``vertex_weight`` (by default its layer work), and METIS minimises the
    edge cut with parts of at most
    ``(1 + epsilon)`` times the average weight (METIS ``ufactor = round(1000 * epsilon)``). The
    edge cut over-estimates the communication volume that :class:`HypergraphPartitioner`
    minimises exactly (paper 000 §4.3.1).

    With ``balance_masks=True`` METIS balances four constraints at once, as DistDGL does: the
    row non-zeros and the numbers of training, validation and test vertices per part. A typed
    graph adds one constraint per node type, its target type's training vertices one of their
    own (:func:`~lightning_gnn_dist.partition.types.balance_classes`).
    ``vertex_weight`` picks the first constraint(s): ``"nnz+rows"`` balances the row non-zeros
    and the vertices of every part at once (two constraints), ``"work"`` the GCN layer work of
    :mod:`~lightning_gnn_dist.partition.weights` (one).

    METIS treats the bound as a target, not a guarantee: it may exceed it by about a vertex, and
    with several constraints on small graphs cut into many parts it can miss it further (e.g.
    2,000 vertices, 16 parts: parts up to 1.14 x average). Only heavy parts are bounded; a part
    may be much lighter than average.

    A graph without edges gives METIS nothing to minimise; its vertices are then dealt
    round-robin (ordered by their train/val/test class when ``balance_masks`` is set), so every
    part's size, and each class count, differ by at most one between parts.

    Args:
        seed (int): METIS seed; equal seeds give equal assignments. (default: ``0``)
        epsilon (float): allowed load imbalance of every constraint. (default: ``0.03``)
        balance_masks (bool): also balance ``data.train_mask``, ``data.val_mask`` and
            ``data.test_mask`` counts (``ncon = 4``). (default: ``False``)
        vertex_weight (str): ``"work"``, ``"nnz"`` (paper 000), ``"rows"`` or ``"nnz+rows"``.
            (default: ``"work"``, chosen by ``python -m benchmarks.full_batch``)
        widths (Sequence[int], optional): GCN widths of ``"work"``; ``None`` reads
            ``(num_features, 16, num_classes)`` from the graph. (default: ``None``)
        on_disk (bool, optional): ``True``: METIS 5.2 in a child process that keeps its coarse
            levels in files of a private temporary folder (METIS' ``ONDISK``), while this
            process holds only the graph (the folder needs about the size of the levels: 2.5 GB
            at R-MAT scale 20); ``False``: METIS 5.1 in this process, levels in memory. The two
            builds give different assignments of similar quality (module docstring). ``None``:
            ``True`` from :data:`~lightning_gnn_dist.data.limits.METIS_ON_DISK_MIN_ENTRIES`
            adjacency entries on. (default: ``None``)

    .. code-block:: python

        from lightning_gnn_dist.partition import get_partitioner

        assignment = get_partitioner("metis", seed=0).partition(data, 4)
    """

    def __init__(
        self,
        seed: int = 0,
        epsilon: float = 0.03,
        balance_masks: bool = False,
        vertex_weight: str = DEFAULT_VERTEX_WEIGHT,
        widths: Sequence[int] | None = None,
        on_disk: bool | None = None,
    ) -> None:
        super().__init__(seed=seed, epsilon=epsilon)
        self.balance_masks = check_bool("balance_masks", balance_masks)
        self.vertex_weight = check_vertex_weight(vertex_weight)
        self.widths = check_widths(widths)
        self.on_disk = None if on_disk is None else check_bool("on_disk", on_disk)
        if on_disk:
            metis_library.load()  # ImportError with the install command, before any work

    @property
    def ufactor(self) -> int:
        """METIS' imbalance tolerance in thousandths (``epsilon = 0.03`` → ``30``), at least 1."""
        return max(1, round(1000 * self.epsilon))

    def _partition(self, data: Data, num_parts: int) -> np.ndarray:
        num_nodes = data.num_nodes
        weights = vertex_weights(data, self.vertex_weight, self.widths)
        weights = weights.reshape(num_nodes, -1)  # [N, ncon]
        if self.balance_masks:
            masks = _mask_matrix(data)
            constraints = np.column_stack([weights, masks]).astype(np.int64)  # [N, ncon + 3]
        else:
            masks = None
            constraints = weights
        if is_typed(data):  # one constraint per node type (DistDGL's balance_ntypes)
            constraints = np.column_stack([constraints, type_constraints(data)]).astype(np.int64)
        view = EdgeView(data.edge_index, num_nodes)
        if view.num_edges == 0:
            return _deal_round_robin(masks, num_nodes, num_parts)
        seed = native_seed(self.seed)
        on_disk = metis_on_disk(self.on_disk, 2 * view.num_edges)
        estimate = estimate_seconds("metis", int(data.edge_index.size(1)))
        with status(f"METIS: {num_nodes:,} vertices into {num_parts} parts", estimate):
            if on_disk:
                return _partition_in_child(view, constraints, num_parts, seed, self.ufactor)
            # int64: pymetis' index type (no copy); ~16 bytes per directed edge.
            indptr, indices = symmetric_csr(None, num_nodes, np.int64, view)
            del view
            if constraints.shape[1] > 1:
                return _part_graph_kway(indptr, indices, constraints, num_parts, seed, self.ufactor)
            options = pymetis.Options(seed=seed, ufactor=self.ufactor)
            _, parts = pymetis.part_graph(
                num_parts,
                adjacency=pymetis.CSRAdjacency(adj_starts=indptr, adjacent=indices),
                vweights=weights[:, 0],
                recursive=False,
                options=options,
            )
        return np.asarray(parts, dtype=np.int64)

    def memory_options(self) -> dict[str, Any]:
        """The METIS build asked for (its memory differs: :func:`~lightning_gnn_dist.data.
        limits.partition_memory_bytes`)."""
        return {"on_disk": self.on_disk}

    def settings(self) -> dict[str, Any]:
        """Method, seed, epsilon, ``balance_masks``, the vertex weight and ``on_disk`` (which
        picks the METIS build; ``None`` picks by the graph's size)."""
        return {
            **super().settings(),
            "balance_masks": self.balance_masks,
            **weight_settings(self.vertex_weight, self.widths),
            "on_disk": self.on_disk,
        }


@cache
def _pymetis_library() -> ctypes.CDLL:
    """The METIS 5.1 library bundled in pymetis' extension module (exports the METIS C API)."""
    from pymetis import _internal

    library = ctypes.CDLL(_internal.__file__)
    if not hasattr(library, "METIS_PartGraphKway"):  # pragma: no cover - other pymetis builds
        raise RuntimeError(
            f"balance_masks=True and vertex_weight='nnz+rows' need METIS_PartGraphKway, which "
            f"this pymetis build ({_internal.__file__}) does not export; use one constraint"
        )
    return library


def _part_graph_kway(
    indptr: np.ndarray,
    indices: np.ndarray,
    constraints: np.ndarray,
    num_parts: int,
    seed: int,
    ufactor: int,
) -> np.ndarray:
    """Multi-constraint ``METIS_PartGraphKway`` of pymetis' METIS 5.1; ``constraints`` is
    ``[num_nodes, ncon]``."""
    from pymetis._internal import options_indices

    option_index = {"seed": options_indices.SEED, "ufactor": options_indices.UFACTOR,
                    "numbering": options_indices.NUMBERING}  # fmt: skip
    return metis_library.kway(
        _pymetis_library(), pymetis.zero_copy_dtype(), option_index, indptr, indices,
        constraints, num_parts, {"seed": seed, "ufactor": ufactor},
    )  # fmt: skip


def _metis_arrays(
    view: EdgeView, constraints: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``xadj [N + 1]``, ``adjncy [nnz]`` of ``A + Aᵀ`` without self loops and the ``[N, ncon]``
    vertex weights, in METIS' index type (``int32``: 8 bytes per undirected edge)."""
    idx = metis_library.index_dtype()
    num_nodes = view.num_nodes
    if 2 * view.num_edges > np.iinfo(idx).max:
        raise ValueError(
            f"METIS ({idx.itemsize * 8}-bit ids) takes at most {np.iinfo(idx).max} adjacency "
            f"entries, but A + Aᵀ of this graph has up to {2 * view.num_edges}; use "
            "method='kaminpar'"
        )
    indptr, adjncy = symmetric_csr(None, num_nodes, idx, view)
    xadj = indptr.astype(idx)
    del indptr
    return xadj, adjncy, metis_library.fit_weights(constraints.reshape(num_nodes, -1), idx)


def _partition_in_child(
    view: EdgeView, constraints: np.ndarray, num_parts: int, seed: int, ufactor: int
) -> np.ndarray:
    """METIS with ``ONDISK`` in ``_worker.py``: the CSR is written to the child's folder and
    freed here before the child starts; the child's levels go to files in that folder."""

    def write(folder: Path) -> Path:
        graph = folder / "graph"
        graph.mkdir()
        for name, array in zip(
            ("xadj", "adjncy", "vwgt"), _metis_arrays(view, constraints), strict=True
        ):
            np.save(graph / f"{name}.npy", array)
        return graph

    return run_in_child(
        "METIS",
        write,
        lambda graph, output: _worker_command(graph, output, num_parts, ufactor, seed),
        None,
        "use on_disk=False (more memory), or method='kaminpar'",
        view.num_nodes,
    )


def _worker_command(
    graph: Path, output: Path, num_parts: int, ufactor: int, seed: int
) -> list[str]:
    """The child's command line (a separate function so tests can substitute a failing child)."""
    return worker_command("metis", graph, output, int(num_parts), int(ufactor), int(seed))


def _mask_matrix(data: Data) -> np.ndarray:
    """``[num_nodes, 3] int64`` 0/1 indicators of the train, val and test masks."""
    columns = []
    for key in MASK_KEYS:
        mask = getattr(data, key, None)
        if mask is None:
            raise ValueError(
                f"balance_masks=True needs data.{key} (got none); give the graph train/val/test "
                "masks or use balance_masks=False"
            )
        if tuple(mask.shape) != (data.num_nodes,):
            raise ValueError(
                f"data.{key} must be a [num_nodes] = [{data.num_nodes}] boolean mask "
                f"(got shape {tuple(mask.shape)})"
            )
        columns.append(mask.detach().cpu().numpy().astype(bool).astype(np.int64))
    return np.column_stack(columns)


def _deal_round_robin(masks: np.ndarray | None, num_nodes: int, num_parts: int) -> np.ndarray:
    """Deal vertices to parts in turn, grouped by mask class so each class is spread evenly."""
    if masks is None:
        order = np.arange(num_nodes)
    else:
        order = np.lexsort(masks.T[::-1])  # stable: by train, then val, then test, then id
    assignment = np.empty(num_nodes, dtype=np.int64)
    assignment[order] = np.arange(num_nodes, dtype=np.int64) % num_parts
    return assignment

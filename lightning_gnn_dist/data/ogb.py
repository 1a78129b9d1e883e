"""Open Graph Benchmark node-property datasets (``ogbn-*``) through ``ogb``'s own PyG loader.

``ogb`` is an optional dependency (``pip install 'lightning-gnn-dist[ogb]'``). Data already on
disk under ``root`` (OGB's layout, ``root/ogbn_arxiv/{raw,split,processed}``) is used as is;
otherwise ``ogb`` downloads it, which needs a network.
"""

from __future__ import annotations

import contextlib
import csv
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import torch
from torch_geometric.data import Data, HeteroData

from .errors import DatasetError

__all__ = ["DEFAULT_OGB_ROOT", "load_ogb"]

DEFAULT_OGB_ROOT = "./data_cache/ogb"


def _import_ogb() -> ModuleType:
    try:
        import ogb.nodeproppred as nodeproppred
    except ImportError as error:
        raise ImportError(
            "loading 'ogb:NAME' datasets needs the ogb package; install it with "
            "pip install 'lightning-gnn-dist[ogb]' (or pip install ogb)"
        ) from error
    return nodeproppred


def _master_table(nodeproppred: ModuleType) -> dict[str, dict[str, str]]:
    """``ogb``'s ``master.csv``: dataset name -> {field: value}."""
    path = Path(nodeproppred.__file__).with_name("master.csv")
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    names = rows[0][1:]
    return {name: {row[0]: row[1 + k] for row in rows[1:]} for k, name in enumerate(names)}


@contextlib.contextmanager
def _allow_pyg_unpickling() -> Iterator[None]:
    """Allow ``torch.load`` to unpickle the PyG classes of ``ogb``'s processed file.

    Why: since torch 2.6 ``torch.load`` defaults to ``weights_only=True``. ``ogb`` 1.3.6 calls
    ``torch.load(processed_path)`` on the file it wrote itself, a pickled ``(Data, slices)``
    pair, and PyG does not allowlist every class in it (``DataEdgeAttr``, ``DataTensorAttr``,
    ``GlobalStorage``), so the load fails. We allowlist exactly these classes, only for the
    duration of the call (``torch.serialization.safe_globals`` is scoped), instead of turning
    ``weights_only`` off.
    """
    safe_globals = getattr(torch.serialization, "safe_globals", None)
    if safe_globals is None:  # torch < 2.4: weights_only defaults to False, nothing to do
        yield
        return
    from torch_geometric.data import data as pyg_data
    from torch_geometric.data import storage as pyg_storage

    classes = [
        getattr(module, name)
        for module, name in (
            (pyg_data, "Data"),
            (pyg_data, "DataEdgeAttr"),
            (pyg_data, "DataTensorAttr"),
            (pyg_storage, "GlobalStorage"),
            (pyg_storage, "NodeStorage"),
            (pyg_storage, "EdgeStorage"),
        )
        if hasattr(module, name)
    ]
    with safe_globals(classes):
        yield


def load_ogb(name: str, root: str | os.PathLike = DEFAULT_OGB_ROOT) -> Data | HeteroData:
    """Load an OGB node-property dataset (a heterogeneous one, ``ogbn-mag``, as the
    ``HeteroData`` of :func:`~lightning_gnn_dist.data.hetero_sources.ogb_hetero`).

    Uses ``ogb.nodeproppred.PygNodePropPredDataset(name=name, root=root)`` and its
    ``get_idx_split()``. Edges are kept as OGB stores them (``ogbn-arxiv`` is directed: citing
    -> cited paper; ``ogbn-products`` and ``ogbn-proteins`` list both directions). Targets follow
    the dataset's task type: one multiclass task becomes ``y [N] int64`` with missing labels
    (``NaN``, e.g. most of ``ogbn-papers100M``) ``-1``; binary classification with ``k`` tasks
    (``ogbn-proteins``: 112) becomes multi-label ``y [N, k] float32`` of 0 and 1 (``NaN`` =
    unlabelled); a regression task ``float32``. Edge features become ``edge_attr [E, d]`` and the
    dataset's additional node and edge files (``node_species``) node and edge attributes of their
    own names. A dataset without node features but with edge features gets ``x`` = the sum of
    each vertex's in-edge features, as PyG's ogbn-proteins example initialises it. The masks are
    the official split; vertices without any label are in none.

    Args:
        name (str): dataset name, e.g. ``"ogbn-arxiv"`` or ``"ogbn-proteins"``.
        root (str or os.PathLike): directory holding OGB datasets; ``ogbn-arxiv`` lives in
            ``root/ogbn_arxiv``. (default: ``"./data_cache/ogb"``)

    Returns:
        ``Data`` with ``x`` ``[N, d] float32`` (``None`` if the dataset has neither node nor
        edge features), ``y``, ``edge_index`` ``[2, E] int64``, ``edge_attr`` (if any), the
        additional attributes, ``train_mask``, ``val_mask``, ``test_mask`` ``[N] bool``,
        ``num_nodes`` and ``name``.

    Raises:
        ImportError: ``ogb`` is not installed.
        ValueError: an unknown dataset.
        DatasetError: ``root`` holds the dataset directory without OGB's ``RELEASE_v*.txt``
            marker (``ogb`` would ask on stdin whether to delete it).
    """
    nodeproppred = _import_ogb()
    master = _master_table(nodeproppred)
    if name not in master:
        raise ValueError(
            f"unknown OGB node-property dataset {name!r}; known: {', '.join(sorted(master))}"
        )
    meta = master[name]
    _check_release_marker(Path(root), name, meta.get("version", "1"))
    if meta.get("is hetero") == "True":  # ogbn-mag: a typed graph (data.hetero_sources)
        from .hetero_sources import ogb_hetero

        with _allow_pyg_unpickling():
            dataset = nodeproppred.PygNodePropPredDataset(name=name, root=str(root))
            return ogb_hetero(dataset[0], name, dataset.get_idx_split())

    with _allow_pyg_unpickling():
        dataset = nodeproppred.PygNodePropPredDataset(name=name, root=str(root))
        split = dataset.get_idx_split()
        graph = dataset[0]

    num_nodes = int(graph.num_nodes)
    y, labelled = _targets(graph.y.reshape(num_nodes, -1), meta.get("task type", ""))
    masks = []
    for key in ("train", "valid", "test"):
        mask = torch.zeros(num_nodes, dtype=torch.bool)
        mask[torch.as_tensor(split[key]).long()] = True
        masks.append(mask & labelled)
    edge_index = graph.edge_index.long()
    edge_attr = getattr(graph, "edge_attr", None)
    x = None if graph.x is None else graph.x.float()
    if x is None and edge_attr is not None:
        x = torch.zeros(num_nodes, edge_attr.size(1)).index_add_(
            0, edge_index[1], edge_attr.float()
        )
    data = Data(
        x=x,
        y=y,
        edge_index=edge_index,
        train_mask=masks[0],
        val_mask=masks[1],
        test_mask=masks[2],
        num_nodes=num_nodes,
    )
    if edge_attr is not None:
        data.edge_attr = edge_attr
    for files in ("additional node files", "additional edge files"):
        for key in meta.get(files, "None").split(","):
            if key != "None" and getattr(graph, key, None) is not None:
                data[key] = graph[key]
    data.name = name
    return data


def _targets(y: torch.Tensor, task_type: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, labelled [N] bool)`` in the canonical form of the OGB task type."""
    if "regression" in task_type or (y.size(1) > 1 and "binary" in task_type):
        y = y.float()
        return y, ~torch.isnan(y).all(1)
    y = y[:, 0]
    if y.is_floating_point():
        y = torch.where(torch.isnan(y), torch.full_like(y, -1), y)
    y = y.long()
    return y, y >= 0


def _check_release_marker(root: Path, name: str, version: str) -> None:
    """Refuse a dataset directory without ``RELEASE_v{version}.txt`` before ``ogb`` prompts."""
    directory = root / name.replace("-", "_")
    if (root / (directory.name + "_pyg")).is_dir():
        directory = root / (directory.name + "_pyg")
    marker = directory / f"RELEASE_v{version}.txt"
    if directory.is_dir() and not marker.exists():
        raise DatasetError(
            f"{directory}: OGB dataset directory without {marker.name}; it is incomplete or "
            f"from an old release. Delete the directory to download {name} again, or create "
            f"{marker} if the files are current"
        )

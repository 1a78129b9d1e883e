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
from torch_geometric.data import Data

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


def load_ogb(name: str, root: str | os.PathLike = DEFAULT_OGB_ROOT) -> Data:
    """Load a homogeneous, single-task OGB node-classification dataset.

    Uses ``ogb.nodeproppred.PygNodePropPredDataset(name=name, root=root)`` and its
    ``get_idx_split()``. Edges are kept as OGB stores them (``ogbn-arxiv`` is directed: citing
    -> cited paper; ``ogbn-products`` lists both directions). Labels become ``[N] int64``;
    missing labels (``NaN``, e.g. most of ``ogbn-papers100M``) become ``-1``. The masks are the
    official split (``train``/``valid``/``test`` indices); unlabelled vertices are in none.

    Args:
        name (str): dataset name, e.g. ``"ogbn-arxiv"``.
        root (str or os.PathLike): directory holding OGB datasets; ``ogbn-arxiv`` lives in
            ``root/ogbn_arxiv``. (default: ``"./data_cache/ogb"``)

    Returns:
        ``Data`` with ``x`` ``[N, d] float32`` (``None`` if the dataset has no node features),
        ``y`` ``[N] int64``, ``edge_index`` ``[2, E] int64``, ``train_mask``, ``val_mask``,
        ``test_mask`` ``[N] bool``, ``num_nodes`` and ``name``.

    Raises:
        ImportError: ``ogb`` is not installed.
        ValueError: an unknown, heterogeneous or multi-task dataset.
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
    if meta.get("is hetero") == "True":
        raise ValueError(
            f"{name} is a heterogeneous graph; only homogeneous ogbn datasets are supported "
            "(e.g. ogbn-arxiv, ogbn-products, ogbn-papers100M)"
        )
    if meta.get("num tasks") != "1":
        raise ValueError(
            f"{name} has {meta.get('num tasks')} prediction tasks; only single-task datasets "
            "with one class label per vertex are supported"
        )
    _check_release_marker(Path(root), name, meta.get("version", "1"))

    with _allow_pyg_unpickling():
        dataset = nodeproppred.PygNodePropPredDataset(name=name, root=str(root))
        split = dataset.get_idx_split()
        graph = dataset[0]

    num_nodes = int(graph.num_nodes)
    y = graph.y.reshape(num_nodes, -1)[:, 0]
    if y.is_floating_point():
        y = torch.where(torch.isnan(y), torch.full_like(y, -1), y)
    y = y.long()
    masks = []
    for key in ("train", "valid", "test"):
        mask = torch.zeros(num_nodes, dtype=torch.bool)
        mask[torch.as_tensor(split[key]).long()] = True
        masks.append(mask & (y >= 0))
    data = Data(
        x=None if graph.x is None else graph.x.float(),
        y=y,
        edge_index=graph.edge_index.long(),
        train_mask=masks[0],
        val_mask=masks[1],
        test_mask=masks[2],
        num_nodes=num_nodes,
    )
    data.name = name
    return data


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

"""Open Graph Benchmark link-prediction datasets (``ogbl-*``) through ``ogb``'s own PyG loader.

``ogb:ogbl-collab?root=DIR`` (also ``ogbl-citation2``, ``ogbl-ppa``, ``ogbl-ddi``) as the
``dataset`` of :class:`~lightning_gnn_dist.lightning.link_datamodule.LinkDataModule` loads the
graph with ``ogb.linkproppred.PygLinkPropPredDataset`` and its official split
(``get_edge_split()``) as the user's supervision pairs:

* ``collab``, ``ppa``, ``ddi``: ``train``/``valid``/``test`` ``edge`` pairs (label ``1``), the
  ``valid``/``test`` ``edge_neg`` pairs as label-``0`` pairs — the shared negative pool of the
  datasets' Hits@K protocol (50, 100, 20);
* ``citation2``: ``source_node``/``target_node`` pairs, and each validation/test source's 1000
  ``target_node_neg`` as label-``0`` pairs in positive-major order after the positives
  (``negatives_per_positive = 1000``: the MRR protocol).

The dataset's graph (``data.edge_index``: the training edges, both directions where OGB adds the
inverse edges) is the message-passing graph; a validation or test positive found in it is taken
out (:func:`~lightning_gnn_dist.data.links.user_link_split`). ``ogbl-ddi`` has no node features:
the usual synthetic ones are filled in (:func:`~lightning_gnn_dist.data.load_dataset`).
"""

from __future__ import annotations

import contextlib
import csv
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from .errors import DatasetError
from .ogb import DEFAULT_OGB_ROOT, _allow_pyg_unpickling, _check_release_marker

OGB_LINK_DATASETS = {
    "ogbl-collab": "hits@50",
    "ogbl-citation2": "mrr",
    "ogbl-ppa": "hits@100",
    "ogbl-ddi": "hits@20",
}
"""The supported datasets and their evaluation metric (OGB's leaderboards)."""

_SPLITS = {"train": "train", "valid": "val", "test": "test"}


def is_ogb_link_spec(dataset) -> bool:
    """Whether ``dataset`` is a spec string ``ogb:ogbl-...``."""
    return isinstance(dataset, str) and dataset.split("?")[0].startswith("ogb:ogbl-")


def _import_ogb():
    try:
        import ogb.linkproppred as linkproppred
    except ImportError as error:
        raise ImportError(
            "loading 'ogb:ogbl-*' datasets needs the ogb package; install it with "
            "pip install 'lightning-gnn-dist[ogb]' (or pip install ogb)"
        ) from error
    return linkproppred


def _version(linkproppred, name: str) -> str:
    with open(Path(linkproppred.__file__).with_name("master.csv"), newline="") as handle:
        rows = list(csv.reader(handle))
    column = rows[0].index(name)
    return {row[0]: row[column] for row in rows[1:]}.get("version", "1")


@contextlib.contextmanager
def _allow_numpy_unpickling() -> Iterator[None]:
    """Allow ``torch.load`` to unpickle the numpy arrays of OGB's split files
    (``split/*/train.pt``: dicts of arrays, which ``ogb`` 1.3.6 loads with torch's default
    ``weights_only=True`` since torch 2.6): exactly numpy's array reconstruction and dtypes,
    only for the call."""
    safe_globals = getattr(torch.serialization, "safe_globals", None)
    if safe_globals is None:
        yield
        return
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import _reconstruct
    dtypes = [getattr(np.dtypes, n) for n in dir(np.dtypes) if n.endswith("DType")]
    with safe_globals([_reconstruct, np.ndarray, np.dtype, *dtypes]):
        yield


def load_ogb_link(spec: str) -> tuple[Data, dict[str, Tensor], dict[str, Tensor], dict[str, int]]:
    """``(data, edge_label_index, edge_label, negatives_per_positive)`` of an ``ogb:ogbl-*``
    spec (module docstring); ``?root=DIR`` holds OGB's folders (default ``./data_cache/ogb``).

    Raises:
        ImportError: ``ogb`` is not installed.
        DatasetError: an unknown dataset or option, or an incomplete dataset folder.
    """
    from .datasets import parse_dataset_spec

    parsed = parse_dataset_spec(spec)
    name = parsed.arg or ""
    if name not in OGB_LINK_DATASETS:
        raise DatasetError(
            f"{spec!r}: unknown OGB link-prediction dataset {name!r}; supported: "
            f"{', '.join(OGB_LINK_DATASETS)}"
        )
    unknown = sorted(set(parsed.options) - {"root"})
    if unknown:
        raise DatasetError(f"{spec!r}: unknown option {unknown[0]!r}; ogbl datasets take root")
    root = Path(parsed.options.get("root", DEFAULT_OGB_ROOT))
    linkproppred = _import_ogb()
    _check_release_marker(root, name, _version(linkproppred, name))
    with _allow_pyg_unpickling(), _allow_numpy_unpickling():
        dataset = linkproppred.PygLinkPropPredDataset(name=name, root=str(root))
        split = dataset.get_edge_split()
        graph = dataset[0]
    num_nodes = int(graph.num_nodes)
    data = Data(edge_index=graph.edge_index.long(), num_nodes=num_nodes)
    if getattr(graph, "x", None) is not None:
        data.x = graph.x.float()
    for key in ("edge_weight", "edge_year", "node_year"):
        value = getattr(graph, key, None)
        if value is not None:
            data[key] = value.float() if key == "edge_weight" else value.long()
    data.name = name
    index, label, per_positive = {}, {}, {}
    for ogb_name, ours in _SPLITS.items():
        part = {key: torch.as_tensor(value) for key, value in split[ogb_name].items()}
        if "source_node" in part:  # citation2: per-source targets
            src, dst = part["source_node"].long(), part["target_node"].long()
            pairs = [torch.stack([src, dst])]
            if "target_node_neg" in part:
                neg = part["target_node_neg"].long()
                pairs.append(torch.stack([src.repeat_interleave(neg.size(1)), neg.reshape(-1)]))
                per_positive[ours] = int(neg.size(1))
        else:
            pairs = [part["edge"].long().t()]
            if "edge_neg" in part:
                pairs.append(part["edge_neg"].long().t())
        index[ours] = torch.cat(pairs, 1).contiguous()
        label[ours] = torch.cat(
            [torch.ones(pairs[0].size(1))] + [torch.zeros(p.size(1)) for p in pairs[1:]]
        )
    return data, index, label, per_positive


__all__ = ["OGB_LINK_DATASETS", "is_ogb_link_spec", "load_ogb_link"]

"""``LinkDataModule``: partitioned link prediction, beside the node datamodule (PyG keeps
``LightningLinkData`` apart from ``LightningNodeData`` the same way).

``prepare_data`` splits the edges once (:mod:`~lightning_gnn_dist.data.links`: seeded
``RandomLinkSplit`` semantics, or the user's own pairs, or an OGB dataset's official split),
partitions the training message-passing graph and stores each part with the supervision pairs
whose source it owns; ``setup`` loads this rank's part. Loaders serve the rank's pairs with
negatives drawn at run time (:mod:`~lightning_gnn_dist.data.negatives`): one full batch per epoch
(``loader="full"``: the model runs on the whole part with the halo exchange, the far endpoints'
rows come by the score exchange) or sampled mini-batches in PyG's ``LinkNeighborLoader`` layout
(``loader="neighbor"``). See the guide "Link prediction".
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import torch
from torch_geometric.data import Data

from lightning_gnn_dist.comm.messages import host_group
from lightning_gnn_dist.comm.score import VertexDirectory
from lightning_gnn_dist.data.attributes import batch_attributes
from lightning_gnn_dist.data.links import SPLITS, LinkSplit, check_disjoint, check_label_index
from lightning_gnn_dist.data.negatives import (
    check_negative_count,
    check_negatives,
    known_edge_keys,
)
from lightning_gnn_dist.data.ogb_link import is_ogb_link_spec
from lightning_gnn_dist.data.sampler import check_fanouts
from lightning_gnn_dist.lightning.auto_plan import AUTO
from lightning_gnn_dist.lightning.partitioned_data import PartitionedDataModule
from lightning_gnn_dist.loaders.link import FullLinkLoader, LinkPairs, NegativeSampler
from lightning_gnn_dist.loaders.link_neighbor import LinkNeighborLoader
from lightning_gnn_dist.partition.store import PartitionStoreError
from lightning_gnn_dist.utils.checks import check_bool, check_int

LINK_LOADERS = ("full", "neighbor")
LINK_FIELDS = (
    "edge_label_index",
    "edge_label",
    "num_positives",
    "num_negatives",
    "negative_valid",
    "pool_index",
    "link_directory",
    "num_positives_global",
    "link_chunks",
)
"""Names the link loaders set on every batch: refused as graph attributes."""
DEFAULT_EVAL_NEGATIVES = 1000
"""ogbl-citation2's negatives per positive: the default evaluation protocol."""


class LinkNeighborLoaders:
    """The train/val/test :class:`~lightning_gnn_dist.loaders.link_neighbor.LinkNeighborLoader`
    of one rank over one graph store (what ``GNNStrategy`` and the monitor read as the
    datamodule's ``neighbor_loaders``: ``store`` and ``device``)."""

    def __init__(self, store, make) -> None:
        self.store, self._make = store, make
        self.device: torch.device | None = None
        self._loaders: dict[str, LinkNeighborLoader] = {}

    def loader(self, split: str) -> LinkNeighborLoader:
        if split not in self._loaders:
            self._loaders[split] = self._make(split, self.device)
        return self._loaders[split]


class LinkDataModule(PartitionedDataModule):
    """Partitioned link-prediction data for :class:`~lightning_gnn_dist.GNNStrategy`.

    Every batch holds the rank's part (or a sampled neighbourhood) and supervision pairs in
    PyG's link layout: ``edge_label_index [2, n + n·k]`` (the positives, then their ``k``
    negatives each, pair-major), ``edge_label`` (labels, then ``0``), ``num_positives`` and
    ``num_negatives`` (see :mod:`~lightning_gnn_dist.loaders.link`). With ``loader="full"`` the
    ids are dataset ids and :func:`~lightning_gnn_dist.nn.link.endpoint_rows` (which
    :class:`~lightning_gnn_dist.lightning.link_module.LinkPredictor` calls) fetches the far
    endpoints' embeddings; with ``loader="neighbor"`` they index the batch's rows.

    Args:
        dataset (str or Data): a dataset spec (any graph: its edges are split), an in-memory
            ``Data``, or ``"ogb:ogbl-collab?root=DIR"`` (``ogbl-citation2``, ``-ppa``, ``-ddi``:
            the official split, :mod:`~lightning_gnn_dist.data.ogb_link`).
            (default: ``"sbm?num_nodes=2000&num_classes=20&avg_degree=10&p_ratio=200"``)
        method, num_parts, root, seed, epsilon, store: as ``GraphPartitionDataModule``'s (the
            message-passing graph is partitioned; ``method="auto"`` is not offered: its cost
            model plans node training); so are ``verify_dataset``, ``force``,
            ``partition_options`` and ``placement``.
        val_ratio (float): edges held out for validation (``RandomLinkSplit``'s ``num_val``).
            (default: ``0.1``)
        test_ratio (float): edges held out for testing. (default: ``0.2``)
        split_seed (int): seed of the split. (default: ``0``)
        undirected (bool, optional): split ``(u, v)`` with ``(v, u)``; ``None``: when the graph
            is symmetric. (default: ``None``)
        disjoint_train_ratio (float): training edges used for supervision only, never for
            message passing (PyG's option; the leakage guard of full-batch training).
            (default: ``0.0``)
        edge_label_index (dict, optional): the user's own pairs, ``{"train": [2, n], "val":
            ..., "test": ...}`` (dataset ids); validation and test positives are removed from
            the message-passing graph. Refused: overlapping splits, ids out of range.
            (default: ``None``: a random split)
        edge_label (dict, optional): their labels (default ``1``; ``0`` marks a validation or
            test negative: the Hits@K pool). (default: ``None``)
        negatives (str): ``"global"`` (targets uniform over all vertices: the single-process
            stream, exact), ``"local"`` (the rank's own vertices: no extra communication) or
            ``"in-batch"`` (the other positives' targets). (default: ``"global"``)
        num_negatives (int): negatives per positive in training (``k``, per source edge).
            (default: ``1``)
        filter_true (bool): redraw training negatives that are true training edges. (default:
            ``False``)
        negative_seed (int): seed of the negatives' streams. (default: ``0``)
        eval_num_negatives (int, optional): validation/test negatives per positive, uniform
            over all vertices and the same every evaluation (ogbl-citation2's protocol); more
            than the graph's vertices is refused. (default: ``1000``, or the number of vertices
            of a smaller graph)
        eval_chunk_size (int): evaluation positives scored per chunk with ``loader="full"``
            (bounds the rows one chunk fetches). (default: ``10000``)
        loader (str): ``"full"`` or ``"neighbor"``. (default: ``"full"``)
        num_neighbors, batch_size, shuffle, replace: the neighbour loader's, as in
            ``GraphPartitionDataModule`` (``batch_size`` counts positive pairs); so are
            ``eval_num_neighbors``, ``cache_size`` and ``prefetch``.
        eval_loader (str): with ``loader="neighbor"``: ``"full"`` (evaluate on the whole part
            with the halo exchange, as full-batch) or ``"neighbor"`` (sampled, the
            ``eval_num_negatives`` negatives as seeds). (default: ``"full"``)
        exclude (bool): with ``loader="neighbor"``, drop each training batch's positives' own
            edges (both directions) from its sampled graph (DGL's ``exclude``). (default:
            ``True``)
    """

    def __init__(
        self,
        dataset: str | Data = "sbm?num_nodes=2000&num_classes=20&avg_degree=10&p_ratio=200",
        method: str | None = None,
        num_parts: int | None = None,
        root: str = "partitions",
        seed: int | None = None,
        epsilon: float | None = None,
        store: str | None = None,
        verify_dataset: bool = True,
        force: bool = False,
        partition_options: dict[str, Any] | None = None,
        placement: str = "naive",
        val_ratio: float = 0.1,
        test_ratio: float = 0.2,
        split_seed: int = 0,
        undirected: bool | None = None,
        disjoint_train_ratio: float = 0.0,
        edge_label_index: dict | None = None,
        edge_label: dict | None = None,
        negatives: str = "global",
        num_negatives: int = 1,
        filter_true: bool = False,
        negative_seed: int = 0,
        eval_num_negatives: int | None = None,
        eval_chunk_size: int = 10000,
        loader: str = "full",
        num_neighbors: list[int] | None = None,
        batch_size: int = 1,
        shuffle: bool = False,
        replace: bool = False,
        eval_num_neighbors: list[int] | None = None,
        eval_loader: str = "full",
        cache_size: int = 0,
        prefetch: bool = False,
        exclude: bool = True,
    ) -> None:
        if method == AUTO:
            raise ValueError(
                "method='auto' plans node training (its cost model has no score exchange); name "
                "the method for link prediction, e.g. method='metis'"
            )
        check_negatives(negatives, num_negatives)
        if eval_num_negatives is not None:
            check_negatives("global", eval_num_negatives, "eval_num_negatives")
        if loader not in LINK_LOADERS:
            raise ValueError(f"undefined loader option {loader!r}; choose 'full' or 'neighbor'")
        if eval_loader not in LINK_LOADERS:
            raise ValueError(
                f"undefined eval_loader option {eval_loader!r}; choose 'full' or 'neighbor'"
            )
        if loader == "neighbor" and num_neighbors is None:
            raise ValueError("loader='neighbor' needs num_neighbors, e.g. [10, 5]")
        if num_neighbors is not None:
            num_neighbors = check_fanouts("num_neighbors", num_neighbors)
        if eval_num_neighbors is not None:
            eval_num_neighbors = check_fanouts("eval_num_neighbors", eval_num_neighbors)
        for name, value, low in (
            ("batch_size", batch_size, 1),
            ("cache_size", cache_size, 0),
            ("eval_chunk_size", eval_chunk_size, 1),
            ("split_seed", split_seed, 0),
            ("negative_seed", negative_seed, 0),
        ):
            check_int(name, value, low)
        for name, value in (
            ("shuffle", shuffle),
            ("replace", replace),
            ("prefetch", prefetch),
            ("exclude", exclude),
            ("filter_true", filter_true),
        ):
            check_bool(name, value)
        if edge_label is not None and edge_label_index is None:
            raise ValueError("edge_label needs edge_label_index (the pairs they label)")
        if isinstance(dataset, Data):
            _check_link_data(dataset, num_negatives, eval_num_negatives)
        if edge_label_index is not None:  # the pairs alone (their range, once the graph is known)
            num_nodes = int(dataset.num_nodes) if isinstance(dataset, Data) else None
            pairs, labels = check_label_index(edge_label_index, edge_label, num_nodes)
            check_disjoint(pairs, labels, num_nodes, bool(undirected))
        super().__init__(
            dataset=dataset,
            method=method,
            num_parts=num_parts,
            root=root,
            seed=seed,
            epsilon=epsilon,
            store=store,
            verify_dataset=verify_dataset,
            force=force,
            partition_options=partition_options,
            placement=placement,
        )
        self.dataset = dataset
        if filter_true and self.partition_kind != "vertex":
            raise ValueError(
                "filter_true reads each vertex's out-edges from a vertex partition's send plan; "
                f"method={self.method!r} makes a vertex cut: use filter_true=False or a vertex "
                "method"
            )
        if loader == "neighbor" and self.partition_kind != "vertex":
            raise ValueError(
                f"loader='neighbor' samples from a vertex partition, but method={self.method!r} "
                "makes a vertex cut; use loader='full'"
            )
        self.split_options = dict(
            val_ratio=val_ratio,
            test_ratio=test_ratio,
            split_seed=split_seed,
            undirected=undirected,
            disjoint_train_ratio=disjoint_train_ratio,
        )
        self.user_pairs = (edge_label_index, edge_label)
        self.negatives, self.num_negatives = negatives, num_negatives
        self.filter_true, self.negative_seed = filter_true, negative_seed
        self.eval_num_negatives, self.eval_chunk_size = eval_num_negatives, eval_chunk_size
        self.loader, self.eval_loader = loader, eval_loader
        self.neighbor_options = dict(
            num_neighbors=num_neighbors,
            eval_num_neighbors=eval_num_neighbors or num_neighbors,
            batch_size=batch_size,
            shuffle=shuffle,
            replace=replace,
            prefetch=prefetch,
            exclude=exclude,
        )
        self.cache_size = cache_size
        self.directory: VertexDirectory | None = None
        self.neighbor_loaders: LinkNeighborLoaders | None = None
        self._loaders: dict[str, Any] = {}
        self._base: Data | None = None

    # -- the split and the store -------------------------------------------------------------
    def _split_settings(self) -> dict[str, Any]:
        """What picks the store folder besides the partitioner (the data-dependent hash of the
        split is checked against the store's settings)."""
        settings: dict[str, Any] = dict(self.split_options)
        index, label = self.user_pairs
        if index is not None:
            digest = hashlib.sha256()
            for name in sorted(index):
                digest.update(name.encode() + torch.as_tensor(index[name]).numpy().tobytes())
                if label is not None and name in label:
                    digest.update(torch.as_tensor(label[name]).numpy().tobytes())
            settings = {"user": digest.hexdigest(), "undirected": self.split_options["undirected"]}
        elif is_ogb_link_spec(self.dataset):
            settings = {"ogb": self.dataset}
        return settings

    @property
    def store_path(self) -> Path:
        if self.store_dir is not None:
            return Path(self.store_dir)
        base = super().store_path
        text = json.dumps(self._split_settings(), sort_keys=True, default=str)
        return base.with_name(base.name + "-link-" + hashlib.sha256(text.encode()).hexdigest()[:8])

    @property
    def _folder_slug(self) -> str:
        if is_ogb_link_spec(self.dataset):
            return self.dataset.split("?")[0].removeprefix("ogb:")
        return super()._folder_slug

    @property
    def _dataset_name(self) -> str:
        if is_ogb_link_spec(self.dataset):
            return self.dataset
        return super()._dataset_name

    def link_split(self) -> tuple[Data, LinkSplit]:
        """``(graph, split)``: the dataset in canonical form and its edge split."""
        from lightning_gnn_dist.data.datasets import load_dataset
        from lightning_gnn_dist.data.links import random_link_split, user_link_split
        from lightning_gnn_dist.data.ogb_link import load_ogb_link

        options = self.split_options
        if is_ogb_link_spec(self.dataset):
            raw, index, label, per_positive = load_ogb_link(self.dataset)
            data = load_dataset(raw)
            return data, user_link_split(data, index, label, options["undirected"], per_positive)
        data = load_dataset(self.dataset)
        index, label = self.user_pairs
        if index is not None:
            return data, user_link_split(data, index, label, options["undirected"])
        split = random_link_split(
            data,
            options["val_ratio"],
            options["test_ratio"],
            options["split_seed"],
            options["undirected"],
            options["disjoint_train_ratio"],
        )
        return data, split

    def prepare_data(self) -> None:
        from lightning_gnn_dist.partition.store import PartitionStore, partition_to_store

        if not self.force and not self.verify_dataset and (self.store_path / "meta.json").is_file():
            PartitionStore.open(self.store_path).verify(full=False)
            return
        topology = self._placed_topology()
        data, split = self.link_split()
        _check_training_pairs(split)
        partition_to_store(
            split.message_passing_graph(data),
            self.partitioner,
            self._parts(),
            self.store_path,
            dataset=self._dataset_name,
            force=self.force,
            verify=False,
            topology=topology,
            placement=self.placement,
            link=split,
        )
        self._store = None

    @property
    def link_meta(self) -> dict[str, Any]:
        """The store's ``link`` key (split settings, per-part counts, far rows)."""
        meta = self.store.meta.get("link")
        if meta is None:
            raise PartitionStoreError(
                f"the partition store {self.store.path} holds no link split (it was made by a "
                "node datamodule); use another store folder for link prediction"
            )
        return meta

    @property
    def num_nodes(self) -> int:
        return int(self.store.meta["num_nodes"])

    def num_pairs(self, split: str) -> int:
        """Positive pairs of ``split`` in the whole graph."""
        return int(self.link_meta["num_positives"].get(split, 0))

    # -- setup -----------------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        if self.local_partition is not None:
            return
        meta = self.link_meta
        part = self.load_part()
        num_nodes = self.num_nodes
        if self.eval_num_negatives is None:
            self.eval_num_negatives = min(DEFAULT_EVAL_NEGATIVES, num_nodes)
        check_negative_count(self.eval_num_negatives, num_nodes, "eval_num_negatives")
        check_negative_count(self.num_negatives, num_nodes, "num_negatives")
        self._base = Data(
            x=part.x,
            edge_index=part.edge_index,
            global_ids=part.global_ids,
            num_nodes=part.num_owned,
            **batch_attributes(part),
        )
        if part.y is not None:
            self._base.y = part.y
        vertex_cut = getattr(part, "kind", "vertex") == "vertex-cut"
        owned = part.global_ids[part.is_root] if vertex_cut else part.global_ids
        if part.num_parts == 1:
            self.directory = VertexDirectory.from_owner(
                torch.zeros(num_nodes, dtype=torch.long).numpy(), 1
            )
        elif vertex_cut:
            self.directory = VertexDirectory.gather(owned, num_nodes, host_group())
        else:
            self.directory = VertexDirectory.from_owner(self.store.assignment(), part.num_parts)
        known = known_edge_keys(part) if self.filter_true else None
        self._pairs = {split: LinkPairs.of_part(part, split, meta) for split in SPLITS}
        for split in SPLITS:
            self._pairs[split].counts = list(meta["counts"].get(split, [0] * part.num_parts))
        self._samplers = {
            "train": NegativeSampler(
                self.negatives, self.num_negatives, num_nodes, self.negative_seed, owned, known
            ),
            "eval": NegativeSampler(
                "global", self.eval_num_negatives, num_nodes, self.negative_seed
            ),
        }
        if self.negatives == "in-batch":
            self._check_in_batch()
        if self.loader == "neighbor":
            self.neighbor_loaders = self._neighbor_loaders(part)

    def _check_in_batch(self) -> None:
        counts = self._pairs["train"].counts
        per_batch = (
            min(counts)
            if self.loader == "full"
            else min(counts) // max(1, math.ceil(max(counts) / self.neighbor_options["batch_size"]))
        )
        if per_batch <= self.num_negatives:
            raise ValueError(
                f"negatives='in-batch' takes {self.num_negatives} other positives per pair, but "
                f"a rank's batch can hold only {per_batch} training pairs; lower num_negatives "
                "or raise batch_size"
            )

    def _neighbor_loaders(self, part) -> LinkNeighborLoaders:
        import torch.distributed as dist

        from lightning_gnn_dist.loaders.graph_store import PartitionedGraphStore

        timeout = getattr(getattr(self.trainer, "strategy", None), "_timeout", None)
        group = host_group(timeout=timeout)
        if dist.is_available() and dist.is_initialized() and self.neighbor_options["prefetch"]:
            group = dist.new_group(backend="gloo", timeout=timeout)
        store = PartitionedGraphStore(part, group=group, cache_size=self.cache_size)
        options = self.neighbor_options

        def make(split: str, device) -> LinkNeighborLoader:
            train = split == "train"
            return LinkNeighborLoader(
                store,
                options["num_neighbors"] if train else options["eval_num_neighbors"],
                self._pairs[split],
                self._samplers["train" if train else "eval"],
                self.directory,
                split=split,
                batch_size=options["batch_size"],
                shuffle=options["shuffle"] and train,
                replace=options["replace"],
                seed=self.negative_seed,
                exclude=options["exclude"],
                prefetch=options["prefetch"] and train,
                device=device,
            )

        return LinkNeighborLoaders(store, make)

    # -- loaders -----------------------------------------------------------------------------------
    def eval_partition(self, split: str):
        """With ``loader="neighbor"`` and ``eval_loader="full"``: the part the strategy runs
        ``split``'s full batch on (the whole part, with the halo exchange); else ``None``."""
        if self.loader != "neighbor" or self.eval_loader != "full" or split == "train":
            return None
        return self.local_partition

    def _full_loader(self, split: str) -> FullLinkLoader:
        if split not in self._loaders:
            sampler = self._samplers["train" if split == "train" else "eval"]
            self._loaders[split] = FullLinkLoader(
                self._base, self._pairs[split], sampler, split, self.directory, self.eval_chunk_size
            )
        return self._loaders[split]

    def _loader(self, split: str):
        if self._base is None:
            raise RuntimeError("call setup() first (the Trainer does)")
        if self.neighbor_loaders is not None and self.eval_partition(split) is None:
            return self.neighbor_loaders.loader(split)
        return self._full_loader(split)

    def train_dataloader(self):
        return self._loader("train")

    def val_dataloader(self):
        return self._loader("val")

    def test_dataloader(self):
        return self._loader("test")

    def __repr__(self) -> str:
        return (
            f"LinkDataModule(dataset={self._dataset_name!r}, method={self.method!r}, "
            f"num_parts={self.num_parts}, negatives={self.negatives!r}, "
            f"num_negatives={self.num_negatives}, loader={self.loader!r})"
        )


def _check_link_data(data: Data, num_negatives: int, eval_num_negatives: int | None) -> None:
    """What can be refused in an in-memory graph before anything is partitioned."""
    for key in LINK_FIELDS:
        if getattr(data, key, None) is not None:
            raise ValueError(
                f"the graph has an attribute {key!r}, a name the link loaders set on every batch; "
                + (
                    "pass the pairs as LinkDataModule(edge_label_index={'train': ..., 'val': ...})"
                    if key in ("edge_label_index", "edge_label")
                    else f"rename it (e.g. data.my_{key})"
                )
            )
    num_nodes = int(data.num_nodes)
    check_negative_count(num_negatives, num_nodes, "num_negatives")
    if eval_num_negatives is not None:
        check_negative_count(eval_num_negatives, num_nodes, "eval_num_negatives")


def _check_training_pairs(split: LinkSplit) -> None:
    labels = split.label.get("train")
    if labels is not None and bool((labels == 0).any()):
        raise ValueError(
            "the 'train' pairs must be positives (edge_label != 0): training negatives are "
            "drawn at run time (negatives=...); keep label-0 pairs in 'val'/'test'"
        )


__all__ = ["LINK_FIELDS", "LINK_LOADERS", "LinkDataModule", "LinkNeighborLoaders"]

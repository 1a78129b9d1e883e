"""``GraphPartitionDataModule``: the node datamodule. It partitions once and loads one part per
rank through :class:`~lightning_gnn_dist.lightning.partitioned_data.PartitionedDataModule`, and
serves full batches (``loader="full"``), sampled mini-batches of the rank's own vertices
(``loader="neighbor"``) or shared sampled subgraphs (``loader="subgraph"``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch_geometric.data import Data

from lightning_gnn_dist.comm.messages import host_group
from lightning_gnn_dist.data.attributes import batch_attributes
from lightning_gnn_dist.data.eval_batch import split_first
from lightning_gnn_dist.data.hetero_local import is_typed_part
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.data.sampler import check_fanouts
from lightning_gnn_dist.data.subgraph_sampler import check_sampler_name, check_subgraph_size
from lightning_gnn_dist.lightning.auto_plan import AUTO
from lightning_gnn_dist.lightning.hetero_data import check_typed_arguments, typed_setup
from lightning_gnn_dist.lightning.partitioned_data import PartitionedDataModule
from lightning_gnn_dist.loaders.neighbor import NeighborLoader, NeighborLoaders
from lightning_gnn_dist.loaders.subgraph import SubgraphLoader
from lightning_gnn_dist.utils.checks import check_bool, check_int

LOADERS = ("full", "neighbor", "subgraph")

_LOADER_OPTIONS: dict[str, tuple[tuple[str, ...], object]] = {
    # option: (loaders it applies to, its default)
    "num_neighbors": (("neighbor",), None),
    "batch_size": (("neighbor",), 1),
    "shuffle": (("neighbor",), False),
    "replace": (("neighbor",), False),
    "eval_num_neighbors": (("neighbor",), None),
    "eval_loader": (("neighbor",), "neighbor"),
    "cache_size": (("neighbor",), 0),
    "prefetch": (("neighbor",), False),
    "subgraph_sampler": (("subgraph",), "uniform"),
    "subgraph_size": (("subgraph",), None),
    "steps_per_epoch": (("subgraph",), None),
    "subgraph_seed": (("subgraph",), 0),
}
"""Loader-specific options: given with another loader (and not at their default), they would
be ignored, so they are refused."""


def _check_values(loader: str, eval_loader: str, given: dict[str, Any]) -> None:
    """Types and ranges of the loader options (they need no graph and no method)."""
    if loader not in LOADERS:
        raise ValueError(f"undefined loader option {loader!r}; choose one of {LOADERS}")
    if eval_loader not in ("neighbor", "full"):
        raise ValueError(
            f"undefined eval_loader option {eval_loader!r}; choose 'neighbor' or 'full'"
        )
    check_int("batch_size", given["batch_size"], 1)
    check_int("cache_size", given["cache_size"], 0)
    check_int("subgraph_seed", given["subgraph_seed"], 0)
    if given["steps_per_epoch"] is not None:
        check_int("steps_per_epoch", given["steps_per_epoch"], 1)
    check_sampler_name(given["subgraph_sampler"])
    for name in ("shuffle", "replace", "prefetch"):
        check_bool(name, given[name])


def _check_other_loaders(loader: str, given: dict[str, Any], method: str) -> None:
    """No option of another loader (``stochastic-hypergraph`` partitions for the subgraph
    sampler, so its options may come with any loader)."""
    shared = ("subgraph_sampler", "subgraph_size") if method == "stochastic-hypergraph" else ()
    for name, (loaders, default) in _LOADER_OPTIONS.items():
        value = given[name]
        if loader not in loaders and name not in shared and value != default:
            raise ValueError(
                f"{name}={value!r} applies to loader={loaders[0]!r} only (got loader={loader!r}); "
                "drop it or change the loader"
            )


class FullGraphLoader:
    """Yields one batch per epoch: the rank's whole part (not a ``DataLoader``, so Lightning
    neither flattens it nor injects a sampler)."""

    def __init__(self, batch: Data) -> None:
        self.batch = batch

    def __iter__(self) -> Iterator[Data]:
        yield self.batch

    def __len__(self) -> int:
        return 1


class GraphPartitionDataModule(PartitionedDataModule):
    """Partitioned full-graph data for :class:`~lightning_gnn_dist.GNNStrategy`.

    ``prepare_data`` (one process per node) loads the dataset, partitions it and writes the
    partition store, or reuses a store made for the same dataset and settings. ``setup`` loads
    only this rank's part; no rank holds the whole graph during training. Each loader yields one
    batch, a :class:`~torch_geometric.data.Data` with the owned rows ``x [num_owned, d]``, ``y``,
    the masks, the local ``edge_index`` (sources over ``[owned | halo]``) and ``global_ids``
    (dataset vertex ids of the owned rows), every other node attribute of the graph (owned rows)
    and edge attribute (``edge_weight``, ``edge_attr``, ... in ``edge_index`` order) under its
    own name, ``e_id`` (dataset edge ids), and ``num_{train,val,test}_global`` /
    ``num_{train,val,test}_labels_global`` (the split's vertices and labelled targets in the
    whole graph). Without a distributed strategy and with one part it is simply the whole
    graph, so single-process code runs unchanged. See the guide "Your own graph" for where each
    attribute goes in every loader.

    Args:
        dataset (str or Data): dataset spec, see :func:`~lightning_gnn_dist.data.load_dataset`,
            or an in-memory PyG ``Data`` (named by its ``name`` attribute in the store path;
            without one by its fingerprint, ``graph-<12 hex>``, so two different graphs never
            share a store). Its ``y`` may be class ids ``[N]`` (``-1`` = unlabelled), multi-label
            ``[N, k]`` (0/1, ``NaN`` = unlabelled) or real targets ``[N]``/``[N, k]``
            (``NaN`` = unlabelled); every tensor with one row per vertex or per edge is
            partitioned with it. A ``Data`` without masks trains on a seeded random 60/20/20
            split (a warning says so). A ``HeteroData`` (or a typed spec: ``mag``,
            ``ogb:ogbn-mag``) is a typed graph: partitioned over all its types at once, its
            batches are ``HeteroData`` (the guide "Heterogeneous graphs";
            :mod:`~lightning_gnn_dist.data.hetero`). Refused here, naming the attribute:
            ``NaN`` features, a tensor with neither ``N`` nor ``E`` rows, a name the loaders
            set themselves, and for a ``HeteroData`` no labels on the target type or a
            relation whose node types are missing; attributes that cannot be partitioned (not
            tensors) are named in a warning and dropped. (default: ``"digits"``)
        method (str, optional): partition method (``hypergraph``, ``metis``, ``random``, ...), or
            ``"auto"``: rank 0 predicts every candidate plan (partitioner × exchange mode, see
            :mod:`lightning_gnn_dist.costmodel.plan`) in ``prepare_data``, prints the table and
            stores the pick in ``plan.json`` beside the candidates' partition stores; every rank
            and every resumed run then reads that plan (``GNNStrategy(exchange="auto")`` runs
            its exchange). Needs ``plan_options`` with the model's ``widths`` and
            ``loader="full"``. (default: the method of an existing ``store``, else
            ``"hypergraph"``)
        num_parts (int, optional): parts; must equal the world size. (default: the world size)
        root (str): directory holding partition stores, one folder per dataset, method, parts,
            seed, epsilon and hash of the partitioner's settings. (default: ``"partitions"``)
        seed (int, optional): partitioner seed. (default: an existing ``store``'s, else ``0``)
        epsilon (float, optional): allowed imbalance. (default: an existing ``store``'s, else
            ``0.03``)
        store (str, optional): explicit store directory (overrides ``root``; e.g. one written by
            ``python -m lightning_gnn_dist partition --out``). When it holds a store already
            (and ``force`` is not set), its settings are used: ``method``, ``seed``,
            ``epsilon`` and ``partition_options`` need not be repeated, and one given that
            differs from the store's is refused here. (default: ``None``)
        verify_dataset (bool): when the store already exists, check the dataset against the
            store's fingerprint on local rank 0. A ``chunked:`` dataset
            (:mod:`~lightning_gnn_dist.data.chunked`) is memory-mapped and its fingerprint was
            recorded when its files were ingested, so this reads none of the graph; another
            dataset is loaded on local rank 0 and hashed. ``False`` skips the check (a store
            partitioned offline from a graph this machine cannot load): only the settings
            (method, seed, parts) are checked. Either way each rank memory-maps only its own
            part. (default: ``True``)
        force (bool): rebuild the partition store in ``prepare_data`` even if it exists (e.g. a
            corrupt one); the old store is replaced atomically once the new one is complete.
            (default: ``False``)
        loader (str): ``"full"`` (one batch per epoch: the rank's part, for the halo-exchange
            modes) or ``"neighbor"`` (owner-compute mini-batches of sampled neighbourhoods in
            PyG's ``NeighborLoader`` layout, see
            :class:`~lightning_gnn_dist.loaders.NeighborLoader`; ``GNNStrategy`` then averages
            gradients like DDP). (default: ``"full"``)
        num_neighbors (list[int] or dict, optional): fan-out per hop for ``loader="neighbor"``,
            ``-1`` for all in-neighbours; for a typed graph also PyG's dict per relation
            (``{("paper", "cites", "paper"): [15, 10], ...}``, any fan-out including ``0``;
            relations left out get ``0``; a relation the graph does not have is refused).
            (default: ``None``)
        batch_size (int): seeds per step and rank at most. (default: ``1``)
        shuffle (bool): reshuffle the training seeds every epoch. (default: ``False``)
        replace (bool): sample neighbours with replacement. (default: ``False``)
        eval_num_neighbors (list[int], optional): validation/test fan-outs; ``[-1, ...]`` gives
            exact full-neighbourhood predictions. (default: ``num_neighbors``)
        eval_loader (str): with ``loader="neighbor"``, how validation/test/predict run:
            ``"neighbor"`` (sampled mini-batches of the rank's own vertices, fan-outs
            ``eval_num_neighbors``) or ``"full"`` (exact layer-wise inference: one batch per rank
            holding its whole part with the split's vertices first, ``batch_size`` = their
            count; the strategy runs the model with the halo exchange). (default:
            ``"neighbor"``)
        cache_size (int): remote feature rows cached per rank (hot halo rows). (default: ``0``)
        prefetch (bool): sample and fetch the next training batch in a background thread (on
            its own process group) while the current step runs; mid-epoch validation and
            ``limit_train_batches`` wait for the batch in flight. (default: ``False``)
        subgraph_sampler (str): with ``loader="subgraph"`` (every rank trains on the same sampled
            subgraph, paper 000 §4.3.3): ``"uniform"`` (uniform vertex sampling, the paper's; the
            only one that runs without the whole graph's edges), ``"edge"`` or ``"random-walk"``
            (GraphSAINT, one part only). (default: ``"uniform"``)
        subgraph_size (int or float, optional): vertices per sampled subgraph, or a fraction of
            the graph when in ``(0, 1)``; required with ``loader="subgraph"``. (default: ``None``)
        steps_per_epoch (int, optional): sampled subgraphs per epoch. (default:
            ``ceil(num_nodes / subgraph_size)``)
        subgraph_seed (int): seed of the subgraph sampler; every rank draws the same batch of a
            step from it without communication. (default: ``0``)
        partition_options (dict, optional): further keyword arguments of the partitioner, e.g.
            ``{"vertex_weight": "work"}`` (work-balanced parts, see
            :mod:`~lightning_gnn_dist.partition.weights`); they are part of the store's
            settings. (default: ``None``)
        plan_options (dict, optional): with ``method="auto"``: ``widths`` (required, the GCN's
            ``[d_0, ..., d_L]``), ``network`` (preset, ``probe --json`` file or
            :class:`~lightning_gnn_dist.costmodel.Network`; default ``"loopback"``),
            ``allow_stale`` (let ``cached`` and lossy codecs be candidates; default ``False``:
            exact plans only), ``methods``, ``exchanges``, ``costs``, ``cores``; checked here,
            see :func:`~lightning_gnn_dist.costmodel.plan_options.check_plan_options`. On
            several nodes of several ranks each the plan also weighs ``exchange="hierarchical"``
            and the placements below (a ``network`` that ``probe`` measured on both levels
            prices each). (default: ``None``)
        placement (str): on several nodes (``Trainer(num_nodes > 1)``), which parts share a
            node: ``"naive"`` (part ``p`` on rank ``p`` as partitioned), ``"mapped"`` (the
            parts renumbered so that parts exchanging many rows share a node) or
            ``"two-level"`` (``method="hypergraph"`` only: into nodes first, then each node
            into its ranks); see :mod:`~lightning_gnn_dist.partition.placement`. Each
            placement has its own store folder (``...-n<nodes>-<placement>``). A launch on one
            node has nothing to place: ``prepare_data``/``setup`` refuse another value than
            ``"naive"`` there; ``method="auto"`` chooses the placement itself. (default:
            ``"naive"``)
        task (str, optional): the targets' task, ``"multiclass"``, ``"multilabel"`` or
            ``"regression"``; a ``y`` that does not fit it is refused (an in-memory ``Data``
            here, naming the value). Without it the task is inferred from ``y`` (integer
            classes, 0/1 columns, other floats; integral floats of one column stay classes),
            see :mod:`~lightning_gnn_dist.data.targets`. Read the stored one from
            :attr:`task` and :attr:`num_tasks`. (default: ``None``)
        target_type (str, optional): a typed graph's node type to predict; refused for a
            homogeneous graph, and an unknown type is refused naming the types. (default: the
            one type with ``y``)

    Integrity: ``prepare_data`` refuses a store with an edited ``meta.json`` or a missing or
    resized file (cheap: no file is read), and each rank hashes the one part it loads in
    ``setup``; either ends with one :class:`~lightning_gnn_dist.partition.store.PartitionStoreError`
    naming the file and how to rebuild.
    """

    def __init__(
        self,
        dataset: str | Data = "digits",
        method: str | None = None,
        num_parts: int | None = None,
        root: str = "partitions",
        seed: int | None = None,
        epsilon: float | None = None,
        store: str | None = None,
        verify_dataset: bool = True,
        force: bool = False,
        loader: str = "full",
        num_neighbors: list[int] | None = None,
        batch_size: int = 1,
        shuffle: bool = False,
        replace: bool = False,
        eval_num_neighbors: list[int] | None = None,
        eval_loader: str = "neighbor",
        cache_size: int = 0,
        prefetch: bool = False,
        subgraph_sampler: str = "uniform",
        subgraph_size: int | float | None = None,
        steps_per_epoch: int | None = None,
        subgraph_seed: int = 0,
        partition_options: dict[str, Any] | None = None,
        plan_options: dict[str, Any] | None = None,
        placement: str = "naive",
        task: str | None = None,
        target_type: str | None = None,
    ) -> None:
        given = {k: v for k, v in locals().items() if k in _LOADER_OPTIONS}
        _check_values(loader, eval_loader, given)
        if loader == "neighbor" and num_neighbors is None:
            raise ValueError("loader='neighbor' needs num_neighbors, e.g. [25, 10]")
        if loader == "subgraph" and subgraph_size is None:
            raise ValueError("loader='subgraph' needs subgraph_size (vertices, or a fraction < 1)")
        typed = check_typed_arguments(
            dataset, target_type, loader, eval_loader, method, num_neighbors, eval_num_neighbors
        )
        if num_neighbors is not None and not typed:
            num_neighbors = check_fanouts("num_neighbors", num_neighbors)
        if eval_num_neighbors is not None and not typed:
            eval_num_neighbors = check_fanouts("eval_num_neighbors", eval_num_neighbors)
        if subgraph_size is not None:
            subgraph_size = check_subgraph_size(subgraph_size)
        if method == AUTO and loader != "full":
            raise ValueError(
                f"method='auto' plans full-batch training (its cost model predicts full-batch "
                f"epochs); loader={loader!r} needs a fixed method, e.g. method='metis'"
            )
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
            plan_options=plan_options,
            placement=placement,
            batch_sampler={"sampler": subgraph_sampler, "subgraph_size": subgraph_size},
            task=task,
            target_type=target_type,
        )
        _check_other_loaders(loader, given, self.method)
        if self.partition_kind != "vertex" and loader != "full":
            raise ValueError(
                f"loader={loader!r} samples from a vertex partition, but method={self.method!r} "
                f"makes a {self.partition_kind} partition; use loader='full' (exchange cd-0, "
                "cd-<r> or 0c) or a vertex method (hypergraph, metis, random, ...)"
            )
        self.loader, self.eval_loader = loader, eval_loader
        self._eval_views: dict = {}
        self.neighbor_options = dict(
            num_neighbors=num_neighbors,
            batch_size=batch_size,
            shuffle=shuffle,
            replace=replace,
            eval_num_neighbors=eval_num_neighbors,
            prefetch=prefetch,
            seed=self.seed,
        )
        self.cache_size = cache_size
        self.neighbor_loaders: NeighborLoaders | None = None
        self.subgraph_sampler, self.subgraph_size = subgraph_sampler, subgraph_size
        self.steps_per_epoch, self.subgraph_seed = steps_per_epoch, subgraph_seed
        self.batch: Data | None = None
        self._subgraph_loader: SubgraphLoader | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.local_partition is not None:
            return
        part = self.load_part()
        store = self.store
        if is_typed_part(part):  # a typed graph: HeteroData batches (lightning.hetero_data)
            self.batch, self.neighbor_loaders = typed_setup(self, part)
            return
        self.batch = Data(
            x=part.x,
            y=part.y,
            edge_index=part.edge_index,
            train_mask=part.train_mask,
            val_mask=part.val_mask,
            test_mask=part.test_mask,
            global_ids=part.global_ids,
            num_nodes=part.num_owned,
            **batch_attributes(part),
        )
        for key in ("train_mask", "val_mask", "test_mask"):
            split = key.split("_")[0]
            self.batch[f"num_{split}_global"] = self.global_mask_count(key)
            self.batch[f"num_{split}_labels_global"] = self.global_label_count(key)
        if self.loader == "neighbor":
            timeout = getattr(getattr(self.trainer, "strategy", None), "_timeout", None)
            self.neighbor_loaders = _neighbor_loaders(
                part, store.meta["mask_counts"], self.cache_size, self.neighbor_options, timeout
            )

    # -- loaders ------------------------------------------------------------------------------
    def eval_partition(self, split: str) -> LocalPartition | None:
        """With ``eval_loader="full"``: the partition (owned rows of ``split`` first) the
        strategy runs ``split``'s batch on; ``None`` when batches are sampled or full-batch."""
        if self.neighbor_loaders is None or self.eval_loader != "full" or split == "train":
            return None
        if split not in self._eval_views:
            self._eval_views[split] = split_first(self.local_partition, split)
        return self._eval_views[split][0]

    def _loader(self, split: str = "full") -> FullGraphLoader | NeighborLoader:
        if self.batch is None:
            raise RuntimeError("call setup() first (the Trainer does)")
        if self.eval_partition(split) is not None:
            return FullGraphLoader(self._eval_views[split][1])
        if self.neighbor_loaders is not None and split != "full":
            return self.neighbor_loaders.loader(split)
        return FullGraphLoader(self.batch)

    def train_dataloader(self) -> FullGraphLoader | NeighborLoader | SubgraphLoader:
        if self.loader == "subgraph":
            return self._make_subgraph_loader()
        return self._loader("train")

    def _make_subgraph_loader(self) -> SubgraphLoader:
        from lightning_gnn_dist.data.subgraph_sampler import make_sampler, subgraph_vertices

        if self.local_partition is None:
            raise RuntimeError("call setup() first (the Trainer does)")
        if self._subgraph_loader is None:
            part = self.local_partition
            num_nodes = int(self.store.meta["num_nodes"])
            size = subgraph_vertices(self.subgraph_size, num_nodes)
            edge_index = None
            if part.num_parts == 1:  # the whole graph is here: structure samplers may run
                edge_index = part.global_ids[part.edge_index]
            elif self.subgraph_sampler != "uniform":
                raise ValueError(
                    f"subgraph_sampler={self.subgraph_sampler!r} reads the whole graph's edges, "
                    f"which no rank holds with {part.num_parts} parts; use 'uniform'"
                )
            sampler = make_sampler(
                self.subgraph_sampler, num_nodes, size, self.subgraph_seed, edge_index
            )
            steps = self.steps_per_epoch or -(-num_nodes // size)
            trainer = self.trainer
            self._subgraph_loader = SubgraphLoader(
                part,
                sampler,
                steps,
                group=host_group(),  # the batch plans are built on the CPU: gloo under NCCL
                current_epoch=(lambda: trainer.current_epoch) if trainer is not None else None,
            )
        return self._subgraph_loader

    def val_dataloader(self) -> FullGraphLoader | NeighborLoader:
        return self._loader("val")

    def test_dataloader(self) -> FullGraphLoader | NeighborLoader:
        return self._loader("test")

    def predict_dataloader(self) -> FullGraphLoader | NeighborLoader:
        return self._loader("predict")

    def __repr__(self) -> str:
        subgraph = (
            f", subgraph_sampler={self.subgraph_sampler!r}, "
            f"subgraph_size={self.subgraph_size}, steps_per_epoch={self.steps_per_epoch}"
            if self.loader == "subgraph"
            else ""
        )
        return (
            f"GraphPartitionDataModule(dataset={self._dataset_name!r}, method={self.method!r}, "
            f"num_parts={self.num_parts}, seed={self.seed}, epsilon={self.epsilon}, "
            f"loader={self.loader!r}{subgraph}"
            + (f", placement={self.placement!r}" if self.placement != "naive" else "")
            + (", force=True)" if self.force else ")")
        )


def _neighbor_loaders(
    part: LocalPartition, mask_counts: dict, cache_size: int, options: dict, timeout=None
) -> NeighborLoaders:
    """This rank's neighbour loaders; collective when a process group exists (every rank runs
    ``setup`` together). Prefetching samples from a thread, so it gets its own group, with the
    strategy's collective ``timeout`` (a ``timedelta``; torch's default would be 30 minutes)."""
    import torch.distributed as dist

    from lightning_gnn_dist.loaders.graph_store import PartitionedGraphStore

    # Sampling and the feature fetch run on the CPU: a gloo group under an NCCL world.
    group = host_group(timeout=timeout)
    if dist.is_available() and dist.is_initialized() and options["prefetch"]:
        group = dist.new_group(backend="gloo", timeout=timeout)
    store = PartitionedGraphStore(part, group=group, cache_size=cache_size)
    return NeighborLoaders(store, mask_counts, **options)

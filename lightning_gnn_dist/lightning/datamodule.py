"""``GraphPartitionDataModule``: partition once, load one part per rank, serve full batches
(``loader="full"``) or sampled mini-batches of the rank's own vertices (``loader="neighbor"``)."""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch_geometric.data import Data

from lightning_gnn_dist.comm.messages import host_group
from lightning_gnn_dist.data.eval_batch import split_first
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.data.sampler import check_fanouts
from lightning_gnn_dist.data.subgraph_sampler import check_sampler_name, check_subgraph_size
from lightning_gnn_dist.lightning.compat import LightningNeutral
from lightning_gnn_dist.loaders.neighbor import NeighborLoader, NeighborLoaders
from lightning_gnn_dist.loaders.subgraph import SubgraphLoader
from lightning_gnn_dist.partition.placement import PLACEMENTS, Topology
from lightning_gnn_dist.partition.store import (
    FORMAT_VERSION,
    PartitionStore,
    PartitionStoreError,
    check_placement,
)
from lightning_gnn_dist.partition.vertex_cut import MAX_VERTEX_CUT_PARTS
from lightning_gnn_dist.utils.checks import check_bool, check_int

if TYPE_CHECKING:
    from lightning_gnn_dist.costmodel.plan import Plan

LOADERS = ("full", "neighbor", "subgraph")
AUTO = "auto"
PLAN_FILE = "plan.json"

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


def _check_options(loader: str, eval_loader: str, given: dict[str, Any], method: str) -> None:
    """Types and ranges of the options that need no graph, and no option for another loader."""
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
    shared = ("subgraph_sampler", "subgraph_size") if method == "stochastic-hypergraph" else ()
    for name, (loaders, default) in _LOADER_OPTIONS.items():
        value = given[name]
        if loader not in loaders and name not in shared and value != default:
            raise ValueError(
                f"{name}={value!r} applies to loader={loaders[0]!r} only (got loader={loader!r}); "
                "drop it or change the loader"
            )


DEFAULT_METHOD, DEFAULT_SEED, DEFAULT_EPSILON = "hypergraph", 0, 0.03
"""The partition settings of a module that is given none and no existing ``store``."""


def _stored_settings(store: str | Path) -> dict[str, Any] | None:
    """The settings of the partition store at ``store`` (``None``: no store there yet, or one
    ``prepare_data`` will report as unreadable)."""
    if not (Path(store) / "meta.json").is_file():
        return None
    try:
        return dict(PartitionStore.open(store).meta["settings"])
    except PartitionStoreError:
        return None


def _store_defaults(
    stored: dict[str, Any] | None,
    store: str | None,
    method: str | None,
    seed: int | None,
    epsilon: float | None,
    num_parts: int | None,
    partition_options: dict[str, Any] | None,
) -> tuple[str, int, float, dict[str, Any] | None]:
    """``(method, seed, epsilon, partition_options)``: those given, the rest from the existing
    store's settings ``stored`` (its partitioner's options too), else the defaults.

    Raises:
        ValueError: a method, seed, epsilon or number of parts given explicitly that differs
            from the store's.
    """
    if stored is None:
        return (
            DEFAULT_METHOD if method is None else method,
            DEFAULT_SEED if seed is None else seed,
            DEFAULT_EPSILON if epsilon is None else epsilon,
            partition_options,
        )
    from lightning_gnn_dist.partition.base import partitioner_options

    for name, value in (
        ("method", method),
        ("seed", seed),
        ("epsilon", epsilon),
        ("num_parts", num_parts),
    ):
        if value is not None and name in stored and stored[name] != value:
            raise ValueError(
                f"store={store!r} holds a partition made with {name}={stored[name]!r}, not "
                f"{name}={value!r}: drop {name} (the store's is used), pass force=True to "
                "partition again, or choose another store"
            )
    method = stored.get("method", DEFAULT_METHOD) if method is None else method
    if partition_options is None and method == stored.get("method"):
        try:
            accepted = partitioner_options(method)
        except ValueError:
            accepted = []
        partition_options = {
            k: v for k, v in stored.items() if k in accepted and k not in ("seed", "epsilon")
        }
    return (
        method,
        stored.get("seed", DEFAULT_SEED) if seed is None else seed,
        stored.get("epsilon", DEFAULT_EPSILON) if epsilon is None else epsilon,
        partition_options or None,
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


class GraphPartitionDataModule(LightningNeutral, lightning_base="LightningDataModule"):
    """Partitioned full-graph data for :class:`~lightning_gnn_dist.GNNStrategy`.

    ``prepare_data`` (one process per node) loads the dataset, partitions it and writes the
    partition store, or reuses a store made for the same dataset and settings. ``setup`` loads
    only this rank's part; no rank holds the whole graph during training. Each loader yields one
    batch, a :class:`~torch_geometric.data.Data` with the owned rows ``x [num_owned, d]``, ``y``,
    the masks, the local ``edge_index`` (sources over ``[owned | halo]``) and ``global_ids``
    (dataset vertex ids of the owned rows). Without a distributed strategy and with one part it is
    simply the whole graph, so single-process code runs unchanged.

    Args:
        dataset (str or Data): dataset spec, see :func:`~lightning_gnn_dist.data.load_dataset`,
            or an in-memory PyG ``Data`` with integer class labels ``y`` (named by its ``name``
            attribute in the store path; without one by its fingerprint, ``graph-<12 hex>``, so
            two different graphs never share a store). A ``Data`` without masks trains on a
            seeded random 60/20/20 split (a warning says so). ``HeteroData`` and regression
            targets are not supported yet (refused here). (default: ``"digits"``)
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
        verify_dataset (bool): when the store already exists, load the dataset on local rank 0
            to check it against the store's fingerprint. Set ``False`` for graphs too large for
            one process that were partitioned offline: then no process ever loads the whole
            graph, and only the settings (method, seed, parts) are checked. (default: ``True``)
        force (bool): rebuild the partition store in ``prepare_data`` even if it exists (e.g. a
            corrupt one); the old store is replaced atomically once the new one is complete.
            (default: ``False``)
        loader (str): ``"full"`` (one batch per epoch: the rank's part, for the halo-exchange
            modes) or ``"neighbor"`` (owner-compute mini-batches of sampled neighbourhoods in
            PyG's ``NeighborLoader`` layout, see
            :class:`~lightning_gnn_dist.loaders.NeighborLoader`; ``GNNStrategy`` then averages
            gradients like DDP). (default: ``"full"``)
        num_neighbors (list[int], optional): fan-out per hop for ``loader="neighbor"``, ``-1``
            for all in-neighbours. (default: ``None``)
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
            its own process group) while the current step runs; validate at epoch ends only
            (``val_check_interval=1.0``) with sampled evaluation. (default: ``False``)
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
    ) -> None:
        super().__init__()
        from lightning_gnn_dist.costmodel.plan_options import check_plan_options
        from lightning_gnn_dist.data.datasets import check_dataset_argument
        from lightning_gnn_dist.partition import get_partitioner

        check_dataset_argument(dataset)
        # An existing store given as `store=` supplies what was not given explicitly.
        stored = _stored_settings(store) if store is not None and not force else None
        method, seed, epsilon, partition_options = _store_defaults(
            stored, store, method, seed, epsilon, num_parts, partition_options
        )
        self._stored_parts: int | None = (stored or {}).get("num_parts")
        given = {k: v for k, v in locals().items() if k in _LOADER_OPTIONS}
        _check_options(loader, eval_loader, given, method)
        if loader == "neighbor" and num_neighbors is None:
            raise ValueError("loader='neighbor' needs num_neighbors, e.g. [25, 10]")
        if loader == "subgraph" and subgraph_size is None:
            raise ValueError("loader='subgraph' needs subgraph_size (vertices, or a fraction < 1)")
        if num_neighbors is not None:
            num_neighbors = check_fanouts("num_neighbors", num_neighbors)
        if eval_num_neighbors is not None:
            eval_num_neighbors = check_fanouts("eval_num_neighbors", eval_num_neighbors)
        if subgraph_size is not None:
            subgraph_size = check_subgraph_size(subgraph_size)
        if num_parts is not None:
            check_int("num_parts", num_parts, 1)
        self.loader, self.eval_loader = loader, eval_loader
        self._eval_views: dict = {}
        self.neighbor_options = dict(
            num_neighbors=num_neighbors,
            batch_size=batch_size,
            shuffle=shuffle,
            replace=replace,
            eval_num_neighbors=eval_num_neighbors,
            prefetch=prefetch,
            seed=seed,
        )
        self.cache_size = cache_size
        self.neighbor_loaders: NeighborLoaders | None = None

        self.subgraph_sampler, self.subgraph_size = subgraph_sampler, subgraph_size
        self.steps_per_epoch, self.subgraph_seed = steps_per_epoch, subgraph_seed
        options = dict(partition_options or {})
        if method == "stochastic-hypergraph":
            options |= {"sampler": subgraph_sampler, "subgraph_size": subgraph_size}
        self.plan: Plan | None = None
        self.plan_options: dict[str, Any] | None = None
        if method == AUTO:
            if loader != "full":
                raise ValueError(
                    f"method='auto' plans full-batch training (its cost model predicts full-batch "
                    f"epochs); loader={loader!r} needs a fixed method, e.g. method='metis'"
                )
            if options:
                raise ValueError(
                    "partition_options do not apply to method='auto' (each candidate uses its "
                    "defaults); to restrict the candidates pass plan_options={'methods': [...]}"
                )
            self.plan_options = check_plan_options(plan_options)
            self.partitioner = None  # the plan's method, once known (_use_plan)
            self.partition_kind = "vertex"  # every candidate is a vertex partition
        else:
            if plan_options is not None:
                raise ValueError(
                    f"plan_options apply to method='auto' only (got method={method!r}); drop "
                    "them or set method='auto'"
                )
            self.partitioner = get_partitioner(method, seed=seed, epsilon=epsilon, **options)
            self.partition_kind = self.partitioner.kind
        if self.partition_kind != "vertex" and loader != "full":
            raise ValueError(
                f"loader={loader!r} samples from a vertex partition, but method={method!r} makes "
                f"a {self.partition_kind} partition; use loader='full' (exchange cd-0, cd-<r> or 0c) or a "
                "vertex method (hypergraph, metis, random, ...)"
            )
        if self.partition_kind == "vertex-cut" and num_parts is not None:
            check_int("num_parts", num_parts, 1, MAX_VERTEX_CUT_PARTS)
        if placement not in PLACEMENTS:
            raise ValueError(
                f"undefined placement option {placement!r}; choose one of {', '.join(PLACEMENTS)}"
            )
        if method == AUTO and placement != "naive":
            raise ValueError(
                f"method='auto' chooses the placement itself on several nodes (got "
                f"placement={placement!r}); drop placement or name the method"
            )
        if self.partitioner is not None:
            check_placement(self.partitioner, placement)
        self.placement = placement
        self.dataset, self.method, self.num_parts = dataset, method, num_parts
        self.root, self.seed, self.epsilon, self.store_dir = root, seed, epsilon, store
        self.verify_dataset, self.force = verify_dataset, force
        self.local_partition: LocalPartition | None = None
        self.batch: Data | None = None
        self._store: PartitionStore | None = None
        self._subgraph_loader: SubgraphLoader | None = None
        self._graph_digest: str | None = None  # an unnamed in-memory graph's, hashed once
        self._split_warned = False

    def _parts(self) -> int:
        if self.num_parts is not None:
            return self.num_parts
        if self.trainer is not None:
            return self.trainer.world_size
        if self._stored_parts is not None:  # an existing store's, without a launch to follow
            return self._stored_parts
        raise ValueError("num_parts is not set and no Trainer is attached; pass num_parts")

    @property
    def store_path(self) -> Path:
        """Directory of the partition store used by this module (``method="auto"``: the
        planned method's store inside :attr:`plan_dir`)."""
        if self.method == AUTO:
            from lightning_gnn_dist.costmodel.plan import store_folder

            return self.plan_dir / store_folder(self._read_plan().pick.partition)
        if self.store_dir is not None:
            return Path(self.store_dir)
        slug = self._folder_slug
        # The partitioner's full settings (backend, preset, refinement...) pick the folder, so a
        # library whose partitioner changed writes a new store instead of refusing the old one.
        # The store format is part of the digest too: a library that changed the format writes
        # a new store beside an old checkout's instead of refusing it.
        settings = json.dumps(
            {"format_version": FORMAT_VERSION, **self.partitioner.settings()}, sort_keys=True
        )
        digest = hashlib.sha256(settings.encode()).hexdigest()[:8]
        name = f"{slug}-{self.method}-p{self._parts()}-s{self.seed}-e{self.epsilon:g}-{digest}"
        return Path(self.root) / (name + self._placement_suffix())

    def _placement_suffix(self) -> str:
        """``-n<nodes>`` on several nodes (a placement of its own), ``-<placement>`` after it
        unless naive: two placements never share a store."""
        topology = self._topology()
        if topology is None or topology.num_nodes == 1:
            return ""
        suffix = f"-n{topology.num_nodes}"
        return suffix if self.placement == "naive" else f"{suffix}-{self.placement}"

    def _topology(self) -> Topology | None:
        """Nodes × ranks per node of the attached Trainer (``None`` without one)."""
        if self.trainer is None:
            return None
        nodes = max(int(getattr(self.trainer, "num_nodes", 1) or 1), 1)
        world = self.trainer.world_size
        return Topology(nodes, world // nodes) if world % nodes == 0 else None

    def _placed_topology(self) -> Topology | None:
        """The topology a store of this launch records (several nodes), else ``None``.

        Raises:
            ValueError: a placement other than ``"naive"`` on one node (nothing to place).
        """
        topology = self._topology()
        if topology is not None and topology.num_nodes > 1:
            return topology
        if self.placement != "naive":
            raise ValueError(
                f"placement={self.placement!r} decides which parts share a node, but this launch "
                "runs on one node (or no Trainer is attached): launch with "
                "Trainer(num_nodes=N > 1), or drop placement (default 'naive')"
            )
        return None

    # -- method="auto" ------------------------------------------------------------------------
    @property
    def plan_dir(self) -> Path:
        """``method="auto"``: the folder holding ``plan.json`` and one partition store per
        candidate method (``store`` if given, else one folder under ``root`` per dataset, parts,
        seed, epsilon and hash of the plan's settings)."""
        if self.store_dir is not None:
            return Path(self.store_dir)
        slug = self._folder_slug
        digest = hashlib.sha256(
            json.dumps(self._plan_settings(), sort_keys=True, default=str).encode()
        ).hexdigest()[:8]
        name = f"{slug}-auto-p{self._parts()}-s{self.seed}-e{self.epsilon:g}-{digest}"
        return Path(self.root) / (name + self._placement_suffix())

    def _plan_settings(self) -> dict[str, Any]:
        """The plan options that pick its folder: the user's, with the exchange narrowed to the
        strategy's own when it is not ``"auto"`` (and then no lossy codec: the strategy's codec
        is the user's)."""
        from dataclasses import asdict

        from lightning_gnn_dist.costmodel.plan import (
            EXACT_EXCHANGES,
            MULTI_NODE_EXCHANGES,
            STALE_EXCHANGES,
            resolve_network,
        )

        options = dict(self.plan_options)
        options["network"] = resolve_network(options["network"], self._topology()).to_dict()
        if options.get("costs") is not None:
            options["costs"] = asdict(options["costs"])
        strategy = getattr(self.trainer, "strategy", None) if self.trainer is not None else None
        exchange = getattr(strategy, "requested_exchange", getattr(strategy, "exchange_mode", AUTO))
        if exchange not in (AUTO, None):
            if exchange not in EXACT_EXCHANGES + MULTI_NODE_EXCHANGES + STALE_EXCHANGES:
                raise ValueError(
                    f"method='auto' plans vertex partitions; exchange={exchange!r} needs "
                    "method='vertex-cut'"
                )
            options["exchanges"], options["codecs"] = [exchange], ["fp32"]
            options["allow_stale"] = options["allow_stale"] or exchange in STALE_EXCHANGES
        return {"format_version": FORMAT_VERSION, **options}

    def _read_plan(self) -> Plan:
        """The stored plan (read once; ``setup`` replaces it by rank 0's)."""
        from lightning_gnn_dist.costmodel.plan import Plan

        if self.plan is None:
            path = self.plan_dir / PLAN_FILE
            if not path.is_file():
                raise FileNotFoundError(
                    f"{path} does not exist: method='auto' decides in prepare_data (the Trainer "
                    "calls it; call it yourself without one)"
                )
            try:
                self.plan = Plan.from_dict(json.loads(path.read_text()))
            except (ValueError, UnicodeDecodeError) as error:
                raise PartitionStoreError(
                    f"{path}: {error} (or delete the file, or pass force=True, to plan again)"
                ) from None
        return self.plan

    def _prepare_auto(self) -> None:
        """Rank 0 (one process per node): reuse the stored plan, or predict every candidate,
        print the table and store the pick. Planning draws no number from the training's random
        streams: a run that plans trains as one that reuses the plan."""
        with _rng_untouched():
            self._plan_or_reuse()

    def _plan_or_reuse(self) -> None:
        import logging

        from rich.console import Console

        from lightning_gnn_dist.costmodel import calibrate
        from lightning_gnn_dist.costmodel.plan import partition_candidates, plan_from_metrics
        from lightning_gnn_dist.partition import get_partitioner
        from lightning_gnn_dist.partition.store import partition_to_store

        path = self.plan_dir / PLAN_FILE
        if path.is_file() and not self.force:
            self.plan = None
            plan = self._read_plan()
            if self.verify_dataset:
                data = self._load_data()
                partition_to_store(
                    data,
                    get_partitioner(plan.pick.method, seed=self.seed, epsilon=self.epsilon),
                    self._parts(),
                    self.store_path,
                    dataset=self._dataset_name,
                    verify=False,
                    topology=self._placed_topology(),
                    placement=plan.pick.placement,
                )
            else:
                PartitionStore.open(self.store_path).verify(full=False)
            return
        settings = self._plan_settings()
        topology = self._placed_topology()
        data = self._load_data()
        metrics, sources = partition_candidates(
            data,
            self._parts(),
            settings["methods"],
            root=self.plan_dir,
            dataset=self._dataset_name,
            seed=self.seed,
            epsilon=self.epsilon,
            force=self.force,
            topology=topology,
        )
        costs = settings.get("costs")
        costs = calibrate(settings["widths"]) if costs is None else self.plan_options["costs"]
        plan = plan_from_metrics(
            metrics,
            settings["widths"],
            costs,
            settings["network"],
            allow_stale=settings["allow_stale"],
            exchanges=settings.get("exchanges"),
            cores=settings.get("cores"),
            sources=sources,
            codecs=settings.get("codecs"),
            topology=topology,
        )
        timing = {"top_k": settings["top_k"], "timed_steps": settings["timed_steps"]}
        plan = replace(plan, settings={**plan.settings, **timing})
        _write_plan(plan, path)
        self.plan = plan
        title = f"automatic plan: {self._dataset_name}, P = {self._parts()}"
        Console(stderr=True).print(plan.table(title))
        logging.getLogger(__name__).info("%s -> %s\n%s", title, path, plan.text())

    def _timed(self, plan: Plan) -> Plan:
        """With ``top_k`` and several ranks: time the best predictions once (collective), store
        the timed plan (rank 0) so that a resumed run reads the decision instead of timing."""
        import torch.distributed as dist

        from lightning_gnn_dist.costmodel.plan import store_folder
        from lightning_gnn_dist.costmodel.timing import time_top_k, timed_partitions

        top_k = int(plan.settings.get("top_k", 0))
        timed = any(row.measured_seconds is not None for row in plan.rows)
        if not top_k or timed or not (dist.is_available() and dist.is_initialized()):
            return plan
        rank = dist.get_rank()
        parts = {
            label: PartitionStore.open(self.plan_dir / store_folder(label)).load_part(rank)
            for label in timed_partitions(plan, top_k)
        }
        with _rng_untouched():  # the timed steps leave the training stream where it was
            timed_plan = time_top_k(plan, parts, top_k, plan.settings["timed_steps"])
        plan = _rank_zero_plan(timed_plan)
        if rank == 0:
            _write_plan(plan, self.plan_dir / PLAN_FILE)
        return plan

    def _use_plan(self, plan: Plan) -> None:
        from lightning_gnn_dist.partition import get_partitioner

        self.plan = plan
        self.partitioner = get_partitioner(plan.pick.method, seed=self.seed, epsilon=self.epsilon)

    @property
    def _dataset_name(self) -> str:
        if isinstance(self.dataset, Data):
            return str(getattr(self.dataset, "name", None) or "graph")
        return self.dataset

    @property
    def _folder_slug(self) -> str:
        """The dataset's part of a store folder's name: its name, or for an in-memory graph
        without a name ``graph-<12 hex digits of its fingerprint>``, so that two different
        unnamed graphs never share a folder (the graph is hashed once per module)."""
        name = getattr(self.dataset, "name", None) if isinstance(self.dataset, Data) else None
        if isinstance(self.dataset, Data) and not (isinstance(name, str) and name):
            if self._graph_digest is None:
                from lightning_gnn_dist.data.graph import graph_fingerprint

                self._graph_digest = graph_fingerprint(self.dataset)[:12]
            return f"graph-{self._graph_digest}"
        return re.sub(r"[^A-Za-z0-9._-]+", "_", self._dataset_name).strip("_")[:80]

    def _load_data(self) -> Data:
        """The dataset in canonical form; for an in-memory graph without masks, rank 0 says
        once which split it trains on (a seeded random 60/20/20 one)."""
        from lightning_gnn_dist.data.datasets import load_dataset

        data = load_dataset(self.dataset)
        masks = ("train_mask", "val_mask", "test_mask")
        made_up = isinstance(self.dataset, Data) and all(
            getattr(self.dataset, key, None) is None for key in masks
        )
        rank = getattr(self.trainer, "global_rank", 0) if self.trainer is not None else 0
        if made_up and not self._split_warned and rank == 0:
            self._split_warned = True
            train, val, test = (int(data[key].sum()) for key in masks)
            warnings.warn(
                f"the in-memory graph {self._dataset_name!r} has no train_mask, val_mask or "
                f"test_mask: it trains on a seeded random 60/20/20 split ({train} training, "
                f"{val} validation and {test} test vertices of {data.num_nodes}); set the three "
                "masks on the Data to choose the split",
                UserWarning,
                stacklevel=2,
            )
        return data

    def prepare_data(self) -> None:
        from lightning_gnn_dist.partition.store import partition_to_store

        if self.method == AUTO:
            self._prepare_auto()
            self._store = None
            return
        if not self.force and not self.verify_dataset and (self.store_path / "meta.json").is_file():
            # trusted offline partition: settings are checked in setup(), each part's hash by
            # the rank that loads it
            PartitionStore.open(self.store_path).verify(full=False)
            return
        topology = self._placed_topology()  # refuses a placement on one node, before loading
        data = self._load_data()
        partition_to_store(
            data,
            self.partitioner,
            self._parts(),
            self.store_path,
            dataset=self._dataset_name,
            force=self.force,
            verify=False,  # each rank hashes its own part in setup()
            # several nodes: the store records the placement (and the hierarchical rows)
            topology=topology,
            placement=self.placement,
        )
        self._store = None  # a rebuilt store has new metadata

    @property
    def store(self) -> PartitionStore:
        if self._store is None:
            self._store = PartitionStore.open(self.store_path)
        return self._store

    def setup(self, stage: str | None = None) -> None:
        if self.local_partition is not None:
            return
        method, placement = self.method, self.placement
        self._placed_topology()  # refuses a placement on one node
        if method == AUTO:
            self._use_plan(self._timed(_rank_zero_plan(self._read_plan())))
            self._store, method = None, self.plan.pick.method
            placement = self.plan.pick.placement
        store = self.store
        settings = store.meta["settings"]
        expected = {"method": method, "seed": self.seed, "num_parts": self._parts()}
        # A partition made for a batch sampler (stochastic-hypergraph) is valid for that one only.
        requested = self.partitioner.settings()
        expected.update({k: requested[k] for k in ("sampler", "subgraph_size") if k in requested})
        wrong = {k: (settings.get(k), v) for k, v in expected.items() if settings.get(k) != v}
        if wrong:
            raise PartitionStoreError(
                f"{store.path} was made with other settings (stored, requested): {wrong}"
            )
        rank = self.trainer.global_rank if self.trainer is not None else 0
        world = self.trainer.world_size if self.trainer is not None else 1
        if store.num_parts != world:
            raise ValueError(
                f"the partition store {store.path} has {store.num_parts} parts but {world} processes run; "
                "num_parts must equal the world size"
            )
        # a placed store runs on its own topology only, and is the placement asked for
        store.check_topology(self._topology(), placement)
        part = store.load_part(rank)
        self.local_partition = part
        self.batch = Data(
            x=part.x,
            y=part.y,
            edge_index=part.edge_index,
            train_mask=part.train_mask,
            val_mask=part.val_mask,
            test_mask=part.test_mask,
            global_ids=part.global_ids,
            num_nodes=part.num_owned,
        )
        for key in ("train_mask", "val_mask", "test_mask"):
            self.batch[f"num_{key.split('_')[0]}_global"] = self.global_mask_count(key)
        if self.loader == "neighbor":
            timeout = getattr(getattr(self.trainer, "strategy", None), "_timeout", None)
            self.neighbor_loaders = _neighbor_loaders(
                part, store.meta["mask_counts"], self.cache_size, self.neighbor_options, timeout
            )

    # -- metadata available on every rank without the graph --------------------------------
    @property
    def num_features(self) -> int:
        return int(self.store.meta["num_features"])

    @property
    def num_classes(self) -> int:
        return int(self.store.meta["num_classes"])

    def global_mask_count(self, name: str) -> int:
        """Vertices selected by mask ``name`` in the whole graph."""
        return int(sum(self.store.meta["mask_counts"].get(name, [0])))

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

    def state_dict(self) -> dict[str, Any]:
        return {"store": str(self.store_path), "fingerprint": self.store.meta["fingerprint"]}

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


@contextmanager
def _rng_untouched() -> Iterator[None]:
    """Run the body with this process's random state (torch, CUDA, numpy, ``random``) restored
    afterwards, so that planning (calibration, partitioning, timed steps) consumes nothing of
    the stream training draws from."""
    from lightning_gnn_dist.lightning.resume import rng_state, set_rng_state

    state = rng_state()
    try:
        yield
    finally:
        set_rng_state(state)


def _write_plan(plan: Plan, path: Path) -> None:
    """Write ``plan`` to ``path`` atomically: a plan file is complete or absent."""
    import os

    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(plan.to_dict(), indent=1))
    os.replace(tmp, path)


def _rank_zero_plan(plan: Plan) -> Plan:
    """Rank 0's plan on every rank (nodes without a shared file system, or whose
    ``prepare_data`` decided apart, all run rank 0's decision)."""
    import torch.distributed as dist

    from lightning_gnn_dist.costmodel.plan import Plan

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return plan
    content = [plan.to_dict()]
    dist.broadcast_object_list(content, src=0)
    return Plan.from_dict(content[0])


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

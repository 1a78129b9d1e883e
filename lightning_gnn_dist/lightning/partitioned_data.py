"""The shared base of the partitioned datamodules: partition once (``prepare_data``), load this
rank's part (``setup``), and the store, placement and plan settings that every task's datamodule
uses (as PyG keeps ``LightningData`` apart from ``LightningNodeData``).

:class:`PartitionedDataModule` knows nothing of loaders or tasks; the node datamodule
(:class:`~lightning_gnn_dist.lightning.datamodule.GraphPartitionDataModule`) adds its loaders,
a link-prediction one adds its splits.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch_geometric.data import Data, HeteroData

from lightning_gnn_dist.data.hetero import HeteroSchema
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.data.targets import check_task
from lightning_gnn_dist.data.vertex_cut import VertexCutPart
from lightning_gnn_dist.lightning.auto_plan import AUTO, AutoPlanMixin, _rank_zero_plan
from lightning_gnn_dist.lightning.compat import LightningNeutral
from lightning_gnn_dist.partition.placement import PLACEMENTS, Topology
from lightning_gnn_dist.partition.store import (
    FORMAT_VERSION,
    PartitionStore,
    PartitionStoreError,
    check_placement,
)
from lightning_gnn_dist.partition.store_meta import stored_label_counts, stored_target
from lightning_gnn_dist.partition.vertex_cut import MAX_VERTEX_CUT_PARTS
from lightning_gnn_dist.utils.checks import check_int

if TYPE_CHECKING:
    from lightning_gnn_dist.costmodel.plan import Plan

DEFAULT_METHOD, DEFAULT_SEED, DEFAULT_EPSILON = "hypergraph", 0, 0.03
"""The partition settings of a module that is given none and no existing ``store``."""


def _stored_meta(store: str | Path) -> dict[str, Any] | None:
    """The ``meta.json`` of the partition store at ``store`` (``None``: no store there yet, or
    one ``prepare_data`` will report as unreadable)."""
    if not (Path(store) / "meta.json").is_file():
        return None
    try:
        return PartitionStore.open(store).meta
    except PartitionStoreError:
        return None


def _check_stored_task(meta: dict[str, Any], task: str | None, store: str | Path) -> None:
    """Refuse a ``task`` other than the one the store's targets were partitioned for.

    Raises:
        PartitionStoreError: naming both tasks and the fixes.
    """
    stored = stored_target(meta)["task"]
    if task is not None and task != stored:
        raise PartitionStoreError(
            f"the partition store {store} holds {stored} targets, not task={task!r}: drop task, "
            "pass force=True to partition again with it, or choose another store"
        )


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


class PartitionedDataModule(AutoPlanMixin, LightningNeutral, lightning_base="LightningDataModule"):
    """Partition settings, the partition store and this rank's part, for every partitioned
    datamodule. The arguments are those of
    :class:`~lightning_gnn_dist.lightning.datamodule.GraphPartitionDataModule` of the same names
    (documented there); ``batch_sampler`` holds ``{"sampler": ..., "subgraph_size": ...}``, the
    batch sampler a ``stochastic-hypergraph`` partition is made for (ignored by other methods);
    ``task`` is the node targets' task (``None``: inferred from ``y``, see
    :mod:`~lightning_gnn_dist.data.targets`); ``target_type`` a typed graph's node type to
    predict (``None``: the one type with ``y``; :mod:`~lightning_gnn_dist.data.hetero`).

    A subclass calls :meth:`load_part` in its ``setup``.
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
        partition_options: dict[str, Any] | None = None,
        plan_options: dict[str, Any] | None = None,
        placement: str = "naive",
        batch_sampler: dict[str, Any] | None = None,
        task: str | None = None,
        target_type: str | None = None,
    ) -> None:
        super().__init__()
        from lightning_gnn_dist.costmodel.plan_options import check_plan_options
        from lightning_gnn_dist.data.datasets import check_dataset_argument, spec_is_typed
        from lightning_gnn_dist.partition import get_partitioner

        check_task(task)
        check_dataset_argument(dataset, task, target_type)
        if isinstance(dataset, str) and target_type is not None:
            if spec_is_typed(dataset) is False:
                raise ValueError(
                    f"{dataset!r}: target_type={target_type!r} names a node type of a "
                    "heterogeneous graph, but this dataset kind is homogeneous; drop target_type"
                )
        # An existing store given as `store=` supplies what was not given explicitly.
        stored_meta = _stored_meta(store) if store is not None and not force else None
        stored = None if stored_meta is None else dict(stored_meta["settings"])
        if stored_meta is not None:
            _check_stored_task(stored_meta, task, store)
        method, seed, epsilon, partition_options = _store_defaults(
            stored, store, method, seed, epsilon, num_parts, partition_options
        )
        self._stored_parts: int | None = (stored or {}).get("num_parts")
        if num_parts is not None:
            check_int("num_parts", num_parts, 1)
        options = dict(partition_options or {})
        if method == "stochastic-hypergraph":
            options |= dict(batch_sampler or {})
        self.plan: Plan | None = None
        self.plan_options: dict[str, Any] | None = None
        if method == AUTO:
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
        self._task_option = task
        self._target_type = target_type
        self.local_partition: LocalPartition | VertexCutPart | None = None
        self._store: PartitionStore | None = None
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
        settings = {"format_version": FORMAT_VERSION, **self.partitioner.settings()}
        if self._task_option is not None:  # the same graph's targets read as another task
            settings["task"] = self._task_option
        if self._target_type is not None:  # the same typed graph, another type predicted
            settings["target_type"] = self._target_type
        settings = json.dumps(settings, sort_keys=True)
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

    @property
    def _dataset_name(self) -> str:
        if isinstance(self.dataset, HeteroData):
            name = self.dataset["name"] if "name" in self.dataset else None
            return str(name or "hetero")
        if isinstance(self.dataset, Data):
            return str(getattr(self.dataset, "name", None) or "graph")
        return self.dataset

    @property
    def _folder_slug(self) -> str:
        """The dataset's part of a store folder's name: its name, or for an in-memory graph
        without a name ``graph-<12 hex digits of its fingerprint>``, so that two different
        unnamed graphs never share a folder (the graph is hashed once per module)."""
        if isinstance(self.dataset, HeteroData):
            name = self.dataset["name"] if "name" in self.dataset else None
            if isinstance(name, str) and name:
                return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")[:80]
            if self._graph_digest is None:
                from lightning_gnn_dist.data.hetero import hetero_fingerprint

                self._graph_digest = hetero_fingerprint(self.dataset)
            return f"hetero-{self._graph_digest}"
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

        data = load_dataset(self.dataset, task=self._task_option, target_type=self._target_type)
        masks = ("train_mask", "val_mask", "test_mask")
        made_up = isinstance(self.dataset, Data) and all(
            getattr(self.dataset, key, None) is None for key in masks
        )
        if isinstance(self.dataset, HeteroData):
            target = self.dataset[data.hetero.schema.target_type]
            made_up = all(key not in target for key in masks)
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

    def load_part(self) -> LocalPartition | VertexCutPart:
        """Check the store against this module's settings and the launch, and load this
        rank's part (hashed as it is read) into :attr:`local_partition`.

        Raises:
            PartitionStoreError: a store made with other settings, or a damaged part.
            ValueError: the store's parts differ from the world size.
        """
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
        _check_stored_task(store.meta, self._task_option, store.path)
        self.local_partition = store.load_part(rank)
        return self.local_partition

    # -- metadata available on every rank without the graph --------------------------------
    @property
    def num_features(self) -> int:
        return int(self.store.meta["num_features"])

    @property
    def num_classes(self) -> int:
        """Classes of a multiclass ``y`` (``0`` for multilabel and regression targets)."""
        return int(self.store.meta["num_classes"])

    @property
    def task(self) -> str:
        """The targets' task: ``"multiclass"``, ``"multilabel"`` or ``"regression"``."""
        return self._task_option or stored_target(self.store.meta)["task"]

    @property
    def hetero_schema(self) -> HeteroSchema | None:
        """A typed graph's types, sizes and target type (``None`` for a homogeneous graph)."""
        types = self.store.meta.get("types")
        return None if types is None else HeteroSchema.from_meta(types)

    def type_feature_widths(self) -> dict[str, int]:
        """``{node type: d}`` of every node type with features ``x`` of a typed graph."""
        widths = {}
        for name, record in self.node_attrs.items():
            node_type, _, attribute = name.rpartition("/")
            if node_type and attribute == "x":
                widths[node_type] = int(record["shape"][0]) if record["shape"] else 1
        return widths

    @property
    def num_tasks(self) -> int:
        """Columns of ``y``: ``1`` for class ids and ``[N]`` regression targets, ``k`` for a
        ``[N, k]`` multi-label or regression ``y`` (the output width of such a model)."""
        return int(stored_target(self.store.meta)["num_tasks"])

    @property
    def node_attrs(self) -> dict[str, dict[str, Any]]:
        """``{name: {"dtype", "shape", "role"}}`` of every partitioned node attribute, ``x``,
        ``y`` and the masks included (``{}`` for a format-2 store)."""
        return dict(self.store.meta.get("node_attrs", {}))

    @property
    def edge_attrs(self) -> dict[str, dict[str, Any]]:
        """``{name: {"dtype", "shape", "role"}}`` of every partitioned edge attribute."""
        return dict(self.store.meta.get("edge_attrs", {}))

    def global_mask_count(self, name: str) -> int:
        """Vertices selected by mask ``name`` in the whole graph."""
        return int(sum(self.store.meta["mask_counts"].get(name, [0])))

    def global_label_count(self, name: str) -> int:
        """Labelled targets of the vertices of mask ``name`` in the whole graph: vertices with a
        class id (multiclass), labelled ``(vertex, task)`` entries (multilabel, ``NaN`` =
        unlabelled) or finite target entries (regression). An exact loss over the mask divides
        its sum by this count."""
        return int(sum(stored_label_counts(self.store.meta).get(name, [0])))

    def state_dict(self) -> dict[str, Any]:
        return {"store": str(self.store_path), "fingerprint": self.store.meta["fingerprint"]}

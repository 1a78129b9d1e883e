"""``method="auto"`` of the partitioned datamodules: rank 0 predicts every candidate plan in
``prepare_data``, stores the pick in ``plan.json`` beside the candidates' partition stores, and
every rank (and every resumed run) reads that plan in ``setup``.

:class:`AutoPlanMixin` is mixed into
:class:`~lightning_gnn_dist.lightning.partitioned_data.PartitionedDataModule`; it reads the
module's partition settings (``seed``, ``epsilon``, ``store_dir``, ``root``, ``force``,
``verify_dataset``, ``plan_options``) and its helpers (``_parts``, ``_folder_slug``,
``_placed_topology``, ``_load_data``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_gnn_dist.partition.store import FORMAT_VERSION, PartitionStore, PartitionStoreError

if TYPE_CHECKING:
    from lightning_gnn_dist.costmodel.plan import Plan

AUTO = "auto"
PLAN_FILE = "plan.json"


class AutoPlanMixin:
    """The ``method="auto"`` steps of a partitioned datamodule (see the module docstring)."""

    plan: Plan | None
    plan_options: dict[str, Any] | None

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

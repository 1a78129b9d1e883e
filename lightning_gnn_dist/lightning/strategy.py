"""``GNNStrategy``: DDP processes that each own one graph part and exchange halo rows.

Registered as ``gnn_ddp`` (Lightning's subprocess launcher; also torchrun and SLURM, which
start the processes themselves), ``gnn_ddp_spawn`` and ``gnn_ddp_fork``.
"""

from __future__ import annotations

import inspect
import logging
import warnings
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Literal

import torch
import torch.distributed as dist
from lightning_fabric.plugins.environments import SLURMEnvironment
from lightning_fabric.utilities.distributed import _init_dist_connection
from lightning_fabric.utilities.seed import reset_seed
from torch import Tensor
from torch_geometric.data import Data

from lightning_gnn_dist.comm.base import (
    HaloExchange,
    make_exchange,
    resolve_exchange_mode,
)
from lightning_gnn_dist.comm.codec import ADAPTIVE, DEFAULT_TOLERANCE
from lightning_gnn_dist.comm.codec_policy import CodecPolicy
from lightning_gnn_dist.comm.counters import CommCounter
from lightning_gnn_dist.comm.rdm import check_codec_option
from lightning_gnn_dist.data.hetero_local import is_typed_part
from lightning_gnn_dist.data.local import LocalPartition, to_device
from lightning_gnn_dist.lightning.auto_plan import AUTO
from lightning_gnn_dist.lightning.compat import NAMESPACES, LightningNeutral
from lightning_gnn_dist.lightning.epochs import begin_next_epoch, finish_begun_epoch
from lightning_gnn_dist.lightning.launcher import (
    GNNMultiProcessingLauncher,
    GNNSubprocessLauncher,
    Termination,
)
from lightning_gnn_dist.lightning.metrics import global_train_labels, labelled_share
from lightning_gnn_dist.lightning.rendezvous import join_ranks, seconds_option
from lightning_gnn_dist.lightning.resume import (
    CHECKPOINT_KEY,
    FORMAT_VERSION,
    check_same_run,
    load_sharded_optimizer_state,
    rng_state,
    run_identity,
    set_rng_state,
    sharded_optimizer_state,
)
from lightning_gnn_dist.lightning.strategy_checks import (
    check_datamodule,
    check_ddp_keywords,
    check_model,
    exchange_options,
)
from lightning_gnn_dist.lightning.strategy_names import GNN_STRATEGIES, strategy_description
from lightning_gnn_dist.nn.context import GraphContext, make_graph_context, use_graph_context
from lightning_gnn_dist.nn.distribute import distribute
from lightning_gnn_dist.nn.hetero import is_sharded, sharded_rows, whole_tables
from lightning_gnn_dist.nn.sampled import SampledBatchContext
from lightning_gnn_dist.nn.trim import trim_per_hop
from lightning_gnn_dist.nn.vertex_cut import check_reductions
from lightning_gnn_dist.utils.checks import check_bool, check_choice, check_number
from lightning_gnn_dist.utils.malloc import retain_freed_memory

STAGES = ("train", "validate", "test", "predict")
log = logging.getLogger(__name__)


class GNNStrategy(LightningNeutral, lightning_base="strategies.DDPStrategy"):
    """Partitioned full-graph training: rank ``r`` holds part ``r`` of the graph.

    Differences from :class:`~pytorch_lightning.strategies.DDPStrategy`:

    * the LightningModule's message-passing layers are made distributed (:func:`distribute`) and
      run inside a :class:`GraphContext` holding this rank's partition and halo exchange;
    * no DDP wrapper: gradients are **summed** over ranks after backward, and the training loss
      is scaled so the sum equals the single-process gradient (design §5). With
      ``loss_reduction="mean"`` the ``training_step`` loss must be the mean over the labelled
      targets of the rank's ``batch.train_mask`` rows (what single-process code computes: class
      ids other than ``-1``; the non-``NaN`` ``(vertex, task)`` entries of a multi-label or
      regression ``y``); it is multiplied by ``local count / global count`` (the datamodule's
      ``global_label_count("train_mask")``). With ``"sum"`` it is used as is;
    * checkpoints also hold every rank's RNG and exchange state and the run's identity, so a
      resumed fit continues exactly (:mod:`lightning_gnn_dist.lightning.resume`);
    * under the popen launcher a failing rank is reported once, as one line, and no child rank
      outlives the job (:mod:`lightning_gnn_dist.lightning.launcher`).

    With ``GraphPartitionDataModule(loader="neighbor")`` (owner-compute mini-batches, DistDGL)
    the model runs unchanged on each rank's sampled batch: no halo exchange runs inside the
    model, and gradients are **averaged** over ranks (DDP semantics). With
    ``eval_loader="full"`` validation/test/predict run on the whole part with the halo exchange
    (exact layer-wise inference).

    A training batch that carries its own ``local_partition`` (``loader="subgraph"``: every rank
    trains on the same sampled subgraph) runs the same exchange mode on that batch plan, and its
    loss is scaled by the rank's share of the batch's labelled training targets
    (``num_train_labels_global``).

    Namespace-neutral: ``GNNStrategy(...)`` builds the ``lightning.pytorch`` or the
    ``pytorch_lightning`` strategy, whichever the calling code imported (the guide's "Both
    Lightning namespaces", ``docs/guide/existing_module.md``); ``isinstance(strategy,
    GNNStrategy)`` holds for both.

    Requires :class:`~lightning_gnn_dist.lightning.datamodule.GraphPartitionDataModule` (or any
    datamodule with a ``local_partition`` and ``global_mask_count(name)``), whose number of parts
    must equal the world size.

    Args:
        exchange (str): exchange mode: ``"p2p"``, ``"broadcast"``, ``"cached"`` (SANCUS;
            configured by the ``cache_*``/``staleness*`` options) or ``"rdm"`` (paper 003;
            ``rdm_order``, ``replication``) or ``"hierarchical"`` (several nodes: each halo row
            crosses to a remote node once, ranks per node = world size ÷ ``num_nodes``) on a
            vertex partition; ``"cd-0"``, ``"cd-<r>"`` or
            ``"0c"`` on a vertex cut (``method="vertex-cut"``); or ``"auto"``: the exchange,
            codec and ``rdm`` order of the plan that
            ``GraphPartitionDataModule(method="auto")`` stored with the partition (every rank
            and every resumed run reads the same plan). (default: ``"p2p"``)
        loss_reduction (str): ``"mean"`` or ``"sum"``, see above. (default: ``"mean"``)
        timeout (float or timedelta): seconds a collective may wait before every rank fails with
            an error instead of hanging. (default: ``1800``)
        startup_timeout (float or timedelta): seconds the processes may take to find each other
            (rendezvous and ``init_process_group``); separate from ``timeout`` because start-up
            includes importing and, on a loaded machine, waiting for a core. (default: ``300``)
        start_method (str): ``"popen"``, ``"spawn"`` or ``"fork"``. (default: ``"popen"``)
        cache_base, staleness, staleness_bound, cache_backward, grad_clip: options of the
            ``cached`` exchange, see :class:`~lightning_gnn_dist.comm.cached.CachedExchange`
            (defaults ``"p2p"``, ``"epoch-fixed"``, ``1.0``, ``"drop"``, ``None``). An option
            the chosen exchange does not take is refused unless it keeps its default.
        codec (str or dict): how exchanged rows travel in training steps, in every exchange mode
            and (``loader="neighbor"``) in the loader's remote feature fetch: ``"fp32"``
            (exact, as without a codec), ``"fp16"``, ``"bf16"`` (2 bytes per element),
            ``"int8"``, ``"int4"`` (per-row stochastic integer quantisation, ``d + 2`` and
            ``ceil(d/2) + 2`` bytes per row of width ``d``; int8 ``d + 1`` when ``d < 32``),
            ``"adaptive"`` (int4 or int8 per layer and direction, re-chosen every epoch by the
            variance int4 would add; not for the feature fetch); or a mapping per direction
            (``{"forward": "int8", "backward": "bf16"}``) or per layer name (``{"convs.0":
            "int8", "*": "fp32"}``; the fetch is layer ``"features"``). Every lossy codec is unbiased; evaluation steps always
            exchange ``fp32``. See :mod:`lightning_gnn_dist.comm.codec`. (default: ``"fp32"``)
        codec_tolerance (float): with ``"adaptive"``, the relative variance
            ``E‖Q(x) − x‖² / ‖x‖²`` int4 may add to a layer's messages before the layer is
            raised to int8. (default: ``0.01``)
        rdm_order (str): ``exchange="rdm"``'s SpMM/GEMM order: ``"auto"`` (time each Pareto
            order for a few steps, keep the fastest), ``"model"`` (the cost model's pick) or an
            order string such as ``"dsds"``; see :mod:`lightning_gnn_dist.comm.rdm`.
            (default: ``"auto"``)
        replication (int, optional): ``exchange="rdm"``: ranks per row panel of ``Â`` (a
            divisor of the world size; ``None`` = every rank holds all of ``Â``). (default:
            ``None``)
        retain_freed_memory (bool): fix glibc's ``malloc`` thresholds in every rank's process
            (:func:`~lightning_gnn_dist.utils.malloc.retain_freed_memory`: 32 MiB mmap, 128 MiB
            trim), so memory a step frees is reused by the next instead of returned to the
            system and faulted in again: ~30,000 fewer page faults an epoch per rank on the
            neighbour benchmark, the epoch 7 % shorter (one-off A/B), for up to 128 MiB more
            resident memory per heap. ``False`` leaves ``malloc`` as the process has it; elsewhere than
            glibc nothing changes. (default: ``True``)
        **kwargs: :class:`DDPStrategy`'s own strategy arguments
            (:data:`~lightning_gnn_dist.lightning.strategy_checks.DDP_STRATEGY_OPTIONS`:
            ``process_group_backend``, ``cluster_environment``, ...). gloo is used on CPU, NCCL
            on GPU. There is no ``DistributedDataParallel`` wrapper, so its options
            (``find_unused_parameters``, ``ddp_comm_hook``, ...) are refused, as is any unknown
            name (the error lists the valid ones).

    Every argument is checked here, before any process starts: a bad value or an unknown name
    raises one ``ValueError`` naming it.
    """

    def __init__(
        self,
        exchange: str = "p2p",
        loss_reduction: Literal["mean", "sum"] = "mean",
        timeout: float | timedelta = 1800.0,
        startup_timeout: float | timedelta = 300.0,
        start_method: Literal["popen", "spawn", "fork", "forkserver"] = "popen",
        cache_base: Literal["p2p", "broadcast"] = "p2p",
        staleness: Literal["epoch-fixed", "epoch-adaptive", "variation-gap"] = "epoch-fixed",
        staleness_bound: float = 1.0,
        cache_backward: Literal["fresh", "drop"] = "drop",
        grad_clip: float | None = None,
        codec: str | dict[str, Any] = "fp32",
        codec_tolerance: float = DEFAULT_TOLERANCE,
        rdm_order: str = "auto",
        replication: int | None = None,
        retain_freed_memory: bool = True,
        **kwargs: Any,
    ) -> None:
        self.requested_exchange = exchange
        if exchange == AUTO:
            if codec != "fp32" or rdm_order != "auto":
                raise ValueError(
                    "exchange='auto' takes its codec and rdm order from the stored plan; drop "
                    f"codec={codec!r} and rdm_order={rdm_order!r}, or choose the exchange yourself "
                    "(GraphPartitionDataModule(plan_options={'allow_stale': True}) lets the plan "
                    "pick a lossy codec)"
                )
            exchange_class = None  # the plan's, in setup (_apply_plan)
        else:
            exchange_class, _ = resolve_exchange_mode(exchange)  # ValueError listing the modes
        own = [name for name in _own_defaults() if name not in ("self", "kwargs")]
        kwargs = check_ddp_keywords(kwargs, own)
        check_choice("loss_reduction", loss_reduction, ("mean", "sum"))
        check_choice("start_method", start_method, ("popen", "spawn", "fork", "forkserver"))
        timeout = seconds_option("timeout", timeout)
        self.startup_timeout = seconds_option("startup_timeout", startup_timeout)
        check_number("codec_tolerance", codec_tolerance, 0)
        self.retain_freed_memory = check_bool("retain_freed_memory", retain_freed_memory)
        given = {
            "cache_base": cache_base,
            "staleness": staleness,
            "staleness_bound": staleness_bound,
            "cache_backward": cache_backward,
            "grad_clip": grad_clip,
            "rdm_order": rdm_order,
            "replication": replication,
        }
        self._given_options = given
        self.exchange_options = (
            {}
            if exchange_class is None
            else exchange_options(exchange, exchange_class, given, _own_defaults())
        )
        super().__init__(timeout=timeout, start_method=start_method, **kwargs)
        self.exchange_mode = exchange
        self.codec_policy = CodecPolicy(codec, tolerance=codec_tolerance)  # validates the spec
        if exchange == "rdm":
            check_codec_option(self.codec_policy)
        self.loss_reduction = loss_reduction
        self.comm_counters = {stage: CommCounter() for stage in STAGES}
        self.graph_context: GraphContext | None = None
        self._loss_weight = self._full_loss_weight = 1.0
        self._resume: dict[str, Any] | None = None  # our part of a loaded checkpoint
        self._resume_rng: dict[str, Any] | None = None  # this rank's RNG, set at train start
        self.data_parallel = False

    # -- launch -------------------------------------------------------------------------------
    def _configure_launcher(self) -> None:
        # torchrun / SLURM start one process per rank already; spawning more would duplicate ranks.
        if self._start_method == "popen" or (
            self.cluster_environment is not None
            and self.cluster_environment.creates_processes_externally
        ):
            launcher = GNNSubprocessLauncher.for_namespace(self._lightning_namespace)
            self._launcher = launcher(
                self.cluster_environment,
                self.num_processes,
                self.num_nodes,
                wait_s=self._timeout.total_seconds(),
                check=self.check_launch,
            )
            return
        launcher = GNNMultiProcessingLauncher.for_namespace(self._lightning_namespace)
        self._launcher = launcher(self, start_method=self._start_method)

    def setup_distributed(self) -> None:
        # DDPStrategy.setup_distributed, except that the processes first join under
        # startup_timeout: Lightning's single timeout would bound both the rendezvous (imports on
        # a loaded machine) and every collective (including gloo's point-to-point waits).
        reset_seed()
        self.set_world_ranks()
        if self.retain_freed_memory:  # before this rank loads its part
            retain_freed_memory()
        environment = self.cluster_environment
        requeue = isinstance(environment, SLURMEnvironment) and environment.auto_requeue
        Termination.install(self.global_rank, requeue)  # SIGTERM ends this rank at once
        self._process_group_backend = self._get_process_group_backend()
        kwargs: dict[str, Any] = {"timeout": self._timeout}
        if not dist.is_initialized():
            kwargs["store"] = join_ranks(
                self.cluster_environment, self.startup_timeout, self._timeout
            )
        if _INIT_TAKES_DEVICE_ID:  # torch >= 2.3: NCCL's communicator bound at once
            kwargs["device_id"] = self.root_device if self.root_device.type != "cpu" else None
        _init_dist_connection(self.cluster_environment, self._process_group_backend, **kwargs)

    # -- what runs together --------------------------------------------------------------------
    def check_datamodule(self, datamodule, world_size: int | None = None) -> None:
        """Refuse a datamodule this strategy cannot train exactly as asked
        (:func:`~lightning_gnn_dist.lightning.strategy_checks.check_datamodule`)."""
        check_datamodule(self, datamodule, world_size)

    def check_model(self, model) -> None:
        """Refuse options that do not fit ``model``'s message-passing layers
        (:func:`~lightning_gnn_dist.lightning.strategy_checks.check_model`)."""
        check_model(self, model)

    def check_launch(self, args: tuple) -> None:
        """:meth:`check_model` and :meth:`check_datamodule` on a ``Trainer`` entry point's
        arguments, for the world size the launcher is about to start."""
        for arg in args:
            if hasattr(arg, "partition_kind") and hasattr(arg, "loader"):
                self.check_datamodule(arg, self.num_nodes * self.num_processes)
            elif isinstance(arg, torch.nn.Module):
                self.check_model(arg)

    # -- setup --------------------------------------------------------------------------------
    def _apply_plan(self, datamodule) -> None:
        """``exchange="auto"``: run the exchange mode, codec and order of the datamodule's
        stored plan (``datamodule.plan``, rank 0's on every rank)."""
        plan = getattr(datamodule, "plan", None)
        if plan is None:
            raise ValueError(
                "exchange='auto' runs the plan that GraphPartitionDataModule(method='auto', "
                "plan_options={'widths': [...]}) stores with the partition; "
                f"{type(datamodule).__name__} has none (method="
                f"{getattr(datamodule, 'method', None)!r}): use method='auto' or name the exchange"
            )
        options = plan.pick.strategy_options()
        self.exchange_mode = options.pop("exchange")
        self.codec_policy = CodecPolicy(options.pop("codec"), tolerance=self.codec_policy.tolerance)
        exchange_class, _ = resolve_exchange_mode(self.exchange_mode)
        given = {**self._given_options, **options}
        self.exchange_options = exchange_options(
            self.exchange_mode, exchange_class, given, _own_defaults()
        )
        if self.is_global_zero:
            log.info("exchange='auto': %s (%s)", plan.pick.name, plan.reason)

    def setup(self, trainer) -> None:
        self._ignore_sharded()
        datamodule = trainer.datamodule
        if self.requested_exchange == AUTO:
            self._apply_plan(datamodule)
        self.check_datamodule(datamodule, self.world_size)
        partition: LocalPartition | None = getattr(datamodule, "local_partition", None)
        if partition is None:
            raise ValueError(
                "GNNStrategy needs a partitioned datamodule (e.g. lightning_gnn_dist.GraphPartitionDataModule) "
                f"passed as trainer.fit(..., datamodule=...); got {type(datamodule).__name__}"
            )
        if partition.num_parts != self.world_size:
            raise ValueError(
                f"the graph is partitioned into {partition.num_parts} parts but {self.world_size} processes run; "
                "set num_parts to the world size (devices x num_nodes) or change devices"
            )
        loader = getattr(datamodule, "loader", "full")
        if self.exchange_mode == "rdm" and loader != "full":
            raise ValueError(
                f"exchange='rdm' trains full-batch (loader='full'); loader={loader!r} needs a "
                "halo exchange such as exchange='p2p'"
            )
        if loader == "neighbor":
            # Sampling and feature fetch happen in the loader; the model sees a complete local
            # batch (a SampledBatchContext: global degrees, synchronised batch norms). With
            # eval_loader="full" evaluation runs on the whole part with the halo exchange.
            self.data_parallel = True
            self._eval_contexts: dict[str, GraphContext] = {}
            loaders = getattr(datamodule, "neighbor_loaders", None)
            if loaders is not None and hasattr(loaders, "device"):  # pinned, async copies
                loaders.device = self.root_device
            self._set_fetch_codec(datamodule)
            self._restore_rank_state(trainer, None)
            full_eval = getattr(datamodule, "eval_loader", "neighbor") == "full"
            kinds = ("neighbor", "vertex") if full_eval else ("neighbor",)
            if is_typed_part(partition):  # typed batches are complete (PyG's layers)
                kinds = ("hetero",)
            distribute(self.lightning_module, kinds)
            trim_per_hop(self.lightning_module)  # PyG's models compute what the seeds need
            super().setup(trainer)
            return
        kind = "hetero" if is_typed_part(partition) else getattr(partition, "kind", "vertex")
        distribute(self.lightning_module, (kind,))
        self.graph_context = self._make_context(partition, self.comm_counters["train"])
        self._restore_rank_state(trainer, self.graph_context.exchange)
        if self.loss_reduction == "mean" and partition.train_mask is not None:
            self._loss_weight = labelled_share(partition, global_train_labels(datamodule))
        self._full_loss_weight = self._loss_weight
        distribute(self.lightning_module, (kind,))
        check_reductions(self.lightning_module, self.graph_context.exchange)
        # distribute() already synchronised every BatchNorm (on CPU too); torch's SyncBatchNorm,
        # which Trainer(sync_batchnorm=True) would swap in, needs a GPU and would undo that.
        self._layer_sync = None
        super().setup(trainer)

    def _ignore_sharded(self) -> None:
        """Leave each rank's own rows of a featureless type (sharded parameters) out of the
        state synchronisation Lightning runs before validate/test/predict (DDP's ignore list)."""
        module = self.lightning_module
        names = [name for name, p in module.named_parameters() if is_sharded(p)]
        if names:
            module._ddp_params_and_buffers_to_ignore = names

    def _set_fetch_codec(self, datamodule) -> None:
        """The neighbour loader's remote feature fetch encodes with this strategy's codec."""
        store = getattr(getattr(datamodule, "neighbor_loaders", None), "store", None)
        if store is None or not hasattr(store, "codec"):
            return
        if self.codec_policy.name("features", "forward") == ADAPTIVE:
            raise ValueError(
                "codec='adaptive' needs every rank's agreement per epoch, which the neighbour "
                "loader's feature fetch does not have; give the fetch a fixed codec, e.g. "
                "codec={'features': 'int8', '*': 'adaptive'}"
            )
        store.codec = self.codec_policy

    def configure_ddp(self) -> None:
        # No DDP wrapper (it would average gradients); start from rank 0's parameters instead.
        for tensor in [*self.model.parameters(), *self.model.buffers()]:
            if not is_sharded(tensor):  # each rank's own rows of a featureless type
                dist.broadcast(tensor.data, src=0)

    # -- checkpoints: per-rank state (design §4: the exchange's cache is part of the checkpoint) --
    def save_checkpoint(
        self, checkpoint: dict[str, Any], filepath, storage_options: Any | None = None
    ) -> None:
        """Add every rank's RNG and exchange state and the run's identity, then let rank 0 write.
        Like Lightning's ``Trainer.save_checkpoint``, it must be called on every rank."""
        state = {
            "rng": rng_state(),
            "exchange": self._exchange_state(),
            "codec": self.codec_policy.state_dict(),
        }
        sharded = sharded_rows(self.lightning_module)  # featureless types' rows, per owner
        if sharded:
            state["sharded"] = sharded
            state["sharded_optimizer"] = sharded_optimizer_state(self.optimizers)
        ranks = [state]
        if dist.is_available() and dist.is_initialized() and self.world_size > 1:
            ranks = [None] * self.world_size if self.is_global_zero else None
            dist.gather_object(state, ranks, dst=0)
        if self.is_global_zero and sharded:  # the whole tables, as one process would save them
            checkpoint["state_dict"].update(whole_tables([r.pop("sharded") for r in ranks]))
        if self.is_global_zero:
            checkpoint[CHECKPOINT_KEY] = {
                "format": FORMAT_VERSION,
                "run": run_identity(self.lightning_module.trainer.datamodule, self.world_size),
                "ranks": ranks,
            }
        super().save_checkpoint(checkpoint, filepath, storage_options=storage_options)

    def load_checkpoint(self, checkpoint_path, weights_only: bool | None = None) -> dict[str, Any]:
        checkpoint = super().load_checkpoint(checkpoint_path, weights_only=weights_only)
        saved = checkpoint.get(CHECKPOINT_KEY)
        self._resume = None if saved is None else {**saved, "path": str(checkpoint_path)}
        return checkpoint

    def _restore_rank_state(self, trainer, exchange: HaloExchange | None) -> None:
        """On ``fit(ckpt_path=...)``: refuse another run's checkpoint, restore this rank's
        exchange state now and its RNG state at train start (validate/test/predict only need
        the weights, which Lightning restores)."""
        saved, self._resume = self._resume, None
        if saved is None or trainer.state.fn != "fit":
            return
        current = run_identity(trainer.datamodule, self.world_size)
        check_same_run(saved["run"], current, saved["path"])
        state = saved["ranks"][self.global_rank]
        if exchange is not None:
            exchange.load_state_dict(state.get("exchange", {}))
        if "codec" in state:
            self.codec_policy.load_state_dict(state["codec"])
        self._resume_rng = state["rng"]
        self._resume_sharded = state.get("sharded_optimizer")

    # Lightning registers its SIGTERM handler right before a stage runs; ours takes over.
    def on_validation_start(self) -> None:
        super().on_validation_start()
        Termination.take_over()

    def on_test_start(self) -> None:
        super().on_test_start()
        Termination.take_over()

    def on_predict_start(self) -> None:
        super().on_predict_start()
        Termination.take_over()

    def on_train_start(self) -> None:
        # Last, after sanity validation and model set-up, so nothing draws from the restored
        # generators before the first resumed training step.
        super().on_train_start()
        Termination.take_over()
        if self._resume_rng is not None:
            set_rng_state(self._resume_rng)
            self._resume_rng = None
        resumed, self._resume_sharded = getattr(self, "_resume_sharded", None), None
        if resumed:  # this rank's optimizer state of its own rows (the checkpoint's is rank 0's)
            load_sharded_optimizer_state(self.optimizers, resumed)

    def on_train_end(self) -> None:
        super().on_train_end()
        unmatched = self.codec_policy.unmatched_layers()
        if unmatched and self.is_global_zero:
            warnings.warn(
                f"codec: layer name(s) {unmatched} matched no exchange during training (they "
                "sent fp32 or the '*' codec); layer names are the distributed layers' "
                "qualified names, e.g. 'convs.0', and 'features' for the neighbour fetch",
                stacklevel=2,
            )

    def _exchange_state(self) -> dict[str, Any]:
        return self.graph_context.exchange.state_dict() if self.graph_context is not None else {}

    # -- gradients ----------------------------------------------------------------------------
    def backward(self, closure_loss: Tensor, optimizer, *args: Any, **kwargs: Any) -> Tensor:
        super().backward(closure_loss * self._loss_weight, optimizer, *args, **kwargs)
        return closure_loss

    def post_backward(self, closure_loss: Tensor) -> None:
        # A sharded parameter (a featureless type's rows, nn.hetero.ShardedEmbedding) holds this
        # rank's rows only, with their whole gradient: it takes no part in the all-reduce.
        params = [
            p for p in self.lightning_module.parameters() if p.requires_grad and not is_sharded(p)
        ]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if self.world_size == 1:  # the sum over one rank: nothing to move (~1–3 ms a step)
            return
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        if self.data_parallel:
            flat /= self.world_size
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()

    # -- steps --------------------------------------------------------------------------------
    @contextmanager
    def _in_graph(self, stage: str, batch: Any = None):
        context = self.graph_context
        if self.data_parallel:
            context = self._eval_context(stage)
            if context is None and isinstance(batch, Data):
                context = SampledBatchContext.from_batch(batch)
            if context is None:
                yield
                return
        if context is None:
            raise RuntimeError("GNNStrategy.setup has not run: no graph context")
        # A sampled-subgraph batch carries its own plan (loaders.subgraph): run the same
        # exchange mode on it.
        view = getattr(batch, "local_partition", None) if isinstance(batch, Data) else None
        if view is not None:
            context = self._make_context(view)
        context.exchange.counter = self.comm_counters[stage]
        # Only training steps may use stale rows: evaluation always exchanges exactly.
        epoch = self.lightning_module.trainer.current_epoch
        context.exchange.begin_round(epoch if stage == "train" else None)
        with use_graph_context(context):
            yield

    def _eval_context(self, stage: str) -> GraphContext | None:
        """Mini-batch mode: the graph context of ``stage``'s exact full-part batch, if any."""
        split = {"validate": "val", "test": "test", "predict": "predict"}.get(stage)
        datamodule = self.lightning_module.trainer.datamodule
        eval_partition = getattr(datamodule, "eval_partition", None)
        partition = eval_partition(split) if split and eval_partition else None
        if partition is None:
            return None
        if stage not in self._eval_contexts:
            self._eval_contexts[stage] = self._make_context(partition, self.comm_counters[stage])
        return self._eval_contexts[stage]

    def _make_context(self, partition, counter: CommCounter | None = None) -> GraphContext:
        """The graph context of ``partition`` (a rank's part, an evaluation view or a batch
        plan) with this strategy's exchange mode and options, on the compute device."""
        partition = to_device(partition, self.root_device)
        options = dict(self.exchange_options)
        if self.exchange_mode == "hierarchical":  # rank r runs on node r // ranks_per_node
            options["ranks_per_node"] = self.world_size // max(self.num_nodes, 1)
        exchange = make_exchange(
            self.exchange_mode, partition, counter, codec=self.codec_policy, **options
        )
        context = make_graph_context(partition, exchange)
        context.prepare(self.lightning_module)  # rdm binds the model's layers here
        return context

    def training_step(self, *args: Any, **kwargs: Any):
        batch = args[0] if args else kwargs.get("batch")
        self._loss_weight = self._full_loss_weight
        view = getattr(batch, "local_partition", None) if isinstance(batch, Data) else None
        if view is not None and self.loss_reduction == "mean" and view.train_mask is not None:
            # The batch's mean loss: this rank's share of the batch's labelled training targets.
            global_count = batch.get("num_train_labels_global", None)
            if global_count is None:
                global_count = batch.get("num_train_global", 0)
            self._loss_weight = labelled_share(view, int(global_count or 0))
        with self._in_graph("train", batch):
            return super().training_step(*args, **kwargs)

    def validation_step(self, *args: Any, **kwargs: Any):
        with self._in_graph("validate", args[0] if args else kwargs.get("batch")):
            return super().validation_step(*args, **kwargs)

    def test_step(self, *args: Any, **kwargs: Any):
        with self._in_graph("test", args[0] if args else kwargs.get("batch")):
            return super().test_step(*args, **kwargs)

    def predict_step(self, *args: Any, **kwargs: Any):
        with self._in_graph("predict", args[0] if args else kwargs.get("batch")):
            return super().predict_step(*args, **kwargs)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        super().on_train_batch_start(batch, batch_idx)
        begin_next_epoch(self.lightning_module.trainer, batch_idx)

    def teardown(self) -> None:
        context = self.graph_context
        trainer = getattr(self._lightning_module, "_trainer", None)
        failed = trainer is not None and trainer.state.status == "interrupted"  # a str enum
        finish_begun_epoch(trainer)
        if context is not None and not failed:  # delayed exchanges hold transfers across steps
            context.exchange.close()  # (after a failure they would only fail again, noisily)
        super().teardown()

    @classmethod
    def register_strategies(cls, strategy_registry) -> None:
        for name, start_method in GNN_STRATEGIES.items():
            strategy_registry.register(
                name,
                cls,
                description=strategy_description(start_method),
                start_method=start_method,
                override=True,
            )

    def __repr__(self) -> str:
        options = "".join(f", {k}={v!r}" for k, v in self.exchange_options.items())
        if not self.codec_policy.lossless:
            options += f", codec={self.codec_policy.spec!r}"
        return (
            f"GNNStrategy(exchange={self.exchange_mode!r}{options}, "
            f"loss_reduction={self.loss_reduction!r}, start_method={self._start_method!r}, "
            f"namespace={self._lightning_namespace!r})"
        )


_INIT_TAKES_DEVICE_ID = "device_id" in inspect.signature(dist.init_process_group).parameters


def _own_defaults() -> dict[str, Any]:
    """:class:`GNNStrategy`'s parameters and their defaults."""
    parameters = inspect.signature(GNNStrategy.__init__).parameters.items()
    return {name: parameter.default for name, parameter in parameters}


for _namespace, _lightning in NAMESPACES.items():
    GNNStrategy.for_namespace(_namespace).register_strategies(
        _lightning.strategies.StrategyRegistry
    )

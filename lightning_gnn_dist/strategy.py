"""``GNNStrategy``: DDP processes that each own one graph part and exchange halo rows.

Registered as ``gnn_ddp`` (Lightning's subprocess launcher; also torchrun and SLURM, which
start the processes themselves), ``gnn_ddp_spawn`` and ``gnn_ddp_fork``.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import fields, replace
from datetime import timedelta
from typing import Any, Literal

import torch
import torch.distributed as dist
from pytorch_lightning.strategies import DDPStrategy, StrategyRegistry
from pytorch_lightning.strategies.launchers import _SubprocessScriptLauncher
from torch import Tensor

from lightning_gnn_dist.comm.counters import CommCounter
from lightning_gnn_dist.comm.exchange import make_exchange, resolve_exchange_mode
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.nn.context import GraphContext, make_graph_context, use_graph_context
from lightning_gnn_dist.nn.distribute import distribute

STAGES = ("train", "validate", "test", "predict")


class GNNStrategy(DDPStrategy):
    """Partitioned full-graph training: rank ``r`` holds part ``r`` of the graph.

    Differences from :class:`~pytorch_lightning.strategies.DDPStrategy`:

    * the LightningModule's message-passing layers are made distributed (:func:`distribute`) and
      run inside a :class:`GraphContext` holding this rank's partition and halo exchange;
    * no DDP wrapper: gradients are **summed** over ranks after backward, and the training loss
      is scaled so the sum equals the single-process gradient (design §5). With
      ``loss_reduction="mean"`` the ``training_step`` loss must be the mean over the rank's
      ``batch.train_mask`` rows (what single-process code computes); it is multiplied by
      ``local train count / global train count``. With ``"sum"`` it is used as is.

    Requires :class:`~lightning_gnn_dist.data.GraphPartitionDataModule` (or any datamodule with a
    ``local_partition`` and ``global_mask_count(name)``), whose number of parts must equal the
    world size.

    Args:
        exchange (str): exchange mode: ``"p2p"`` or ``"broadcast"`` on a vertex partition;
            ``"cd-0"``, ``"cd-<r>"`` or ``"0c"`` on a vertex cut (``method="vertex-cut"``).
            (default: ``"p2p"``)
        loss_reduction (str): ``"mean"`` or ``"sum"``, see above. (default: ``"mean"``)
        timeout (float or timedelta): seconds a collective may wait before every rank fails with
            an error instead of hanging. (default: ``1800``)
        start_method (str): ``"popen"``, ``"spawn"`` or ``"fork"``. (default: ``"popen"``)
        **kwargs: passed to :class:`DDPStrategy` (``process_group_backend``, ``cluster_environment``,
            ...). gloo is used on CPU, NCCL on GPU.
    """

    def __init__(
        self,
        exchange: str = "p2p",
        loss_reduction: Literal["mean", "sum"] = "mean",
        timeout: float | timedelta = 1800.0,
        start_method: Literal["popen", "spawn", "fork", "forkserver"] = "popen",
        **kwargs: Any,
    ) -> None:
        resolve_exchange_mode(exchange)  # raises ValueError listing the known modes
        if loss_reduction not in ("mean", "sum"):
            raise ValueError(f"loss_reduction must be 'mean' or 'sum' (got {loss_reduction!r})")
        if not isinstance(timeout, timedelta):
            if timeout <= 0:
                raise ValueError(f"timeout must be positive seconds (got {timeout})")
            timeout = timedelta(seconds=timeout)
        super().__init__(timeout=timeout, start_method=start_method, **kwargs)
        self.exchange_mode = exchange
        self.loss_reduction = loss_reduction
        self.comm_counters = {stage: CommCounter() for stage in STAGES}
        self.graph_context: GraphContext | None = None
        self._loss_weight = 1.0

    # -- launch -------------------------------------------------------------------------------
    def _configure_launcher(self) -> None:
        # torchrun / SLURM start one process per rank already; spawning more would duplicate ranks.
        if (
            self.cluster_environment is not None
            and self.cluster_environment.creates_processes_externally
        ):
            self._launcher = _SubprocessScriptLauncher(
                self.cluster_environment, self.num_processes, self.num_nodes
            )
            return
        super()._configure_launcher()

    # -- setup --------------------------------------------------------------------------------
    def setup(self, trainer) -> None:
        datamodule = trainer.datamodule
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
        partition = _to_device(partition, self.root_device)
        exchange = make_exchange(self.exchange_mode, partition, self.comm_counters["train"])
        self.graph_context = make_graph_context(partition, exchange)
        if self.loss_reduction == "mean" and partition.train_mask is not None:
            local = int(partition.train_mask.sum())
            self._loss_weight = local / max(1, datamodule.global_mask_count("train_mask"))
        distribute(self.lightning_module)
        super().setup(trainer)

    def configure_ddp(self) -> None:
        # No DDP wrapper (it would average gradients); start from rank 0's parameters instead.
        for tensor in [*self.model.parameters(), *self.model.buffers()]:
            dist.broadcast(tensor.data, src=0)

    # -- gradients ----------------------------------------------------------------------------
    def backward(self, closure_loss: Tensor, optimizer, *args: Any, **kwargs: Any) -> Tensor:
        super().backward(closure_loss * self._loss_weight, optimizer, *args, **kwargs)
        return closure_loss

    def post_backward(self, closure_loss: Tensor) -> None:
        params = [p for p in self.lightning_module.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()

    # -- steps --------------------------------------------------------------------------------
    @contextmanager
    def _in_graph(self, stage: str):
        context = self.graph_context
        if context is None:
            raise RuntimeError("GNNStrategy.setup has not run: no graph context")
        context.exchange.counter = self.comm_counters[stage]
        with use_graph_context(context):
            yield

    def training_step(self, *args: Any, **kwargs: Any):
        with self._in_graph("train"):
            return super().training_step(*args, **kwargs)

    def validation_step(self, *args: Any, **kwargs: Any):
        with self._in_graph("validate"):
            return super().validation_step(*args, **kwargs)

    def test_step(self, *args: Any, **kwargs: Any):
        with self._in_graph("test"):
            return super().test_step(*args, **kwargs)

    def predict_step(self, *args: Any, **kwargs: Any):
        with self._in_graph("predict"):
            return super().predict_step(*args, **kwargs)

    def teardown(self) -> None:
        if self.graph_context is not None:  # delayed exchanges hold transfers across steps
            self.graph_context.exchange.close()
        super().teardown()

    @classmethod
    def register_strategies(cls, strategy_registry) -> None:
        for name, start_method in (
            ("gnn_ddp", "popen"),
            ("gnn_ddp_spawn", "spawn"),
            ("gnn_ddp_fork", "fork"),
        ):
            strategy_registry.register(
                name,
                cls,
                description=f"partitioned GNN training, halo exchange, start_method '{start_method}'",
                start_method=start_method,
                override=True,
            )

    def __repr__(self) -> str:
        return f"GNNStrategy(exchange={self.exchange_mode!r}, loss_reduction={self.loss_reduction!r}, start_method={self._start_method!r})"


def _to_device(partition: LocalPartition, device: torch.device) -> LocalPartition:
    if device.type == "cpu":
        return partition
    moved = {
        f.name: getattr(partition, f.name).to(device)
        for f in fields(partition)
        if isinstance(getattr(partition, f.name), Tensor)
    }
    return replace(partition, **moved)


GNNStrategy.register_strategies(StrategyRegistry)

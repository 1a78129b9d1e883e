"""``HeteroNodeClassifier``: the reference LightningModule for node prediction on typed graphs.

Like :class:`~lightning_gnn_dist.lightning.module.NodePredictor` it is ordinary single-process
PyG code: it reads a ``HeteroData`` (a whole graph, a typed part's full batch or a sampled typed
batch) and predicts the target type's vertices. Losses and metrics are those of
:mod:`~lightning_gnn_dist.lightning.metrics` over the target type's labelled vertices:

* full batch (``loader="full"``): the split's rows are ``batch[target].{split}_mask``; the
  training loss is the mean over the rank's labelled training vertices, which the strategy
  weights by their share of the whole graph's, logged as the global mean;
* sampled (``loader="neighbor"``): the split's rows are the target type's first
  ``batch[target].batch_size`` rows (the seeds); the loss is the mean over the rank's seeds.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import HeteroData
from torchmetrics import MeanMetric

from lightning_gnn_dist.data.targets import check_task
from lightning_gnn_dist.lightning.compat import LightningNeutral
from lightning_gnn_dist.lightning.metrics import (
    TaskMetrics,
    log_split_metrics,
    task_loss,
    training_loss,
)
from lightning_gnn_dist.nn.hetero_models import HETERO_MODELS, HeteroRGCN, HeteroSAGE, TypeEncoder
from lightning_gnn_dist.utils.checks import check_int, check_number

SPLITS = ("val", "test")


class HeteroNodeClassifier(LightningNeutral, lightning_base="LightningModule"):
    """Node prediction on a typed graph with a reference model: relational GCN (``"rgcn"``,
    ``"fast_rgcn"``) or ``to_hetero(GraphSAGE)`` (``"sage"``), after a per-type encoder
    (features projected by a ``Linear`` per type, featureless types as learnable rows held by
    their owners; :class:`~lightning_gnn_dist.nn.hetero_models.TypeEncoder`).

    The graph's types, feature widths, target type and task come from the datamodule when the
    Trainer builds the model (``configure_model``), or from the arguments for single-process
    use (``metadata``, ``target_type``, ``in_channels``, ``num_nodes`` and ``num_classes`` or
    ``num_tasks``; the model is then built at once).

    Args:
        model (str): ``"rgcn"``, ``"fast_rgcn"`` or ``"sage"``. (default: ``"rgcn"``)
        hidden_channels (int): hidden width (and embedding width). (default: ``64``)
        num_layers (int): message-passing layers. (default: ``2``)
        dropout (float): dropout between layers. (default: ``0.5``)
        lr (float): Adam learning rate. (default: ``0.01``)
        weight_decay (float): Adam weight decay. (default: ``0.0``)
        num_bases (int, optional): RGCN's basis decomposition. (default: ``None``)
        task (str, optional): the targets' task; the datamodule's when ``None``.
        metadata (tuple, optional): ``(node_types, edge_types)``.
        target_type (str, optional): the node type predicted.
        in_channels (dict, optional): feature width of each node type with ``x``.
        num_nodes (dict, optional): vertices of each featureless node type.
        num_classes (int, optional): classes of a multiclass task.
        num_tasks (int, optional): columns of a multilabel or regression ``y``.
        seed (int): seed of the embeddings' initial rows. (default: ``0``)
    """

    def __init__(
        self,
        model: str = "rgcn",
        hidden_channels: int = 64,
        num_layers: int = 2,
        dropout: float = 0.5,
        lr: float = 0.01,
        weight_decay: float = 0.0,
        num_bases: int | None = None,
        task: str | None = None,
        metadata: tuple | None = None,
        target_type: str | None = None,
        in_channels: dict[str, int] | None = None,
        num_nodes: dict[str, int] | None = None,
        num_classes: int | None = None,
        num_tasks: int | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_task(task)
        if model not in (*HETERO_MODELS, "fast_rgcn"):
            raise ValueError(
                f"HeteroNodeClassifier: unknown model {model!r}; choose one of: rgcn, "
                "fast_rgcn, sage"
            )
        check_int("hidden_channels", hidden_channels, 1)
        check_int("num_layers", num_layers, 1)
        check_number("dropout", dropout, 0.0, 1.0)
        if num_bases is not None:
            check_int("num_bases", num_bases, 1)
        self.save_hyperparameters()
        self.model: torch.nn.Module | None = None
        self.task = task
        self.target_type = target_type
        outputs = num_classes if (task or "multiclass") == "multiclass" else num_tasks
        if metadata is not None and target_type is not None and in_channels is not None:
            if outputs is None:
                raise ValueError("HeteroNodeClassifier: give num_classes (or num_tasks)")
            self.task = task or "multiclass"
            ids = {t: torch.arange(n) for t, n in (num_nodes or {}).items()}
            self._build(metadata, target_type, in_channels, ids, False, outputs)

    # -- the network ---------------------------------------------------------------------------
    def _build(self, metadata, target_type, in_channels, embedding_ids, sharded, outputs) -> None:
        hp = self.hparams
        missing = [t for t in metadata[0] if t not in in_channels and t not in embedding_ids]
        if missing:
            raise ValueError(
                f"HeteroNodeClassifier: node type {missing[0]!r} has no features and no "
                "embedding size; give in_channels or num_nodes for it"
            )
        encoder = TypeEncoder(in_channels, hp.hidden_channels, embedding_ids, sharded, hp.seed)
        self.target_type = target_type
        if hp.model == "sage":
            self.model = HeteroSAGE(
                metadata, target_type, encoder, hp.hidden_channels, outputs, hp.num_layers,
                hp.dropout,
            )  # fmt: skip
        else:
            self.model = HeteroRGCN(
                metadata, target_type, encoder, hp.hidden_channels, outputs, hp.num_layers,
                hp.dropout, hp.num_bases, fast=hp.model == "fast_rgcn",
            )  # fmt: skip
        self.split_metrics = torch.nn.ModuleDict(
            {split: TaskMetrics(self.task, outputs) for split in SPLITS}
        )
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()

    def configure_model(self) -> None:
        if self.model is not None:
            return
        datamodule = self.trainer.datamodule
        schema = getattr(datamodule, "hetero_schema", None)
        if schema is None:
            raise ValueError(
                "HeteroNodeClassifier trains on a typed graph: give the datamodule a "
                "HeteroData (or a typed dataset such as 'mag'); NodeClassifier trains on a "
                "homogeneous one"
            )
        stored = datamodule.task
        if self.task is not None and self.task != stored:
            raise ValueError(
                f"HeteroNodeClassifier(task={self.task!r}) but the datamodule's targets are "
                f"task={stored!r}; leave task out or give the datamodule task={self.task!r}"
            )
        self.task = stored
        hp = self.hparams
        outputs = datamodule.num_classes if stored == "multiclass" else datamodule.num_tasks
        outputs = (hp.num_classes if stored == "multiclass" else hp.num_tasks) or outputs
        in_channels = datamodule.type_feature_widths()
        featureless = [t for t in schema.node_types if t not in in_channels]
        sharded = getattr(datamodule, "loader", "full") == "full"
        if sharded:  # each rank's own rows (full batch): the batch's owned ids of the type
            ids = {t: datamodule.batch[t].global_ids for t in featureless}
        else:
            sizes = dict(zip(schema.node_types, schema.num_nodes, strict=True))
            ids = {t: torch.arange(sizes[t]) for t in featureless}
        self._build(schema.metadata(), schema.target_type, in_channels, ids, sharded, outputs)

    # -- steps ---------------------------------------------------------------------------------
    def forward(self, batch: HeteroData) -> Tensor:
        """The target type's outputs of ``batch``: ``[n, num_classes]`` logits or
        ``[n, num_tasks]``."""
        x_dict = {t: batch[t].x for t in batch.node_types if "x" in batch[t]}
        n_id = {t: batch[t].n_id for t in batch.node_types if "n_id" in batch[t]} or None
        return self.model(x_dict, batch, n_id)

    def _split(self, batch: HeteroData, split: str) -> tuple[Tensor, Tensor, bool]:
        """``(outputs, targets, sampled)`` of ``split``'s labelled-or-not target rows."""
        store = batch[self.target_type]
        out = self(batch)
        if "batch_size" in store:
            seeds = slice(0, int(store.batch_size))
            return out[seeds], store.y[seeds], True
        mask = store[f"{split}_mask"]
        return out[mask], store.y[mask], False

    def training_step(self, batch: HeteroData, batch_idx: int) -> Tensor:
        out, y, sampled = self._split(batch, "train")
        return training_loss(self, task_loss(out, y, self.task), sampled, batch)

    def _evaluate(self, batch: HeteroData, split: str) -> None:
        out, y, _ = self._split(batch, split)
        log_split_metrics(self, split, out, y, self.task)

    def validation_step(self, batch: HeteroData, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: HeteroData, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def predict_step(self, batch: HeteroData, batch_idx: int) -> dict[str, Tensor]:
        """``{"global_ids": [n] the target type's dataset ids, "logits": [n, C or k]}`` of the
        batch's owned target vertices, or of its seeds in a sampled batch."""
        store = batch[self.target_type]
        out = self(batch)
        if "batch_size" in store:
            seeds = slice(0, int(store.batch_size))
            return {"global_ids": store.n_id[seeds], "logits": out[seeds]}
        return {"global_ids": store.global_ids, "logits": out}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay
        )


__all__ = ["HeteroNodeClassifier"]

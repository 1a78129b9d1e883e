"""``LinkPredictor``: the reference LightningModule for link prediction.

An encoder (a reference GNN, :mod:`~lightning_gnn_dist.nn.models`) embeds the vertices, a
decoder scores pairs (:mod:`~lightning_gnn_dist.nn.link`: ``dot``, ``distmult``, ``mlp`` or the
user's module), a loss compares the positives' scores with their negatives'. It is ordinary
single-process PyG code on PyG's link layout (``edge_label_index``, ``edge_label``); the one
distributed call is :func:`~lightning_gnn_dist.nn.link.pair_scores`, which fetches a full
batch's far endpoints by the score exchange (and is plain indexing otherwise).

* Full batch (``LinkDataModule(loader="full")``): the training loss is the rank's sum over its
  pairs divided by the whole graph's terms (``num_positives_global``), so the gradients the
  strategy sums over ranks are the single-process gradients; ``train_loss`` is logged as the
  global mean.
* Sampled batches (``loader="neighbor"``): the mean over the rank's batch; the strategy averages
  gradients over ranks (DDP semantics).

Validation and test log ``{split}_mrr`` and ``{split}_hits@K`` (the ``metrics`` asked for),
computed over every rank's pairs without gathering embeddings
(:class:`~lightning_gnn_dist.nn.link_metrics.LinkRankMetrics`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from lightning_gnn_dist.comm.messages import host_group
from lightning_gnn_dist.lightning.compat import LightningNeutral
from lightning_gnn_dist.nn.link import (
    check_loss,
    link_loss,
    loss_terms,
    make_decoder,
    pair_scores,
)
from lightning_gnn_dist.nn.link_metrics import LinkRankMetrics, check_metrics
from lightning_gnn_dist.nn.models import MODELS, build_model

EVAL_SPLITS = ("val", "test")


class LinkPredictor(LightningNeutral, lightning_base="LightningModule"):
    """Link prediction with a reference encoder and a decoder.

    Args:
        model (str): encoder, ``"gcn"``, ``"sage"`` or ``"gat"``. (default: ``"sage"``)
        hidden_channels (int): hidden width of the encoder. (default: ``64``)
        out_channels (int, optional): embedding width. (default: ``hidden_channels``)
        num_layers (int): encoder layers. (default: ``2``)
        dropout (float): encoder dropout. (default: ``0.0``)
        decoder (str or nn.Module): ``"dot"``, ``"distmult"``, ``"mlp"``, or a module called as
            ``decoder(h_src, h_dst)`` returning ``[n]`` or ``[n, 1]`` scores (refused here when
            its output does not fit, with ``in_channels`` given; else when the model is built).
            (default: ``"dot"``)
        decoder_hidden (int): ``"mlp"``'s hidden width. (default: ``64``)
        decoder_layers (int): ``"mlp"``'s layers. (default: ``2``)
        loss (str): ``"bce"``, ``"bpr"``, ``"margin"`` or ``"contrastive"``
            (:mod:`~lightning_gnn_dist.nn.link`). (default: ``"bce"``)
        margin (float): ``"margin"``'s margin. (default: ``1.0``)
        lr (float): Adam learning rate. (default: ``0.01``)
        weight_decay (float): Adam weight decay. (default: ``0.0``)
        metrics (list[str]): evaluation metrics, ``"mrr"`` and ``"hits@K"``. (default:
            ``["mrr", "hits@50"]``)
        in_channels (int, optional): input width; the datamodule's ``num_features`` when
            ``None``. (default: ``None``)
        heads (int): GAT heads. (default: ``4``)
    """

    def __init__(
        self,
        model: str = "sage",
        hidden_channels: int = 64,
        out_channels: int | None = None,
        num_layers: int = 2,
        dropout: float = 0.0,
        decoder: str | nn.Module = "dot",
        decoder_hidden: int = 64,
        decoder_layers: int = 2,
        loss: str = "bce",
        margin: float = 1.0,
        lr: float = 0.01,
        weight_decay: float = 0.0,
        metrics: list[str] | tuple[str, ...] = ("mrr", "hits@50"),
        in_channels: int | None = None,
        heads: int = 4,
    ) -> None:
        super().__init__()
        if (
            not isinstance(model, str)
            or model.lower() not in MODELS
            or model.lower() == "deepergcn"
        ):
            raise ValueError(
                f"LinkPredictor: unknown model {model!r}; choose one of: gcn, sage, gat"
            )
        check_loss(loss)
        self.metric_names = check_metrics(list(metrics))
        custom = isinstance(decoder, nn.Module)
        self.save_hyperparameters(ignore=["decoder"] if custom else None)
        self._decoder_spec = decoder
        self.encoder: nn.Module | None = None
        self.decoder: nn.Module | None = decoder if custom else None
        if in_channels is not None:
            self._build(in_channels)

    @property
    def embedding_channels(self) -> int:
        return self.hparams.out_channels or self.hparams.hidden_channels

    def _build(self, in_channels: int) -> None:
        hp = self.hparams
        extra: dict[str, Any] = {"heads": hp.heads} if hp.model.lower() == "gat" else {}
        self.encoder = build_model(
            hp.model,
            in_channels,
            hp.hidden_channels,
            self.embedding_channels,
            num_layers=hp.num_layers,
            dropout=hp.dropout,
            **extra,
        )
        self.decoder = make_decoder(
            self._decoder_spec, self.embedding_channels, hp.decoder_hidden, hp.decoder_layers
        )
        self.split_metrics = {split: LinkRankMetrics(self.metric_names) for split in EVAL_SPLITS}

    def configure_model(self) -> None:
        if self.encoder is not None:
            return
        if self._trainer is None:
            raise ValueError("LinkPredictor needs in_channels, or a datamodule to read them from")
        self._build(self.hparams.in_channels or self.trainer.datamodule.num_features)

    # -- the network ----------------------------------------------------------------------------
    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        num_sampled_nodes: list[int] | None = None,
        num_sampled_edges: list[int] | None = None,
    ) -> Tensor:
        """Embeddings ``[N, d]`` (a sampled batch's seeds only, ``[batch_size, d]``, when the
        per-hop counts are given and the encoder trims)."""
        return self.encoder(x, edge_index, num_sampled_nodes, num_sampled_edges)

    def embed(self, batch: Data) -> Tensor:
        """The batch's embeddings: every row of a full batch; a sampled batch's seeds (the
        pairs' endpoints) first."""
        if "batch_size" in batch:
            trim = [batch.get("num_sampled_nodes"), batch.get("num_sampled_edges")]
            if (
                not getattr(self.encoder, "trims", False)
                or trim[1] is None
                or len(trim[1]) != len(self.encoder.convs)
            ):
                trim = [None, None]
            return self(batch.x, batch.edge_index, *trim)
        return self(batch.x, batch.edge_index)

    def score(self, h: Tensor, pairs: Tensor, batch: Data) -> Tensor:
        """``[n]`` scores of ``pairs [2, n]`` (the batch's ids; collective in a full batch)."""
        return pair_scores(self.decoder, h, pairs, batch.get("link_directory"))

    # -- steps --------------------------------------------------------------------------------------
    def training_step(self, batch: Data, batch_idx: int) -> Tensor:
        h = self.embed(batch)
        n, k = int(batch.num_positives), int(batch.num_negatives)
        scores = self.score(h, batch.edge_label_index, batch)
        valid = batch.get("negative_valid")
        total, terms = link_loss(
            self.hparams.loss,
            scores[:n],
            scores[n:].view(n, k),
            None if valid is None else valid.view(n, k),
            batch.edge_label[:n],
            self.hparams.margin,
        )
        if "num_positives_global" in batch:  # a full batch: this rank's share of the mean
            share = total / max(1, loss_terms(self.hparams.loss, batch.num_positives_global, k))
            self.log("train_loss", share.detach(), reduce_fx="sum", sync_dist=True, batch_size=1,
                     prog_bar=True)  # fmt: skip
            return share
        loss = total / max(1, terms)
        self.log("train_loss", loss.detach(), sync_dist=True, batch_size=1, prog_bar=True)
        return loss

    def _evaluate(self, batch: Data, split: str) -> None:
        h = self.embed(batch)
        n, k = int(batch.num_positives), int(batch.num_negatives)
        index = batch.edge_label_index
        metrics = self.split_metrics[split]
        chunks = int(batch.get("link_chunks", 1))
        # every rank scores the same number of chunks (each a collective plan in a full batch)
        for rows in torch.tensor_split(torch.arange(n, device=index.device), chunks):
            negatives = n + (rows.unsqueeze(1) * k + torch.arange(k, device=index.device))
            pairs = torch.cat([index[:, rows], index[:, negatives.reshape(-1)]], 1)
            scores = self.score(h, pairs, batch)
            metrics.update(scores[: rows.numel()], scores[rows.numel() :].view(-1, k))
        pool = batch.get("pool_index")
        if pool is not None:
            for chunk in torch.tensor_split(torch.arange(pool.size(1), device=pool.device), chunks):
                metrics.update(torch.empty(0), pool=self.score(h, pool[:, chunk], batch))

    def validation_step(self, batch: Data, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: Data, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def _log_metrics(self, split: str) -> None:
        metrics = self.split_metrics[split]
        metrics.group = host_group()
        for name, value in metrics.compute().items():  # already global: no sync
            self.log(
                f"{split}_{name}",
                value,
                batch_size=1,
                prog_bar=True,
                sync_dist=True,
                reduce_fx="max",
            )
        metrics.reset()

    def on_validation_epoch_end(self) -> None:
        self._log_metrics("val")

    def on_test_epoch_end(self) -> None:
        self._log_metrics("test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay
        )


__all__ = ["LinkPredictor"]

"""The Lightning floor: the only package of ``lightning_gnn_dist`` that imports Lightning.

============================ ===================================================================
module                       what it holds
============================ ===================================================================
:mod:`.compat`               one decision between ``lightning.pytorch`` and ``pytorch_lightning``
:mod:`.strategy`             :class:`~.strategy.GNNStrategy` (``gnn_ddp``, ``gnn_ddp_spawn``,
                             ``gnn_ddp_fork``): process groups, exchange, gradient sync
:mod:`.registration`         the ``gnn_ddp*`` names in Lightning's registries, registered
                             without importing the strategy (``import lightning_gnn_dist``)
:mod:`.partitioned_data`     :class:`~.partitioned_data.PartitionedDataModule`: the base of the
                             datamodules: partition once, load the rank's part, store settings
:mod:`.auto_plan`            ``method="auto"``: plan in ``prepare_data``, read the plan in ``setup``
:mod:`.datamodule`           :class:`~.datamodule.GraphPartitionDataModule`: the node datamodule,
                             full-batch or mini-batch loaders
:mod:`.callbacks`            communication table, partition report, prediction writer
:mod:`.batch_monitor`        per-batch communication of mini-batch loaders
:mod:`.module`               :class:`~.module.NodePredictor` (``NodeClassifier``), the reference
                             LightningModule of the three node tasks
:mod:`.hetero_module`        :class:`~.hetero_module.HeteroNodeClassifier`: the same on typed
                             graphs (RGCN, ``to_hetero(GraphSAGE)``)
:mod:`.hetero_data`          what the node datamodule does for a typed graph (``HeteroData``)
:mod:`.metrics`              losses and synchronised metrics of each task, unlabelled left out
:mod:`.launcher`             the subprocess launcher: one-line rank failures, clean exits
:mod:`.reports`              a rank's failure report, read by rank 0 or by ``emulate`` (light)
:mod:`.resume`               what a checkpoint holds beyond Lightning's own state
:mod:`.cli`                  the LightningCLI behind ``python -m lightning_gnn_dist fit``
============================ ===================================================================

The user-facing classes are importable from :mod:`lightning_gnn_dist` itself, namespace-neutral.
"""

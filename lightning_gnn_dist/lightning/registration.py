"""The strategy names ``gnn_ddp``, ``gnn_ddp_spawn`` and ``gnn_ddp_fork`` in a Lightning
namespace's ``StrategyRegistry``, without importing the strategy (nor torch).

``import lightning_gnn_dist`` calls :func:`register_strategy_names` for every Lightning namespace
as it is imported (:mod:`lightning_gnn_dist._imports`). Until the strategy module is imported,
each entry is a factory that imports it when a Trainer builds the strategy; importing
:mod:`.strategy` then registers the classes themselves in their place.
"""

from __future__ import annotations

import types
from typing import Any

from lightning_gnn_dist.lightning.strategy_names import GNN_STRATEGIES, strategy_description

#: The Lightning namespaces whose registries get the names, as module names.
NAMESPACE_MODULES = ("pytorch_lightning", "lightning.pytorch")


class _StrategyFactory:
    """A registry entry standing in for ``GNNStrategy`` of one namespace until the strategy
    module is imported: called by ``StrategyRegistry.get(name)`` with the entry's
    ``start_method``, it imports the module and builds the strategy."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def __call__(self, **init_params: Any):
        from lightning_gnn_dist.lightning.strategy import GNNStrategy

        return GNNStrategy.for_namespace(self.namespace)(**init_params)

    def __repr__(self) -> str:
        return f"GNNStrategy.for_namespace({self.namespace!r})"


def register_strategy_names(lightning_module: types.ModuleType) -> None:
    """Add the ``gnn_ddp*`` names to ``lightning_module.strategies.StrategyRegistry``
    (``lightning_module``: ``pytorch_lightning`` or ``lightning.pytorch``, imported); names
    registered already (the classes themselves) are kept."""
    registry = lightning_module.strategies.StrategyRegistry
    for name, start_method in GNN_STRATEGIES.items():
        if name not in registry:
            registry.register(
                name,
                _StrategyFactory(lightning_module.__name__),
                description=strategy_description(start_method),
                start_method=start_method,
            )

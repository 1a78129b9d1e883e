"""The strategy names this package registers with Lightning, and their descriptions: read by the
light registration hook (:mod:`.registration`, before the strategy is imported) and by
``GNNStrategy.register_strategies`` alike."""

from __future__ import annotations

#: Registered strategy names → the ``start_method`` each one passes to ``GNNStrategy``.
GNN_STRATEGIES = {"gnn_ddp": "popen", "gnn_ddp_spawn": "spawn", "gnn_ddp_fork": "fork"}


def strategy_description(start_method: str) -> str:
    """The registry's one-line description of the name with ``start_method``."""
    return f"partitioned GNN training, halo exchange, start_method '{start_method}'"

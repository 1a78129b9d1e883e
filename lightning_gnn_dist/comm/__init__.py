"""Communication between ranks: one module per exchange mode, all behind :class:`HaloExchange`.

Importing the package registers every mode in :data:`EXCHANGE_MODES` (each subclass registers
itself; :mod:`~lightning_gnn_dist.comm.base` imports none of them):

================ ======================================================== ======================
mode             what moves per layer and direction                       module
================ ======================================================== ======================
``p2p``          exactly the planned halo rows, one message per peer      :mod:`.p2p`
``broadcast``    every rank's whole block to every other rank             :mod:`.broadcast`
``cached``       ``p2p``/``broadcast`` rounds skipped within a staleness  :mod:`.cached`
                 bound (SANCUS)
``cd-0``         partial aggregates of split vertices (vertex cut)        :mod:`.vertex_cut`
``cd-<r>``       the same, delayed ``r`` epochs in bins                   :mod:`.vertex_cut`
``0c``           nothing                                                  :mod:`.vertex_cut`
``hierarchical`` ``p2p``'s rows, but once per remote node to a gateway    :mod:`.hierarchical`
                 rank that forwards them inside its node
``rdm``          no halo: one all-to-all per switch between row and       :mod:`.rdm`,
                 column slices; Â replicated (paper 003)                  :mod:`.rdm_plan`
================ ======================================================== ======================

Every mode moves its rows with :func:`start_messages` (point-to-point, receives posted first) or
:func:`all_to_all` (:mod:`.messages`), which keep a gloo link between hosts busy both ways.
"""

from lightning_gnn_dist.comm.base import (
    EXCHANGE_MODES,
    HaloExchange,
    PendingHalo,
    Transfer,
    make_exchange,
    resolve_exchange_mode,
)
from lightning_gnn_dist.comm.broadcast import BroadcastExchange
from lightning_gnn_dist.comm.cached import CachedExchange
from lightning_gnn_dist.comm.counters import CommCounter, Traffic
from lightning_gnn_dist.comm.hierarchical import HierarchicalExchange
from lightning_gnn_dist.comm.messages import all_to_all, start_messages
from lightning_gnn_dist.comm.p2p import P2PExchange
from lightning_gnn_dist.comm.rdm import RDMExchange
from lightning_gnn_dist.comm.vertex_cut import (
    DelayedPartialAggregateSync,
    NoSync,
    PartialAggregateSync,
)

__all__ = [
    "EXCHANGE_MODES",
    "BroadcastExchange",
    "CachedExchange",
    "CommCounter",
    "DelayedPartialAggregateSync",
    "HaloExchange",
    "HierarchicalExchange",
    "NoSync",
    "P2PExchange",
    "PartialAggregateSync",
    "PendingHalo",
    "RDMExchange",
    "Traffic",
    "Transfer",
    "all_to_all",
    "make_exchange",
    "resolve_exchange_mode",
    "start_messages",
]

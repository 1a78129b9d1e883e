"""A calibrated cost model of distributed GCN training: compute, network, predicted epochs.

=================== ==========================================================================
module              what it holds
=================== ==========================================================================
:mod:`.epoch`       :func:`predict_epoch`: per-rank seconds of one full-batch epoch (every
                    vertex-partition mode, ``rdm`` included); :func:`rdm_pick`
:mod:`.network`     :class:`Network` (bandwidth, latency), :class:`TwoLevelNetwork` (intra- and
                    inter-node links) and the :data:`NETWORKS` presets
:mod:`.calibrate`   :func:`calibrate`: :class:`ComputeCosts` measured on this machine
=================== ==========================================================================

:class:`ComputeCosts`, :class:`GCNLayer` and :func:`gcn_layers` are defined in
:mod:`lightning_gnn_dist.partition.work` (the partitioners' work weight uses them too).
"""

from lightning_gnn_dist.costmodel.calibrate import calibrate
from lightning_gnn_dist.costmodel.epoch import EpochEstimate, predict_epoch, rdm_pick
from lightning_gnn_dist.costmodel.network import NETWORKS, Network, TwoLevelNetwork
from lightning_gnn_dist.partition.work import ComputeCosts, GCNLayer, gcn_layers

__all__ = [
    "NETWORKS",
    "ComputeCosts",
    "EpochEstimate",
    "GCNLayer",
    "Network",
    "TwoLevelNetwork",
    "calibrate",
    "gcn_layers",
    "predict_epoch",
    "rdm_pick",
]

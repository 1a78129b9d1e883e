"""What a checkpoint must hold so that a resumed run continues exactly like an uninterrupted one.

Lightning's checkpoint carries the weights, optimiser and loop state; it does not carry the random
number generators of each process (dropout draws differ per rank because parts differ in size), nor
which graph and partition the run trained on, nor state held by the halo exchange. This module
packs those under ``checkpoint["lightning_gnn_dist"]``::

    {"format": 1,
     "run": {"dataset", "fingerprint", "partition", "settings", "world_size"},
     "ranks": [{"rng": ..., "exchange": ...}, ...]}   # one entry per global rank

Everything is stored as tensors and plain Python values, so checkpoints load with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lightning_gnn_dist.nn.hetero import is_sharded

CHECKPOINT_KEY = "lightning_gnn_dist"
FORMAT_VERSION = 1


class ResumeMismatchError(ValueError):
    """A checkpoint is resumed against another dataset, partition or number of processes."""


def rng_state() -> dict[str, Any]:
    """The random state of this process: torch (CPU and, once initialised, every CUDA device),
    numpy's global generator and Python's ``random``."""
    name, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    version, python_state, gauss = random.getstate()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []
    return {
        "torch": torch.get_rng_state(),
        "cuda": cuda,
        "numpy": {
            "name": name,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "python": {"version": version, "state": list(python_state), "gauss": gauss},
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    torch.set_rng_state(state["torch"].cpu())
    if state["cuda"]:
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
    numpy = state["numpy"]
    np.random.set_state(
        (
            numpy["name"],
            numpy["keys"].numpy().astype(np.uint32),
            numpy["pos"],
            numpy["has_gauss"],
            numpy["cached_gaussian"],
        )
    )
    python = state["python"]
    random.setstate((python["version"], tuple(python["state"]), python["gauss"]))


def run_identity(datamodule: Any, world_size: int) -> dict[str, Any]:
    """What a resumed run must share with the checkpoint: the dataset fingerprint, the partition
    (checksum of the store's vertex assignment), the partitioner settings and the world size.

    Args:
        datamodule: the fit's datamodule; its ``store.meta`` (a
            :class:`~lightning_gnn_dist.partition.store.PartitionStore`) is read when present.
        world_size: processes in the run.
    """
    store = getattr(datamodule, "store", None)
    meta = getattr(store, "meta", None) or {}
    return {
        "dataset": meta.get("dataset"),
        "fingerprint": meta.get("fingerprint"),
        "partition": meta.get("files", {}).get("assignment.npy"),
        "settings": meta.get("settings"),
        "world_size": int(world_size),
    }


def check_same_run(saved: dict[str, Any], current: dict[str, Any], checkpoint: str) -> None:
    """Raise :class:`ResumeMismatchError` unless ``current`` continues the run of ``saved``.

    The message names both fingerprints (dataset and partition) and every setting that differs.
    """
    differences = [
        f"{key}: checkpoint {saved.get(key)!r}, this run {current.get(key)!r}"
        for key in ("fingerprint", "partition", "settings", "world_size")
        if saved.get(key) != current.get(key)
    ]
    if differences:
        raise ResumeMismatchError(
            f"cannot resume {checkpoint}: it was trained on dataset {saved.get('dataset')!r} "
            f"(fingerprint {saved.get('fingerprint')}, partition {saved.get('partition')}) "
            f"but this run uses {current.get('dataset')!r} (fingerprint "
            f"{current.get('fingerprint')}, partition {current.get('partition')}); differs in "
            + "; ".join(differences)
            + ". Resume with the datamodule and number of processes of the checkpoint, or start a "
            "new fit from its weights (NodeClassifier.load_from_checkpoint)."
        )


def sharded_optimizer_state(optimizers) -> dict[tuple[int, int], dict]:
    """``{(optimizer, parameter position): state}`` of this rank's sharded parameters (a
    featureless type's rows, held per owner: each rank's optimizer state of them differs)."""
    out = {}
    for i, optimizer in enumerate(optimizers):
        params = [p for g in optimizer.param_groups for p in g["params"]]
        for j, parameter in enumerate(params):
            if is_sharded(parameter) and parameter in optimizer.state:
                out[(i, j)] = {
                    k: v.detach().clone() if isinstance(v, Tensor) else v
                    for k, v in optimizer.state[parameter].items()
                }
    return out


def load_sharded_optimizer_state(optimizers, state: dict[tuple[int, int], dict]) -> None:
    """Put :func:`sharded_optimizer_state`'s ``state`` back into ``optimizers``."""
    for (i, j), values in state.items():
        optimizer = optimizers[i]
        parameter = [p for g in optimizer.param_groups for p in g["params"]][j]
        optimizer.state[parameter] = values

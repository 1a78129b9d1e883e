"""Which codec each layer and direction uses (:class:`CodecPolicy`), parsed from the strategy's
``codec=`` option (a name, a per-direction dict or a per-layer dict; ``"adaptive"`` picks
int4/int8 per layer within a tolerance), and its checks against a model's layers and the
neighbour fetch. The codecs themselves are in :mod:`~lightning_gnn_dist.comm.codec`."""

from __future__ import annotations

import difflib
import math
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from lightning_gnn_dist.comm.codec import (
    ADAPTIVE,
    ADAPTIVE_LADDER,
    CODEC_NAMES,
    CODECS,
    CONTROL_LAYER,
    DEFAULT_TOLERANCE,
    DIRECTIONS,
    FETCH_LAYER,
    Codec,
    quantisation_variance,
)
from lightning_gnn_dist.data.sampler import hash_keys

__all__ = ["CodecPolicy", "check_fetch_codec", "parse_codec_spec", "unmatched_codec_layers"]


def _check_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or name not in CODEC_NAMES:
        raise ValueError(
            f"{where}: unknown codec {name!r}; choose one of {', '.join(CODEC_NAMES)} "
            "(or a mapping per direction 'forward'/'backward', or per layer name with '*' for "
            "the rest)"
        )
    return name


def _per_direction(value: Any, where: str) -> dict[str, str]:
    if isinstance(value, str):
        name = _check_name(value, where)
        return dict.fromkeys(DIRECTIONS, name)
    if isinstance(value, Mapping):
        unknown = set(value) - set(DIRECTIONS)
        if unknown:
            raise ValueError(
                f"{where}: unknown direction(s) {sorted(unknown)}; use 'forward' and/or "
                "'backward' (the other defaults to 'fp32')"
            )
        return {d: _check_name(value.get(d, "fp32"), f"{where}[{d!r}]") for d in DIRECTIONS}
    raise ValueError(
        f"{where}: a codec is a name ({', '.join(CODEC_NAMES)}) or a mapping "
        f"{{'forward': ..., 'backward': ...}} (got {type(value).__name__} {value!r})"
    )


def parse_codec_spec(spec: Any) -> dict[str, dict[str, str]]:
    """``{layer or "*": {"forward": name, "backward": name}}`` from a codec spec.

    Accepted: a name; ``{"forward": name, "backward": name}`` (a missing direction is
    ``fp32``); ``{layer: name or per-direction mapping, "*": default}`` (layers not listed and no
    ``"*"``: ``fp32``).

    Raises:
        ValueError: unknown codec name or direction, or a value of the wrong type.
    """
    if isinstance(spec, str) or (
        isinstance(spec, Mapping) and spec and set(spec) <= set(DIRECTIONS)
    ):
        return {"*": _per_direction(spec, "codec")}
    if not isinstance(spec, Mapping):
        raise ValueError(
            f"codec must be a name ({', '.join(CODEC_NAMES)}) or a mapping per direction or per "
            f"layer (got {type(spec).__name__} {spec!r})"
        )
    if set(spec) & set(DIRECTIONS):
        others = sorted(str(k) for k in set(spec) - set(DIRECTIONS))
        raise ValueError(
            f"codec mixes directions and layer names {others}: give either "
            "{'forward': ..., 'backward': ...} or {layer: name or {'forward': ..., 'backward': "
            "...}, '*': default}"
        )
    for layer in spec:
        _check_layer_key(layer)
    table = {str(layer): _per_direction(v, f"codec[{layer!r}]") for layer, v in spec.items()}
    table.setdefault("*", dict.fromkeys(DIRECTIONS, "fp32"))
    if ADAPTIVE in table.get(FETCH_LAYER, {}).values():
        raise ValueError(
            f"codec[{FETCH_LAYER!r}]='adaptive': the neighbour loader's feature fetch needs a "
            "fixed codec (adaptive re-chooses per epoch with every rank's agreement, which the "
            "fetch does not have); give it fp32, fp16, bf16, int8 or int4"
        )
    return table


def _check_layer_key(layer: Any) -> None:
    """Refuse a layer key that cannot be a layer name: not a string, or a direction misspelt
    (``"Forward"``, ``"forwrd"``: read as a layer name it would match no layer)."""
    if not isinstance(layer, str) or not layer:
        raise ValueError(
            f"codec: layer key {layer!r} is not a layer name; keys are the distributed layers' "
            f"names (e.g. 'convs.0'), {FETCH_LAYER!r} (the neighbour fetch) or '*' (the rest)"
        )
    close = difflib.get_close_matches(layer.lower(), DIRECTIONS, n=1, cutoff=0.75)
    if close:
        raise ValueError(
            f"codec: key {layer!r} looks like a misspelt direction; did you mean {close[0]!r}? (directions"
            " are 'forward' and 'backward', lower case; other keys are layer names)"
        )


def unmatched_codec_layers(policy: CodecPolicy, layer_names: Sequence[str]) -> list[str]:
    """The layer keys of ``policy``'s spec (besides ``"*"`` and the fetch's) that name none of
    ``layer_names`` (a model's message-passing layers' qualified names), with
    :meth:`CodecPolicy.lookup`'s matching: the name itself or its tail after a dot."""
    return sorted(
        key
        for key in policy.table
        if key not in ("*", FETCH_LAYER)
        and not any(name == key or name.endswith("." + key) for name in layer_names)
    )


def check_fetch_codec(policy: CodecPolicy) -> None:
    """Refuse a policy whose neighbour-fetch codec is ``"adaptive"`` (e.g. ``"adaptive"`` for
    everything, with ``loader="neighbor"``)."""
    if policy.lookup(FETCH_LAYER, "forward") == ADAPTIVE:
        raise ValueError(
            "codec='adaptive' needs every rank's agreement per epoch, which the neighbour "
            "loader's feature fetch does not have; give the fetch a fixed codec, e.g. "
            f"codec={{{FETCH_LAYER!r}: 'int8', '*': 'adaptive'}}"
        )


class CodecPolicy:
    """Which codec each ``(layer, direction)`` uses, the random streams of the stochastic ones,
    and the adaptive bit-width rule.

    Args:
        codec (str or dict): a codec name (``"fp32"``, ``"fp16"``, ``"bf16"``, ``"int8"``,
            ``"int4"``, ``"adaptive"``), a mapping per direction (``{"forward": "int8",
            "backward": "bf16"}``), or a mapping per layer name (the distributed layer's
            ``layer_name``, e.g. ``"model.convs.0"``, or its tail after a dot, ``"convs.0"``; the
            neighbour loader's feature fetch is layer ``"features"``, direction ``"forward"``)
            with ``"*"`` for the rest. (default: ``"fp32"``)
        seed (int, optional): seed of the stochastic rounding; the stream of a message is a hash
            of ``(seed, rank, layer, direction, message number)``. (default: torch's initial
            seed when the first message is encoded, so ``seed_everything`` makes runs repeatable)
        tolerance (float): ``"adaptive"``: the relative variance ``E‖Q(x) − x‖² / ‖x‖²`` int4
            may add to a layer's messages (summed over ranks and the epoch's rounds) before the
            layer is raised to int8. (default: :data:`DEFAULT_TOLERANCE`)
    """

    def __init__(
        self, codec: Any = "fp32", seed: int | None = None, tolerance: float = DEFAULT_TOLERANCE
    ) -> None:
        valid = isinstance(tolerance, int | float) and not isinstance(tolerance, bool)
        if not (valid and math.isfinite(tolerance) and tolerance >= 0):
            raise ValueError(
                f"tolerance must be a finite relative variance >= 0 (got {tolerance!r})"
            )
        self.spec = codec
        self.table = parse_codec_spec(codec)
        self.seed, self.tolerance = seed, float(tolerance)
        self._steps: dict[tuple[str, str], int] = {}
        # adaptive: the codec in use per key, and [Σ error, Σ norm²] of int4 over this epoch
        self._choice: dict[tuple[str, str], str] = {}
        self._stats: dict[tuple[str, str], list[float]] = {}
        self._epoch: int | None = None
        self._seen: set[str] = set()
        #: ``(epoch, {"layer/direction": codec})`` after every adaptive agreement.
        self.history: list[tuple[int, dict[str, str]]] = []

    @classmethod
    def coerce(cls, codec: Any) -> CodecPolicy:
        """``codec`` itself if it is a policy, else a new policy from the spec."""
        return codec if isinstance(codec, CodecPolicy) else cls(codec)

    @property
    def lossless(self) -> bool:
        """True when every message travels as ``fp32`` (the exchange without a codec)."""
        return all(n == "fp32" for row in self.table.values() for n in row.values())

    @property
    def adaptive(self) -> bool:
        return any(n == ADAPTIVE for row in self.table.values() for n in row.values())

    def name(self, layer: str, direction: str) -> str:
        """The configured name for ``(layer, direction)`` (``"adaptive"`` unresolved); marks
        the spec's entry as used (see :meth:`unmatched_layers`)."""
        key = self._key(layer)
        self._seen.add(key)
        return self.table[key].get(direction, "fp32")

    def lookup(self, layer: str, direction: str) -> str:
        """:meth:`name` without marking the entry as used."""
        return self.table[self._key(layer)].get(direction, "fp32")

    def _key(self, layer: str) -> str:
        """The spec entry of ``layer``: its own name, else the longest entry it ends with after a
        dot (``"convs.0"`` matches ``"model.convs.0"``), else ``"*"``."""
        if layer in self.table:
            return layer
        suffixes = [k for k in self.table if k != "*" and layer.endswith("." + k)]
        return max(suffixes, key=len) if suffixes else "*"

    def codec(self, layer: str, direction: str) -> Codec:
        """The codec of this round's messages of ``(layer, direction)``."""
        name = self.name(layer, direction)
        if name == ADAPTIVE:
            name = self._choice.setdefault((layer, direction), ADAPTIVE_LADDER[-1])
            self._stats.setdefault((layer, direction), [0.0, 0.0])
        return CODECS[name]

    def generator(self, layer: str, direction: str, rank: int, device) -> torch.Generator:
        """A generator for the next message of ``(layer, direction)`` sent by ``rank``."""
        if self.seed is None:
            self.seed = int(torch.initial_seed()) & 0x7FFFFFFF
        key = (layer, direction)
        step = self._steps.get(key, 0)
        self._steps[key] = step + 1
        layer_key = zlib.crc32(layer.encode())
        direction_key = zlib.crc32(direction.encode())
        seed = int(hash_keys(self.seed, rank, layer_key, direction_key, step))
        return torch.Generator(device=device).manual_seed(seed)

    def encode(self, codec: Codec, rows: Tensor, layer: str, direction: str, rank: int) -> Tensor:
        """``codec.encode(rows)`` with the message's generator; feeds the adaptive statistics."""
        if codec.lossless:
            return codec.encode(rows)
        stats = self._stats.get((layer, direction))
        if stats is not None:
            error, norm = quantisation_variance(rows, 4)
            stats[0] += error
            stats[1] += norm
        return codec.encode(rows, self.generator(layer, direction, rank, rows.device))

    def begin_round(self, epoch: int | None, group=None, counter=None) -> None:
        """Called before every round on every rank; at the first training round of a new epoch
        the adaptive rule re-chooses each key's codec from the previous epoch's statistics of all
        ranks (one collective, recorded in ``counter`` as ``(CONTROL_LAYER, "control")``)."""
        if epoch is None or epoch == self._epoch:
            return
        first, self._epoch = self._epoch is None, epoch
        if first or not self._stats:
            return
        keys = sorted(self._stats)
        local = torch.tensor([self._stats[k] for k in keys], dtype=torch.float64).view(-1)
        names = "|".join(f"{layer}/{direction}" for layer, direction in keys)
        header = torch.tensor([len(keys), zlib.crc32(names.encode())], dtype=torch.float64)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1:
            # Both sizes must match on every rank: gather the key lists' fingerprints first.
            world = dist.get_world_size(group)
            headers = [torch.empty_like(header) for _ in range(world)]
            dist.all_gather(headers, header, group=group)
            if any(not torch.equal(h, header) for h in headers):
                raise RuntimeError(
                    "codec='adaptive': the ranks exchanged different layers this epoch "
                    f"(this rank: {names}); every rank must run the same distributed layers"
                )
            dist.all_reduce(local, group=group)
            if counter is not None:
                counter.record(
                    CONTROL_LAYER,
                    "control",
                    rows_sent=1,
                    rows_received=1,
                    width=header.numel() + local.numel(),
                    element_size=8,
                    messages_sent=2,
                    messages_received=2,
                )
        stats = local.view(-1, 2).tolist()
        for key, (error, norm) in zip(keys, stats, strict=True):
            if norm > 0:
                low = ADAPTIVE_LADDER[0]
                self._choice[key] = low if error <= self.tolerance * norm else ADAPTIVE_LADDER[1]
            self._stats[key] = [0.0, 0.0]
        self.history.append((epoch, {f"{lay}/{d}": self._choice[(lay, d)] for lay, d in keys}))

    def unmatched_layers(self) -> list[str]:
        """Layer names of the spec that no message has asked for (typos, renamed layers)."""
        return sorted(set(self.table) - {"*"} - self._seen)  # _seen holds matched entries

    # -- checkpoint ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Message counters, adaptive choices and statistics, the epoch and the seed."""
        return {
            "seed": self.seed,
            "epoch": self._epoch,
            "steps": [[*k, v] for k, v in self._steps.items()],
            "choice": [[*k, v] for k, v in self._choice.items()],
            "stats": [[*k, *v] for k, v in self._stats.items()],
        }

    def load_state_dict(self, state: dict) -> None:
        self.seed, self._epoch = state["seed"], state["epoch"]
        self._steps = {(lay, d): int(v) for lay, d, v in state["steps"]}
        self._choice = {(lay, d): str(v) for lay, d, v in state["choice"]}
        self._stats = {(lay, d): [float(e), float(n)] for lay, d, e, n in state["stats"]}

    def __repr__(self) -> str:
        extra = f", tolerance={self.tolerance}" if self.adaptive else ""
        return f"CodecPolicy({self.spec!r}{extra})"

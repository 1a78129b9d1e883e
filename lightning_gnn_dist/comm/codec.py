"""Message codecs: how exchanged rows travel on the wire (issue 22; AdaQP, Sancus^q).

Every exchange mode moves ``[rows, d]`` float blocks. A :class:`Codec` turns such a block into a
*wire* tensor of one row per input row (so a transport can slice it per peer exactly as it slices
the rows) and back:

========= ============================================== ==================================
codec     wire row of a ``d``-wide float32 row            bytes per row
========= ============================================== ==================================
``fp32``  the row itself (nothing is converted)           ``4·d``
``fp16``  IEEE half, stochastically rounded               ``2·d``
``bf16``  bfloat16, stochastically rounded                ``2·d``
``int8``  ``d`` codes + row header (scale, zero pt.)     ``d + 2`` (``d < 32``: ``d + 1``)
``int4``  ``d`` codes packed two per byte + 2-byte hdr.  ``ceil(d/2) + 2``
========= ============================================== ==================================

Integer codecs quantise each row on its own grid (AdaQP's per-row quantisation): ``q = floor(x/s +
z + ε)`` with ``ε ~ U[0, 1)``, decoded as ``s·(q − z)``. On rows of 32 or more elements the scale
``s`` keeps float32's 8 exponent bits and 4 leading mantissa bits and the zero point ``z`` has 16
positions, so the header is 2 bytes (a bf16 zero point and scale took 4, which cost int8 0.29×
instead of 0.27× of the fp32 bytes on 8-wide rows). int8's narrower rows, such as a
transform-first layer's class-wide messages, carry 1 byte: a power-of-two scale and a zero point
at the grid's bottom or middle (on 5-wide rows the 2-byte header alone was 10 % of fp32's bytes,
and int8 moved 0.2703× on the SBM benchmark instead of 0.264×). int4 keeps the 2-byte header on
every row: with 15 levels, the coarser grid doubled its variance on narrow rows, and
``"adaptive"`` then never chose it. Per row the encoder takes the smallest ``s``
(rounded *up*) whose grid ``[−z·s, (2^b − 1 − z)·s]`` covers the row, so every ``x`` lies on the
grid's span and the decoded row is unbiased: ``E[decode(encode(x))] = x`` (up to float32 rounding
of the arithmetic); zero is on the grid, so zeros stay exact. On wide rows the step is at most
``range/(2^b − 1 − u)`` (``u = (2^b − 1)/15``; one-signed rows: ``max|x|/(2^b − 1)``) times ``1 +
2⁻⁴``: within 7 % (int8) of the per-row min/max step when the row straddles zero, coarser for a
row far from zero (its step follows ``max|x|``, not its range); on narrow rows at most
``2·max|x|/⌊(2^b − 1)/2⌋`` (``2·max|x|/(2^b − 1)`` for a row ≥ 0). The half-precision codecs
round stochastically too (probability proportional to the distance to each neighbour), so every
lossy codec is unbiased;
``fp16`` saturates at ±65504 instead of overflowing. The random numbers come from a generator per
message (:meth:`CodecPolicy.generator`: seed, rank, layer, direction and a per-message counter), so
a run is repeatable for a seed.

:class:`CodecPolicy` says which codec each message uses: one name for everything, one per
direction (``{"forward": "int8", "backward": "bf16"}``), or one per layer (``{"convs.0":
"fp32", "*": "int8"}``, values a name or a per-direction mapping). ``"adaptive"`` picks, per
``(layer, direction)`` and epoch, ``int4`` where the variance that ``int4`` rounding would add to
the layer's messages in the previous epoch stays within ``tolerance`` of their squared norm, and
``int8`` elsewhere (AdaQP's variance criterion, per layer instead of per message group); all ranks
agree through one small collective per epoch, counted as layer :data:`CONTROL_LAYER`.

The transports call the codec (``comm.p2p``, ``comm.broadcast``, ``comm.cached``,
``comm.vertex_cut``, the neighbour loader's feature fetch, and :func:`all_to_all_rows` for any
``all_to_all`` of rows); the counters record the encoded bytes (payload plus the integer codecs'
row headers).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import torch
from torch import Tensor

from lightning_gnn_dist.comm.messages import all_to_all

DIRECTIONS = ("forward", "backward")
ADAPTIVE = "adaptive"
ADAPTIVE_LADDER = ("int4", "int8")
"""Codecs ``"adaptive"`` chooses from, lowest bit-width first."""
CONTROL_LAYER = "codec"
"""Counter layer of the adaptive codec's per-epoch agreement (direction ``"control"``)."""
DEFAULT_TOLERANCE = 0.01
"""Default relative variance ``E‖Q(x) − x‖² / ‖x‖²`` that ``"adaptive"`` accepts from int4."""
FETCH_LAYER = "features"
"""Layer name of the neighbour loader's remote feature fetch (direction ``"forward"``)."""


class Codec(ABC):
    """Encodes ``[rows, d]`` float rows into a wire tensor ``[rows, row_bytes(d)]`` and back."""

    name: ClassVar[str] = ""
    lossless: ClassVar[bool] = False

    @abstractmethod
    def row_bytes(self, width: int, element_size: int = 4) -> int:
        """Bytes on the wire per row of ``width`` elements of ``element_size`` bytes."""

    def message_bytes(self, rows: int, width: int, element_size: int = 4) -> int:
        """Bytes on the wire of ``rows`` rows (payload plus zero points and scales)."""
        return rows * self.row_bytes(width, element_size)

    @abstractmethod
    def encode(self, rows: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """``[n, d]`` float rows → ``[n, row_bytes(d)]`` wire (``uint8``; ``fp32``: the rows)."""

    @abstractmethod
    def decode(self, wire: Tensor, width: int, dtype: torch.dtype = torch.float32) -> Tensor:
        """``[n, row_bytes(width)]`` wire → ``[n, width]`` rows of ``dtype``."""

    def empty(self, rows: int, width: int, like: Tensor) -> Tensor:
        """A receive buffer for ``rows`` encoded rows of ``width`` (device of ``like``)."""
        return torch.empty(
            rows, self.row_bytes(width, like.element_size()), dtype=torch.uint8, device=like.device
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class IdentityCodec(Codec):
    """``fp32``: rows travel as they are (bit-identical to an exchange without a codec)."""

    name = "fp32"
    lossless = True

    def row_bytes(self, width: int, element_size: int = 4) -> int:
        return width * element_size

    def encode(self, rows: Tensor, generator: torch.Generator | None = None) -> Tensor:
        return rows

    def decode(self, wire: Tensor, width: int, dtype: torch.dtype = torch.float32) -> Tensor:
        return wire

    def empty(self, rows: int, width: int, like: Tensor) -> Tensor:
        return like.new_empty(rows, width)


class HalfCodec(Codec):
    """``fp16`` / ``bf16`` with stochastic rounding: 2 bytes per element, unbiased."""

    def __init__(self, name: str, dtype: torch.dtype) -> None:
        self.name, self.dtype = name, dtype

    def row_bytes(self, width: int, element_size: int = 4) -> int:
        return 2 * width

    def encode(self, rows: Tensor, generator: torch.Generator | None = None) -> Tensor:
        rows = rows.float()
        if self.dtype == torch.bfloat16:
            half = _stochastic_bf16(rows, generator)
        else:
            half = _stochastic_fp16(rows, generator)
        return half.contiguous().view(torch.uint8).view(rows.size(0), 2 * rows.size(1))

    def decode(self, wire: Tensor, width: int, dtype: torch.dtype = torch.float32) -> Tensor:
        return _aligned(wire).view(self.dtype).view(wire.size(0), width).to(dtype)


class IntCodec(Codec):
    """``int8`` / ``int4``: per-row stochastic integer quantisation (AdaQP) with a row header of
    2 bytes, 1 byte on narrow rows (fewer than ``narrow_width`` elements); ``int4`` codes are
    packed two per byte (low nibble first).

    A row decodes as ``s·(q − z)``: ``q`` its codes (``0 … L``, ``L = 2^b − 1``), ``s`` its scale
    and ``z`` its zero point in codes. Per row the encoder picks the smallest ``s`` on the header's
    grid, over the header's zero points, whose codes ``[−z·s, (L − z)·s]`` cover the row, so zero
    is on the grid (zero rows and zero elements stay exact) and every element is at most one step
    ``s`` from its decoded value.

    * Wide rows (2 bytes, little-endian word ``(float32 bits of s >> 19) << 4 | k``): ``s`` keeps
      float32's 8 exponent bits and 4 leading mantissa bits (rounded *up*), ``z = k·u`` with
      ``k = 0 … 15`` and ``u = L/15`` codes (17 for int8, 1 for int4).
    * Narrow rows (1 byte ``e << 1 | k``): ``s = 2^(e − 96)``, a power of two (``e = 0 … 127``:
      ``2^-96 … 2^31``), and ``z = k·⌈L/2⌉`` with ``k`` 0 or 1 (the grid starts at zero or is
      centred on it). The step is at most twice the wide header's, but on a 5-wide row the
      second byte is 1/20 of its fp32 bytes. Rows beyond ``L·2^31`` (``5.5e11`` for int8)
      saturate, like ``fp16`` beyond 65504.
    """

    header_bytes: ClassVar[int] = 2
    zero_steps: ClassVar[int] = 15
    _mantissa_bits: ClassVar[int] = 23  # float32's; a narrow scale keeps none of them
    _dropped_bits: ClassVar[int] = 19  # float32 mantissa bits the wide scale does not keep
    _narrow_exponents: ClassVar[tuple[int, int]] = (127 - 96, 127 + 31)  # float32 exponent fields

    def __init__(self, bits: int, narrow_width: int = 0) -> None:
        """``bits`` per code; rows of fewer than ``narrow_width`` elements carry the 1-byte
        header (``0``: none do)."""
        self.bits, self.name, self.narrow_width = bits, f"int{bits}", narrow_width
        self.levels = 2**bits - 1
        self.unit = self.levels // self.zero_steps

    def _payload(self, width: int) -> int:
        return width if self.bits == 8 else (width + 1) // 2

    def _narrow(self, width: int) -> bool:
        """Whether ``width``-wide rows carry the 1-byte header."""
        return width < self.narrow_width

    def _header_bytes(self, width: int) -> int:
        return 1 if self._narrow(width) else self.header_bytes

    def row_bytes(self, width: int, element_size: int = 4) -> int:
        return self._payload(width) + self._header_bytes(width)

    def zero_unit(self, width: int) -> int:
        """Codes per step of the zero point of ``width``-wide rows (``z = k·zero_unit``)."""
        return (self.levels + 1) // 2 if self._narrow(width) else self.unit

    def _grid(self, rows: Tensor) -> tuple[Tensor, Tensor]:
        """``[n, d]`` float32 rows → ``([n]`` scales (already on the header's grid),
        ``[n]`` int64 zero-point steps ``k``)``: the smallest scale whose grid covers each row."""
        width = rows.size(1)
        narrow = self._narrow(width)
        steps = 1 if narrow else self.zero_steps
        below = (self.zero_unit(width) * torch.arange(steps + 1, device=rows.device)).float()
        above = self.levels - below
        low = rows.amin(1, keepdim=True).neg_().clamp_(min=0)  # how far below zero
        high = rows.amax(1, keepdim=True).clamp_(min=0)
        # 0/0 (nothing on that side, no codes there) → 0; x/0 → inf (that zero point fails).
        need = torch.maximum(
            torch.where(low > 0, low / below, torch.zeros_like(below)),
            torch.where(high > 0, high / above, torch.zeros_like(above)),
        )
        scale, zero = need.min(1)
        mask = (1 << (self._mantissa_bits if narrow else self._dropped_bits)) - 1
        bits = (scale.contiguous().view(torch.int32) + mask) & ~mask  # round up, positive floats
        if narrow:
            lowest, highest = self._narrow_exponents
            bits = bits.clamp(lowest << self._mantissa_bits, highest << self._mantissa_bits)
        return bits.view(torch.float32), zero

    def _scaled(self, rows: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(scales, zero-point steps, t)`` of ``[n, d]`` float32 rows: ``t = x/s + z``, the
        real-valued codes that stochastic rounding floors after adding ``U[0, 1)``."""
        scale, step = self._grid(rows)
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        # A row with scale 0 is all zeros: t = 0 and its codes are the zero point z = 0.
        zero = (self.zero_unit(rows.size(1)) * step).float()
        return scale, step, (rows / safe[:, None]).add_(zero[:, None])

    def header(self, wire: Tensor, width: int) -> tuple[Tensor, Tensor]:
        """``([n]`` float32 scales, ``[n]`` int64 zero points in codes``)`` of ``wire``'s rows."""
        payload = self._payload(width)
        if self._narrow(width):
            byte = wire[:, payload].to(torch.int32)
            bits = ((byte >> 1) + self._narrow_exponents[0]) << self._mantissa_bits
            scale, step = bits.view(torch.float32), byte & 1
        else:
            raw = wire[:, payload : payload + 2].to(torch.int32)
            word = raw[:, 0] | (raw[:, 1] << 8)
            scale = ((word >> 4) << self._dropped_bits).contiguous().view(torch.float32)
            step = word & 0xF
        return scale, step.to(torch.int64) * self.zero_unit(width)

    def encode(self, rows: Tensor, generator: torch.Generator | None = None) -> Tensor:
        rows = rows.float()
        n, width = rows.shape
        if n == 0:
            return torch.empty(0, self.row_bytes(width), dtype=torch.uint8, device=rows.device)
        scale, step, t = self._scaled(rows)
        codes = t.add_(self._noise(rows, generator)).floor_().clamp_(0, self.levels)
        codes = codes.to(torch.uint8)
        if self.bits == 4:
            if width % 2:
                codes = torch.cat([codes, codes.new_zeros(n, 1)], 1)
            codes = codes[:, 0::2] | (codes[:, 1::2] << 4)
        if self._narrow(width):
            exponent = (scale.view(torch.int32) >> self._mantissa_bits) - self._narrow_exponents[0]
            header = ((exponent << 1) | step.to(torch.int32)).to(torch.uint8)[:, None]
        else:
            word = ((scale.view(torch.int32) >> self._dropped_bits) << 4) | step.to(torch.int32)
            header = torch.stack([word & 0xFF, word >> 8], 1).to(torch.uint8)
        return torch.cat([codes, header], 1)

    @staticmethod
    def _noise(rows: Tensor, generator: torch.Generator | None) -> Tensor:
        """``U[0, 1)`` per element: the stochastic rounding's dither."""
        return torch.rand(rows.shape, generator=generator, device=rows.device)

    def decode(self, wire: Tensor, width: int, dtype: torch.dtype = torch.float32) -> Tensor:
        payload = self._payload(width)
        codes = wire[:, :payload]
        if self.bits == 4:
            codes = torch.stack([codes & 0x0F, codes >> 4], 2).view(wire.size(0), 2 * payload)
            codes = codes[:, :width]
        scale, zero = self.header(wire, width)
        return ((codes.float() - zero.float()[:, None]) * scale[:, None]).to(dtype)


CODECS: dict[str, Codec] = {
    codec.name: codec
    for codec in (
        IdentityCodec(),
        HalfCodec("fp16", torch.float16),
        HalfCodec("bf16", torch.bfloat16),
        IntCodec(8, narrow_width=32),
        IntCodec(4),
    )
}
"""The codecs by name."""
IDENTITY = CODECS["fp32"]
CODEC_NAMES = (*CODECS, ADAPTIVE)


def get_codec(name: str) -> Codec:
    """The codec ``name`` (``fp32``, ``fp16``, ``bf16``, ``int8``, ``int4``).

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    if name not in CODECS:
        raise ValueError(f"unknown codec {name!r}; choose one of {', '.join(CODECS)}")
    return CODECS[name]


# -- rounding helpers ----------------------------------------------------------------------------
def _aligned(wire: Tensor) -> Tensor:
    """``wire`` contiguous and at an even storage offset, so its bytes can be viewed as 2-byte
    values."""
    if wire.is_contiguous() and wire.storage_offset() % 2 == 0:
        return wire
    return wire.clone(memory_format=torch.contiguous_format)


def _bf16_toward(x: Tensor, down: bool) -> Tensor:
    """``[n]`` float32 → bfloat16 rounded toward −inf (``down``) or +inf: the nearest bf16
    that is ``≤ x`` (``≥ x``)."""
    nearest = x.to(torch.bfloat16)
    wrong = nearest.float() > x if down else nearest.float() < x
    return torch.where(wrong, _bf16_step(nearest, up=not down), nearest)


def _bf16_step(values: Tensor, up: bool) -> Tensor:
    """The next bf16 above (``up``) or below each value, through its float32 bit pattern
    (bf16 is the upper half of float32; sign and magnitude are stored separately)."""
    bits = values.float().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    negative = (bits >> 31) == 1
    magnitude = (bits >> 16) & 0x7FFF
    grow = negative != up  # moving away from zero
    at_zero = (magnitude == 0) & ~grow
    magnitude = torch.where(grow, magnitude + 1, magnitude - 1)
    negative = torch.where(at_zero, ~negative, negative)
    magnitude = torch.where(at_zero, torch.ones_like(magnitude), magnitude)
    pattern = ((negative.to(torch.int64) << 15) | magnitude) << 16
    pattern = torch.where(pattern >= 2**31, pattern - 2**32, pattern).to(torch.int32)
    return pattern.view(torch.float32).to(torch.bfloat16)


def _stochastic_bf16(x: Tensor, generator: torch.Generator | None) -> Tensor:
    """float32 → bfloat16 rounded up in magnitude with probability equal to the dropped
    fraction of the 16 low mantissa bits (unbiased). Adding the dither to the bit pattern adds
    to the magnitude for either sign (sign and magnitude are stored apart), and a carry moves
    into the exponent as it should."""
    x = x.contiguous()
    noise = torch.randint(0, 1 << 16, x.shape, generator=generator, device=x.device)
    bits = (x.view(torch.int32) + noise.to(torch.int32)) & -(1 << 16)
    return torch.where(torch.isnan(x), x, bits.view(torch.float32)).to(torch.bfloat16)


def _stochastic_fp16(x: Tensor, generator: torch.Generator | None) -> Tensor:
    """float32 → float16 with stochastic rounding (unbiased within ±65504; beyond, it
    saturates). Normal float16 values keep 10 of float32's 23 mantissa bits, so the bf16 trick
    works with 13 dithered bits; below float16's smallest normal (2^-14) the grid is 2^-24."""
    finite = torch.finfo(torch.float16).max
    x = x.clamp(-finite, finite).contiguous()
    noise = torch.randint(0, 1 << 13, x.shape, generator=generator, device=x.device)
    noise = noise.to(torch.int32)
    normal = ((x.view(torch.int32) + noise) & -(1 << 13)).view(torch.float32)
    grid = 2.0**-24
    subnormal = torch.floor(x / grid + noise.to(x.dtype) * 2.0**-13) * grid
    return torch.where(x.abs() < 2.0**-14, subnormal, normal).to(torch.float16)


def quantisation_variance(rows: Tensor, bits: int) -> tuple[float, float]:
    """``(E‖Q(x) − x‖², ‖x‖²)`` of stochastic ``bits``-bit quantisation of ``[n, d]`` ``rows``
    by :class:`IntCodec` (exact for its grid: ``Σ s² f (1 − f)`` with ``s`` the row's scale and
    ``f`` the element's fractional code)."""
    if rows.numel() == 0:
        return 0.0, 0.0
    rows = rows.detach().float()
    codec = CODECS[f"int{bits}"]
    assert isinstance(codec, IntCodec)
    scale, _, t = codec._scaled(rows)
    fraction = t - torch.floor(t)
    error = (scale[:, None].square() * fraction * (1 - fraction)).sum()
    return float(error), float(rows.square().sum())


def row_bytes(codec: str | Codec, width: int, element_size: int = 4) -> int:
    """Bytes per row of ``width`` elements under ``codec`` (a name or a :class:`Codec`)."""
    codec = get_codec(codec) if isinstance(codec, str) else codec
    return codec.row_bytes(width, element_size)


def all_to_all_rows(
    wire: Tensor,
    send_counts: list[int],
    recv_counts: list[int],
    codec: Codec,
    width: int,
    dtype: torch.dtype = torch.float32,
    group=None,
) -> Tensor:
    """One ``all_to_all_single`` of encoded rows: ``wire`` (``codec``'s encoding of
    ``[Σ send_counts, width]`` rows grouped by receiving rank, e.g. from
    :meth:`CodecPolicy.encode`) → ``[Σ recv_counts, width]`` decoded rows grouped by sending rank.
    For exchanges that move rows with collectives (the neighbour loader's fetch, RDM's
    redistributions; :meth:`~lightning_gnn_dist.comm.base.HaloExchange._all_to_all_rows` also
    counts them)."""
    received = codec.empty(sum(recv_counts), width, wire)
    all_to_all(received, wire, recv_counts, send_counts, group=group)
    return codec.decode(received, width, dtype)


__all__ = [
    "ADAPTIVE",
    "CODECS",
    "CODEC_NAMES",
    "CONTROL_LAYER",
    "Codec",
    "all_to_all_rows",
    "get_codec",
    "quantisation_variance",
    "row_bytes",
]

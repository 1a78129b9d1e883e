"""A store's exchanges written as steps, so that two of them can share their all-to-alls.

A sampled hop and a feature fetch each make the same three all-to-alls: the per-peer request
sizes (``P`` int64), the requests, and the answers (sized by what both sides know). Written as
generators that yield a :class:`Sizes` or :class:`Rows` message and receive what arrived, they
run alone (:func:`drive`) or side by side (:func:`drive_together`), where each round's two
messages travel as one all-to-all: the loader sends a batch's fetch with the next batch's
second hop (three all-to-alls a step instead of six; issue 31).

Merging changes neither the bytes nor their counting: each message keeps its own per-peer
blocks (the first message's block to a peer, then the second's), and the exchanges record their
counters as they do alone. Every rank runs the same steps in the same order (the loaders make
the same calls on every rank), so the merged rounds agree across ranks too; messages of
different kinds in a round run one after the other, the first exchange's first.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass

import torch
from torch import Tensor

from lightning_gnn_dist.comm.messages import all_to_all

__all__ = ["Rows", "Sizes", "Steps", "drive", "drive_together"]


@dataclass
class Sizes:
    """A size all-to-all: ``send [P] int64`` (one value per peer); the step receives ``[P]``."""

    send: Tensor


@dataclass
class Rows:
    """A data all-to-all: ``send`` rows grouped by peer (``send_splits [P]`` rows each), and
    ``recv_splits [P]`` rows to receive (agreed before: exchanged sizes or known to both
    sides); the step receives ``[Σ recv_splits, *send.shape[1:]]`` of ``send``'s dtype."""

    send: Tensor
    send_splits: list[int]
    recv_splits: list[int]


Steps = Generator["Sizes | Rows", Tensor, object]
"""An exchange as steps: yields messages, receives what arrived, returns its result."""


def drive(steps: Steps, group=None):
    """Run one exchange's steps, each message as its own all-to-all; returns its result."""
    try:
        message = next(steps)
        while True:
            message = steps.send(_run(message, group))
    except StopIteration as done:
        return done.value


def drive_together(first: Steps, second: Steps, group=None) -> tuple[object, object]:
    """Run two exchanges' steps round by round, two messages of a kind as one all-to-all;
    returns both results."""
    steps = [first, second]
    pending: list[Sizes | Rows | None] = [None, None]
    results: list[object] = [None, None]

    def advance(index: int, reply: Tensor | None) -> None:
        try:
            pending[index] = next(steps[index]) if reply is None else steps[index].send(reply)
        except StopIteration as done:
            pending[index], results[index] = None, done.value

    advance(0, None)
    advance(1, None)
    while pending[0] is not None or pending[1] is not None:
        a, b = pending
        if a is not None and b is not None and type(a) is type(b):
            reply_a, reply_b = _run_two(a, b, group)
            advance(0, reply_a)
            advance(1, reply_b)
        else:
            index = 0 if a is not None else 1
            advance(index, _run(pending[index], group))
    return results[0], results[1]


def _run(message: Sizes | Rows, group) -> Tensor:
    if isinstance(message, Sizes):
        received = torch.empty_like(message.send)
        all_to_all(received, message.send, group=group)
        return received
    send = message.send
    received = send.new_empty((sum(message.recv_splits), *send.shape[1:]))
    all_to_all(received, send, message.recv_splits, message.send_splits, group=group)
    return received


def _run_two(a: Sizes | Rows, b: Sizes | Rows, group) -> tuple[Tensor, Tensor]:
    if isinstance(a, Sizes):
        both = _run(Sizes(torch.stack([a.send, b.send], 1)), group)
        return both[:, 0].contiguous(), both[:, 1].contiguous()
    # As bytes, each peer's block a's rows then b's: one copy of each send buffer; a's received
    # rows stay in place when one peer sent them (two parts), as a view at the buffer's start.
    messages = (a, b)
    widths = [_row_bytes(message.send) for message in messages]
    sent = [
        _bytes(message.send).split([n * width for n in message.send_splits])
        for message, width in zip(messages, widths, strict=True)
    ]
    peers = range(len(a.send_splits))
    send = torch.cat([blocks[peer] for peer in peers for blocks in sent])
    send_bytes = [sent[0][peer].numel() + sent[1][peer].numel() for peer in peers]
    expected = [
        [n * width for n in message.recv_splits]
        for message, width in zip(messages, widths, strict=True)
    ]
    recv_bytes = [expected[0][peer] + expected[1][peer] for peer in peers]
    received = _run(Rows(send, send_bytes, recv_bytes), group)
    blocks = received.split([n for peer in peers for n in (expected[0][peer], expected[1][peer])])
    replies = []
    for index, message in enumerate(messages):
        parts = [block for block in blocks[index::2] if block.numel()]
        data = parts[0] if len(parts) == 1 else torch.cat(parts) if parts else received[:0]
        if data.storage_offset() % 8:  # views as wider dtypes (here or by the reader) need it
            data = data.clone()
        shape = (sum(message.recv_splits), *message.send.shape[1:])
        replies.append(data.view(message.send.dtype).view(shape))
    return replies[0], replies[1]


def _bytes(tensor: Tensor) -> Tensor:
    return tensor.contiguous().view(-1).view(torch.uint8)


def _row_bytes(tensor: Tensor) -> int:
    return math.prod(tensor.shape[1:]) * tensor.element_size()

"""Point-to-point messages and all-to-alls that keep a gloo link busy both ways.

gloo serves a pair of ranks over one TCP connection. A message that arrives before its receive
is posted waits in the socket, which stops the peer's send too: an exchange that posts its sends
first runs the link half-duplex. :func:`start_messages` posts every receive first, and
:func:`all_to_all` runs ``all_to_all_single``'s exchange that way on gloo (gloo's own all-to-all
posts each send before its receive). Measured between two emulated nodes on 250 Mbit/s links,
per direction while both directions carry the same bytes (one way: 8 MB in 268 ms):

=========  ===================  ==================  =====================  =======
bytes      receives first       sends first         ``all_to_all_single``  raw TCP
=========  ===================  ==================  =====================  =======
2 MB       68 ms                77-81 ms            71-112 ms              70 ms
8 MB       273 ms               405-534 ms          396-542 ms             272 ms
=========  ===================  ==================  =====================  =======

Other backends (NCCL) start a batch of messages as one group, so the order does not matter and
:func:`all_to_all` is their own ``all_to_all_single``.
"""

from __future__ import annotations

from itertools import accumulate

import torch
import torch.distributed as dist
from torch import Tensor


def start_messages(ops: list[dist.P2POp]) -> list:
    """Start point-to-point messages (``batch_isend_irecv``) with every receive posted before
    any send (each kind in its given order); returns the requests, receives first."""
    receives = [op for op in ops if op.op is dist.irecv]
    ordered = receives + [op for op in ops if op.op is not dist.irecv]
    return dist.batch_isend_irecv(ordered) if ordered else []


def all_to_all(
    output: Tensor,
    input: Tensor,
    output_split_sizes: list[int] | None = None,
    input_split_sizes: list[int] | None = None,
    group: dist.ProcessGroup | None = None,
) -> None:
    """``dist.all_to_all_single`` (same arguments; splits in rows of dimension 0), run on gloo
    as one message per peer with the receives posted first; the rank's own chunk is copied."""
    if dist.get_backend(group) != dist.Backend.GLOO:
        dist.all_to_all_single(output, input, output_split_sizes, input_split_sizes, group=group)
        return
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    sent = input_split_sizes or [input.size(0) // world] * world
    received = output_split_sizes or [output.size(0) // world] * world
    if len(sent) != world or len(received) != world:
        raise ValueError(f"all_to_all needs {world} split sizes, got {sent} and {received}")
    if sum(sent) != input.size(0) or sum(received) != output.size(0):
        raise ValueError(
            f"split sizes {sent} / {received} do not add up to the {input.size(0)} input and "
            f"{output.size(0)} output rows"
        )
    source = input.contiguous()
    out = output if output.is_contiguous() else output.contiguous()
    starts_in = list(accumulate(sent, initial=0))
    starts_out = list(accumulate(received, initial=0))
    ops = []
    with torch.no_grad():  # a collective: autograd does not see it (as all_to_all_single)
        for peer in range(world):
            chunk_in = source.narrow(0, starts_in[peer], sent[peer])
            chunk_out = out.narrow(0, starts_out[peer], received[peer])
            if peer == rank:
                chunk_out.copy_(chunk_in)
                continue
            if received[peer]:
                ops.append(dist.P2POp(dist.irecv, chunk_out, group=group, group_peer=peer))
            if sent[peer]:
                ops.append(dist.P2POp(dist.isend, chunk_in, group=group, group_peer=peer))
        for request in start_messages(ops):
            request.wait()
        if out is not output:
            output.copy_(out)


__all__ = ["all_to_all", "start_messages"]

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

Between ranks of one host the receives-first messages cost more than they save: loopback
sockets never fill, while each gloo point-to-point message is a round trip through gloo's threads
that ``all_to_all_single`` batches. Two ranks sharing 2 busy cores took 0.5-4 ms per exchange of
16 B-200 kB that way, against 0.3-0.6 ms with ``all_to_all_single``, and the neighbour loader's
sampling epoch (240 exchanges) ran 1.3-1.45x slower. So :func:`all_to_all` posts receives first
only when the group spans hosts (:func:`group_spans_hosts`; an emulated node is a host of its
own), and is ``all_to_all_single`` otherwise.

Other backends (NCCL) start a batch of messages as one group, so the order does not matter and
:func:`all_to_all` is their own ``all_to_all_single``.

**NCCL's rules** (gloo tolerates breaking some of them; NCCL hangs or corrupts, NCCL#479, #2130,
#788; pytorch#146468). Every exchange (each mode's class, the subgraph loader and the neighbour
loader's store) states how it keeps them in an "NCCL rule" paragraph of its class docstring, and
``tests/comm/test_nccl_patterns.py`` checks that every one has it and runs every mode on gloo
with :class:`~lightning_gnn_dist.testing.nccl.MessageRecorder`:

1. *Pairwise equal messages*: what rank ``a`` posts to ``b`` is, in order, size and dtype, what
   ``b`` posts to receive from ``a``. A zero-size message is left out on **both** sides (every
   point-to-point exchange here skips it, as ``broadcast`` skips a root without rows: sizes
   come from plans both sides hold, or from a size exchange).
2. *Symmetric batches*: the messages of one exchange between two ranks go in one
   :func:`start_messages` call on each side, after the same collectives of the group.
3. *Consistent all-to-alls*: ``all_to_all_single``'s splits agree pairwise (what ``a`` sends
   ``b`` is what ``b`` expects from ``a``); zero splits are allowed on both sides alike.
4. *Same collectives*: every rank of a group calls the same collectives in the same order
   (kind, dtype, size, root).
5. *Device*: tensors posted to an NCCL group live on the rank's CUDA device
   (``torch.cuda.set_device`` is called before the group is created: Lightning's strategy does);
   a CPU-side exchange (the loaders' sampling and fetch) uses a gloo group,
   :func:`host_group`. If ``batch_isend_irecv`` is the first call on an NCCL group, every rank
   must take part: the strategy's parameter broadcast comes first.
"""

from __future__ import annotations

import os
import weakref
from itertools import accumulate

import torch
import torch.distributed as dist
from torch import Tensor


def start_messages(ops: list[dist.P2POp]) -> list:
    """Start point-to-point messages (``batch_isend_irecv``) with every receive posted before
    any send (each kind in its given order); returns the requests, receives first.

    NCCL rule: the caller posts one exchange's messages with each peer in one call, the same
    call on the peer holding the mirror messages (rule 2 of the module docstring); an empty
    list posts nothing (no zero-size placeholder: the peer posts none either)."""
    receives = [op for op in ops if op.op is dist.irecv]
    ordered = receives + [op for op in ops if op.op is not dist.irecv]
    return dist.batch_isend_irecv(ordered) if ordered else []


def global_rank(group: dist.ProcessGroup | None, rank: int) -> int:
    """The global rank of ``group``'s rank ``rank`` (what ``P2POp``'s ``peer`` takes; its
    ``group_peer`` argument exists only from torch 2.6 on)."""
    return rank if group is None else dist.get_global_rank(group, rank)


_SPANS_HOSTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_HOST_GROUPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def host_group(group: dist.ProcessGroup | None = None, timeout=None) -> dist.ProcessGroup | None:
    """A process group over ``group``'s ranks (default: the world) that carries CPU tensors,
    for exchanges that run on the host (the loaders' sampling and feature fetch): ``group``
    itself on gloo, or when no process group is initialised; otherwise (NCCL) a gloo group over
    the same ranks, created on the first call (collective: every rank of ``group`` calls it) and
    kept. ``timeout`` (a ``timedelta``) applies to a new group."""
    if not (dist.is_available() and dist.is_initialized()):
        return group
    if dist.get_backend(group) == dist.Backend.GLOO:
        return group
    key = group if group is not None else dist.group.WORLD
    if key not in _HOST_GROUPS:
        ranks = None if group is None else dist.get_process_group_ranks(group)
        options = {} if timeout is None else {"timeout": timeout}
        _HOST_GROUPS[key] = dist.new_group(ranks, backend="gloo", **options)
    return _HOST_GROUPS[key]


def host_key() -> str:
    """What tells this process's host apart: the kernel's boot id (one per machine and boot)
    and the network namespace (one per emulated node)."""
    with open("/proc/sys/kernel/random/boot_id") as boot:
        boot_id = boot.read().strip()
    return f"{boot_id}/{os.stat('/proc/self/ns/net').st_ino}"


def group_spans_hosts(group: dist.ProcessGroup | None = None) -> bool:
    """Whether the ranks of ``group`` (default: the world) run on more than one host. Found
    once per group by an ``all_gather_object`` of :func:`host_key` (so the first call is
    collective), then cached."""
    key = group if group is not None else dist.group.WORLD
    if key not in _SPANS_HOSTS:
        try:
            local = host_key()
        except OSError:  # no /proc (not Linux): every rank on its own host is the safe guess
            local = f"{os.uname().nodename}/{os.getpid()}"
        keys: list = [None] * dist.get_world_size(group)
        dist.all_gather_object(keys, local, group=group)
        _SPANS_HOSTS[key] = len(set(keys)) > 1
    return _SPANS_HOSTS[key]


def all_to_all(
    output: Tensor,
    input: Tensor,
    output_split_sizes: list[int] | None = None,
    input_split_sizes: list[int] | None = None,
    group: dist.ProcessGroup | None = None,
    receive_first: bool | None = None,
) -> None:
    """``dist.all_to_all_single`` (same arguments; splits in rows of dimension 0). On gloo with
    ``receive_first`` it runs as one message per peer with the receives posted first and the
    rank's own chunk copied; ``receive_first=None`` chooses that when the group spans hosts
    (:func:`group_spans_hosts`, the module docstring). Every rank must pass the same
    ``receive_first``.

    NCCL rule: the splits must agree pairwise (``input_split_sizes[b]`` on rank ``a`` equals
    ``output_split_sizes[a]`` on rank ``b``); on NCCL this is NCCL's own all-to-all, zero splits
    included. The receives-first form posts a message only where the split is non-zero, on both
    sides alike."""
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
    if receive_first is None:
        receive_first = group_spans_hosts(group)
    if not receive_first:
        with torch.no_grad():
            dist.all_to_all_single(output, input, received, sent, group=group)
        return
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
                ops.append(dist.P2POp(dist.irecv, chunk_out, global_rank(group, peer), group))
            if sent[peer]:
                ops.append(dist.P2POp(dist.isend, chunk_in, global_rank(group, peer), group))
        for request in start_messages(ops):
            request.wait()
        if out is not output:
            output.copy_(out)


__all__ = [
    "all_to_all",
    "global_rank",
    "group_spans_hosts",
    "host_group",
    "host_key",
    "start_messages",
]

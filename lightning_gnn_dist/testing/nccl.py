"""NCCL's rules for message patterns, checked on CPU: a recorder of what each rank posts.

gloo buffers point-to-point messages and pairs every send with any later receive; NCCL does not.
A pattern that passes on gloo can hang on NCCL (NCCL#479, #2130) when

* the point-to-point messages between two ranks differ: rank ``a`` posts a send to ``b`` (a
  zero-size one included) that ``b`` never receives, or sizes or dtypes differ;
* batched point-to-point groups (``batch_isend_irecv``, one NCCL group each) are not symmetric:
  the ``k``-th batch ``a`` posts with ``b`` must hold the mirror of the ``k``-th batch ``b``
  posts with ``a``, after the same collectives of that group;
* collectives differ between the ranks of a group (kind, dtype, size, root), or
  ``all_to_all_single``'s splits disagree pairwise (``a`` sends ``b`` what ``b`` expects from
  ``a``; NCCL#788, pytorch#146468 for zero-size sides);
* a tensor posted to a group lives on another device than the group's others (NCCL: CUDA only,
  on the device ``torch.cuda.set_device`` chose before the first call).

:class:`MessageRecorder` wraps ``torch.distributed``'s point-to-point calls (``send``, ``recv``,
``isend``, ``irecv``, ``batch_isend_irecv``) and collectives (``all_to_all_single``,
``all_reduce``, ``reduce``, ``broadcast``, ``all_gather``, ``all_gather_into_tensor``,
``barrier`` and the ``*_object`` ones) while it is active and records, per call, the operation, the
peer, the element count, dtype, device and where it was called from; calls made inside a recorded
one (an object collective's own all-gathers, ``batch_isend_irecv``'s sends) are not recorded again.
:func:`check_records` compares every rank's records pairwise and returns the violations;
:func:`assert_nccl_safe` raises with the two ranks' lists. Records are picklable: gather them
from forked ranks (``tests/distributed.py``) or from threads (:func:`run_threaded`).

:func:`run_threaded` runs ranks as threads of this process on torch's threaded process group
(``backend="threaded"``, a private API of ``torch.testing``): real data between threads, every
collective (uneven ``all_to_all_single`` included), no point-to-point. Its backend is not gloo, so
code that branches on the backend takes its NCCL branch.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import threading
import traceback
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

POINT_TO_POINT = ("send", "recv", "isend", "irecv")
COLLECTIVES = (
    "all_to_all_single",
    "all_reduce",
    "reduce",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "barrier",
    "all_gather_object",
    "broadcast_object_list",
    "gather_object",
)
OBJECT_COLLECTIVES = ("all_gather_object", "broadcast_object_list", "gather_object")
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Op:
    """One operation a rank posted.

    Attributes:
        rank: the global rank that posted it (``dist.get_rank()`` of the posting thread).
        kind: ``"send"``/``"recv"`` (point to point, bare or batched) or a collective's name.
        group: the process group's name (the same on every rank).
        peer: point to point: the peer's global rank; ``None`` for collectives.
        numel: elements of the tensor (collectives with several tensors: of the input;
            ``-1`` for object collectives, whose sizes are exchanged inside).
        dtype: the tensor's dtype (``""`` when none).
        device: the tensor's device type (``"cpu"``, ``"cuda"``...).
        batch: the rank's ``batch_isend_irecv`` call that posted it (``-1``: a bare send/recv,
            a batch of its own).
        collectives_before: collectives this rank had posted on ``group`` before this op.
        detail: collectives: what must agree across ranks besides the size (``all_to_all_single``:
            ``(elements sent to each group rank, elements received from each)``; ``broadcast``,
            ``reduce``: the root; ``all_reduce``, ``reduce``: the operation).
        where: the caller inside the package (``file:line``), else the first caller outside
            ``torch``.
    """

    rank: int
    kind: str
    group: str
    peer: int | None
    numel: int
    dtype: str
    device: str
    batch: int = -1
    collectives_before: int = 0
    detail: tuple = ()
    where: str = ""

    def describe(self) -> str:
        peer = "" if self.peer is None else f" peer {self.peer}"
        detail = f" {self.detail}" if self.detail else ""
        batch = f" batch {self.batch}" if self.batch >= 0 else ""
        return (
            f"{self.kind}{peer} {self.numel}x{self.dtype}@{self.device}{batch}{detail} "
            f"[{self.group}] at {self.where}"
        )


def _group_name(group) -> str:
    group = group if group is not None else c10d._get_default_group()
    name = getattr(group, "group_name", None)
    if name:
        return str(name)
    return "ranks " + ",".join(map(str, dist.get_process_group_ranks(group)))


def _where() -> str:
    """The innermost caller in this package (not this module), else the first outside torch."""
    outside = ""
    for frame in reversed(traceback.extract_stack()[:-3]):
        path = os.path.abspath(frame.filename)
        if path == os.path.abspath(__file__):
            continue
        if path.startswith(_PACKAGE):
            return f"{os.path.relpath(path, os.path.dirname(_PACKAGE))}:{frame.lineno}"
        if not outside and f"{os.sep}torch{os.sep}" not in path:
            outside = f"{os.path.basename(path)}:{frame.lineno}"
    return outside


def _tensor_facts(tensor) -> tuple[int, str, str]:
    if not isinstance(tensor, torch.Tensor):
        return -1, "", ""
    return tensor.numel(), str(tensor.dtype).removeprefix("torch."), tensor.device.type


def _global_peer(group, peer, group_peer) -> int:
    """The global rank of a point-to-point peer given either way."""
    if peer is not None:
        return int(peer)
    if group is None or group is c10d._get_default_group():
        return int(group_peer)
    return int(dist.get_global_rank(group, group_peer))


class MessageRecorder:
    """Records every ``torch.distributed`` operation this process posts while active.

    A context manager; the records of the calling process (all its threads, each op with the
    rank that posted it) are in :attr:`records`, in posting order; :meth:`by_rank` splits them
    when threads are the ranks (:func:`run_threaded`). Nested use is refused (the recorder
    patches ``torch.distributed`` for the whole process).

    Args:
        post_point_to_point: ``False`` records point-to-point messages without posting them
            (their requests complete at once and receive buffers keep their values): a pattern
            that would hang, on gloo too, can be recorded and checked. Collectives always run.
            (default: ``True``)

    Example::

        with MessageRecorder() as recorder:
            exchange(h_owned, "layer")
        return recorder.records      # gather every rank's list, then check_records(lists)
    """

    _active: MessageRecorder | None = None

    def __init__(self, post_point_to_point: bool = True) -> None:
        self.post_point_to_point = post_point_to_point
        self.records: list[Op] = []
        self._lock = threading.Lock()
        self._local = threading.local()  # depth of recorded calls in this thread
        self._batches = 0
        self._collectives: dict[tuple[int, str], int] = defaultdict(int)
        self._saved: dict[tuple[Any, str], Any] = {}

    def by_rank(self, world_size: int) -> list[list[Op]]:
        """:attr:`records` split by posting rank (threaded ranks share one recorder)."""
        split: list[list[Op]] = [[] for _ in range(world_size)]
        for op in self.records:
            split[op.rank].append(op)
        return split

    # -- recording ----------------------------------------------------------------------------
    def _add(self, op: Op) -> None:
        with self._lock:
            self.records.append(op)

    def _nested(self) -> bool:
        return getattr(self._local, "depth", 0) > 0

    def _call(self, original: Callable, args, kwargs):
        self._local.depth = getattr(self._local, "depth", 0) + 1
        try:
            return original(*args, **kwargs)
        finally:
            self._local.depth -= 1

    def _point_to_point(self, kind: str, original: Callable) -> Callable:
        parameters = inspect.signature(original).parameters
        peer_name = "dst" if kind in ("send", "isend") else "src"

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            if not self._nested():
                bound = inspect.signature(original).bind(*args, **kwargs)
                values = {
                    name: bound.arguments.get(name, parameters[name].default) for name in parameters
                }
                group = values.get("group")
                peer = _global_peer(group, values.get(peer_name), values.get(f"group_{peer_name}"))
                self._record_p2p(
                    "send" if "send" in kind else "recv", values["tensor"], peer, group
                )
                if not self.post_point_to_point:
                    return _Done() if kind.startswith("i") else None
            return self._call(original, args, kwargs)

        return wrapper

    def _record_p2p(self, kind: str, tensor, peer: int, group, batch: int = -1) -> None:
        numel, dtype, device = _tensor_facts(tensor)
        name, rank = _group_name(group), dist.get_rank()
        with self._lock:
            before = self._collectives[rank, name]
        self._add(Op(rank, kind, name, peer, numel, dtype, device, batch, before, where=_where()))

    def _batch(self, original: Callable) -> Callable:
        @functools.wraps(original)
        def wrapper(p2p_op_list, *args, **kwargs):
            if not self._nested() and p2p_op_list:
                with self._lock:
                    batch, self._batches = self._batches, self._batches + 1
                for op in p2p_op_list:
                    kind = "send" if op.op.__name__ == "isend" else "recv"
                    self._record_p2p(kind, op.tensor, int(op.peer), op.group, batch)
                if not self.post_point_to_point:
                    return [_Done() for _ in p2p_op_list]
            return self._call(original, (p2p_op_list, *args), kwargs)

        return wrapper

    def _collective(self, kind: str, original: Callable) -> Callable:
        signature = inspect.signature(original)

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            if not self._nested():
                values = signature.bind(*args, **kwargs)
                values.apply_defaults()
                self._record_collective(kind, values.arguments)
            return self._call(original, args, kwargs)

        return wrapper

    def _record_collective(self, kind: str, arguments: dict) -> None:
        group = arguments.get("group")
        name = _group_name(group)
        tensor = arguments.get("tensor", arguments.get("input"))
        if kind == "all_gather_into_tensor":
            tensor = arguments.get("input_tensor")
        numel, dtype, device = _tensor_facts(tensor)
        detail: tuple = ()
        if kind == "all_to_all_single":
            detail = _split_elements(arguments, dist.get_world_size(group))
        elif kind in ("broadcast", "reduce"):
            root = arguments.get("src", arguments.get("dst"))
            group_root = arguments.get("group_src", arguments.get("group_dst"))
            detail = (_global_peer(group, root, group_root),)
        if kind in ("all_reduce", "reduce"):
            detail += (str(arguments.get("op")),)
        if kind in OBJECT_COLLECTIVES:
            numel, dtype, device = -1, "object", ""
        rank = dist.get_rank()
        with self._lock:
            before = self._collectives[rank, name]
            self._collectives[rank, name] += 1
        self._add(Op(rank, kind, name, None, numel, dtype, device, -1, before, detail, _where()))

    # -- installing ---------------------------------------------------------------------------
    def __enter__(self) -> MessageRecorder:
        if MessageRecorder._active is not None:
            raise RuntimeError("a MessageRecorder is already recording in this process")
        MessageRecorder._active = self
        wrappers: dict[str, Callable] = {}
        for kind in POINT_TO_POINT:
            wrappers[kind] = self._point_to_point(kind, getattr(c10d, kind))
        wrappers["batch_isend_irecv"] = self._batch(c10d.batch_isend_irecv)
        for kind in COLLECTIVES:
            if hasattr(c10d, kind):
                wrappers[kind] = self._collective(kind, getattr(c10d, kind))
        # Both namespaces: ``P2POp`` checks its op against distributed_c10d's own isend/irecv.
        for module in (dist, c10d):
            for name, wrapper in wrappers.items():
                self._saved[(module, name)] = getattr(module, name)
                setattr(module, name, wrapper)
        return self

    def __exit__(self, *exc) -> None:
        for (module, name), original in self._saved.items():
            setattr(module, name, original)
        self._saved.clear()
        MessageRecorder._active = None


class _Done:
    """The request of a message recorded but not posted: complete."""

    def wait(self, timeout=None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def _split_elements(arguments: dict, world: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(elements sent to each group rank, elements received from each)`` of an
    ``all_to_all_single`` call (even splits when none are given)."""
    output, input = arguments["output"], arguments["input"]

    def elements(tensor, splits) -> tuple[int, ...]:
        row = math.prod(tensor.shape[1:])  # elements per row of dimension 0
        if splits is None:
            return tuple([tensor.numel() // world] * world)
        return tuple(int(s) * row for s in splits)

    return (
        elements(input, arguments.get("input_split_sizes")),
        elements(output, arguments.get("output_split_sizes")),
    )


# -- checking -------------------------------------------------------------------------------------
def _listing(ops: Sequence[Op]) -> str:
    return "\n".join(f"      {op.describe()}" for op in ops) or "      (nothing)"


def check_records(records: Sequence[Sequence[Op]]) -> list[str]:
    """The NCCL rules ``records`` (one list per global rank, in rank order) break; empty when
    none. Each problem names the two ranks and lists what each posted."""
    problems: list[str] = []
    problems += _check_point_to_point(records)
    problems += _check_batches(records)
    problems += _check_collectives(records)
    problems += _check_devices(records)
    return problems


def assert_nccl_safe(records: Sequence[Sequence[Op]]) -> None:
    """Raise ``AssertionError`` listing every violation :func:`check_records` finds."""
    problems = check_records(records)
    if problems:
        raise AssertionError(f"{len(problems)} NCCL rule(s) broken:\n" + "\n".join(problems[:20]))


def _check_point_to_point(records) -> list[str]:
    """Every rank posts to each peer the messages that peer receives from it, in order, with
    equal sizes and dtypes (zero-size messages included or left out on both sides)."""
    problems = []
    for a, ops_a in enumerate(records):
        for b, ops_b in enumerate(records):
            groups = {op.group for op in ops_a if op.peer == b} | {
                op.group for op in ops_b if op.peer == a
            }
            for group in sorted(groups):
                sent = [o for o in ops_a if o.kind == "send" and o.peer == b and o.group == group]
                got = [o for o in ops_b if o.kind == "recv" and o.peer == a and o.group == group]
                if [(o.numel, o.dtype) for o in sent] != [(o.numel, o.dtype) for o in got]:
                    problems.append(
                        f"point to point {a} -> {b} on group {group}: rank {a} sends "
                        f"{len(sent)} message(s), rank {b} receives {len(got)}; they must match "
                        f"one to one in order, size and dtype\n    rank {a} posts:\n"
                        f"{_listing(sent)}\n    rank {b} posts:\n{_listing(got)}"
                    )
    return problems


def _batches_with(ops: Sequence[Op], peer: int, group: str) -> list[tuple]:
    """The batches of ``ops`` that talk to ``peer`` on ``group``: ``(collectives before,
    sorted messages)`` each, a message as ``(kind, numel, dtype)``."""
    batches: dict[Any, list[Op]] = {}
    for index, op in enumerate(ops):
        if op.peer == peer and op.group == group:
            key = op.batch if op.batch >= 0 else ("bare", index)
            batches.setdefault(key, []).append(op)
    return [
        (members[0].collectives_before, sorted((o.kind, o.numel, o.dtype) for o in members))
        for members in batches.values()
    ]


def _check_batches(records) -> list[str]:
    """The ``k``-th batch rank ``a`` posts with ``b`` mirrors the ``k``-th batch ``b`` posts
    with ``a`` and comes after the same number of the group's collectives."""
    problems = []
    mirror = {"send": "recv", "recv": "send"}
    for a, ops_a in enumerate(records):
        for b in range(a + 1, len(records)):
            ops_b = records[b]
            groups = {o.group for o in ops_a if o.peer == b} | {
                o.group for o in ops_b if o.peer == a
            }
            for group in sorted(groups):
                mine = _batches_with(ops_a, b, group)
                theirs = [
                    (before, sorted((mirror[k], n, d) for k, n, d in messages))
                    for before, messages in _batches_with(ops_b, a, group)
                ]
                if mine != theirs:
                    listing_a = [o for o in ops_a if o.peer == b and o.group == group]
                    listing_b = [o for o in ops_b if o.peer == a and o.group == group]
                    problems.append(
                        f"batches between ranks {a} and {b} on group {group} are not symmetric "
                        f"(each batch of one must mirror the other's, after the same "
                        f"collectives)\n    rank {a} posts:\n{_listing(listing_a)}\n"
                        f"    rank {b} posts:\n{_listing(listing_b)}"
                    )
    return problems


def _check_collectives(records) -> list[str]:
    """Every rank of a group posts the same collectives in the same order (kind, dtype, size,
    root, operation); ``all_to_all_single`` splits agree pairwise."""
    problems = []
    by_group: dict[str, dict[int, list[Op]]] = defaultdict(dict)
    for rank, ops in enumerate(records):
        for op in ops:
            if op.peer is None:
                by_group[op.group].setdefault(rank, []).append(op)
    for group, per_rank in sorted(by_group.items()):
        ranks = sorted(per_rank)
        first = ranks[0]
        for rank in ranks[1:]:
            a, b = per_rank[first], per_rank[rank]

            def shape(op: Op) -> tuple:
                size = () if op.kind in ("all_to_all_single", "all_gather") else (op.numel,)
                detail = () if op.kind == "all_to_all_single" else op.detail
                return (op.kind, op.dtype, *size, *detail)

            if [shape(o) for o in a] != [shape(o) for o in b]:
                problems.append(
                    f"collectives on group {group} differ between ranks {first} and {rank}\n"
                    f"    rank {first} posts:\n{_listing(a)}\n    rank {rank} posts:\n{_listing(b)}"
                )
        problems += _check_all_to_all(group, per_rank)
    return problems


def _check_all_to_all(group: str, per_rank: dict[int, list[Op]]) -> list[str]:
    calls = {r: [o for o in ops if o.kind == "all_to_all_single"] for r, ops in per_rank.items()}
    ranks = sorted(calls)
    problems = []
    for position in range(min(len(c) for c in calls.values()) if calls else 0):
        for ia, a in enumerate(ranks):
            for ib, b in enumerate(ranks):
                op_a, op_b = calls[a][position], calls[b][position]
                sent, expected = op_a.detail[0][ib], op_b.detail[1][ia]
                if sent != expected:
                    problems.append(
                        f"all_to_all_single #{position} on group {group}: rank {a} sends "
                        f"{sent} elements to rank {b}, which expects {expected}\n"
                        f"    rank {a}: {op_a.describe()}\n    rank {b}: {op_b.describe()}"
                    )
    return problems


def _check_devices(records) -> list[str]:
    """Every tensor a rank posts to one group lives on one device type."""
    problems = []
    for rank, ops in enumerate(records):
        devices: dict[str, set[str]] = defaultdict(set)
        for op in ops:
            if op.device:
                devices[op.group].add(op.device)
        for group, kinds in sorted(devices.items()):
            if len(kinds) > 1:
                listing = [o for o in ops if o.group == group]
                problems.append(
                    f"rank {rank} posts tensors of devices {sorted(kinds)} to group {group} "
                    f"(NCCL takes the rank's CUDA device only)\n{_listing(listing)}"
                )
    return problems


# -- threaded ranks -------------------------------------------------------------------------------
def threaded_unavailable_reason() -> str | None:
    """Why :func:`run_threaded` cannot run with this torch (``None`` when it can)."""
    try:
        from torch.testing._internal.distributed import multi_threaded_pg  # noqa: F401
    except Exception as error:  # a private module: absent or broken in some releases
        return f"torch's threaded process group is not importable ({error})"
    if not hasattr(torch._C._distributed_c10d, "_set_thread_isolation_mode"):
        return "this torch has no thread isolation mode for the threaded process group"
    return None


def run_threaded(fn: Callable[..., Any], world_size: int, *args: Any, timeout: float = 60) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` threads joined by torch's threaded
    process group (``backend="threaded"``); return the results in rank order.

    Raises:
        RuntimeError: the threaded process group is unavailable
            (:func:`threaded_unavailable_reason`), or a rank failed or hung (the message holds
            the rank and its traceback).
    """
    reason = threaded_unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)
    from torch.testing._internal.distributed.multi_threaded_pg import (
        ProcessLocalGroup,
        _install_threaded_pg,
        _uninstall_threaded_pg,
    )

    results: dict[int, Any] = {}
    errors: dict[int, str] = {}
    torch._C._distributed_c10d._set_thread_isolation_mode(True)
    _install_threaded_pg()
    store = dist.HashStore()

    def worker(rank: int) -> None:
        dist.init_process_group("threaded", rank=rank, world_size=world_size, store=store)
        try:
            results[rank] = fn(rank, world_size, *args)
        except BaseException as error:
            errors[rank] = traceback.format_exc()
            ProcessLocalGroup.exception_handle(error)  # wakes the ranks waiting on this one
        finally:
            dist.destroy_process_group()

    threads = [threading.Thread(target=worker, args=(r,), daemon=True) for r in range(world_size)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout)
        hung = [r for r, t in enumerate(threads) if t.is_alive()]
    finally:
        ProcessLocalGroup.reset()
        _uninstall_threaded_pg()
        torch._C._distributed_c10d._set_thread_isolation_mode(False)
    if errors:
        rank = min(errors)
        raise RuntimeError(f"threaded rank {rank} failed:\n{errors[rank]}")
    if hung:
        raise RuntimeError(f"threaded ranks {hung} did not finish within {timeout} s")
    return [results[r] for r in range(world_size)]


__all__ = [
    "MessageRecorder",
    "Op",
    "assert_nccl_safe",
    "check_records",
    "run_threaded",
    "threaded_unavailable_reason",
]

"""Count the operations that make a CUDA device wait for the host (device → host round trips).

On a GPU an operation whose result the host must see stops the host until the device has run
everything queued before it: ``.item()``, ``.tolist()``, ``bool(t)``/``int(t)``/``float(t)``,
``.cpu()``/``.numpy()``, and operations whose output size depends on values (``nonzero``, boolean
mask indexing, ``masked_select``, ``unique``, ``bincount``, ``repeat_interleave`` without
``output_size``). :class:`HostSyncCounter` counts them while active, by operation and by the
line of this package that asked for them, on any device: a CPU run shows where a GPU run would
wait, so a test can hold the count a step needs (``tests/comm/test_host_syncs.py``).

It counts through a ``TorchDispatchMode`` (every ATen operation of the calling thread and of
autograd's backward) plus wrappers of ``Tensor.tolist``, ``.numpy`` and ``.cpu`` (which do not
reach the dispatcher on a CPU tensor). With ``device="cuda"`` only operations on CUDA tensors
count; with ``device=None`` every one does (on a CPU run: the host syncs the same code would
make if its tensors were on a GPU, plus those on tensors that stay on the host by design).
"""

from __future__ import annotations

import functools
import os
import traceback
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from lightning_gnn_dist.data.sampler import use_compiled

#: ATen operations that wait for the device (their output, or its size, is read on the host).
SYNC_OPS = frozenset(
    {
        "aten._local_scalar_dense.default",  # .item(), bool(), int(), float()
        "aten.nonzero.default",
        "aten.nonzero_static.default",
        "aten.masked_select.default",
        "aten._unique2.default",
        "aten.unique_dim.default",
        "aten.unique_consecutive.default",
        "aten.bincount.default",
        "aten.histc.default",
    }
)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _where() -> str:
    """The innermost frame of this package outside this module (``file:line (function)``),
    else ``"?"`` (a caller outside the package)."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        path = os.path.abspath(frame.filename)
        if path.startswith(_PACKAGE) and path != os.path.abspath(__file__):
            where = os.path.relpath(path, os.path.dirname(_PACKAGE))
            return f"{where}:{frame.lineno} ({frame.name})"
    return "?"


def _tensors(args, kwargs):
    for value in (*args, *(kwargs or {}).values()):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, torch.Tensor))


class _Mode(TorchDispatchMode):
    def __init__(self, counter: HostSyncCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        sync = name in SYNC_OPS
        if name == "aten.index.Tensor":  # boolean mask indexing: a nonzero inside
            sync = any(
                t is not None and t.dtype == torch.bool for t in (args[1] if len(args) > 1 else [])
            )
        elif name == "aten.repeat_interleave.Tensor":
            sync = (kwargs or {}).get("output_size") is None
        if sync and self.counter._counts_device(_tensors(args, kwargs)):
            self.counter._add(name.removeprefix("aten.").split(".")[0])
        return func(*args, **(kwargs or {}))


class HostSyncCounter:
    """Counts device → host round trips while active (a context manager).

    Args:
        device (str, optional): count only operations on tensors of this device type
            (``"cuda"``); ``None`` counts every one. (default: ``None``)

    Attributes:
        counts: ``Counter`` of operation names (``"_local_scalar_dense"``, ``"nonzero"``,
            ``"tolist"``, ``"cpu"``...).
        sites: ``Counter`` of ``(operation, "file:line")`` with the package line that asked.
    """

    _PATCHED = ("tolist", "numpy", "cpu")

    def __init__(self, device: str | None = None) -> None:
        self.device = device
        self.counts: Counter = Counter()
        self.sites: Counter = Counter()
        self._mode = _Mode(self)
        self._saved: dict[str, object] = {}

    @property
    def total(self) -> int:
        """Round trips counted."""
        return sum(self.counts.values())

    def _counts_device(self, tensors) -> bool:
        if self.device is None:
            return True
        return any(t.device.type == self.device for t in tensors)

    def _add(self, name: str) -> None:
        self.counts[name] += 1
        self.sites[name, _where()] += 1

    def _wrap(self, name: str):
        original = getattr(torch.Tensor, name)

        @functools.wraps(original)
        def wrapper(tensor, *args, **kwargs):
            if self._counts_device([tensor]):
                self._add(name)
            return original(tensor, *args, **kwargs)

        return wrapper

    def __enter__(self) -> HostSyncCounter:
        # The compiled (numba) kernels run on host tensors only, never in a device step: off
        # while counting, so a CPU run takes the code path a GPU step takes.
        self._compiled = use_compiled()
        use_compiled(False)
        for name in self._PATCHED:
            self._saved[name] = getattr(torch.Tensor, name)
            setattr(torch.Tensor, name, self._wrap(name))
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        self._saved.clear()
        use_compiled(self._compiled)

    def report(self) -> dict:
        """``{"total", "by_op", "by_site"}`` (JSON-ready)."""
        return {
            "total": self.total,
            "by_op": dict(sorted(self.counts.items())),
            "by_site": {f"{op} @ {site}": n for (op, site), n in sorted(self.sites.items())},
        }


__all__ = ["SYNC_OPS", "HostSyncCounter"]

"""Keep freed memory in the process's heaps between training steps (glibc's ``malloc``).

A training step allocates and frees tensors of the same sizes every step: a batch's feature
rows, the rows it exchanges, activations and their gradients (megabytes each; PyTorch's CPU
allocator hands each one to ``malloc`` and back). With glibc's default, adaptive thresholds the
freed top of a heap goes back to the system and the next step faults it in again, page by page:
on the neighbour benchmark's batches (R-MAT scale 16, two ranks with prefetch) 20,000–50,000
minor page faults an epoch per rank and 0.08–0.13 s of system time beside 0.6 s of compute.
Fixed thresholds keep that memory in the heap: under 2,000 faults an epoch, the epoch 7 %
shorter in a one-off A/B of the guide's module (issue 31).

:func:`retain_freed_memory` sets them once per process (``GNNStrategy`` does, on every rank,
unless ``retain_freed_memory=False``). The cost is resident memory: up to ``trim_threshold``
bytes free at the top of each heap (the main one and one per thread that allocates) stay
mapped, and allocations under ``mmap_threshold`` come from the heaps. PyTorch's own CPU
launcher reaches for the same effect by preloading jemalloc or tcmalloc, which a library
cannot do inside a running process.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "retain_freed_memory"]

MMAP_THRESHOLD = 32 * 2**20
"""Bytes: larger allocations get their own mapping (glibc's largest adaptive threshold)."""
TRIM_THRESHOLD = 128 * 2**20
"""Bytes: free memory a heap keeps at its top before returning any to the system."""

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>


def retain_freed_memory(
    mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD
) -> bool:
    """Fix glibc's ``malloc`` thresholds for this process (bytes); returns whether they were
    set: ``False`` where the C library is not glibc (musl, macOS, Windows), and nothing
    changes there.

    Both are set together: fixing either one turns glibc's adaptive thresholds off, and a
    trim threshold alone leaves the 128 KiB mmap threshold, which maps (and faults in) every
    larger tensor afresh."""
    for name, value in (("mmap_threshold", mmap_threshold), ("trim_threshold", trim_threshold)):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**31:
            raise ValueError(f"{name} must be a number of bytes in [1, 2**31 - 1] (got {value!r})")
    libc = _glibc()
    if libc is None:
        return False
    return bool(
        libc.mallopt(_M_MMAP_THRESHOLD, mmap_threshold)
        and libc.mallopt(_M_TRIM_THRESHOLD, trim_threshold)
    )


def _glibc() -> ctypes.CDLL | None:
    """The process's C library if it is glibc (it has ``gnu_get_libc_version`` and
    ``mallopt``)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not (hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt")):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc

"""``utils.malloc``: memory a step frees stays in the heap for the next step (issue 31)."""

import subprocess
import sys

import pytest

from lightning_gnn_dist.utils.malloc import _glibc, retain_freed_memory

# 100 MB of 4 MB tensors allocated and freed, in a fresh process: how many bytes the heaps keep
# free afterwards (glibc's mallinfo2) and how many of the tensors had mappings of their own.
STEP = """
import ctypes, sys, torch
from lightning_gnn_dist.utils.malloc import retain_freed_memory
if sys.argv[1] == "retain":
    assert retain_freed_memory()

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
mapped = libc.mallinfo2().hblks
held = [torch.ones(2**20) for _ in range(25)]
mapped = libc.mallinfo2().hblks - mapped
del held
print(libc.mallinfo2().fordblks, mapped)
"""


def freed_and_mapped(mode: str) -> tuple[int, int]:
    done = subprocess.run(
        [sys.executable, "-c", STEP, mode], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    free, mapped = done.stdout.split()[-2:]
    return int(free), int(mapped)


@pytest.mark.skipif(
    _glibc() is None or not hasattr(_glibc(), "mallinfo2"), reason="needs glibc 2.33 or later"
)
def test_freed_tensors_stay_in_the_heap():
    """By default each 4 MB tensor gets a mapping of its own, returned (and faulted in afresh)
    at every allocation; retained, the tensors come from the heap and their 100 MB stay there
    free for the next step."""
    free, mapped = freed_and_mapped("default")
    assert free < 50 * 2**20  # mapped (25) or trimmed: returned either way
    free, mapped = freed_and_mapped("retain")
    assert mapped == 0 and free >= 100 * 2**20


@pytest.mark.parametrize("value", [0, -1, 2**31, 1.5, True])
def test_thresholds_must_be_positive_byte_counts(value):
    with pytest.raises(ValueError, match=r"must be a number of bytes in \[1, 2\*\*31 - 1\]"):
        retain_freed_memory(mmap_threshold=value)

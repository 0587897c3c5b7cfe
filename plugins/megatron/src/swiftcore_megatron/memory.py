"""Keep a streaming conversion's memory near what it holds, not what it once held.

glibc raises its mmap threshold each time a large block is freed (up to 32 MiB), after which
tensors of that size come from the heap, and freed heap memory is rarely returned to the system:
converting a 1 GB model tensor by tensor then peaked at 1.6 GB RSS instead of 0.8 GB (measured with
``bench/convert.py``). Pinning the threshold keeps every large tensor in its own mapping, given
back when freed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["pin_mmap_threshold"]

_M_MMAP_THRESHOLD = -3  # from glibc's malloc.h
_done = False


def pin_mmap_threshold(threshold_bytes: int = 1024 * 1024) -> bool:
    """Make glibc serve allocations above ``threshold_bytes`` with mmap, always (process-wide).

    Returns:
        True when applied (now or before); False off glibc Linux, where it is not needed or possible.
    """
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other libcs have no mallopt
        return False
    _done = bool(mallopt(_M_MMAP_THRESHOLD, threshold_bytes))
    return _done

"""The C allocator's settings for a serving process (glibc on Linux; elsewhere nothing changes).

Every synthesised segment allocates audio buffers of a few hundred kilobytes (the model's float
output, its clipped copy, the PCM bytes). glibc serves blocks over 128 KiB with ``mmap`` and gives
freed memory at the top of its heap back to the kernel once more than 128 KiB of it is free, so
each of those buffers costs a fresh mapping or a re-grown heap, and the kernel zero-fills its
pages again on first touch: on every segment of every request (measured: about a sixth of a
millisecond of system time for each one-sentence request, docs/operating.md). :func:`tune` raises
both thresholds (``MMAP_THRESHOLD_BYTES``, ``TRIM_THRESHOLD_BYTES``), so audio buffers come from,
and go back to, memory the process already holds; freed memory above the trim threshold still goes
back to the kernel.

A process whose environment sets the allocator itself (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_``, or ``malloc`` in ``GLIBC_TUNABLES``) keeps its
settings.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import sys
from collections.abc import Mapping

#: Blocks up to this size come from the heap, not from a mapping of their own.
MMAP_THRESHOLD_BYTES = 4 << 20
#: Free memory at the top of the heap that is kept rather than given back to the kernel.
TRIM_THRESHOLD_BYTES = 16 << 20
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_USER_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def set_by_user(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` already chooses glibc's allocator thresholds."""
    return any(name in environ for name in _USER_VARIABLES) or "malloc" in environ.get("GLIBC_TUNABLES", "")


def tune(environ: Mapping[str, str]) -> bool:
    """Raise this process's allocator thresholds (see the module docstring); True when they were set."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc" or set_by_user(environ):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )

"""The serving process's allocator settings: audio-sized buffers reuse memory the process holds."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from server.cli import allocator

glibc_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's allocator only"
)

# A second of audio at 24 kHz, float32 (~94 KiB) through the float -> int16 steps a segment takes,
# many times over; prints the page faults those allocations cost.
_FAULTS = """
import resource, sys
import numpy as np
from server.cli import allocator
print(allocator.tune({} if sys.argv[1] == "tuned" else {"MALLOC_TRIM_THRESHOLD_": "1"}))
audio = np.zeros(240_000, dtype=np.float32)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(200):
    pcm = (np.clip(audio * 1.0, -1.0, 1.0) * 32767.0).astype(np.int16).tobytes()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(how: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", _FAULTS, how], capture_output=True, text=True, check=True).stdout
    applied, faults = out.split()
    return applied, int(faults)


@pytest.mark.subprocess
@glibc_only
def test_audio_buffers_come_from_memory_the_server_already_holds() -> None:
    applied, tuned = _faults("tuned")
    left, untuned = _faults("untouched")
    assert (applied, left) == ("True", "False")
    # untouched: each buffer is a fresh mapping the kernel zero-fills (hundreds of pages a round)
    assert untuned > 200 * 100
    assert tuned < untuned / 20


def test_the_allocator_settings_in_the_environment_are_left_as_they_are() -> None:
    assert allocator.set_by_user({"MALLOC_MMAP_THRESHOLD_": "65536"})
    assert allocator.set_by_user({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1"})
    assert not allocator.set_by_user({"GLIBC_TUNABLES": "glibc.rtld.nns=2", "PATH": "/bin"})
    assert allocator.tune({"MALLOC_TOP_PAD_": "0"}) is False

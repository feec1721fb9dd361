"""An in-process target: a backend built by :func:`backends.factory.create_backend` — the engine the
server runs, in the mode and with the settings a :class:`~backends.config.BackendConfig` names — and
the suite's closed loop (:func:`benchmarks.loop.closed_loop`) over it, with no server or socket in
between: audio-seconds per wall-second, this process's CPU seconds per audio second, first audio;
:func:`started` builds one, :func:`sweep` runs it at several concurrency levels against one such backend.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from backends.api import Backend, NoObserver, SynthesisRequest, Synthesizer
from backends.config import BackendConfig
from backends.factory import create_backend

from .clients import BYTES_PER_SECOND, Timing
from .loop import closed_loop as run_closed_loop
from .results import ms, percentile


class Tally(NoObserver):
    """A :class:`~backends.api.BackendObserver` that keeps the batch sizes the engine formed."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def batch_done(self, size: int) -> None:
        self.batches.append(size)


@asynccontextmanager
async def started(config: BackendConfig, tally: Tally | None = None, *,
                  synthesizer: Synthesizer | None = None) -> AsyncIterator[Backend]:
    """``async with started(config) as backend:`` — built, loaded and warmed up (as the server
    starts it), closed on the way out; ``tally`` hears the batches it forms. ``synthesizer``: a
    runtime already built (and loaded) from this same ``config``, used instead of loading another
    (see :func:`backends.factory.create_backend`)."""
    backend = create_backend(config, observer=tally, synthesizer=synthesizer)
    await backend.start()
    try:
        yield backend
    finally:
        await backend.aclose()


async def request(backend: Backend, text: str, *, voice: str | None = None, session: str | None = None,
                  request_id: str = "bench") -> Timing:
    """One text through ``backend.prepare`` and ``backend.stream``; times from before the prepare."""
    timing = Timing(request_id)
    t0 = time.perf_counter()
    prepared = await backend.prepare(SynthesisRequest(text=text, voice=voice, session=session or "",
                                                      request_id=request_id))
    async for chunk in backend.stream(prepared):
        if timing.first_audio_s is None:
            timing.first_audio_s = time.perf_counter() - t0
        timing.audio_bytes += round(chunk.seconds * BYTES_PER_SECOND)
    timing.complete_s = time.perf_counter() - t0
    return timing


async def closed_loop(backend: Backend, texts: Sequence[str], clients: int, per_client: int, *,
                      tally: Tally, voice: str | None = None) -> dict[str, Any]:
    """``clients`` clients at once, ``per_client`` requests each, back to back. Client ``c``'s
    ``r``-th text is ``texts[(c * 7 + r) % len(texts)]`` (the clients start on different texts).
    With the backend's ``tally``: the number and mean size of the batches formed meanwhile."""
    seen = len(tally.batches)

    async def one(_s: None, c: int, r: int) -> Timing:
        return await request(backend, texts[(c * 7 + r) % len(texts)], voice=voice, session=f"c{c}",
                             request_id=f"c{c}-{r}")

    cpu0 = time.process_time()
    loop = await run_closed_loop(one, clients, per_client=per_client)
    if loop.failures:
        raise loop.failures[0]
    timings, wall, cpu = loop.records, loop.wall_s, time.process_time() - cpu0
    audio = sum(t.audio_s for t in timings)
    first = [t.first_audio_s for t in timings if t.first_audio_s is not None]
    formed = tally.batches[seen:]
    return {
        "concurrency": clients, "requests": len(timings), "audio_s": round(audio, 2), "wall_s": round(wall, 3),
        "audio_s_per_s": round(audio / wall, 2) if wall else None,
        # CPU seconds this process spent per audio second (all threads): the cost of a configuration
        # with contention from other processes mostly factored out; cpu/wall = cores it really got.
        "cpu_s_per_audio_s": round(cpu / audio, 3) if audio else None, "cores_used": round(cpu / wall, 2),
        **{f"first_audio_ms_{k}": ms(percentile(first, q)) for k, q in (("p50", 50), ("p95", 95), ("max", 100))},
        "batches": len(formed), "mean_batch": round(sum(formed) / len(formed), 2) if formed else None,
    }


async def sweep(config: BackendConfig, texts: Sequence[str], levels: Sequence[int], per_client: int, *,
                voice: str | None = None, log: Callable[[str], None] | None = None,
                synthesizer: Synthesizer | None = None) -> list[dict[str, Any]]:
    """:func:`closed_loop` at each of ``levels`` against one backend built from ``config`` — loaded and
    warmed up once, as the server starts it, closed at the end — with the batches it forms; ``log``
    hears one line a level. ``synthesizer``: that backend's runtime, already built (and loaded) from
    ``config`` (:func:`started`)."""
    tally = Tally()
    out = []
    async with started(config, tally, synthesizer=synthesizer) as backend:
        for clients in levels:
            level = await closed_loop(backend, texts, clients, per_client, tally=tally, voice=voice)
            if log is not None:
                log(f"C={clients:>4}: {level['audio_s_per_s']:>8.1f} audio-s/s, first audio p50 "
                    f"{level['first_audio_ms_p50']} ms p95 {level['first_audio_ms_p95']} ms, "
                    f"mean batch {level['mean_batch']}")
            out.append(level)
    return out

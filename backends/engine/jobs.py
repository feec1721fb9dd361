"""The concurrent mode's bookkeeping (:mod:`backends.engine.concurrent`): what it keeps per admitted
request, what it queues, and how many workers and intra-op threads the runtime gets.

* :class:`Job`: one admitted request — its segments not yet offered to the scheduler, the
  collector (an ``asyncio.Queue``) its stream reads, its playout clock, and whether a segment of it
  is queued or running. Worker threads read only ``cancelled``.
* :class:`Item`: what the scheduler's :class:`~backends.engine.schedule.SegmentQueue` holds — a
  job's one ready segment; :func:`segment_of` and :func:`tokens` read an entry's segment and its
  size for the policy.
* :func:`worker_count`: the parallel runtime calls — ``workers`` when set, else 2 (on a machine
  with 2+ cores) for a ``thread_safe`` runtime without a batch path, else 1.
* :func:`tune_threads`: each parallel call's share of the cores (``cpu_count // workers``
  intra-op threads), and every core for a call that runs alone when the runtime has
  ``solo_calls``; only when the user chose no thread count and the runtime is not loaded yet.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from backends.api import Capabilities, Segment, SynthesisRequest, Synthesizer
from backends.config import BackendConfig
from backends.engine.cost import input_tokens
from backends.engine.schedule import Entry, Playout

log = logging.getLogger("kokoro.backend")


@dataclass(eq=False)
class Job:
    """One admitted request: its unsubmitted segments and the collector its stream reads."""

    request: SynthesisRequest
    key: str
    seq: int
    pending: deque[Segment]
    playout: Playout
    outbox: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    planned: int = 0  # how many of the request's segments have joined ``pending``
    busy: bool = False  # a segment of this job is queued or being synthesised
    cancelled: bool = False  # read by worker threads (a plain bool; the GIL makes it safe)


@dataclass(eq=False, slots=True)
class Item:
    job: Job
    segment: Segment


def segment_of(entry: Entry) -> Segment:
    item: Item = entry.item
    return item.segment


def tokens(entry: Entry) -> int:
    return input_tokens(entry.item.segment)


def worker_count(config: BackendConfig, caps: Capabilities) -> int:
    """The parallel runtime calls: the user's ``workers``, else 2 (2+ cores) for a thread-safe
    runtime that has no batch path, else 1 (whole batches, or one call at a time)."""
    if config.workers is not None:
        return config.workers
    parallel = caps.thread_safe and not caps.batch
    return min(2, os.cpu_count() or 1) if parallel else 1


def tune_threads(synth: Synthesizer, config: BackendConfig, workers: int) -> None:
    """Give each parallel call its share of the cores, unless the user chose a thread count
    or the runtime is already loaded (then its own setting stands)."""
    caps, cores = synth.capabilities, os.cpu_count() or 1
    if workers > 1 and caps.threads_settable and not synth.loaded and synth.threads is None:
        threads = max(1, cores // workers)
        solo = cores if config.solo_calls and caps.solo_calls and cores > threads else None
        synth.set_threads(threads, solo=solo)
        log.info("concurrent mode: %d parallel calls x %d intra-op threads", workers, threads)
        if solo is not None:
            log.info("concurrent mode: a call that runs alone uses %d intra-op threads", solo)

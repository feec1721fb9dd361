"""A segment as a window of its sentence's reading: the frame arithmetic both runtimes share.

A runtime that declares :attr:`~backends.api.Capabilities.windowed` predicts the prosody of the
whole sentence (per-token durations in frames, the energy curve at two steps a frame) and decodes
only the segment's frames. Which frames those are, how far the decode reaches past them, and how
the window's frames are shared out among the segment's own tokens are pure functions of the
prediction, here, so every call of a sentence agrees and both runtimes cut alike; and
:class:`Predictions` keeps a sentence's prediction while its windows are read, so the predictor
runs once a sentence, not once a window.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from backends.api import Segment

P = TypeVar("P")

#: Frames decoded on each side of a window and cropped after: 0.2 s.
WINDOW_CONTEXT = 8


@dataclass(frozen=True)
class TokenRange:
    """A segment's place among its sentence's tokens (vocabulary ids, without bos/eos)."""

    tokens: list[int]  # the sentence's
    first: int  # index of the segment's first token
    end: int  # index past its share (its tokens and the space after them)
    own: int  # how many tokens the segment itself has


def token_range(segment: Segment, tokens: Callable[[str], list[int]]) -> TokenRange:
    """Where ``segment`` (with a :attr:`~backends.api.Segment.sentence`) lies in its sentence, in
    the tokens ``tokens`` makes of phonemes."""
    context = segment.sentence
    assert context is not None
    return TokenRange(tokens(context.phonemes), len(tokens(context.phonemes[: context.start])),
                      len(tokens(context.phonemes[: context.end])), len(tokens(segment.phonemes)))


def boundary_frame(durations: np.ndarray, energy: np.ndarray, token: int, n_tokens: int) -> int:
    """The frame where a window of one sentence ends before the sentence's token ``token`` (an
    index into the ``n_tokens`` tokens without bos/eos; 0: the start, bos included; ``n_tokens``:
    the end, eos included). ``durations``: frames per token (bos, each token, eos); ``energy``: the
    predicted energy curve (two steps a frame). Inside, the cut falls in the frames of the token
    before it (a window's range ends with the space between words) where the predicted energy is
    lowest, so two windows meet where the reading is quietest."""
    ends = np.cumsum(np.asarray(durations, dtype=np.int64))
    if token <= 0:
        return 0
    if token >= n_tokens:
        return int(ends[-1])
    lo, hi = int(ends[token - 1]), int(ends[token])
    energy = np.asarray(energy, dtype=np.float32)
    around = [float(energy[max(0, 2 * k - 2) : 2 * k + 2].mean()) for k in range(lo, hi + 1)]
    return lo + int(np.argmin(around))


def decode_range(start: int, stop: int, total: int, context: int = WINDOW_CONTEXT) -> tuple[int, int]:
    """The frames to decode for the window ``start:stop`` of ``total``: ``context`` more on each side."""
    return max(0, start - context), min(total, stop + context)


def fold_durations(per_token: np.ndarray, start: int, stop: int, first: int, own: int) -> np.ndarray:
    """The window's frames per token of the segment (bos, its ``own`` tokens, eos) from the
    sentence's ``per_token`` durations (bos, each token, eos): bos takes the window's frames of the
    sentence's tokens before the segment's ``first``, eos those after its own."""
    per_token = np.asarray(per_token, dtype=np.int64)
    owner = np.repeat(np.arange(len(per_token)), per_token)[start:stop]
    counts = np.bincount(owner, minlength=len(per_token))
    durations = np.zeros(own + 2, np.int64)
    durations[0] = counts[: first + 1].sum()
    durations[1 : own + 1] = counts[first + 1 : first + 1 + own]
    durations[-1] = counts[first + 1 + own :].sum()
    return durations


class Predictions(Generic[P]):
    """The prosody of the sentences being read in windows, so that each sentence's predictor runs
    once and its windows reuse it. Keyed by what the prediction is a function of (the sentence's
    tokens, the style vector's bytes, the speed: :func:`prediction_key`), so two readings share an
    entry only where they would predict the same. An entry goes when the window that reaches its
    sentence's end has used it; one left behind (a reading stopped part-way) goes after
    ``max_age_s`` or when ``size`` newer ones push it out. Thread-safe; the predictor itself runs
    outside the lock."""

    def __init__(self, size: int = 8, max_age_s: float = 30.0, clock: Callable[[], float] = time.monotonic):
        self.size = size
        self.max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[float, P]] = OrderedDict()

    def get(self, key: Hashable, predict: Callable[[], P], *, last: bool) -> P:
        """The prediction under ``key``, from ``predict()`` when none is kept; ``last``: this window
        reaches the sentence's end, so the entry is dropped (or never kept)."""
        with self._lock:
            self._expire()
            kept = self._entries.pop(key, None) if last else self._entries.get(key)
        if kept is not None:
            return kept[1]
        value = predict()
        if not last:
            with self._lock:
                self._entries[key] = (self._clock(), value)
                self._entries.move_to_end(key)
                while len(self._entries) > self.size:
                    self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            self._expire()
            return len(self._entries)

    def _expire(self) -> None:
        cutoff = self._clock() - self.max_age_s
        while self._entries and next(iter(self._entries.values()))[0] < cutoff:
            self._entries.popitem(last=False)


def prediction_key(tokens: list[int], style: np.ndarray, speed: float) -> Hashable:
    """What a sentence's prediction is a function of: its tokens, the style vector, the speed."""
    return tuple(tokens), np.ascontiguousarray(style, dtype=np.float32).tobytes(), float(speed)

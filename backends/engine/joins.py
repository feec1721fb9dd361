"""Joins between a request's segments that sound like one reading of the whole text.

Kokoro speaks each segment as an utterance of its own: a quarter of a second or more of near
silence before the first sound and half a second after the last, so two segments played back to
back sit in up to a second of silence wherever the text was cut, far more than a reader pauses
there. :func:`shape` trims that padding from both ends of a segment and puts back the pause that
the reading of the whole text makes at the segment's end (:data:`PAUSES`, by the kind of boundary
the planner cut at: :attr:`~backends.api.Segment.ends`), with a short raised-cosine fade at each
cut so no click comes back.

A segment that is a window of its sentence's reading (:attr:`~backends.api.Segment.sentence`, from
a runtime that decodes windows) is not an utterance of its own: where it meets the next window of
the same sentence it has no padding and the reading makes no pause, so :func:`shape_segment` keeps
that end as it is, with only a :data:`FADE_S` fade (the runtime cuts where the predicted energy is
lowest, between two words, so the fade touches the quietest few milliseconds there).

* Silence is a 10 ms window whose RMS is below :data:`SILENCE_DB` (the model's padding sits near
  −75 dBFS and exact zeros; speech runs −10 to −45 dBFS, its quietest consonants above −55).
* Each segment keeps :data:`MARGIN_S` of its own padding before the first and after the last
  sound; the join's silence is then the margin after one segment, the appended zeros and the
  margin before the next, together the pause of :data:`PAUSES` (to within one frame).
* Cuts and lengths are whole frames of :data:`FRAME` samples (25 ms, the unit of the model's
  durations), so a runtime's per-token frame durations are shifted with the audio: the frames
  trimmed at the start come off the first tokens (``<bos>`` first), and the last tokens take the
  change at the end, so ``600 * durations.sum() == len(audio)`` still holds and every consumer of a
  chunk's durations (word timings, the voice-agent protocols' timestamps) reads times of the audio
  it was sent.

Pure numpy; called on the worker thread of the per-segment step (microseconds per second of audio).
"""

from __future__ import annotations

import numpy as np

from backends.api import SAMPLE_RATE, Segment

FRAME = 600  # samples per duration frame at 24 kHz (see server.pipeline.word_timings)
WINDOW = 240  # 10 ms, the silence detector's window
SILENCE_DB = -60.0
MARGIN_S = 0.010
FADE_S = 0.005

#: The pause (seconds of silence) the whole-text reading makes at each kind of boundary: the median
#: silent run of one reading of the whole text at the places the server cuts, measured on Kokoro-82M
#: (jm_kumo, ONNX int8) over the quality benchmark's texts (``python -m benchmarks quality``, "joins
#: by kind of boundary"; docs/speech-quality.md) and 22 English texts before that (sentence 0.58 s,
#: clause 0.38 s). ``sentence``: after ``. ! ? …`` (and at the end of a request); ``clause``: after
#: ``, ; : —``; ``phrase``: a cut between words inside a clause (most readings run straight on:
#: 0 to 0.13 s, median 0.08 s). Languages without their own row use English's.
PAUSES: dict[str, dict[str, float]] = {
    "en": {"sentence": 0.58, "clause": 0.38, "phrase": 0.08},
}
KINDS = ("sentence", "clause", "phrase")


def pause_for(kind: str, lang: str = "en-us") -> float:
    """Seconds of silence the reading makes after a segment that ends at a ``kind`` boundary."""
    table = PAUSES.get(lang.split("-")[0], PAUSES["en"])
    return table.get(kind, table["sentence"])


def window_power(audio: np.ndarray) -> np.ndarray:
    """Mean square of each 10 ms window (the last partial window counts as a window, zero-padded)."""
    n = len(audio)
    x = np.asarray(audio, dtype=np.float32).reshape(-1)
    full = n // WINDOW * WINDOW
    windows = x[:full].reshape(-1, WINDOW)
    power: np.ndarray = np.einsum("ij,ij->i", windows, windows, dtype=np.float64) / WINDOW
    if full < n:
        rest = x[full:].astype(np.float64)
        power = np.append(power, np.dot(rest, rest) / WINDOW)
    return power


def window_db(audio: np.ndarray) -> np.ndarray:
    """RMS of each 10 ms window, dBFS (the last partial window counts as a window)."""
    db: np.ndarray = 10 * np.log10(np.maximum(window_power(audio), 1e-20))
    return db


#: :data:`SILENCE_DB` as a window's mean square.
_LOUD_POWER = 10.0 ** (SILENCE_DB / 10.0)


def sound_extent(audio: np.ndarray) -> tuple[int, int] | None:
    """First and one past the last sample of the windows louder than :data:`SILENCE_DB`; None: none."""
    loud = np.flatnonzero(window_power(audio) > _LOUD_POWER)
    if not len(loud):
        return None
    return int(loud[0]) * WINDOW, min(len(audio), (int(loud[-1]) + 1) * WINDOW)


def _fade(n: int) -> np.ndarray:
    return (0.5 - 0.5 * np.cos(np.linspace(0.0, np.pi, n, endpoint=False))).astype(np.float32)


def shape(
    audio: np.ndarray, durations: np.ndarray | None, pause_s: float, *, keep_start: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """``audio`` with its padding trimmed and ``pause_s`` of silence after it (see the module
    docstring), and ``durations`` shifted to match (None stays None). Audio with no padding to
    replace (no sound, no silence at its end: not a model's utterance) or shorter than a frame is
    returned as it is. ``keep_start``: nothing comes off the front (a window that continues its
    sentence's reading)."""
    extent = sound_extent(audio)
    if extent is None or extent[1] == len(audio) or len(audio) < FRAME:
        return audio, durations
    margin, fade = round(MARGIN_S * SAMPLE_RATE), round(FADE_S * SAMPLE_RATE)
    start, end = extent
    cut = 0 if keep_start else max(0, start - margin) // FRAME * FRAME  # whole frames off the front
    body = audio[cut : min(len(audio), end + margin)].astype(np.float32, copy=True)
    k = min(fade, len(body))
    if cut:
        body[:k] *= _fade(k)
    if end + margin < len(audio):
        body[len(body) - k :] *= _fade(k)[::-1]
    # the next segment brings its own margin and on average half a frame more of lead
    zeros = max(0.0, pause_s - margin / SAMPLE_RATE - (margin + FRAME / 2) / SAMPLE_RATE) * SAMPLE_RATE
    total = -(-(len(body) + round(zeros)) // FRAME) * FRAME
    out = np.zeros(total, dtype=np.float32)
    out[: len(body)] = body
    return out, None if durations is None else shift_durations(durations, cut // FRAME, total // FRAME)


def shape_segment(
    segment: Segment, audio: np.ndarray, durations: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """``segment``'s audio joined as the reading would run on: :func:`shape` with the pause for its
    boundary, except at an end where it meets another window of its sentence (kept, faded)."""
    context = segment.sentence
    pause = pause_for(segment.ends, segment.lang)
    if context is None or (context.first and context.last):
        return shape(audio, durations, pause)
    k = min(round(FADE_S * SAMPLE_RATE), len(audio))
    if context.last:  # its start meets the window before; its end is the sentence's
        out, shifted = shape(audio, durations, pause, keep_start=True)
        out = out.copy() if out is audio else out
    else:
        out, shifted = np.asarray(audio, dtype=np.float32).copy(), durations
        out[len(out) - k :] *= _fade(k)[::-1]
    if not context.first:
        out[:k] *= _fade(k)
    return out, shifted


def shift_durations(durations: np.ndarray, front: int, frames: int) -> np.ndarray:
    """``durations`` with ``front`` frames taken off the first tokens and the last tokens adjusted
    so they sum to ``frames``."""
    d = np.asarray(durations).reshape(-1).astype(np.int64, copy=True)
    if not len(d):
        return d
    d = _take(d, front)
    change = frames - int(d.sum())
    if change >= 0:
        d[-1] += change
    else:
        d = _take(d[::-1].copy(), -change)[::-1].copy()
    return d.astype(np.asarray(durations).dtype).reshape(np.shape(durations))


def _take(d: np.ndarray, n: int) -> np.ndarray:
    """``n`` frames off the front of ``d``, token by token (none goes below zero)."""
    for i in range(len(d)):
        if n <= 0:
            break
        step = min(int(d[i]), n)
        d[i] -= step
        n -= step
    return d

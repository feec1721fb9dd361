"""Per-word start/end times from Kokoro's predicted durations.

Kokoro's duration predictor gives one integer per input token (``<bos>``, each phoneme character,
``<eos>``) counted in *frames*. The F0/energy predictor upsamples frames by 2 and the iSTFTNet
decoder by 10·6·5 = 300 samples, so one frame is 600 samples at 24 kHz (25 ms) and
``len(audio) == 600 * sum(durations)``; the ``kokoro`` package's ``KPipeline.join_timestamps``
uses the same factor.

Words: the planner keeps, on each segment, the words of its text and which of its phonemes the
G2P read for each, from the same one reading the segment was synthesised from
(:attr:`backends.api.Segment.words`, carried on the chunk). A word's time runs from its first
phoneme's start to its last phoneme's end; the spaces and marks between words (pauses) belong to
no word, and a word nothing was said for (a lone ``—``) is a zero-length mark where the speech
stands. So timing a segment reads nothing again and takes no G2P lock: it is arithmetic over the
durations. Where a segment carries no spans (a pipeline without word spans), the words share the
spoken characters in proportion to their letters. Either way the times are monotonic,
non-overlapping and inside the segment's audio.

Pure functions, CPU only (microseconds a word).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from backends.api import AudioChunk, WordSpan

FRAME_SAMPLES = 600
SAMPLE_RATE = 24_000


@dataclass(frozen=True, slots=True)
class WordTiming:
    word: str
    start: float
    end: float
    #: It follows the word before with no space between (Japanese, Mandarin).
    joined: bool = False

    def to_dict(self) -> dict[str, float | str]:
        return {"word": self.word, "start": round(self.start, 3), "end": round(self.end, 3)}


def char_times(phonemes: str, durations: np.ndarray, n_samples: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and end seconds of every phoneme character, from the per-token frame durations.

    ``durations[0]`` is ``<bos>``, ``durations[1 : 1 + len(phonemes)]`` the characters, the last
    ``<eos>``. Times are clamped to the audio's length.
    """
    d = np.asarray(durations, dtype=np.int64).reshape(-1)
    per_char = d[1 : 1 + len(phonemes)]
    if len(per_char) < len(phonemes):
        per_char = np.concatenate([per_char, np.zeros(len(phonemes) - len(per_char), np.int64)])
    edges = (int(d[0]) + np.concatenate([[0], np.cumsum(per_char)])) * (FRAME_SAMPLES / SAMPLE_RATE)
    edges = np.minimum(edges, n_samples / SAMPLE_RATE)
    return edges[:-1], edges[1:]


def segment_word_timings(
    text: str,
    phonemes: str,
    durations: np.ndarray,
    n_samples: int,
    words: Sequence[WordSpan] | None = None,
    offset: float = 0.0,
) -> list[WordTiming]:
    """Word timings for one synthesised segment, shifted by ``offset`` seconds. ``words``: the
    segment's word spans (:attr:`backends.api.Segment.words`); None spreads the words of ``text``
    over the spoken characters by their letters."""
    starts, ends = char_times(phonemes, durations, n_samples)
    spoken = [i for i, c in enumerate(phonemes) if not c.isspace()]
    if words is None:
        return _by_letters(text, spoken, starts, ends, n_samples, offset)
    if not spoken:
        return [WordTiming(text[w.start:w.end], offset, offset + n_samples / SAMPLE_RATE) for w in words]
    out: list[WordTiming] = []
    cursor = float(starts[spoken[0]])
    last_end = -1
    for w in words:
        a, b = min(w.ph_start, len(phonemes)), min(w.ph_end, len(phonemes))
        if b > a:
            t0 = max(float(starts[a]), cursor)
            t1 = max(float(ends[b - 1]), t0)
        else:  # nothing spoken for it: a zero-length mark
            t0 = t1 = cursor
        joined = last_end >= 0 and not any(c.isspace() for c in text[last_end:w.start])
        out.append(WordTiming(text[w.start:w.end], offset + t0, offset + t1, joined))
        cursor, last_end = t1, w.end
    return out


def segment_chunk_timings(chunk: AudioChunk, offset: float = 0.0) -> list[WordTiming]:
    """:func:`segment_word_timings` of one chunk that carries durations (its words' spans, or none)."""
    assert chunk.durations is not None
    return segment_word_timings(chunk.text, chunk.phonemes, chunk.durations, len(chunk.audio), chunk.words, offset)


def _by_letters(
    text: str, spoken: list[int], starts: np.ndarray, ends: np.ndarray, n_samples: int, offset: float,
) -> list[WordTiming]:
    words = text.split()
    if not words:
        return []
    if not spoken:
        return [WordTiming(w, offset, offset + n_samples / SAMPLE_RATE) for w in words]
    spans = _proportional_spans([sum(c.isalnum() for c in w) for w in words], len(spoken))
    out: list[WordTiming] = []
    cursor = float(starts[spoken[0]])
    for word, span in zip(words, spans, strict=True):
        if span is None:
            t0 = t1 = cursor
        else:
            t0 = max(float(starts[spoken[span[0]]]), cursor)
            t1 = max(float(ends[spoken[span[1]]]), t0)
        out.append(WordTiming(word, offset + t0, offset + t1))
        cursor = t1
    return out


def _proportional_spans(weights: list[int], n_spoken: int) -> list[tuple[int, int] | None]:
    total = sum(weights)
    ws = weights if total else [1] * len(weights)
    total = sum(ws)
    spans: list[tuple[int, int] | None] = []
    acc = 0
    for w in ws:
        a = round(acc / total * n_spoken)
        acc += w
        b = round(acc / total * n_spoken)
        spans.append((a, b - 1) if b > a else None)
    return spans

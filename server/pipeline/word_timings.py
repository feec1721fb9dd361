"""Per-word start/end times from Kokoro's predicted durations.

Kokoro's duration predictor gives one integer per input token (``<bos>``, each phoneme character,
``<eos>``) counted in *frames*. The F0/energy predictor upsamples frames by 2 and the iSTFTNet
decoder by 10·6·5 = 300 samples, so one frame is 600 samples at 24 kHz (25 ms) and
``len(audio) == 600 * sum(durations)``; the ``kokoro`` package's ``KPipeline.join_timestamps``
uses the same factor.

Words: a segment's phonemes are espeak-ng output for the whole segment, which does not keep one
phoneme word per text word (``of the`` -> ``ʌvðə``; numbers expand; lone punctuation vanishes). So
each text word is phonemised on its own and its characters are aligned (difflib) to the segment's
phoneme characters; a word spans the frames of the characters it matched. Without a phonemiser,
words share the spoken characters in proportion to their letters. Either way the times are
monotonic, non-overlapping and inside the segment's audio.

Pure functions, CPU only; call from a worker thread when the text is long (phonemisation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from difflib import SequenceMatcher

import numpy as np

FRAME_SAMPLES = 600
SAMPLE_RATE = 24_000


@dataclass(frozen=True, slots=True)
class WordTiming:
    word: str
    start: float
    end: float

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
    phonemize_word: Callable[[str], str] | None = None,
    offset: float = 0.0,
) -> list[WordTiming]:
    """Word timings for one synthesised segment, shifted by ``offset`` seconds.

    ``phonemize_word(word) -> phonemes`` (the backend's G2P, vocabulary-filtered) gives alignment
    by sound; without it words are spread over the spoken characters by their letter counts.
    """
    words = text.split()
    if not words:
        return []
    starts, ends = char_times(phonemes, durations, n_samples)
    spoken = [i for i, c in enumerate(phonemes) if not c.isspace()]
    if not spoken:
        return [WordTiming(w, offset, offset + n_samples / SAMPLE_RATE) for w in words]
    if phonemize_word is not None:
        spans = _aligned_spans(words, phonemes, spoken, phonemize_word)
    else:
        spans = _proportional_spans([sum(c.isalnum() for c in w) for w in words], len(spoken))
    out: list[WordTiming] = []
    cursor = float(starts[spoken[0]])
    for word, span in zip(words, spans, strict=True):
        if span is None:  # nothing spoken for it (lone punctuation): a zero-length mark
            t0 = t1 = cursor
        else:
            t0 = max(float(starts[spoken[span[0]]]), cursor)
            t1 = max(float(ends[spoken[span[1]]]), t0)
        out.append(WordTiming(word, offset + t0, offset + t1))
        cursor = t1
    return out


def _aligned_spans(
    words: list[str], phonemes: str, spoken: list[int], phonemize_word: Callable[[str], str]
) -> list[tuple[int, int] | None]:
    """Per word, the first and last index into ``spoken`` its own phonemes matched."""
    target = "".join(phonemes[i] for i in spoken)
    source, owner = [], []
    for k, word in enumerate(words):
        for c in phonemize_word(word):
            if not c.isspace():
                source.append(c)
                owner.append(k)
    first: list[int | None] = [None] * len(words)
    last: list[int | None] = [None] * len(words)
    matcher = SequenceMatcher(None, "".join(source), target, autojunk=False)
    for a, b, size in matcher.get_matching_blocks():
        for n in range(size):
            k = owner[a + n]
            if first[k] is None:
                first[k] = b + n
            last[k] = b + n
    # A run of words that matched nothing (context changed their sound: "a" -> ɐ, not eɪ) shares
    # the unmatched characters between its neighbours; other leftovers go to the word before them.
    k = 0
    while k < len(words):
        if first[k] is not None:
            k += 1
            continue
        m = k
        while m < len(words) and first[m] is None:
            m += 1
        before = last[k - 1] if k > 0 else None
        lo = before + 1 if before is not None else 0
        after = first[m] if m < len(words) else None
        hi = after if after is not None else len(target)
        run = m - k
        for j in range(k, m):
            a = lo + (hi - lo) * (j - k) // run
            b = lo + (hi - lo) * (j - k + 1) // run
            if b > a:
                first[j], last[j] = a, b - 1
        k = m
    spans: list[tuple[int, int] | None] = []
    for k in range(len(words)):
        start, end = first[k], last[k]
        if start is None or end is None:
            spans.append(None)
            continue
        nxt = next((f for f in first[k + 1:] if f is not None), len(target))
        spans.append((start, max(end, nxt - 1)))
    if spans and spans[0] is not None:
        spans[0] = (0, spans[0][1])
    return spans


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

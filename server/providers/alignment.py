"""What the Cartesia and ElevenLabs mappers share: the word and character times of one streamed
segment (Cartesia's word timestamps, ElevenLabs' character ``alignment``) and the join of text sent
in pieces.

:func:`joined` keeps two sentences apart when a client sends them as separate messages with no
space between (Pipecat's sentence mode sends ``"First one."`` then ``"Second one."``; the providers
concatenate verbatim, which would read ``one.Second``): a space goes in only where a message ends
with a sentence mark and the next starts with a capital, so tokens (``3`` ``.`` ``14``) join as sent.

The words come from the engine's word timings (``server.pipeline.word_timings``: the model's predicted
durations) carried by each :class:`~server.streaming.text_stream.Audio` event. Where the runtime reports no
durations, :func:`words_of` spreads the segment's words over its audio by their letter counts — an
estimate, so a client still gets its transcript in step with the audio. Either way the times are
monotonic, non-overlapping and inside the segment's audio.

:func:`char_alignment` turns a segment's words into ElevenLabs' per-character arrays, relative to
the segment's first sample: each word's characters share its span, the spaces between words take
the gaps (words written without a space between, in Japanese and Mandarin, get none), and a trailing space takes the rest of the audio, so that the last character ends exactly
where the segment's audio does (clients advance their clock by that end, and complete a word when a
space follows it).

Pure functions; no I/O.
"""

from __future__ import annotations

from typing import Any

from backends.text.sentences import CLOSERS, OPENERS, TERMINATORS
from server.pipeline.word_timings import WordTiming
from server.streaming.text_stream import Audio


def joined(previous_tail: str, text: str) -> str:
    """``text`` as it continues text ending in ``previous_tail``: with a space put in front where two
    sentences would otherwise touch."""
    if not previous_tail or not text or previous_tail[-1].isspace() or text[0].isspace():
        return text
    tail = previous_tail.rstrip(CLOSERS)
    head = text.lstrip(OPENERS)
    if tail and tail[-1] in TERMINATORS and head[:1].isupper():
        return " " + text
    return text


def words_of(audio: Audio) -> list[WordTiming]:
    """The words of ``audio`` with start/end seconds on the stream's clock."""
    if audio.words:
        end = audio.offset + audio.duration
        return [WordTiming(w.word, min(w.start, end), min(max(w.end, w.start), end), w.joined) for w in audio.words]
    return estimate_words(audio.text, audio.offset, audio.duration)


def estimate_words(text: str, offset: float, duration: float) -> list[WordTiming]:
    """``text``'s words spread over ``[offset, offset + duration]`` in proportion to their letters."""
    words = text.split()
    if not words:
        return []
    weights = [max(1, sum(c.isalnum() for c in w)) for w in words]
    total = sum(weights)
    out, acc = [], 0
    for word, weight in zip(words, weights, strict=True):
        start = offset + duration * acc / total
        acc += weight
        out.append(WordTiming(word, start, offset + duration * acc / total))
    return out


def char_alignment(audio: Audio, seconds: float | None = None) -> dict[str, list[Any]]:
    """ElevenLabs' ``alignment`` of one segment: ``chars``, ``charStartTimesMs``, ``charDurationsMs``
    (integers, relative to the segment's first sample), ending with a space. ``seconds``: the length
    of the audio as sent (a resampled segment's differs from the model's by the resampler's delay);
    the last character ends there."""
    words = words_of(audio)
    total_ms = max(0, round((audio.duration if seconds is None else seconds) * 1000))
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []

    def ms(t: float) -> int:
        return max(0, min(total_ms, round((t - audio.offset) * 1000)))

    cursor = 0
    for k, word in enumerate(words):
        if k and not word.joined:
            chars.append(" ")
            starts.append(cursor)
            ends.append(max(cursor, ms(word.start)))
            cursor = ends[-1]
        t0, t1 = max(cursor, ms(word.start)), max(cursor, ms(word.end))
        n = len(word.word)
        for i, c in enumerate(word.word):
            a = t0 + (t1 - t0) * i // n
            b = t0 + (t1 - t0) * (i + 1) // n
            chars.append(c)
            starts.append(a)
            ends.append(b)
        cursor = t1
    chars.append(" ")
    starts.append(cursor)
    ends.append(total_ms)
    return {
        "chars": chars,
        "charStartTimesMs": starts,
        "charDurationsMs": [b - a for a, b in zip(starts, ends, strict=True)],
    }

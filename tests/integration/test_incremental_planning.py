"""A request's first audio depends on its first segment only: the planner reads the first clause
before anything else, the engine starts synthesis while the rest of the text is read behind it, and
one request's long text never holds up another request's planning.

Real G2P (the server's, espeak-ng for English) behind a recorder or a gate, the fake runtime.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from backends.api import InvalidRequest, SynthesisRequest
from backends.config import BackendConfig
from backends.engine.concurrent import ConcurrentBackend
from backends.engine.sequential import SequentialBackend
from backends.runtimes.fake import FakeSynthesizer
from backends.text.planner import TextPipeline

LONG = ("When you ask a voice assistant a question, it should answer at once. Nobody likes to wait. "
        "The rest of this text is long enough to take a while to read. It goes on for several sentences, "
        "each one read by the same front end. And then it ends.")
MODES = {"sequential": (SequentialBackend, {}), "concurrent": (ConcurrentBackend, {"max_wait_ms": 0})}


def test_the_first_segment_is_read_before_the_rest_of_the_text(server_g2p, vocab):
    read: list[str] = []
    pipe = TextPipeline(lambda text, lang: read.append(text) or server_g2p.phonemize(text, lang), vocab,
                        check=server_g2p.check)
    segments = pipe.plan_iter(LONG, voice="jm_kumo")
    first = next(segments)
    assert read == [first.text] and first.text == "When you ask a voice assistant a question,"
    rest = list(segments)
    planned = pipe.plan(LONG, voice="jm_kumo")
    assert [s.text for s in [first, *rest]] == [s.text for s in planned]  # the same plan, read step by step
    assert [s.phonemes for s in [first, *rest]] == [s.phonemes for s in planned]
    assert [s.index for s in rest] == list(range(1, len(planned)))


def test_a_letter_no_front_end_reads_late_in_the_text_is_refused_before_any_segment(server_g2p, vocab):
    read: list[str] = []
    pipe = TextPipeline(lambda text, lang: read.append(text) or server_g2p.phonemize(text, lang), vocab,
                        check=server_g2p.check)
    with pytest.raises(InvalidRequest) as err:
        next(pipe.plan_iter(LONG + " それから日本語。", voice="jm_kumo", lang="en-us"))
    assert err.value.code == "language_mismatch" and read == []


@pytest.mark.parametrize("mode", sorted(MODES))
async def test_a_long_text_being_read_holds_up_neither_its_own_first_audio_nor_another_request(
        mode, server_g2p, vocab, voices):
    gate = threading.Event()

    def phonemize(text: str, lang: str) -> str:
        if "Nobody" in text:  # the long request's second sentence: its G2P waits for the test
            gate.wait(30)
        return server_g2p.phonemize(text, lang)

    cls, extra = MODES[mode]
    pipe = TextPipeline(phonemize, vocab, check=server_g2p.check)
    backend = cls(FakeSynthesizer(voices, segment_s=0.0), pipe, voices, BackendConfig.defaults(**extra))
    await backend.start()
    try:
        long = await asyncio.wait_for(backend.prepare(SynthesisRequest(text=LONG, voice="jm_kumo", session="a")), 10)
        stream = aiter(backend.stream(long))
        first = await asyncio.wait_for(anext(stream), 10)  # heard while the text's next sentence is being read
        assert first.index == 0 and not first.is_last and not gate.is_set()
        short = await asyncio.wait_for(backend.prepare(SynthesisRequest(text="Hi there.", voice="jm_kumo",
                                                                        session="b")), 10)
        heard = await asyncio.wait_for(_all(backend.stream(short)), 10)
        # answered whole, its plan complete, while the long text's planning still waits for the gate (a
        # chunk's is_last may come before its plan says so: it is never claimed early, only known late)
        assert [c.text for c in heard] == ["Hi there."] and short.plan is not None and short.plan.complete
        assert not gate.is_set()
        gate.set()
        rest = await asyncio.wait_for(_all(stream), 30)
    finally:
        gate.set()
        await backend.aclose()
    chunks = [first, *rest]
    assert [c.index for c in chunks] == list(range(len(chunks))) and chunks[-1].is_last
    assert all(c.count == len(chunks) for c in chunks[-1:])
    assert " ".join(c.text for c in chunks) == LONG  # nothing lost, nothing twice
    assert long.segments == [s for s in long.segments if s.voice == "jm_kumo"] and len(long.segments) == len(chunks)


async def _all(stream) -> list:
    return [chunk async for chunk in stream]

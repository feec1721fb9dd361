"""Real speech through the engine: the joins between a request's segments carry the pause a reading
makes at each boundary (not the model's padding), with no click, and the words still come through."""

from __future__ import annotations

import numpy as np
import pytest

from backends.api import SynthesisRequest
from backends.config import BackendConfig
from backends.engine.joins import pause_for
from backends.engine.sequential import SequentialBackend
from benchmarks import speech_measures as sm

TEXT = "Kokoro is a small text to speech model, and it runs on a laptop. Try it."


async def _chunks(onnx_synth, pipeline, voices, **config):
    backend = SequentialBackend(onnx_synth, pipeline, voices, BackendConfig.defaults(**config))
    request = await backend.prepare(SynthesisRequest(text=TEXT, voice="jm_kumo", session="joins"))
    chunks = [chunk async for chunk in backend.stream(request)]
    return request, chunks


async def test_joins_pause_as_the_reading_does_without_a_click(onnx_synth, pipeline, voices):
    # segments read alone (a first sentence read in windows is tests/integration/test_windowed_decoder.py)
    request, chunks = await _chunks(onnx_synth, pipeline, voices, windowed_first_segment=False)
    kinds = [s.ends for s in request.segments]
    assert kinds[0] == "phrase" and "sentence" in kinds[1:-1] and kinds[-1] == "sentence"
    stream = np.concatenate([c.audio for c in chunks])
    runs, at = sm.silent_runs(stream), 0
    for chunk, kind in zip(chunks[:-1], kinds, strict=False):
        at += len(chunk.audio)
        run = sm.run_at(runs, at // sm.WINDOW)
        gap = 0.0 if run is None else (run[1] - run[0]) * sm.HOP_S
        assert gap == pytest.approx(pause_for(kind), abs=0.05), kind  # not the model's 0.7-1.0 s
        assert sm.band_db(stream, at) < -40  # no click
    first_sound = np.flatnonzero(np.abs(chunks[0].audio) > 0.01)[0] / 24_000
    assert first_sound < 0.1  # the model's 0.3 s of lead is gone


@pytest.mark.slow
@pytest.mark.timeout(300)  # real synthesis and transcription of several texts
async def test_joined_audio_stays_intelligible(onnx_synth, pipeline, voices, transcribe):
    _, chunks = await _chunks(onnx_synth, pipeline, voices)
    heard = set(transcribe(np.concatenate([c.audio for c in chunks])))
    expected = [w.strip(".,").lower() for w in TEXT.split()]
    assert sum(w in heard for w in expected) / len(expected) >= 0.6, sorted(heard)

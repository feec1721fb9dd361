"""A first sentence cut early keeps its intonation on a runtime that decodes windows (torch).

The segments of the first sentence each carry the whole sentence; the runtime predicts its prosody
whole and decodes only the segment's frames. What a listener would notice, on the real model:
the fragment before the cut is at the pitch of the whole sentence's reading there (not the falling
end of an utterance), the windows meet without a click or a pause, and the word timings still add
up to the audio sent.
"""

from __future__ import annotations

import numpy as np
import pytest

from backends.base import Segment, SynthesisRequest
from backends.config import BackendConfig
from backends.joins import FRAME, sound_extent
from backends.sequential import SequentialBackend
from backends.torch_runtime import TorchSynthesizer
from benchmarks import speech_measures as sm

TEXT = "Kokoro is a small text to speech model."


@pytest.fixture(scope="module")
def torch_synth(model_dir, voices):
    synth = TorchSynthesizer(model_dir, voices, device="cpu", deterministic=True, warmup=False)
    synth.load()
    return synth


async def _stream(synth, pipeline, voices, **config):
    backend = SequentialBackend(synth, pipeline, voices, BackendConfig.defaults(**config))
    request = await backend.prepare(SynthesisRequest(text=TEXT, voice="jm_kumo", session="windowed"))
    return request, [chunk async for chunk in backend.stream(request)]


async def test_an_early_cut_keeps_the_sentences_pitch_and_joins_without_a_click(torch_synth, pipeline, voices):
    request, chunks = await _stream(torch_synth, pipeline, voices)
    segments = request.segments
    assert segments[0].ends == "phrase" and len(segments) >= 2
    context = segments[0].sentence
    assert context is not None and all(s.sentence is not None and s.sentence.phonemes == context.phonemes
                                       for s in segments)
    reading = torch_synth.synthesize(Segment(TEXT, context.phonemes, "jm_kumo"))
    stream = np.concatenate([c.audio for c in chunks])
    at = len(chunks[0].audio)
    # the windows start where the reading starts: the same frames, no alignment needed
    f0_stream, f0_reading = sm.pitch(stream), sm.pitch(reading)
    cut = sm.cut_pitch(f0_stream, f0_reading, np.arange(len(f0_stream)), at // sm.WINDOW)
    assert cut is not None
    assert abs(sm.semitones(*cut)) <= 1.5, f"{cut[0]:.0f} Hz at the cut where the reading is at {cut[1]:.0f} Hz"
    assert sm.band_db(stream, at) < -40  # no click
    steps = np.abs(np.diff(reading))
    assert abs(float(stream[at]) - float(stream[at - 1])) <= np.percentile(steps, 99)
    # no pause put in: from the first to the last sound the sentence runs as long as its reading
    (s0, s1), (r0, r1) = sound_extent(stream), sound_extent(reading)
    assert abs((s1 - s0) - (r1 - r0)) <= 2 * FRAME
    for chunk in chunks:
        assert chunk.durations is not None and int(chunk.durations.sum()) * FRAME == len(chunk.audio)


async def test_switched_off_each_segment_is_read_alone(torch_synth, pipeline, voices):
    """``KOKORO_WINDOWED_FIRST_SEGMENT=false``: the fragment is an utterance of its own again."""
    request, chunks = await _stream(torch_synth, pipeline, voices, windowed_first_segment=False)
    assert request.segments[0].ends == "phrase"
    assert all(s.sentence is None for s in request.segments) and len(chunks) == len(request.segments)

"""A first sentence cut early keeps its intonation on the ONNX runtime with its predict and decode
graphs (made by graph surgery from the int8 export, beside links to the model directory's files).

What a listener would notice, on the real model: a window that covers the whole sentence is the
model's own reading, sample for sample; the fragment before an early cut is at the pitch of the
whole sentence's reading there (not the falling end of an utterance), the windows meet without a
click or a pause, and the word timings add up to the audio sent. Without the two graphs the
runtime reads each segment alone, as before.
"""

from __future__ import annotations

import numpy as np
import pytest

from backends.assets import ModelFiles
from backends.base import Interrupt, Interrupted, Segment, SentenceContext, SynthesisRequest
from backends.config import BackendConfig
from backends.joins import FRAME, sound_extent
from backends.onnx_runtime import OnnxSynthesizer
from backends.onnx_timed import source_name
from backends.onnx_windowed import decode_name, predict_name, split_model
from backends.sequential import SequentialBackend
from benchmarks import speech_measures as sm

TEXT = "Kokoro is a small text to speech model."


@pytest.fixture(scope="module")
def windowed_synth(tmp_path_factory, model_files, voices):
    root = tmp_path_factory.mktemp("windowed")
    source = model_files.root / source_name(model_files.onnx.name)
    for path in (model_files.onnx, source, model_files.voices, model_files.config):
        if not (root / path.name).exists():
            (root / path.name).symlink_to(path.resolve())
    with open(root / predict_name(source.name), "wb") as p, open(root / decode_name(source.name), "wb") as d:
        split_model(source, p, d)
    synth = OnnxSynthesizer(ModelFiles.discover(root), voices, threads=2)
    synth.load()
    return synth


async def _stream(synth, pipeline, voices, **config):
    backend = SequentialBackend(synth, pipeline, voices, BackendConfig.defaults(**config))
    request = await backend.prepare(SynthesisRequest(text=TEXT, voice="jm_kumo", session="windowed"))
    return request, [chunk async for chunk in backend.stream(request)]


def test_a_window_of_the_whole_sentence_is_the_models_reading(windowed_synth, onnx_synth, pipeline):
    assert windowed_synth.capabilities.windowed and not onnx_synth.capabilities.windowed
    phonemes = pipeline.plan(TEXT, voice="jm_kumo")[0].phonemes
    plain = Segment(TEXT, phonemes, "jm_kumo")
    whole = Segment(TEXT, phonemes, "jm_kumo", sentence=SentenceContext(phonemes, 0, len(phonemes)))
    audio, durations = windowed_synth.synthesize_timed(whole)
    reading, reading_durations = onnx_synth.synthesize_timed(plain)
    assert np.array_equal(audio, reading)
    assert np.array_equal(durations, reading_durations)


def test_an_interrupt_stops_a_windowed_call_and_the_next_one_speaks_as_before(windowed_synth, pipeline):
    phonemes = pipeline.plan(TEXT, voice="jm_kumo")[0].phonemes
    cut = phonemes.index(" ") + 1
    first = Segment(TEXT, phonemes[: cut - 1], "jm_kumo", sentence=SentenceContext(phonemes, 0, cut))
    before = windowed_synth.synthesize(first)
    stop = Interrupt()
    stop.set()
    with pytest.raises(Interrupted):
        windowed_synth.synthesize(first, interrupt=stop)
    assert np.array_equal(windowed_synth.synthesize(first), before)


async def test_an_early_cut_keeps_the_sentences_pitch_and_joins_without_a_click(windowed_synth, pipeline, voices):
    request, chunks = await _stream(windowed_synth, pipeline, voices)
    segments = request.segments
    assert segments[0].ends == "phrase" and len(segments) >= 2
    context = segments[0].sentence
    assert context is not None and all(s.sentence is not None and s.sentence.phonemes == context.phonemes
                                       for s in segments)
    reading = windowed_synth.synthesize(Segment(TEXT, context.phonemes, "jm_kumo"))
    stream = np.concatenate([c.audio for c in chunks])
    at = len(chunks[0].audio)
    f0_stream, f0_reading = sm.pitch(stream), sm.pitch(reading)
    cut = sm.cut_pitch(f0_stream, f0_reading, np.arange(len(f0_stream)), at // sm.WINDOW)
    assert cut is not None
    assert abs(sm.semitones(*cut)) <= 1.5, f"{cut[0]:.0f} Hz at the cut where the reading is at {cut[1]:.0f} Hz"
    assert sm.band_db(stream, at) < -40  # no click
    steps = np.abs(np.diff(reading))
    assert abs(float(stream[at]) - float(stream[at - 1])) <= np.percentile(steps, 99)
    (s0, s1), (r0, r1) = sound_extent(stream), sound_extent(reading)
    assert abs((s1 - s0) - (r1 - r0)) <= 2 * FRAME  # no pause put in
    for chunk in chunks:
        assert chunk.durations is not None and int(chunk.durations.sum()) * FRAME == len(chunk.audio)

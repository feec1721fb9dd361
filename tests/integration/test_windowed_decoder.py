"""A first sentence cut early keeps its intonation on a runtime that decodes windows: torch, and
ONNX with the predict and decode graphs that ``kokoro-serve assets`` cuts from the int8 export.

The segments of the first sentence each carry the whole sentence; the runtime predicts its prosody
whole and decodes only the segment's frames. What a listener would notice, on the real model: the
fragment before the cut is at the pitch of the whole sentence's reading there (not the falling end
of an utterance), the windows meet without a click or a pause, and the word timings still add up
to the audio sent. On ONNX a window that covers the whole sentence is the export's own reading,
sample for sample (the pair stands in for the export, which is not opened beside it); a sentence's
prosody is predicted once for all its windows and let go after its last; and an interrupted
windowed call leaves the next one as it was.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from backends.api import Interrupt, Interrupted, Segment, SentenceContext, SynthesisRequest
from backends.config import BackendConfig
from backends.engine.joins import FRAME, sound_extent
from backends.engine.sequential import SequentialBackend
from benchmarks import speech_measures as sm

TEXT = "Kokoro is a small text to speech model."


@pytest.fixture(params=["onnx", pytest.param("torch", marks=[pytest.mark.torch, pytest.mark.xdist_group("torch")])])
def windowed_synth(request, onnx_synth):
    """The ONNX runtime, or the run's one torch runtime (``torch_synth``, asked for at run time: the
    torch case runs in its group, where it is loaded once), both loaded."""
    return onnx_synth if request.param == "onnx" else request.getfixturevalue("torch_synth")


@pytest.fixture(scope="module")
def whole_reading():
    """A runtime's reading of the whole sentence alone, with its durations: read once for the tests
    that compare against it (both runtimes here are deterministic)."""
    kept: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}

    def read(synth, phonemes: str) -> tuple[np.ndarray, np.ndarray]:
        if (synth.name, phonemes) not in kept:
            kept[synth.name, phonemes] = synth.synthesize_timed(Segment(TEXT, phonemes, "jm_kumo"))
        return kept[synth.name, phonemes]

    return read


async def _stream(synth, pipeline, voices, **config):
    backend = SequentialBackend(synth, pipeline, voices, BackendConfig.defaults(**config))
    request = await backend.prepare(SynthesisRequest(text=TEXT, voice="jm_kumo", session="windowed"))
    return request, [chunk async for chunk in backend.stream(request)]


def _first_fragment(pipeline) -> Segment:
    phonemes = pipeline.plan(TEXT, voice="jm_kumo")[0].phonemes
    cut = phonemes.index(" ") + 1
    return Segment(TEXT, phonemes[: cut - 1], "jm_kumo", sentence=SentenceContext(phonemes, 0, cut))


async def test_an_early_cut_keeps_the_sentences_pitch_and_joins_without_a_click(windowed_synth, pipeline, voices,
                                                                                 whole_reading):
    assert windowed_synth.capabilities.windowed  # the default model directory has the ONNX graphs
    request, chunks = await _stream(windowed_synth, pipeline, voices)
    segments = request.segments
    assert segments[0].ends == "phrase" and len(segments) >= 2
    context = segments[0].sentence
    assert context is not None and all(s.sentence is not None and s.sentence.phonemes == context.phonemes
                                       for s in segments)
    reading = whole_reading(windowed_synth, context.phonemes)[0]
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


async def test_switched_off_each_segment_is_read_alone(onnx_synth, pipeline, voices):
    """``KOKORO_WINDOWED_FIRST_SEGMENT=false``: the fragment is an utterance of its own again, on a
    runtime that could read it as a window (the switch is the engine's, whichever runtime)."""
    assert onnx_synth.capabilities.windowed
    request, chunks = await _stream(onnx_synth, pipeline, voices, windowed_first_segment=False)
    assert request.segments[0].ends == "phrase"
    assert all(s.sentence is None for s in request.segments) and len(chunks) == len(request.segments)


def test_on_onnx_a_window_of_the_whole_sentence_is_the_exports_reading(onnx_synth, model_files, voices, pipeline,
                                                                        whole_reading):
    from backends.runtimes.onnx import OnnxSynthesizer

    export = OnnxSynthesizer(model_files, voices)
    export.window_graphs = None  # the export alone
    export.load()
    assert onnx_synth._session is None and export._session is not None  # the pair stands in for the export
    phonemes = pipeline.plan(TEXT, voice="jm_kumo")[0].phonemes
    reading, reading_durations = export.synthesize_timed(Segment(TEXT, phonemes, "jm_kumo"))
    whole = Segment(TEXT, phonemes, "jm_kumo", sentence=SentenceContext(phonemes, 0, len(phonemes)))
    # the predict and decode graphs: a window of all of it; the segment alone
    for audio, durations in (onnx_synth.synthesize_timed(whole), whole_reading(onnx_synth, phonemes)):
        assert np.array_equal(audio, reading)
        assert np.array_equal(durations, reading_durations)


def test_on_onnx_a_sentence_is_predicted_once_for_all_its_windows_and_not_kept_after(onnx_synth, pipeline):
    phonemes = pipeline.plan(TEXT, voice="jm_kumo")[0].phonemes
    cuts = [i + 1 for i, c in enumerate(phonemes) if c == " "][:2]
    bounds = [0, *cuts, len(phonemes)]
    windows = [Segment(TEXT, phonemes[a:b].strip(), "jm_kumo", sentence=SentenceContext(phonemes, a, b))
               for a, b in itertools.pairwise(bounds)]
    calls = 0
    predict = onnx_synth._windows[False][0]

    class Counting:
        def run(self, *args):
            nonlocal calls
            calls += 1
            return predict.run(*args)

    bound = onnx_synth.predictions.size
    onnx_synth.predictions.clear()  # no prediction an earlier reading left behind is reused here
    onnx_synth._windows[False] = (Counting(), onnx_synth._windows[False][1])
    try:
        readings = []
        for _ in range(2):  # two readings of the sentence, window by window
            readings.append([onnx_synth.synthesize(w) for w in windows])
            assert len(onnx_synth.predictions) == 0  # its last window let the prediction go
        assert all(np.array_equal(a, b) for a, b in zip(*readings, strict=True))
        assert calls == 2  # once a reading, not once a window
        # A bound of 2 rather than the default: three readings stopped early overflow it. What is
        # checked is that the runtime keeps no more than its bound, whatever the bound is set to.
        onnx_synth.predictions.size = 2
        onnx_synth.synthesize(windows[0])  # a reading stopped after its first window: kept a while, bounded
        for n in range(onnx_synth.predictions.size + 1):  # one more reading stopped early than it keeps
            other = Segment(TEXT, phonemes[: cuts[0]].strip(), "jm_kumo", speed=1.0 + n / 100,
                            sentence=SentenceContext(phonemes, 0, cuts[0]))
            onnx_synth.synthesize(other)
        assert len(onnx_synth.predictions) <= onnx_synth.predictions.size
    finally:
        onnx_synth._windows[False] = (predict, onnx_synth._windows[False][1])
        onnx_synth.predictions.size = bound
        onnx_synth.predictions.clear()


def test_on_onnx_an_interrupt_stops_a_windowed_call_and_the_next_one_speaks_as_before(onnx_synth, pipeline):
    first = _first_fragment(pipeline)
    before = onnx_synth.synthesize(first)
    stop = Interrupt()
    stop.set()
    with pytest.raises(Interrupted):
        onnx_synth.synthesize(first, interrupt=stop)
    assert np.array_equal(onnx_synth.synthesize(first), before)

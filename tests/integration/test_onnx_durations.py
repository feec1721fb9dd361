"""Word timings on the ONNX runtime: the timed twin's audio is the plain export's, bit for bit, its
durations fill that audio exactly, ``/v1/audio/speech/timed`` answers on ``onnx`` with word times
that are monotonic and inside the audio, and the engine's timed calls keep the solo session and
interrupts."""

from __future__ import annotations

import base64
import io
from dataclasses import replace
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile

import backends.assets.build as assets
from backends.api import Interrupt, Segment, Unsupported
from backends.runtimes.onnx import OnnxSynthesizer
from server.settings import Settings
from tests.support.app import LoadedRuntime, build_app, build_backend
from tests.support.live import ThreadServer

FRAME = 600  # samples per predicted frame (server/pipeline/word_timings.py)
TIMED_TEXT = "Hello there, it costs 42 dollars."


@pytest.fixture(scope="module")
def plain_synth(model_files, voices):
    """The shipped export itself, without the duration output."""
    synth = OnnxSynthesizer(replace(model_files, onnx=model_files.root / assets.OFFLINE_ONNX), voices)
    synth.window_graphs = None  # (not the predict/decode pair that would stand in for it)
    synth.load()
    return synth


def test_the_timed_model_is_the_default_and_sounds_the_same(onnx_synth, plain_synth, pipeline):
    assert onnx_synth.reports_durations and not plain_synth.reports_durations
    assert onnx_synth.model_name == plain_synth.model_name == assets.OFFLINE_ONNX
    slow, fast = (pipeline.plan("Open the door, please.", voice="jm_kumo", speed=s, fast_first=False)[0]
                  for s in (1.0, 1.6))
    frames, audios = [], []
    for segment in (slow, fast):
        audio, durations = onnx_synth.synthesize_timed(segment)
        assert np.array_equal(audio, plain_synth.synthesize(segment))  # the same graph: the same audio
        assert durations.dtype == np.int64 and len(durations) == len(onnx_synth.tokens(segment.phonemes)) + 2
        assert durations.min() >= 1 and len(audio) == FRAME * durations.sum()  # they fill the audio exactly
        frames.append(durations.sum())
        audios.append(audio)
    assert frames[1] < 0.8 * frames[0]  # faster speech, shorter durations
    assert np.array_equal(onnx_synth.synthesize(slow), audios[0])  # audio alone: the same run
    assert onnx_synth.capabilities.timed and not plain_synth.capabilities.timed
    with pytest.raises(Unsupported, match="reports no durations"):
        plain_synth.synthesize_timed(slow)


class TimedRuntime(LoadedRuntime):
    """The session's loaded ONNX runtime with its timed calls, every one recorded (``timed_calls``)."""

    def __init__(self, inner: OnnxSynthesizer):
        super().__init__(inner, timed=True)
        self.timed_calls: list[dict[str, Any]] = []

    def synthesize_timed(self, segment: Segment, **options: Any):
        self.timed_calls.append(options)
        return super().synthesize_timed(segment, **options)


def test_timed_speech_on_onnx_through_the_server(onnx_synth, pipeline, voices):
    app = build_app(TimedRuntime(onnx_synth), "sequential", settings=Settings(api_key=None), pipeline=pipeline, voices=voices)
    body = {"model": "kokoro", "input": TIMED_TEXT, "voice": "jm_kumo", "response_format": "wav"}
    with ThreadServer(app) as server, httpx.Client(base_url=server.url, timeout=120) as http:
        r = http.post("/v1/audio/speech/timed", json=body)
    assert r.status_code == 200, r.text
    result = r.json()
    audio, rate = soundfile.read(io.BytesIO(base64.b64decode(result["audio"])))
    duration = len(audio) / rate
    assert 1.0 < duration < 6.0 and result["duration"] == pytest.approx(duration, abs=0.01)
    words = result["words"]
    assert [w["word"] for w in words] == TIMED_TEXT.split()
    prev = 0.0
    for w in words:
        assert prev <= w["start"] < w["end"] <= duration + 0.001, w  # monotonic, spoken, inside the audio
        prev = w["end"]
    assert words[-1]["end"] > duration / 2  # the words span the speech, not a corner of it


def test_the_engine_keeps_every_core_and_interrupts_on_timed_calls(onnx_synth, pipeline, voices):
    """A call that runs alone takes the timed solo call, and an interrupt reaches the timed call."""
    runtime = TimedRuntime(onnx_synth)
    backend = build_backend(runtime, "concurrent", pipeline=pipeline, voices=voices)
    assert backend.capabilities.word_timings
    segment = pipeline.plan("Hello.", voice="jm_kumo", speed=1.0, fast_first=False)[0]
    interrupt = Interrupt()
    (alone,) = backend.run_segments([segment], solo=True)
    (shared,) = backend.run_segments([segment], interrupt=interrupt)
    assert alone.error is None and shared.error is None and alone.durations is not None
    assert np.array_equal(alone.audio, shared.audio) and np.array_equal(alone.durations, shared.durations)
    assert runtime.timed_calls == [{"solo": True, "interrupt": None}, {"solo": False, "interrupt": interrupt}]

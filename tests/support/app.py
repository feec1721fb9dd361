"""The one in-process app builder: the real app (:func:`server.app.create_app`) over the real
sequential or concurrent backend and text pipeline (every language's G2P, offline), around a given
synthesizer — :class:`~backends.runtimes.fake.FakeSynthesizer` (built by :func:`fake_synth`) or a real,
already-loaded runtime wrapped in :class:`LoadedRuntime`.

One :class:`~server.metrics.Metrics` object is both the app's metrics and the backend's observer,
handed to the backend when it is built, as the server's CLI does.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from starlette.applications import Starlette

from backends.api import Capabilities, Segment, Synthesizer
from backends.assets.voices import VoiceStore
from backends.config import BackendConfig
from backends.engine.concurrent import ConcurrentBackend
from backends.engine.sequential import SequentialBackend
from backends.runtimes.fake import FakeSynthesizer
from backends.runtimes.onnx import load_vocab
from backends.text.g2p.frontends import G2P
from backends.text.planner import TextPipeline
from server.app import create_app
from server.metrics import Metrics
from server.settings import Settings

#: The fake voice set: random style vectors under real-looking names (the first is the default).
VOICES = ("af_test", "am_other", "jf_third")


@cache
def fake_pipeline(segment_phonemes: int = 60) -> TextPipeline:
    """The real text pipeline with Kokoro's vocabulary; short segments, so texts split."""
    import kokoro_onnx

    vocab = load_vocab(Path(kokoro_onnx.__file__).parent / "config.json")
    g2p = G2P()
    return TextPipeline(g2p.phonemize, vocab, segment_phonemes=segment_phonemes, read=g2p.phonemize_words)


@cache
def fake_voices() -> VoiceStore:
    rng = np.random.default_rng(0)
    return VoiceStore({v: rng.standard_normal((510, 1, 256)).astype(np.float32) for v in VOICES}, VOICES[0])


def fake_synth(**knobs: Any) -> FakeSynthesizer:
    """The fake runtime with no latency unless asked (``segment_s``, ``fail_on``, ``gate``, ...),
    deaf to the ``KOKORO_FAKE_*`` variables of the shell running the tests."""
    return FakeSynthesizer(**{"segment_s": 0.0, **knobs})


class LoadedRuntime(Synthesizer):
    """A real runtime the test session has already loaded, behind the whole interface with the
    inner runtime's capabilities: ``load()`` does not load it again, it only waits on ``gate`` when
    one is given (a model "still loading": not ``loaded`` until the gate opens, so the engine's
    ``start()``, which skips the load of a loaded runtime, waits on it). It declares no word timings unless ``timed`` (and the
    runtime reports durations). ``calls`` lists the text of every segment call in call order;
    ``hold`` (a :class:`threading.Event`, settable at any time) makes every call wait on it."""

    def __init__(self, inner: Synthesizer, gate: threading.Event | None = None, *, timed: bool = False):
        self.inner, self.gate = inner, gate
        self.name, self.sample_rate, self.model_name = inner.name, inner.sample_rate, inner.model_name
        self.threads, self.solo_threads = inner.threads, inner.solo_threads
        self.timed = timed
        self.calls: list[str] = []
        self.hold: threading.Event | None = None

    @property
    def capabilities(self) -> Capabilities:
        caps = self.inner.capabilities
        return dataclasses.replace(caps, timed=self.timed and caps.timed)

    @property
    def loaded(self) -> bool:
        # (its threads stand as they were loaded); gated: "still loading" until the gate opens
        return self.inner.loaded and (self.gate is None or self.gate.is_set())

    def load(self) -> None:
        if self.gate is not None:
            self.gate.wait(60)

    def _called(self, segments: Sequence[Segment]) -> None:
        self.calls.extend(s.text for s in segments)
        if self.hold is not None:
            self.hold.wait(30)

    def synthesize(self, segment: Segment, **options: Any) -> np.ndarray:
        self._called([segment])
        return self.inner.synthesize(segment, **options)

    def synthesize_timed(self, segment: Segment, **options: Any) -> tuple[np.ndarray, np.ndarray]:
        self._called([segment])
        return self.inner.synthesize_timed(segment, **options)

    def synthesize_batch(self, segments: Sequence[Segment]) -> list[np.ndarray]:
        self._called(segments)
        return self.inner.synthesize_batch(segments)

    def synthesize_batch_timed(self, segments: Sequence[Segment]) -> list[tuple[np.ndarray, np.ndarray]]:
        self._called(segments)
        return self.inner.synthesize_batch_timed(segments)


def build_backend(
    synth: Any,
    mode: str = "sequential",
    *,
    metrics: Metrics | None = None,
    pipeline: TextPipeline | None = None,
    voices: VoiceStore | None = None,
    **backend_kw: Any,
) -> Any:
    """The real backend of ``mode`` around ``synth``, reporting to ``metrics``."""
    pipeline = pipeline if pipeline is not None else fake_pipeline()
    voices = voices if voices is not None else fake_voices()
    backend_class = ConcurrentBackend if mode == "concurrent" else SequentialBackend
    return backend_class(synth, pipeline, voices, BackendConfig.defaults(**backend_kw), observer=metrics)


def build_app(
    synth: Any,
    mode: str = "sequential",
    *,
    settings: Settings | None = None,
    pipeline: TextPipeline | None = None,
    voices: VoiceStore | None = None,
    **backend_kw: Any,
) -> Starlette:
    """The real app over the real backend of ``mode`` around ``synth`` (not started: its lifespan
    loads and warms it up). The backend is ``app.state.kokoro.backend``."""
    metrics = Metrics()
    backend = build_backend(synth, mode, metrics=metrics, pipeline=pipeline, voices=voices, **backend_kw)
    return create_app(settings if settings is not None else Settings(), backend, metrics=metrics)


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll until ``predicate()`` holds (a condition to reach, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.01)

"""The raw runtime a user would otherwise call: ``kokoro_onnx.Kokoro(...).create()`` /
``create_stream()`` on the server's model file, voice pack and config, in this process (nothing here
starts a server). ``create()`` blocks: call it from a thread on an event loop; the ONNX Runtime
session inside is thread-safe, so N threads calling it is the raw runtime's concurrency.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .clients import BYTES_PER_SECOND, Timing

VOICE = "jm_kumo"
LANG = "en-us"


def model_files(model_dir: Path | None = None, *, torch: bool = False):
    """Build/verify the offline assets (idempotent) and return :class:`backends.assets.build.ModelFiles`."""
    from backends.assets.build import build_assets, default_model_dir

    return build_assets(Path(model_dir or default_model_dir()), torch=torch)


def _timing(t0: float, batches: list[tuple[np.ndarray, int, float]]) -> Timing:
    """The call begun at ``t0`` and done now, from its ``(audio, sample rate, seconds from t0)`` batches."""
    audio_s = sum(len(audio) / sr for audio, sr, _ in batches)
    return Timing("raw", first_audio_s=batches[0][2] if batches else 0.0, complete_s=time.perf_counter() - t0,
                  audio_bytes=round(audio_s * BYTES_PER_SECOND))


class RawRuntime:
    """kokoro-onnx on our model directory. ``voice``/``lang`` default to the benchmark's."""

    def __init__(self, model_dir: Path | None = None, *, voice: str = VOICE, lang: str = LANG):
        from kokoro_onnx import Kokoro

        files = model_files(model_dir)
        if files.onnx is None:
            raise FileNotFoundError(f"no ONNX model in {files.root}")
        self.model_path = files.onnx
        self.voice, self.lang = voice, lang
        t0 = time.perf_counter()
        self.kokoro = Kokoro(str(files.onnx), str(files.voices), vocab_config=str(files.config))
        self.load_s = time.perf_counter() - t0
        self.create("Warming up.")  # the server warms up too; compare warm against warm

    def create(self, text: str) -> Timing:
        """Whole text at once: first audio is the whole audio (blocking)."""
        timing = self.create_sentences((text,))
        timing.first_audio_s = timing.complete_s
        return timing

    def create_sentences(self, sentences: list[str] | tuple[str, ...]) -> Timing:
        """The raw runtime's sentence-first: ``create()`` per sentence, first audio after the first."""
        t0 = time.perf_counter()
        return _timing(t0, [(*self.kokoro.create(sentence, voice=self.voice, lang=self.lang), time.perf_counter() - t0)
                            for sentence in sentences])

    async def create_stream(self, text: str) -> Timing:
        """``create_stream()``: first audio when its first batch arrives."""
        t0 = time.perf_counter()
        return _timing(t0, [(audio, sr, time.perf_counter() - t0)
                            async for audio, sr in self.kokoro.create_stream(text, voice=self.voice, lang=self.lang)])

"""ONNX Runtime synthesizer (CPU by default): the offline default runtime.

We own the ``InferenceSession`` (rather than going through ``kokoro_onnx.Kokoro``) so thread counts
and providers are settable; the vocabulary comes from the Kokoro config that ships in
``kokoro_onnx``. ``InferenceSession.run`` is thread-safe, so ``thread_safe`` is True; the
sequential backend still runs one synthesis at a time by design. Blocking: call from a thread.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from .assets import ModelFiles
from .base import MAX_PHONEMES, SAMPLE_RATE, BackendFault, Segment, clip_audio
from .voices import VoiceStore


def load_vocab(config_path: Path) -> dict[str, int]:
    return json.loads(Path(config_path).read_text(encoding="utf-8"))["vocab"]


class OnnxSynthesizer:
    name = "onnx"
    sample_rate = SAMPLE_RATE
    thread_safe = True

    def __init__(
        self,
        files: ModelFiles,
        voices: VoiceStore,
        *,
        threads: int | None = None,
        providers: list[str] | None = None,
    ):
        if files.onnx is None:
            raise FileNotFoundError(f"no ONNX model in {files.root}")
        self.files = files
        self.voices = voices
        self.vocab = load_vocab(files.config)
        self.threads = threads
        self.providers = providers or ["CPUExecutionProvider"]
        self.model_name = files.onnx.name
        self._session = None

    def load(self) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads or (os.cpu_count() or 1)
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Memory patterns are planned per input shape, and every text length is a new shape: with
        # them on, RSS climbed ~50 MB over the first hundred texts; off, it stays flat, at no cost
        # in speed (measured; see benchmarks/results/soak.md).
        opts.enable_mem_pattern = False
        self._session = ort.InferenceSession(str(self.files.onnx), sess_options=opts, providers=self.providers)
        inputs = {i.name: i for i in self._session.get_inputs()}
        self._tokens_input = "input_ids" if "input_ids" in inputs else "tokens"
        self._speed_dtype = np.int32 if "int" in inputs["speed"].type else np.float32

    @property
    def device(self) -> str:
        return "cuda" if self.providers[0].startswith("CUDA") else "cpu"

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def tokens(self, phonemes: str) -> list[int]:
        return [self.vocab[c] for c in phonemes if c in self.vocab]

    def synthesize(self, segment: Segment) -> np.ndarray:
        if self._session is None:
            raise BackendFault("ONNX runtime used before load()")
        tokens = self.tokens(segment.phonemes)[:MAX_PHONEMES]
        if not tokens:
            return np.zeros(0, dtype=np.float32)
        style = self.voices.style(segment.voice, len(tokens)).reshape(1, -1).astype(np.float32)
        speed = np.array([segment.speed], dtype=self._speed_dtype)
        out = self._session.run(
            None,
            {
                self._tokens_input: np.array([[0, *tokens, 0]], dtype=np.int64),
                "style": style,
                "speed": speed,
            },
        )
        return clip_audio(out[0])

"""Build a backend by name. Runtimes are imported only when chosen (the CPU image never imports
torch), in the manner of uvicorn's import strings."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .assets import REBUILT_PTH, ModelFiles, default_model_dir
from .g2p import EspeakG2P
from .onnx_runtime import load_vocab
from .text import TextPipeline
from .voices import VoiceStore

RUNTIMES = {
    "onnx": "backends.onnx_runtime:OnnxSynthesizer",
    "torch": "backends.torch_runtime:TorchSynthesizer",
    # For tests, load and soak runs only: no model, tones with latency/failure knobs (backends/fake.py).
    "fake": "backends.fake:FakeSynthesizer",
}
MODES = {
    "sequential": "backends.sequential:SequentialBackend",
    "concurrent": "backends.concurrent:BatchedBackend",
}


def import_from_string(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass
class BackendOptions:
    runtime: str = "onnx"
    mode: str = "sequential"
    model_dir: Path | None = None
    device: str = "auto"
    threads: int | None = None
    half: bool = False
    default_voice: str | None = None
    default_lang: str = "en-us"
    fast_first_segment: bool = True
    first_segment_words: int = 3
    first_segment_max_words: int = 12
    segment_phonemes: int = 300
    max_text_chars: int = 5000
    max_batch_size: int = 16
    max_wait_ms: float = 5.0
    max_queue: int = 256
    request_timeout_s: float | None = 120.0
    observer: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


def create_synthesizer(options: BackendOptions, files: ModelFiles, voices: VoiceStore) -> Any:
    if options.runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {options.runtime!r}; choose one of {', '.join(RUNTIMES)}")
    cls = import_from_string(RUNTIMES[options.runtime])
    if options.runtime == "onnx":
        return cls(files, voices, threads=options.threads)
    return cls(files.root, voices, device=options.device, half=options.half, threads=options.threads)


def _model_name(runtime: str, files: ModelFiles) -> str:
    """What /ping reports: the file the chosen runtime actually loads."""
    if runtime == "torch":
        return (files.torch_checkpoint or files.root / REBUILT_PTH).name
    return files.model_name


def create_backend(options: BackendOptions) -> Any:
    """Discover the assets, build synthesizer, text pipeline and backend. Loads nothing heavy:
    ``await backend.start()`` does the loading, off the event loop."""
    if options.mode not in MODES:
        raise ValueError(f"unknown mode {options.mode!r}; choose one of {', '.join(MODES)}")
    files = ModelFiles.discover(Path(options.model_dir or default_model_dir()))
    voices = VoiceStore.from_path(files.voices, options.default_voice)
    synthesizer = create_synthesizer(options, files, voices)
    pipeline = TextPipeline(
        EspeakG2P().phonemize,
        load_vocab(files.config),
        first_segment_words=options.first_segment_words,
        first_segment_max_words=options.first_segment_max_words,
        segment_phonemes=options.segment_phonemes,
    )
    common = dict(
        default_lang=options.default_lang,
        fast_first_segment=options.fast_first_segment,
        max_text_chars=options.max_text_chars,
        max_queue=options.max_queue,
        request_timeout_s=options.request_timeout_s,
        observer=options.observer,
        model_name=_model_name(options.runtime, files),
    )
    cls = import_from_string(MODES[options.mode])
    if options.mode == "concurrent":
        common.update(max_batch_size=options.max_batch_size, max_wait_ms=options.max_wait_ms)
    return cls(synthesizer, pipeline, voices, **common)

"""Build a backend from its configuration. Runtimes and modes are imported only when chosen (the
CPU image never imports torch), in the manner of uvicorn's import strings.

:func:`create_backend` discovers the model assets, builds the runtime, the text pipeline and the
engine of the chosen mode, all from one :class:`~backends.config.BackendConfig`, and loads nothing
heavy: ``await backend.start()`` does the loading, off the event loop.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from backends.api import Backend, BackendObserver, Synthesizer
from backends.assets.build import REBUILT_PTH, ModelFiles, default_model_dir
from backends.assets.voices import VoiceStore
from backends.config import BackendConfig
from backends.runtimes.onnx import load_vocab
from backends.startup import ConfigError
from backends.text.g2p.frontends import G2P
from backends.text.lexicon import Lexicon
from backends.text.planner import TextPipeline

RUNTIMES = {
    "onnx": "backends.runtimes.onnx:OnnxSynthesizer",
    "torch": "backends.runtimes.torch:TorchSynthesizer",
    # For tests, load and soak runs only: no model, tones with latency/failure knobs (backends/runtimes/fake.py).
    "fake": "backends.runtimes.fake:FakeSynthesizer",
}
MODES = {
    "sequential": "backends.engine.sequential:SequentialBackend",
    "concurrent": "backends.engine.concurrent:ConcurrentBackend",
}


def import_from_string(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


def create_synthesizer(config: BackendConfig, files: ModelFiles, voices: VoiceStore) -> Any:
    """The runtime ``config.backend`` names, not loaded yet."""
    if config.backend not in RUNTIMES:
        raise ValueError(f"unknown runtime {config.backend!r}; choose one of {', '.join(RUNTIMES)}")
    cls = import_from_string(RUNTIMES[config.backend])
    if config.backend == "onnx":
        return cls(files, voices, threads=config.threads)
    if config.backend == "torch":
        return cls(files.root, voices, device=config.device, dtype=config.dtype, threads=config.threads)
    return cls(voices, config=config)


def create_g2p(config: BackendConfig) -> G2P:
    """The G2P of every language (front ends built on first use), with ``KOKORO_LEXICON`` loaded."""
    try:
        lexicon = Lexicon.from_file(config.lexicon) if config.lexicon else None
    except ValueError as e:
        raise ConfigError(f"{e} (KOKORO_LEXICON); point it at a JSON object of {{language: {{word: phonemes}}}} "
                          "(docs/languages.md), or unset it") from None
    return G2P(english=config.english_g2p, lexicon=lexicon, torch_free=config.backend != "torch")


def create_pipeline(config: BackendConfig, files: ModelFiles) -> TextPipeline:
    g2p = create_g2p(config)
    return TextPipeline(
        g2p.phonemize,
        load_vocab(files.config),
        first_segment_words=config.first_segment_words,
        first_segment_max_words=config.first_segment_max_words,
        segment_phonemes=config.segment_phonemes,
        preload=g2p.preload,
        check=g2p.check,
        phrase_end_mark=config.phrase_end_mark,
        read=g2p.phonemize_words,
    )


def _model_name(runtime: str, files: ModelFiles) -> str:
    """What /ping reports: the file the chosen runtime actually loads."""
    if runtime == "torch":
        return (files.torch_checkpoint or files.root / REBUILT_PTH).name
    if runtime == "fake":  # no model file is loaded: never let a stand-in pass for the model
        return "fake"
    return files.model_name


def create_voices(config: BackendConfig, files: ModelFiles) -> VoiceStore:
    """The voices of ``files`` with ``config``'s default voice and aliases: what the backend and its runtime share."""
    return VoiceStore.from_path(files.voices, config.default_voice, config.voice_alias_map)


def create_backend(config: BackendConfig, observer: BackendObserver | None = None, *,
                   synthesizer: Synthesizer | None = None) -> Backend:
    """The backend ``config`` describes; ``observer`` (the server's metrics) hears what it does.
    ``synthesizer``: a runtime already built from this same ``config`` (``create_synthesizer(config,
    files, create_voices(config, files))``), loaded or not, for the backend to use instead of building
    its own (a benchmark that measured the runtime alone first: loaded once, held once in memory);
    ``start()`` skips the load of one already loaded."""
    if config.mode not in MODES:
        raise ValueError(f"unknown mode {config.mode!r}; choose one of {', '.join(MODES)}")
    files = ModelFiles.discover(Path(config.model_dir or default_model_dir()))
    voices = create_voices(config, files)
    if synthesizer is None:
        synthesizer = create_synthesizer(config, files, voices)
    cls: Callable[..., Backend] = import_from_string(MODES[config.mode])
    return cls(synthesizer, create_pipeline(config, files), voices, config,
               observer=observer, model_name=_model_name(config.backend, files))

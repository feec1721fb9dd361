"""Shared fixtures: the model directory is built once (idempotently) and the real ONNX runtime is
loaded once per test session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# The SageMaker HTTP/2 SDK needs Python >= 3.12: `make test` runs that folder with .venv312.
collect_ignore = ["agent_py312"] if sys.version_info < (3, 12) else []


@pytest.fixture(scope="session")
def model_dir() -> Path:
    from backends.assets.build import build_assets, default_model_dir

    path = Path(os.environ.get("KOKORO_MODEL_DIR") or default_model_dir())
    build_assets(path, torch=False)
    return path


@pytest.fixture(scope="session")
def model_files(model_dir):
    from backends.assets.build import ModelFiles

    return ModelFiles.discover(model_dir)


@pytest.fixture(scope="session")
def voices(model_files):
    from backends.assets.voices import VoiceStore

    return VoiceStore.from_path(model_files.voices)


@pytest.fixture(scope="session")
def vocab(model_files):
    from backends.runtimes.onnx import load_vocab

    return load_vocab(model_files.config)


@pytest.fixture(scope="session")
def g2p():
    """espeak-ng alone (the G2P of Spanish, French, Hindi, Italian, Portuguese)."""
    from backends.text.g2p.frontends import EspeakG2P

    return EspeakG2P()


@pytest.fixture(scope="session")
def server_g2p():
    """The server's G2P with its default settings: every language's front end (espeak-ng for English), each built
    on first use."""
    from backends.text.g2p.frontends import G2P

    return G2P()


@pytest.fixture(scope="session")
def pipeline(vocab, server_g2p):
    """The server's text pipeline."""
    from backends.text.planner import TextPipeline

    return TextPipeline(server_g2p.phonemize, vocab)


@pytest.fixture(scope="session")
def onnx_synth(model_files, voices):
    from backends.runtimes.onnx import OnnxSynthesizer

    synth = OnnxSynthesizer(model_files, voices)
    synth.load()
    return synth


@pytest.fixture(scope="session")
def transcribe():
    """Transcribe 24 kHz float audio with pocketsphinx's bundled en-us model; returns lower-case words."""
    import numpy as np
    import soxr
    from pocketsphinx import Decoder

    decoder = Decoder(samprate=16000)

    def run(audio) -> list[str]:
        pcm = (np.clip(soxr.resample(audio, 24000, 16000), -1, 1) * 32767).astype(np.int16).tobytes()
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp()
        return hyp.hypstr.lower().split() if hyp else []

    return run

"""Building backends from the configuration: the environment reaches the engine and the runtime."""

from __future__ import annotations

import asyncio

from backends.api import SynthesisRequest
from backends.config import BackendConfig
from backends.factory import create_backend
from server.cli.main import build_backend
from server.settings import Settings
from tests.support.observer import Recorder


def test_ping_names_the_file_the_runtime_loads(model_dir):
    """Regression: --backend torch reported the ONNX file as its model."""
    assert create_backend(BackendConfig.defaults(model_dir=model_dir)).info.model.endswith(".onnx")
    torch_backend = create_backend(BackendConfig.defaults(backend="torch", device="cpu", model_dir=model_dir))
    assert torch_backend.info.model.endswith(".pth")


def test_environment_reaches_the_engine_and_the_runtime(model_dir):
    """env -> Settings -> backend: the concurrent mode's knobs (settable at last), the fake runtime's."""
    env = {
        "KOKORO_BACKEND": "fake", "KOKORO_MODE": "concurrent", "KOKORO_MODEL_DIR": str(model_dir),
        "KOKORO_WORKERS": "3", "KOKORO_MAX_AHEAD": "4", "KOKORO_BATCH_ON_CPU": "true", "KOKORO_FAKE_BATCH": "true",
        "KOKORO_MAX_BATCH_SIZE": "5", "KOKORO_MAX_WAIT_MS": "7", "KOKORO_MAX_TEXT_CHARS": "40",
        "KOKORO_FAKE_SEGMENT_S": "0.001", "KOKORO_FAKE_FAIL_ON": "Boom",
    }
    recorder = Recorder()
    backend = build_backend(Settings.from_env(env), observer=recorder)
    assert (backend.mode, backend.workers, backend.max_ahead, backend.batch_on_cpu) == ("concurrent", 3, 4, True)
    assert (backend.max_batch_size, backend.max_wait_s, backend.config.max_text_chars) == (5, 0.007, 40)
    assert backend.info.capabilities.batching  # a CPU runtime, batched because KOKORO_BATCH_ON_CPU says so
    assert backend.info.model == "fake"  # /ping never names the model file for the stand-in
    synth = backend.synthesizer
    assert (synth.segment_s, synth.fail_on, synth.hang_on) == (0.001, "Boom", None)

    async def speak(text: str) -> int:
        request = await backend.prepare(SynthesisRequest(text=text))
        try:
            return len([chunk async for chunk in backend.stream(request)])
        finally:
            await backend.aclose()

    assert asyncio.run(speak("Hello there.")) == 1
    assert len(recorder.segments) == 1 and recorder.batches == [1]  # the observer given at construction


def test_torch_precision_comes_from_the_configuration(model_dir):
    config = BackendConfig.defaults(backend="torch", device="cpu", dtype="bfloat16", model_dir=model_dir)
    info = create_backend(config).info
    assert (info.runtime, info.device, info.dtype) == ("torch", "cpu", "bfloat16")


def test_only_the_given_environment_is_read(monkeypatch):
    monkeypatch.setenv("KOKORO_MAX_QUEUE", "3")  # the process's environment: read by no constructor
    assert BackendConfig().max_queue == 256 and BackendConfig.defaults().max_queue == 256
    assert BackendConfig.defaults(max_queue=9).max_queue == 9
    assert BackendConfig.from_env({"KOKORO_MAX_QUEUE": "4"}).max_queue == 4


def test_a_runtime_handed_in_loaded_is_used_and_not_loaded_again(model_dir):
    """benchmarks/gpu.py measures its runtime alone, then hands it to the sweep's backend: one load."""
    from backends.assets.build import ModelFiles
    from backends.factory import create_synthesizer, create_voices

    config = BackendConfig.defaults(backend="fake", mode="concurrent", model_dir=model_dir)
    files = ModelFiles.discover(model_dir)
    synth = create_synthesizer(config, files, create_voices(config, files))
    synth.load()
    loads = []
    synth.load = lambda: loads.append("again")  # type: ignore[method-assign]
    backend = create_backend(config, synthesizer=synth)
    assert backend.synthesizer is synth

    async def start_and_speak() -> int:
        await backend.start()
        try:
            request = await backend.prepare(SynthesisRequest(text="Hello there."))
            return len([chunk async for chunk in backend.stream(request)])
        finally:
            await backend.aclose()

    assert asyncio.run(start_and_speak()) == 1
    assert loads == []  # start() skipped the load of the loaded runtime (and still warmed up and answered)

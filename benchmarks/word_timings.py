"""What word timings cost a request: ``python -m benchmarks word_timings [--quick] [--backend fake|onnx]``.

The real app in this process (Starlette's ``TestClient``: no socket, the server's own routes, engine
and text pipeline) answers the 267-character paragraph through ``/v1/audio/speech`` (PCM, no
timings) and ``/v1/audio/speech/timed`` (the same audio, base64 in JSON, with every word's start
and end), the two alternating request by request (which goes first rotating). Per request: the
process's CPU time (all threads: planning, G2P, the runtime, timing, encoding) and the wall time.
The difference of the medians, timed minus untimed, is what asking for word timings costs (the
base64 and JSON of the timed answer included); the timing step alone (cutting the words' times
from one request's chunks, ``server.pipeline.word_timings``) is measured apart. ``fake``: the fake runtime reporting durations
(synthesis costs next to nothing, so the text path's share shows); ``onnx``: the timed model.
Results: ``benchmarks/results/word_timings_<runtime>.{json,md}``. Run on a tree before a change
(``--out``) to compare.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from backends.config import BackendConfig

from . import results
from .texts import PARAGRAPH

VOICE = "jm_kumo"
#: The CPU cutting one request's word timings may take (µs): arithmetic, no G2P.
TARGET_CUT_US = 1000


def _backend(config: BackendConfig) -> Any:
    """The engine the server builds (``create_backend``); the fake runtime built to report durations."""
    from backends.factory import create_backend

    if config.backend != "fake":
        return create_backend(config)
    from backends.assets.build import ModelFiles, default_model_dir
    from backends.assets.voices import VoiceStore
    from backends.engine.sequential import SequentialBackend
    from backends.factory import create_pipeline
    from backends.runtimes.fake import FakeSynthesizer

    files = ModelFiles.discover(Path(config.model_dir or default_model_dir()))
    voices = VoiceStore.from_path(files.voices, config.default_voice, config.voice_alias_map)
    return SequentialBackend(FakeSynthesizer(voices, config=config, timed=True), create_pipeline(config, files), voices,
                             config, model_name="fake")


def run(*, quick: bool = False, model_dir: Path | None = None, log: Callable[[str], None] = print,
        backend: str = "fake") -> results.Result:
    """50 requests of each kind (``quick``: 10), alternating."""
    from starlette.testclient import TestClient

    from server.app import create_app
    from server.settings import Settings

    n = 10 if quick else 50
    config = BackendConfig.defaults(backend=backend, mode="sequential", device="cpu", model_dir=model_dir,
                                    request_timeout_s=None, fake_segment_s=0.0, fake_phoneme_s=0.0)
    result = results.Result(f"word_timings_{backend}", quick, results.command_line("word_timings", quick), config={
        "runtime": backend, "mode": "sequential", "requests_per_kind": n, "text_chars": len(PARAGRAPH),
        "voice": VOICE})
    body = {"model": "kokoro", "input": PARAGRAPH, "voice": VOICE, "response_format": "pcm"}
    routes = {"untimed": "/v1/audio/speech", "timed": "/v1/audio/speech/timed"}
    with TestClient(create_app(Settings(), _backend(config))) as client:
        while client.get("/ping").status_code != 200:
            time.sleep(0.05)
        for kind in routes:  # one of each first: lazy imports and caches are not the requests' cost
            client.post(routes[kind], json=body).raise_for_status()
        for i in range(n):
            for kind in (("untimed", "timed") if i % 2 == 0 else ("timed", "untimed")):
                cpu0, wall0 = time.process_time(), time.perf_counter()
                r = client.post(routes[kind], json=body)
                cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
                r.raise_for_status()
                sample: dict[str, Any] = {"kind": kind, "round": i, "cpu_ms": results.ms(cpu, 2),
                                          "wall_ms": results.ms(wall, 2)}
                if kind == "timed":
                    sample["words"] = len(r.json()["words"])
                result.samples.append(sample)
        assert client.portal is not None
        result.summary["cut_us_per_request"] = _cut_cost(client.portal.call(_chunks, client.app.state.kokoro.backend))
    result.medians = results.medians_by(result.samples, "kind", {"cpu_ms": 2, "wall_ms": 2})
    timed, untimed = result.medians["timed"]["cpu_ms"], result.medians["untimed"]["cpu_ms"]
    extra = results.rnd(timed - untimed, 2) if timed is not None and untimed is not None else None
    result.summary |= {"extra_cpu_ms_per_timed_request": extra,
                      "words_per_request": next(s["words"] for s in result.samples if s["kind"] == "timed")}
    cut = result.summary.get("cut_us_per_request")
    result.target("CPU to cut one request's word timings from its durations", f"<= {TARGET_CUT_US:,} µs", cut,
                  results.at_most(cut, TARGET_CUT_US), any_runtime=True)
    result.notes.append("CPU is this process's CPU time (every thread) during the request: steadier than wall time "
                        "when other processes share the cores. The timed answer also carries its audio as base64 "
                        "in JSON; that encoding is part of the difference.")
    log(f"  {backend}: untimed {untimed} ms CPU, timed {timed} ms CPU per request (median of {n})")
    return result


async def _chunks(backend: Any) -> list[Any]:
    """The paragraph's chunks, durations and word spans with them (on the app's event loop)."""
    from backends.api import SynthesisRequest

    prepared = await backend.prepare(SynthesisRequest(text=PARAGRAPH, voice=VOICE))
    return [chunk async for chunk in backend.stream(prepared)]


def _cut_cost(chunks: list[Any]) -> float | None:
    """CPU microseconds to cut one request's word timings from its chunks (the timing step alone,
    median of 200 passes over the paragraph's chunks)."""
    from server.pipeline.word_timings import segment_chunk_timings

    passes = []
    for _ in range(200):
        t = time.process_time()
        for chunk in chunks:
            segment_chunk_timings(chunk)
        passes.append((time.process_time() - t) * 1e6)
    return results.rnd(results.median(passes), 1)


def body(data: dict[str, Any]) -> str:
    cfg, med = data["config"], data["medians"]
    rows = [[kind, med[kind]["cpu_ms"], med[kind]["wall_ms"]] for kind in ("untimed", "timed") if kind in med]
    return (f"{cfg['runtime']} runtime, {cfg['requests_per_kind']} requests of each kind on the "
            f"{cfg['text_chars']}-character paragraph ({data['summary']['words_per_request']} words), "
            f"{data['machine']['cpu_count']} CPUs.\n\n"
            + results.markdown_table(["request", "CPU per request (ms, median)", "wall per request (ms, median)"], rows)
            + f"\n\nA timed request costs {data['summary']['extra_cpu_ms_per_timed_request']} ms more CPU than the "
              "same request untimed (its answer is base64 audio in JSON, against streamed PCM)"
            + (f"; cutting its {data['summary']['words_per_request']} words' timings from the durations takes "
               f"{cut} µs of it." if (cut := data["summary"].get("cut_us_per_request")) is not None else "."))

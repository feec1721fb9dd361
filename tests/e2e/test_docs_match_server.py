"""What the docs say the server does, checked against one live server (the real ONNX runtime), as a
newcomer would check it: /ping and /v1/models name the device and dtype, the timed-words example is
the answer, the 1009 and 1008 closes read as documented, a non-streamed WAV carries its true sizes,
`kokoro-serve say --url` uses the running server, and a JSON log line carries fields."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import subprocess
import sys
import urllib.request
import wave
from pathlib import Path

import pytest
import websockets

from tests.support.live import REPO, ServerProcess

pytestmark = pytest.mark.subprocess

DOCS = REPO / "docs"


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("docs-match") / "server.log"
    proc = ServerProcess(log, KOKORO_MODEL_DIR=str(model_dir), KOKORO_LOG_FORMAT="json", KOKORO_LOG_LEVEL="info")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def get(server, path: str) -> dict:
    with urllib.request.urlopen(server.url + path, timeout=30) as r:
        return json.load(r)


def post(server, path: str, body: dict) -> bytes:
    request = urllib.request.Request(server.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as r:
        return r.read()


def test_ping_and_models_report_device_and_dtype_as_the_runtimes_page_says(server):
    row = next(line for line in (DOCS / "runtimes.md").read_text().splitlines() if line.startswith("| `device`, `dtype`"))
    assert "`/ping`, `/v1/models`" in row
    assert {k: get(server, "/ping")[k] for k in ("device", "dtype")} == {"device": "cpu", "dtype": "float32"}
    cards = get(server, "/v1/models")["data"]
    assert cards and all((c["device"], c["dtype"]) == ("cpu", "float32") for c in cards)


def test_the_timed_words_example_is_the_answer(server):
    text = (DOCS / "runtimes.md").read_text()
    request = re.search(r"speech/timed .*?-d '(\{.*?\})'", text, re.S).group(1)
    shown = re.search(r"\| python -c .*?\n```\n\n```text\n(.*?)\n```", text, re.S).group(1)
    words = json.loads(post(server, "/v1/audio/speech/timed", json.loads(request)))["words"]
    example = ast.literal_eval(shown)
    # The same words, each where the example puts it: the int8 model's predicted durations move by a
    # frame or two (25 ms each) between CPU families (their integer kernels round differently).
    assert [w["word"] for w in words] == [w["word"] for w in example]
    for got, doc in zip(words, example, strict=True):
        assert abs(got["start"] - doc["start"]) <= 0.1 and abs(got["end"] - doc["end"]) <= 0.1, (got, doc)


def close_of(url: str, first: bytes | str | None = None) -> tuple[int, str]:
    async def run() -> tuple[int, str]:
        async with websockets.connect(url, max_size=None) as ws:
            try:
                if first is not None:
                    await ws.send(first)
                while True:
                    await ws.recv()
            except websockets.ConnectionClosed as e:
                assert e.rcvd is not None
                return e.rcvd.code, e.rcvd.reason
    return asyncio.run(asyncio.wait_for(run(), 60))


def test_the_1009_reasons_read_as_the_operating_page_says(server):
    limits = (DOCS / "operating.md").read_text().split("## Limits", 1)[1].split("\n## ", 1)[0]
    just_over = close_of(server.ws_url, b"x" * 65537)
    far_over = close_of(server.ws_url, b"x" * 100_000)
    assert just_over == (1009, "message over 65536 bytes") and f"`{just_over[1]}`" in limits
    assert far_over[0] == 1009 and f"`{far_over[1]}`" in limits


def test_elevenlabs_refuses_an_unknown_voice_at_the_upgrade_as_the_operating_page_says(server):
    ws_url = server.url.replace("http", "ws") + "/v1/text-to-speech/"
    with pytest.raises(websockets.InvalidStatus) as refused:
        close_of(ws_url + "nobody/stream-input")
    assert refused.value.response.status_code == 404
    limits = (DOCS / "operating.md").read_text().split("## Limits", 1)[1].split("\n## ", 1)[0]
    assert "ElevenLabs' sockets also close\n  **1008**" in limits and "**404** `voice_not_found`" in limits


def test_a_non_streamed_wav_carries_its_true_sizes(server, tmp_path):
    """POST /invocations {"text": ..., "stream": false}: Python's wave reads the real length."""
    out = tmp_path / "hello.wav"
    out.write_bytes(post(server, "/invocations", {"text": "Hello there.", "stream": False}))
    with wave.open(str(out)) as w:
        seconds = w.getnframes() / w.getframerate()
    assert 0.3 < seconds < 5  # not the streaming placeholder's 89,478 s


def kokoro_serve(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KOKORO_")}
    return subprocess.run([sys.executable, "-m", "server.cli.main", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**environ, "PYTHONPATH": str(REPO), **env})


def test_say_uses_a_running_server(server, tmp_path):
    """kokoro-serve say "Hello there." -o hello.wav --url URL"""
    out = tmp_path / "hello.wav"
    done = kokoro_serve("say", "Hello there.", "-o", str(out), "--url", server.url)
    assert done.returncode == 0, done.stderr
    with wave.open(str(out)) as w:
        seconds = w.getnframes() / w.getframerate()
    assert 0.3 < seconds < 5
    assert done.stderr.splitlines() == [f"wrote {seconds:.2f}s of wav audio ({out.stat().st_size:,} bytes) to {out}, "
                                        f"synthesised by {server.url}"]
    refused = kokoro_serve("say", "Hi.", "-o", str(tmp_path / "x.mp3"), "--url", server.url, "--voice", "nobody")
    assert refused.returncode == 2 and refused.stderr.startswith("kokoro-serve: unknown_voice: unknown voice 'nobody'")


def test_say_refuses_an_unknown_voice_before_loading_a_model(model_dir, tmp_path):
    """kokoro-serve say Hi -o x.wav --voice nobody: refused from the voice files, so even a runtime that
    could not load (torch missing here) is never reached."""
    no_torch = "import sys; sys.modules['torch'] = None; from server.cli.main import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", no_torch, "say", "Hi.", "-o", str(tmp_path / "x.wav"), "--backend",
                           "torch", "--voice", "nobody", "--model-dir", str(model_dir)], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"kokoro-serve: unknown_voice: unknown voice 'nobody'; available: "
                                        f"{', '.join(sorted(json.loads(get_voices(model_dir))))}"]
    assert not (tmp_path / "x.wav").exists()


def get_voices(model_dir: Path) -> str:
    from backends.assets.build import ModelFiles
    from backends.assets.voices import VoiceStore

    return json.dumps(VoiceStore.from_path(ModelFiles.discover(model_dir).voices).names())


def test_the_backend_ready_line_carries_fields_not_a_dict_as_text(server):
    lines = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    for start in ("backend ready", "ready: "):
        ready = next(e for e in lines if e["message"].startswith(start))
        assert (ready["backend"], ready["device"], ready["dtype"], ready["mode"]) == ("onnx", "cpu", "float32",
                                                                                      "sequential")
        assert "{" not in ready["message"]
    assert not [e for e in lines if "color_message" in e]


def test_the_dashboard_draws_demanded_against_delivered_as_the_operating_page_says():
    dash = json.loads((REPO / "benchmarks" / "grafana" / "kokoro.json").read_text())
    panel = next(p for p in dash["panels"] if p["title"].startswith("Audio demanded vs delivered"))
    exprs = " ".join(t["expr"] for t in panel["targets"])
    assert "kokoro_audio_demanded_seconds_per_second" in exprs and "1.1 * sum(kokoro_audio_delivered" in exprs
    assert 'panel "Audio demanded vs delivered"' in (DOCS / "operating.md").read_text()


def test_the_agent_page_says_to_install_the_agent_extra():
    assert ".venv/bin/pip install -e '.[agent]'" in (DOCS / "agent.md").read_text()

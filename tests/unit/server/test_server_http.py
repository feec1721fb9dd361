"""POST /invocations, /ping and /metrics over the real app and sequential backend (fake
synthesizer): statuses, bodies, capacity released on every path, a failure after the first bytes."""

from __future__ import annotations

import contextlib
import json
import struct
import threading
from collections.abc import Iterator

import httpx
import pytest

from backends.audio.encoders import wav_header


def test_ping_is_503_while_loading_then_200(make_client, synth, wait):
    synth.load_gate = threading.Event()
    with make_client(wait_ready=False) as client:
        loading = client.get("/ping")
        refused = client.post("/invocations", json={"text": "Too early."})
        synth.load_gate.set()
        wait(lambda: client.get("/ping").status_code == 200)
        ready = client.get("/ping").json()
    assert loading.status_code == 503 and loading.json()["status"] == "loading"
    assert refused.status_code == 503 and refused.json() == {
        "error": {"code": "not_ready", "message": refused.json()["error"]["message"]}
    }
    assert ready == {"status": "ok", "backend": "fake", "mode": "sequential", "model": "fake", "device": "cpu",
                     "dtype": "float32"}


def test_streamed_wav_has_the_streaming_header_then_pcm(make_client):
    with make_client() as client:
        r = client.post("/invocations", json={"text": "Four words right here.", "request_id": "w1"})
    assert r.status_code == 200
    assert r.headers["content-type"] == "audio/wav"
    assert r.headers["x-request-id"] == "w1"
    assert r.content[:44] == wav_header(24000)  # sizes 0xFFFFFFFF: "read to the end"
    assert (len(r.content) - 44) % 2 == 0 and len(r.content) > 44


def test_buffered_wav_carries_real_sizes(make_client):
    with make_client() as client:
        r = client.post("/invocations", json={"text": "Four words right here.", "stream": False})
    assert r.status_code == 200 and r.headers["content-length"] == str(len(r.content))
    riff, data = struct.unpack("<I", r.content[4:8])[0], struct.unpack("<I", r.content[40:44])[0]
    assert data == len(r.content) - 44 and riff == data + 36


@pytest.mark.parametrize(
    ("body", "accept", "content_type"),
    [
        ({"format": "pcm"}, None, "audio/pcm; rate=24000; channels=1"),
        ({"format": "pcm", "sample_rate": 16000}, None, "audio/pcm; rate=16000; channels=1"),
        ({"format": "mp3"}, None, "audio/mpeg"),
        ({}, "audio/mpeg", "audio/mpeg"),
        ({}, "audio/L16", "audio/pcm; rate=24000; channels=1"),
        ({}, "*/*", "audio/wav"),
    ],
)
def test_formats_and_content_types(make_client, body, accept, content_type):
    headers = {"accept": accept} if accept else {}
    with make_client() as client:
        r = client.post("/invocations", json={"text": "Some words.", **body}, headers=headers)
    assert r.status_code == 200 and r.headers["content-type"] == content_type
    assert r.content


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{oops", 400, "invalid_json"),
        (b"\xff\xfe", 400, "invalid_json"),
        (b'"just a string"', 400, "invalid_json"),
        (b'{"voice": "af_test"}', 400, "invalid_request"),
        (b'{"text": ["a"]}', 400, "invalid_request"),
        (b'{"text": "hi", "speed": 0.1}', 400, "invalid_request"),
        (b'{"text": "hi", "format": "ogg"}', 400, "invalid_request"),
        (b'{"text": "hi", "stream": "yes"}', 400, "invalid_request"),
        (b'{"text": ""}', 400, "empty_text"),
        (b'{"text": "hi", "voice": "zz_nobody"}', 404, "unknown_voice"),
        (b'{"text": "' + b"a" * 101 + b'"}', 413, "text_too_long"),
        (b'{"text": "hi", "pad": "' + b" " * 3000 + b'"}', 413, "text_too_long"),  # body over the byte limit
    ],
)
def test_error_statuses_and_bodies(make_client, body, status, code):
    with make_client(max_text_chars=100, max_message_bytes=2048) as client:
        r = client.post("/invocations", content=body)
        ok = client.post("/invocations", json={"text": "Fine."})
    assert r.status_code == status
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"]["code"] == code and r.json()["error"]["message"]
    assert ok.status_code == 200


@contextlib.contextmanager
def one_held(client, synth, wait) -> Iterator[dict]:
    """A request held in the runtime (its call started, gated) while the block runs; its answer
    is the dict's ``r`` once the block is done."""
    synth.gate = threading.Event()
    synth.started.clear()
    first: dict = {}
    worker = threading.Thread(target=lambda: first.update(r=client.post("/invocations", json={"text": "Held."})))
    worker.start()
    wait(synth.started.is_set)
    try:
        yield first
    finally:
        synth.gate.set()
        worker.join(10)


def test_overloaded_backend_answers_503(make_client, synth, wait):
    with make_client(backend_kw={"max_queue": 1}) as client, one_held(client, synth, wait) as first:
        r = client.post("/invocations", json={"text": "Refused."})
        unread = client.post("/invocations", content=b"{not json")  # refused before its body is read
    assert r.status_code == 503 and r.json()["error"]["code"] == "overloaded" and r.headers["retry-after"]
    assert unread.status_code == 503 and unread.json()["error"]["code"] == "overloaded"
    assert first["r"].status_code == 200


def test_every_speech_route_refused_at_admission_answers_in_its_own_shape(make_client, synth, wait):
    """Refused before it is routed or read (the admission gate, or the endpoint itself where the
    path has a parameter), each HTTP speech route still answers as its clients expect: 503 with
    Retry-After, its own error body and request-id header, and the refusal counted on its route."""
    shapes = {
        "/invocations": lambda b: b["error"]["code"],
        "/v1/audio/speech": lambda b: b["error"]["code"],
        "/v1/speak": lambda b: b["err_code"],
        "/tts/bytes": lambda b: b["error_code"],
        "/tts/sse": lambda b: b["error_code"],
        "/v1/text-to-speech/af_heart": lambda b: b["detail"]["status"],
    }
    ids = {"/invocations": "x-request-id", "/v1/audio/speech": "x-request-id", "/v1/speak": "dg-request-id",
           "/v1/text-to-speech/af_heart": "x-trace-id"}
    with make_client(backend_kw={"max_queue": 1}) as client, one_held(client, synth, wait) as first:
        answers = {path: client.post(path, content=b"{not json") for path in shapes}
        metrics = client.get("/metrics").text
    assert first["r"].status_code == 200
    for path, code_of in shapes.items():
        r = answers[path]
        assert r.status_code == 503 and r.headers["retry-after"], path
        assert code_of(r.json()).lower() == "overloaded", (path, r.json())
        if path in ids:
            assert r.headers[ids[path]], path
    refused = [line for line in metrics.splitlines() if line.startswith("kokoro_requests_total") and '"503"' in line]
    assert len(refused) >= 5, refused  # one series per route refused (the two Cartesia routes share one)


def test_malformed_requests_never_leak_capacity(make_client):
    with make_client(max_sessions=2) as client:
        for i in range(200):
            client.post("/invocations", content=[b"{", b'{"text": 1}', b"\x00", b'{"text": "x", "voice": "zz"}'][i % 4])
        metrics = client.get("/metrics").text
        assert 'kokoro_inflight_requests{route="invocations"} 0.0' in metrics
        assert client.post("/invocations", json={"text": "Still fine."}).status_code == 200


def test_metrics_count_requests_by_status(make_client):
    with make_client() as client:
        client.post("/invocations", json={"text": "Counted."})
        client.post("/invocations", content=b"{")
        text = client.get("/metrics").text
    assert 'kokoro_requests_total{route="invocations",status="200"} 1.0' in text
    assert 'kokoro_requests_total{route="invocations",status="400"} 1.0' in text
    assert 'kokoro_errors_total{code="invalid_json",route="invocations"} 1.0' in text
    assert 'kokoro_time_to_first_audio_seconds_count{route="invocations"} 1.0' in text


def test_unknown_route_is_a_json_404(make_client):
    with make_client() as client:
        r = client.get("/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_failure_after_the_first_bytes_truncates_the_body(live_server, synth):
    """A segment that fails after audio has left cannot change the 200; the body must then end
    without its final chunk, so the client sees an error instead of a short, 'complete' file."""
    synth.fail_on = "explodes"
    url = live_server()
    with httpx.Client(timeout=10) as http:
        with pytest.raises(httpx.RemoteProtocolError), http.stream(
            "POST", f"{url}/invocations", json={"text": "This part is fine. This part explodes.", "format": "pcm"}
        ) as r:
            assert r.status_code == 200
            for _ in r.iter_bytes():
                pass
        after = http.post(f"{url}/invocations", content=json.dumps({"text": "Next one."}))
        metrics = http.get(f"{url}/metrics").text
    assert after.status_code == 200
    assert 'kokoro_errors_total{code="backend_error",route="invocations"} 1.0' in metrics


def test_a_client_that_leaves_before_the_first_audio_costs_no_synthesis(live_server, synth, wait):
    url = live_server()
    synth.gate = threading.Event()
    synth.started.clear()
    held: dict = {}
    worker = threading.Thread(
        target=lambda: held.update(r=httpx.post(f"{url}/invocations", json={"text": "Held first."}, timeout=30))
    )
    worker.start()
    wait(synth.started.is_set)
    with pytest.raises(httpx.ReadTimeout):  # gives up while queued behind the held request
        httpx.post(f"{url}/invocations", json={"text": "Abandoned second."}, timeout=0.5)
    wait(lambda: 'kokoro_inflight_requests{route="invocations"} 1.0' in httpx.get(f"{url}/metrics").text)
    synth.gate.set()
    worker.join(10)
    assert held["r"].status_code == 200
    assert "Abandoned second." not in synth.calls
    assert 'kokoro_requests_total{route="invocations",status="499"} 1.0' in httpx.get(f"{url}/metrics").text


def test_aliases_on_every_route_and_each_routes_statuses(make_client):
    """An alias is a voice on /invocations as on the OpenAI routes; an unknown voice and over-long
    text keep their documented SageMaker codes (404, 413) and get OpenAI's 400 on /v1."""
    from tests.support.app import fake_voices

    speech = {"model": "kokoro", "input": "Hi there.", "response_format": "pcm"}
    limits = {"max_text_chars": 100}  # the server's and the engine's, as one Settings gives both
    with make_client(backend_kw={"voices": fake_voices().with_aliases({"nova": "am_other"}), **limits},
                     **limits) as client:
        assert client.post("/invocations", json={"text": "Hi there.", "voice": "nova"}).status_code == 200
        assert client.post("/v1/audio/speech", json={**speech, "voice": "nova"}).status_code == 200
        sagemaker = [client.post("/invocations", json={"text": "Hi.", "voice": "nobody"}),
                     client.post("/invocations", json={"text": "a" * 101})]
        openai = [client.post("/v1/audio/speech", json={**speech, "voice": "nobody"}),
                  client.post("/v1/audio/speech", json={**speech, "input": "a" * 101})]
    assert [(r.status_code, r.json()["error"]["code"]) for r in sagemaker] == [
        (404, "unknown_voice"), (413, "text_too_long")]
    assert [(r.status_code, r.json()["error"]["code"], r.json()["error"]["param"]) for r in openai] == [
        (400, "unknown_voice", "voice"), (400, "text_too_long", "input")]

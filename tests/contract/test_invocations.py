"""POST /invocations with the real ONNX runtime (docs/wire-contract.md): formats and every error status."""

from __future__ import annotations

import io
import json
import struct
import wave

import av
import numpy as np
import pytest


def test_streamed_wav_is_readable_and_holds_speech(contract_client):
    r = contract_client.post("/invocations", json={"text": "Hello.", "speed": 2.0})
    assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"
    assert struct.unpack("<I", r.content[40:44])[0] == 0xFFFFFFFF  # streaming: size unknown
    with wave.open(io.BytesIO(r.content)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2)
        pcm = np.frombuffer(w.readframes(10**9), "<i2")
    assert len(pcm) == (len(r.content) - 44) // 2 > 24000 // 10
    assert np.sqrt(np.mean((pcm / 32768.0) ** 2)) > 0.01


def test_pcm_content_type(contract_client):
    r = contract_client.post("/invocations", json={"text": "Hi.", "speed": 2.0, "format": "pcm"})
    assert r.status_code == 200
    assert r.headers["content-type"] == "audio/pcm; rate=24000; channels=1"
    assert len(r.content) % 2 == 0 and len(r.content) > 0


def test_mp3_decodes(contract_client):
    r = contract_client.post("/invocations", json={"text": "Hi.", "speed": 2.0, "format": "mp3", "stream": False})
    assert r.status_code == 200 and r.headers["content-type"] == "audio/mpeg"
    with av.open(io.BytesIO(r.content)) as container:
        samples = sum(frame.samples for frame in container.decode(audio=0))
    assert samples > 24000 // 10


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (json.dumps({"text": "Hi.", "speed": 5}).encode(), 400, "invalid_request"),
        (json.dumps({"voice": "jm_kumo"}).encode(), 400, "invalid_request"),
        (json.dumps({"text": "Hi.", "voice": "af_nobody"}).encode(), 404, "unknown_voice"),
        (json.dumps({"text": "x" * 401}).encode(), 413, "text_too_long"),
        (json.dumps({"text": "Hi.", "padding": "y" * 5000}).encode(), 413, "text_too_long"),
    ],
)
def test_error_statuses(contract_client, body, status, code):
    r = contract_client.post("/invocations", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status
    assert r.json() == {"error": {"code": code, "message": r.json()["error"]["message"]}}


def test_not_ready_is_503(loading_client):
    r = loading_client.post("/invocations", json={"text": "Hi."})
    assert r.status_code == 503 and r.json()["error"]["code"] == "not_ready"

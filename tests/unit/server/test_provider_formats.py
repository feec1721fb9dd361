"""The providers' formats (``server.providers.formats``) over the real app (fake runtime): each
client's default is produced, telephony G.711 comes one byte a sample, and what the server does not
produce is refused with the reason, in the provider's shape."""

from __future__ import annotations

import base64
import io
import json

import av
import pytest

from server.providers.formats import FormatError, cartesia_format, deepgram_format, elevenlabs_format

LIVEKIT_ELEVENLABS = ("/v1/text-to-speech/af_test/multi-stream-input?model_id=eleven_turbo_v2_5&output_format=mp3_22050_32"
                      "&enable_ssml_parsing=false&enable_logging=true&inactivity_timeout=180"
                      "&apply_text_normalization=auto&sync_alignment=true&auto_mode=true")


def mp3_rate_and_seconds(data: bytes) -> tuple[int, float]:
    with av.open(io.BytesIO(data)) as f:
        frames = list(f.decode(audio=0))
    return frames[0].sample_rate, sum(fr.samples for fr in frames) / frames[0].sample_rate


@pytest.mark.parametrize(("query", "http", "want"), [
    ({}, True, ("mp3", 22050, 48000, "none")),  # Deepgram's REST default
    ({}, False, ("pcm", 24000, None, "none")),  # its WebSocket's
    ({"encoding": "linear16"}, True, ("pcm", 24000, None, "wav")),
    ({"encoding": "linear16", "container": "none", "sample_rate": "16000"}, True, ("pcm", 16000, None, "none")),
    ({"encoding": "mulaw", "sample_rate": "8000.0"}, False, ("mulaw", 8000, None, "none")),  # the SDK's floats
    ({"encoding": "mp3", "bit_rate": "32000"}, True, ("mp3", 22050, 32000, "none")),
])
def test_deepgram_formats(query, http, want):
    f = deepgram_format(query, http=http)
    assert (f.encoding, f.sample_rate, f.bit_rate, f.container) == want


@pytest.mark.parametrize(("parse", "why"), [
    (lambda: deepgram_format({"encoding": "mp3"}, http=False), "not supported on the WebSocket"),
    (lambda: deepgram_format({"encoding": "mulaw", "sample_rate": "24000"}, http=True), "`sample_rate` must be"),
    (lambda: deepgram_format({"encoding": "mp3", "sample_rate": "44100"}, http=True), "not applicable"),
    (lambda: cartesia_format({"container": "mp3", "sample_rate": 24000}), "not supported here"),
    (lambda: elevenlabs_format("opus_48000_64", http=True), "is not supported"),
    (lambda: elevenlabs_format("wav_24000", http=False), "is not supported"),
])
def test_what_is_not_produced_is_refused_with_the_reason(parse, why):
    with pytest.raises(FormatError, match=why):
        parse()


def test_livekit_elevenlabs_default_mp3_22050_32_streams_mp3(make_client):
    """LiveKit's ElevenLabs plugin (Python) asks for ``mp3_22050_32`` on its multi-stream socket
    unless told otherwise: it used to be refused (1008, which LiveKit retries)."""
    with make_client() as c, c.websocket_connect(LIVEKIT_ELEVENLABS) as ws:
        ws.send_text(json.dumps({"text": " ", "voice_settings": {}, "context_id": "c1"}))
        ws.send_text(json.dumps({"text": "Hello there, how are you today? ", "context_id": "c1", "flush": True}))
        ws.send_text(json.dumps({"text": "", "context_id": "c1", "flush": True}))
        ws.send_text(json.dumps({"context_id": "c1", "close_context": True}))
        messages = []
        while not messages or not messages[-1].get("isFinal"):
            messages.append(json.loads(ws.receive_text()))
    data = b"".join(base64.b64decode(m["audio"]) for m in messages if m.get("audio"))
    rate, seconds = mp3_rate_and_seconds(data)
    assert rate == 22050 and seconds > 0.5


@pytest.mark.parametrize(("path", "query", "body", "status", "check"), [
    ("/v1/speak", "?model=nobody", {"text": "Hi."}, 400, lambda b: b["err_code"] == "Bad Request"),
    ("/v1/speak", "?model=af_test", {"text": " "}, 400, lambda b: b["err_msg"] == "Input text contains no characters."),
    ("/v1/speak", "?model=af_test&encoding=opus&sample_rate=8000", {"text": "Hi."}, 400,
     lambda b: b["err_code"] == "INVALID_QUERY_PARAMETER"),
    ("/tts/bytes", "", {"transcript": "Hi.", "voice": {"id": "nobody"}, "output_format": {"container": "raw"}}, 404,
     lambda b: b["error_code"] == "unknown_voice" and b["title"] and b["message"]),
    ("/tts/sse", "", {"transcript": "Hi.", "output_format": {"container": "wav"}}, 400, lambda b: "container" in b["message"]),
    ("/v1/text-to-speech/nobody/stream", "", {"text": "Hi."}, 404, lambda b: b["detail"]["status"] == "voice_not_found"),
    ("/v1/text-to-speech/af_test", "?output_format=opus_48000_32", {"text": "Hi."}, 400,
     lambda b: "not supported" in b["detail"]["message"]),
])
def test_http_errors_in_each_providers_shape(make_client, path, query, body, status, check):
    with make_client() as c:
        r = c.post(path + query, json=body)
    assert r.status_code == status and check(r.json()), r.text


def test_telephony_is_one_byte_a_sample_on_every_http_route(make_client):
    """The same words as 8 kHz linear16 (two bytes a sample) and as G.711 on each provider's route."""
    words = "Exactly these words."
    asks = [
        ("/v1/speak?model=af_test&encoding=linear16&container=none&sample_rate=8000", {"text": words}, 2),
        ("/v1/speak?model=af_test&encoding=mulaw&container=none&sample_rate=8000", {"text": words}, 1),
        ("/tts/bytes", {"transcript": words, "voice": "af_test",
                        "output_format": {"container": "raw", "encoding": "pcm_alaw", "sample_rate": 8000}}, 1),
        ("/v1/text-to-speech/af_test/stream?output_format=ulaw_8000", {"text": words}, 1),
    ]
    seconds = []
    with make_client() as c:
        for path, body, width in asks:
            r = c.post(path, json=body)
            assert r.status_code == 200 and r.headers["content-type"].startswith("audio/"), path
            seconds.append(len(r.content) / width / 8000)
    assert seconds[0] > 0.3 and all(s == pytest.approx(seconds[0], abs=0.002) for s in seconds)

"""The WebSocket contract client of the suite (Burst, over any transport): one timing record per
request, the order the answers came in, a breach of that order, and hanging up from a chunk."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from benchmarks.clients import BYTES_PER_SECOND, Burst


class Scripted:
    """A transport whose server says ``frames`` (dicts as JSON text, bytes as audio), then closes."""

    def __init__(self, frames: list[Any]):
        self.frames = [json.dumps(f) if isinstance(f, dict) else f for f in frames]
        self.sent: list[dict[str, Any]] = []

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    async def receive(self) -> str | bytes | None:
        return self.frames.pop(0) if self.frames else None

    async def aclose(self) -> None:
        return None


def start(rid: str) -> dict:
    return {"type": "synthesis_start", "request_id": rid}


def complete(rid: str) -> dict:
    return {"type": "synthesis_complete", "request_id": rid, "ttfa_ms": 12.5}


SECOND = b"\0" * BYTES_PER_SECOND


def test_each_request_gets_its_timing_and_the_answers_their_order():
    transport = Scripted([start("bench-1"), SECOND, SECOND, complete("bench-1"), start("bench-2"),
                          {"type": "error", "request_id": "bench-2", "code": "bad_voice", "message": "no"}])
    burst = Burst(transport, voice="jm_kumo")
    one, two = asyncio.run(burst.synthesize(["One.", "Two."], raise_on_error=False))
    assert [m["text"] for m in transport.sent] == ["One.", "Two."]  # both sent before any answer
    assert one.audio_s == 2.0 and len(one.chunks) == 2 and one.server_ttfa_ms == 12.5
    assert one.sent_s is not None and one.first_audio_s is not None and one.complete_s is not None
    assert two.code == "bad_voice" and two.audio_bytes == 0 and two.complete_s is None
    assert burst.sent == burst.answered == ["bench-1", "bench-2"] and burst.violations == []


def test_an_answer_inside_another_request_is_a_breach_of_the_contract():
    transport = Scripted([start("bench-1"), start("bench-2"), complete("bench-2"), complete("bench-1")])
    burst = Burst(transport)
    asyncio.run(burst.synthesize(["One.", "Two."]))
    assert burst.answered == ["bench-2", "bench-1"]
    assert burst.violations  # bench-2 started inside bench-1


def test_a_listener_can_hang_up_at_its_first_chunk():
    transport = Scripted([start("bench-1"), SECOND, SECOND, complete("bench-1")])
    heard: list[float] = []
    (t,) = asyncio.run(Burst(transport).synthesize(["One."], on_audio=lambda _t, now, _pcm: heard.append(now) or True))
    assert len(heard) == 1 and t.audio_s == 1.0 and t.complete_s is None


def test_a_post_counts_the_audio_after_a_wav_header_and_keeps_a_refusal_as_its_error():
    import io
    import wave

    import httpx

    from benchmarks.clients import post

    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(24_000)
        w.writeframes(SECOND)

    def answer(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content).get("format") == "pcm":
            return httpx.Response(400, stream=httpx.ByteStream(b"pcm is not supported"))
        return httpx.Response(200, stream=httpx.ByteStream(buf.getvalue()))

    async def both() -> tuple:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
            return (await post(http, "http://peer/invocations", {"format": "wav"}, wav=True),
                    await post(http, "http://peer/invocations", {"format": "pcm"}))

    wav, refused = asyncio.run(both())
    assert wav.audio_s == 1.0 and wav.error is None and wav.first_audio_s is not None and wav.complete_s is not None
    assert refused.error == "HTTP 400: pcm is not supported" and refused.audio_bytes == 0


def test_a_post_can_hang_up_at_its_first_chunk():
    import httpx

    from benchmarks.clients import post

    async def body():
        for _ in range(3):
            yield SECOND

    async def one() -> Any:
        async with httpx.AsyncClient(transport=httpx.MockTransport(lambda _r: httpx.Response(200, content=body()))) as http:
            return await post(http, "http://peer/invocations", {"text": "x"}, on_audio=lambda *_: True)

    t = asyncio.run(one())
    assert t.audio_s == 1.0 and t.error is None and t.complete_s is None

"""SIGTERM mid-reply on every route of one real server (``python -m server serve``, the real ONNX
model): each reply already started — a bidi request with another queued behind it, a Deepgram,
Cartesia and ElevenLabs turn whose text is still arriving, a streamed ``/invocations`` and OpenAI
body — completes with all its audio (the same bytes as the same reply before the drain; Cartesia's
word timestamps and ElevenLabs' alignment hold every word), new sessions are refused 503 with
``Retry-After``, a new turn gets the protocol's ``not_ready``, and the process exits 0 within the
drain budget. One server for every route: a drain ends it."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import time

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.support.live import ServerProcess

# Six real-model replies, twice (once to know each reply, once drained): minutes beside the rest of the suite.
pytestmark = [pytest.mark.slow, pytest.mark.subprocess, pytest.mark.timeout(300)]
# Short sentences: what keeps each reply under way at SIGTERM is the route (the text still arriving, a request
# queued behind another, a later segment that waits while the other routes' first segments run first), not
# its length; the test checks that every reply was still under way when the signal came.
FIRST, SECOND = "Here is one.", "And two."
#: The bidi request queued behind the first.
LONGER = f"{SECOND} Then three."
#: Room for six replies at once on a small, busy CPU (the default budget is KOKORO_DRAIN_S's own).
DRAIN_S = 60
PATHS = {
    "bidi": "/invocations-bidirectional-stream",
    "deepgram": "/v1/speak?model=jm_kumo&encoding=linear16&sample_rate=24000&speed=2",
    "cartesia": "/tts/websocket",
    "elevenlabs": "/v1/text-to-speech/jm_kumo/multi-stream-input?output_format=pcm_24000",
}


class Turn:
    """One reply on one route; ``started`` once its first audio arrived, then it waits for ``go``
    (SIGTERM was sent) before sending the rest of its text."""

    def __init__(self, base: str, name: str) -> None:
        self.base, self.name = base, name
        self.started, self.go = asyncio.Event(), asyncio.Event()
        self.audio = 0
        self.refusal: dict | None = None
        self.close_code: int | None = None
        self.words: list[str] = []
        #: Set once the whole reply has arrived (its end event, or the end of the body).
        self.replied = asyncio.Event()

    async def run(self, drained: bool) -> None:
        if not drained:
            self.go.set()
        await getattr(self, self.name)(drained)

    async def _recv_all(self, ws, done) -> None:
        try:
            while True:
                message = await ws.recv()
                if isinstance(message, bytes):
                    self.audio += len(message)
                    self.started.set()
                    continue
                event = json.loads(message)
                if await done(event):
                    return
        except ConnectionClosed as e:
            self.close_code = e.rcvd.code if e.rcvd is not None else None

    async def bidi(self, drained: bool) -> None:
        async with connect(self.base.replace("http", "ws") + PATHS["bidi"]) as ws:
            await ws.send(json.dumps({"text": FIRST, "request_id": "a", "speed": 2.0}))
            await ws.send(json.dumps({"text": LONGER, "request_id": "b", "speed": 2.0}))  # queued behind it
            late = [{"text": "Too late.", "request_id": "late"}] if drained else []
            sender = asyncio.create_task(self._rest(ws, late))
            completed: list[str] = []

            async def done(event: dict) -> bool:
                if event["type"] == "error":
                    self.refusal = event
                if event["type"] == "synthesis_complete":
                    completed.append(event["request_id"])
                    if completed == ["a", "b"]:
                        self.replied.set()
                return not drained and completed == ["a", "b"]

            await self._recv_all(ws, done)
            await sender

    async def deepgram(self, drained: bool) -> None:
        async with connect(self.base.replace("http", "ws") + PATHS["deepgram"]) as ws:
            await ws.send(json.dumps({"type": "Speak", "text": FIRST + " "}))

            async def done(event: dict) -> bool:
                if event["type"] == "Warning":
                    self.refusal = event
                if event["type"] == "Flushed":
                    self.replied.set()
                return event["type"] == "Flushed" and not drained

            rest = [{"type": "Speak", "text": SECOND}, {"type": "Flush"}]
            rest += [{"type": "Speak", "text": "Too late. "}] if drained else []  # a new turn, after the flush
            sender = asyncio.create_task(self._rest(ws, rest))
            await self._recv_all(ws, done)
            await sender

    async def _rest(self, ws, messages: list[dict]) -> None:
        await self.started.wait()
        await self.go.wait()
        for message in messages:
            await ws.send(json.dumps(message))

    async def cartesia(self, drained: bool) -> None:
        async with connect(self.base.replace("http", "ws") + PATHS["cartesia"]) as ws:
            first = {"context_id": "c1", "transcript": FIRST + " ", "continue": True, "add_timestamps": True,
                     "voice": {"mode": "id", "id": "jm_kumo"}, "generation_config": {"speed": 2.0}}
            await ws.send(json.dumps(first))
            rest = [{"context_id": "late", "transcript": "Too late.", "voice": {"mode": "id", "id": "jm_kumo"}}]
            rest = (rest if drained else []) + [{"context_id": "c1", "transcript": SECOND, "continue": False}]
            sender = asyncio.create_task(self._rest(ws, rest))

            async def done(event: dict) -> bool:
                if event["type"] == "chunk":
                    self.audio += len(base64.b64decode(event["data"]))
                    self.started.set()
                elif event["type"] == "timestamps":
                    self.words += event["word_timestamps"]["words"]
                elif event["type"] == "error":
                    self.refusal = event
                elif event["type"] == "done":
                    self.replied.set()
                return event["type"] == "done" and not drained

            await self._recv_all(ws, done)
            await sender

    async def elevenlabs(self, drained: bool) -> None:
        async with connect(self.base.replace("http", "ws") + PATHS["elevenlabs"]) as ws:
            await ws.send(json.dumps({"text": FIRST + " ", "context_id": "x", "voice_settings": {"speed": 2.0}}))
            rest = [{"text": "Too late. ", "context_id": "late"}] if drained else []
            rest += [{"text": SECOND + " ", "context_id": "x"}, {"context_id": "x", "flush": True},
                     {"context_id": "x", "close_context": True}]
            sender = asyncio.create_task(self._rest(ws, rest))
            chars: list[str] = []

            async def done(event: dict) -> bool:
                if event.get("audio"):
                    self.audio += len(base64.b64decode(event["audio"]))
                    chars.extend(event["alignment"]["chars"])
                    self.started.set()
                elif "error" in event:
                    self.refusal = event
                if event.get("isFinal") is True:
                    self.replied.set()
                return event.get("isFinal") is True and not drained

            await self._recv_all(ws, done)
            await sender
            self.words = "".join(chars).split()

    async def post(self, path: str, body: dict) -> None:
        async with httpx.AsyncClient(base_url=self.base, timeout=120) as http:
            async with http.stream("POST", path, json=body) as r:
                assert r.status_code == 200
                async for part in r.aiter_bytes():
                    self.audio += len(part)
                    self.started.set()
        self.replied.set()

    async def invocations(self, drained: bool) -> None:
        await self.post("/invocations", {"text": f"{FIRST} {SECOND}", "format": "pcm", "speed": 2.0})

    async def openai(self, drained: bool) -> None:
        await self.post("/v1/audio/speech", {"model": "kokoro", "input": f"{FIRST} {SECOND}", "voice": "jm_kumo",
                                             "response_format": "pcm", "speed": 2.0})


ROUTES = ("bidi", "deepgram", "cartesia", "elevenlabs", "invocations", "openai")


async def test_sigterm_mid_reply_finishes_every_route_and_refuses_new_work(model_dir, tmp_path):
    proc = ServerProcess(tmp_path / "server.log", KOKORO_MODEL_DIR=str(model_dir), KOKORO_DRAIN_S=str(DRAIN_S))
    try:
        await asyncio.to_thread(proc.wait_ready)
        whole = {}
        for name in ROUTES:  # each reply once, undisturbed
            turn = Turn(proc.url, name)
            await asyncio.wait_for(turn.run(drained=False), 120)
            whole[name] = turn.audio
        turns = {name: Turn(proc.url, name) for name in ROUTES}
        running = [asyncio.create_task(t.run(drained=True)) for t in turns.values()]
        await asyncio.wait_for(asyncio.gather(*(t.started.wait() for t in turns.values())), 120)
        proc.proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        replied_before = [name for name, t in turns.items() if t.replied.is_set()]
        async with httpx.AsyncClient(base_url=proc.url, timeout=30) as http:
            for _ in range(500):
                if (await http.get("/ping")).status_code == 503:
                    break
                await asyncio.sleep(0.01)
            assert (await http.get("/ping")).json()["status"] == "draining"
            refused = await http.post("/invocations", json={"text": "Too late."})
            assert refused.status_code == 503 and refused.headers["retry-after"]
            assert refused.json()["error"]["code"] == "not_ready"
        for path in PATHS.values():
            with pytest.raises(InvalidStatus) as denied:
                async with connect(proc.url.replace("http", "ws") + path):
                    pass
            assert denied.value.response.status_code == 503 and denied.value.response.headers["retry-after"]
        for t in turns.values():
            t.go.set()
        await asyncio.wait_for(asyncio.gather(*running), DRAIN_S + 10)
        exit_code = await asyncio.to_thread(proc.proc.wait, DRAIN_S + 10)
        took = time.monotonic() - signalled
    finally:
        proc.stop()
    assert replied_before == [], "these replies had ended before SIGTERM: the drain had nothing of theirs to finish"
    assert exit_code == 0 and took < DRAIN_S
    for name, t in turns.items():
        assert t.audio == whole[name], name  # all its audio, not a byte less
    for name in ("bidi", "deepgram", "cartesia", "elevenlabs"):
        assert turns[name].close_code == 1001, name
        assert turns[name].refusal is not None and "not_ready" in json.dumps(turns[name].refusal).lower(), name
    expected = f"{FIRST} {SECOND}".split()
    assert turns["cartesia"].words == expected and turns["elevenlabs"].words == expected

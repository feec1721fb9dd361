"""The churn mix: one short session per call, over every route a client can reach — HTTP
(``/invocations``, ``/v1/audio/speech``) and the four WebSocket protocols (the bidi route,
Deepgram's ``/v1/speak``, Cartesia's ``/tts/websocket``, ElevenLabs' ``stream-input`` and
``multi-stream-input``) — with cancels, barge-ins and clients that vanish mid-answer.

:class:`Churn` runs one unit of :data:`KINDS` at a time against a server's base URL and counts what
came back: ``answered`` (the protocol's terminal: the whole audio, an acknowledgement, a close), ``typed``
(a typed error the protocol defines, e.g. ``overloaded``) and ``unanswered`` (nothing within
``timeout_s``, or a close the protocol does not send: a client left waiting). Used by the ``churn``
suite and by the test that finds the server's tables empty after thousands of sessions.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

TEXTS = ["Hello there.", "Short one.", "How are you today?", "It is a fine morning.", "Thank you, goodbye.",
         "One more sentence, with a clause.", "The number is 42.", "Right away."]
LONG = "This reply goes on for a while. It has a second sentence. And a third one, too. Then a fourth."
#: Unit name -> weight in the mix (each unit is one session: an HTTP request or one socket).
KINDS = {
    "invocations": 4, "invocations_cut": 1, "openai": 2,
    "bidi": 3, "bidi_cancel": 1, "bidi_vanish": 1,
    "deepgram": 2, "deepgram_clear": 1,
    "cartesia": 2, "cartesia_cancel": 1,
    "elevenlabs": 2, "elevenlabs_barge": 1, "elevenlabs_vanish": 1,
}


class Unanswered(Exception):
    """The server left the client waiting, or closed in a way its protocol does not."""


class Typed(Exception):
    """The server answered with a typed error of the protocol (an answer, not a failure)."""


def plan(n: int, seed: int = 7) -> list[str]:
    """``n`` units in the mix's proportions, shuffled."""
    names = [k for k, w in KINDS.items() for _ in range(w)]
    units = [names[i % len(names)] for i in range(n)]
    random.Random(seed).shuffle(units)
    return units


class Churn:
    """The mix against one server (``base`` http URL); ``voice`` one of its voices."""

    def __init__(self, base: str, voice: str, *, timeout_s: float = 60.0, seed: int = 1):
        self.base, self.voice, self.timeout_s = base.rstrip("/"), voice, timeout_s
        self.ws = "ws" + self.base.removeprefix("http")
        self.rng = random.Random(seed)
        self.counts: dict[str, dict[str, int]] = {}
        self.unanswered: list[str] = []

    def _count(self, kind: str, outcome: str) -> None:
        self.counts.setdefault(kind, {"answered": 0, "typed": 0, "unanswered": 0})[outcome] += 1

    async def one(self, kind: str, http: httpx.AsyncClient) -> None:
        """Run one unit; its outcome is counted, a failure kept as an example."""
        try:
            async with asyncio.timeout(self.timeout_s):
                await getattr(self, f"_{kind}")(http)
            self._count(kind, "answered")
        except Typed:
            self._count(kind, "typed")
        except (TimeoutError, Unanswered, ConnectionClosed, httpx.HTTPError, OSError) as e:
            self._count(kind, "unanswered")
            if len(self.unanswered) < 20:
                self.unanswered.append(f"{kind}: {type(e).__name__}: {e}")

    def _text(self) -> str:
        return self.rng.choice(TEXTS)

    # -- HTTP ---------------------------------------------------------------------------------
    async def _post(self, http: httpx.AsyncClient, path: str, body: dict[str, Any], *, cut: bool = False) -> None:
        async with http.stream("POST", path, json=body) as r:
            if r.status_code != 200:
                error = json.loads(await r.aread()).get("error")
                if r.status_code in (400, 404, 413, 503) and error:
                    raise Typed(error)
                raise Unanswered(f"{path}: {r.status_code}")
            size = 0
            async for chunk in r.aiter_bytes():
                size += len(chunk)
                if cut and size:
                    return  # the client goes away mid-body
            if not size:
                raise Unanswered(f"{path}: 200 without audio")

    async def _invocations(self, http: httpx.AsyncClient) -> None:
        await self._post(http, "/invocations", {"text": self._text(), "voice": self.voice, "format": "pcm"})

    async def _invocations_cut(self, http: httpx.AsyncClient) -> None:
        await self._post(http, "/invocations", {"text": LONG, "voice": self.voice, "format": "pcm"}, cut=True)

    async def _openai(self, http: httpx.AsyncClient) -> None:
        await self._post(http, "/v1/audio/speech", {"model": "kokoro", "input": self._text(), "voice": self.voice,
                                                   "response_format": "pcm"})

    # -- WebSocket helpers ----------------------------------------------------------------------
    def _connect(self, path: str) -> Any:
        return connect(self.ws + path, compression=None, max_size=None, open_timeout=self.timeout_s)

    @staticmethod
    async def _json(ws: ClientConnection) -> dict[str, Any]:
        """The next text message, binary (audio) frames skipped."""
        while True:
            m = await ws.recv()
            if isinstance(m, str):
                return dict(json.loads(m))

    @staticmethod
    async def _closed(ws: ClientConnection, codes: tuple[int, ...] = (1000,)) -> None:
        """Read to the server's close, which must be one of ``codes``."""
        try:
            while True:
                await ws.recv()
        except ConnectionClosed as e:
            if e.rcvd is None or e.rcvd.code not in codes:
                raise Unanswered(f"closed {e.rcvd.code if e.rcvd else 'without a close frame'}") from None

    @staticmethod
    async def _audio(ws: ClientConnection) -> None:
        """Until the first binary frame."""
        while not isinstance(await ws.recv(), bytes):
            pass

    # -- the bidi route -------------------------------------------------------------------------
    async def _bidi_answer(self, ws: ClientConnection, rid: str) -> None:
        while True:
            event = await self._json(ws)
            if event.get("type") == "synthesis_complete" and event.get("request_id") == rid:
                return
            if event.get("type") == "error" and event.get("request_id") in (rid, None):
                raise Typed(event.get("code"))  # (a cancelled request's own error is its answer)

    async def _bidi(self, http: httpx.AsyncClient) -> None:
        async with self._connect("/invocations-bidirectional-stream") as ws:
            rids = [f"r{i}" for i in range(self.rng.randint(1, 3))]
            for rid in rids:
                await ws.send(json.dumps({"text": self._text(), "voice": self.voice, "request_id": rid}))
            for rid in rids:
                await self._bidi_answer(ws, rid)
            await ws.send(json.dumps({"type": "close"}))
            await self._closed(ws)

    async def _bidi_cancel(self, http: httpx.AsyncClient) -> None:
        async with self._connect("/invocations-bidirectional-stream") as ws:
            await ws.send(json.dumps({"text": LONG, "voice": self.voice, "request_id": "a"}))
            await ws.send(json.dumps({"text": LONG, "voice": self.voice, "request_id": "b"}))
            await self._audio(ws)
            await ws.send(json.dumps({"type": "cancel"}))
            await ws.send(json.dumps({"text": self._text(), "voice": self.voice, "request_id": "c"}))
            await self._bidi_answer(ws, "c")
            await ws.send(json.dumps({"type": "close"}))
            await self._closed(ws)

    async def _bidi_vanish(self, http: httpx.AsyncClient) -> None:
        async with self._connect("/invocations-bidirectional-stream") as ws:
            await ws.send(json.dumps({"text": LONG, "voice": self.voice, "request_id": "a"}))
            await ws.send(json.dumps({"text": LONG, "voice": self.voice, "request_id": "b"}))
            await self._audio(ws)
            ws.transport.abort()  # gone without a close, work still queued

    # -- Deepgram -------------------------------------------------------------------------------
    async def _speak_session(self, clear: bool) -> None:
        async with self._connect(f"/v1/speak?model={self.voice}&encoding=linear16&sample_rate=24000") as ws:
            if (await self._json(ws)).get("type") != "Metadata":
                raise Unanswered("no Metadata")
            for word in (LONG if clear else self._text()).split():
                await ws.send(json.dumps({"type": "Speak", "text": word + " "}))
            await ws.send(json.dumps({"type": "Flush"}))
            if clear:
                await self._audio(ws)
                await ws.send(json.dumps({"type": "Clear"}))  # barge-in
            want = "Cleared" if clear else "Flushed"
            while (m := await self._json(ws)).get("type") != want:
                if m.get("type") not in ("Warning", "Flushed"):
                    raise Unanswered(f"unexpected {m}")
            await ws.send(json.dumps({"type": "Close"}))
            await self._closed(ws)

    async def _deepgram(self, http: httpx.AsyncClient) -> None:
        await self._speak_session(clear=False)

    async def _deepgram_clear(self, http: httpx.AsyncClient) -> None:
        await self._speak_session(clear=True)

    # -- Cartesia -------------------------------------------------------------------------------
    def _generation(self, cid: str, transcript: str, more: bool, **extra: Any) -> str:
        return json.dumps({"context_id": cid, "transcript": transcript, "continue": more, "model_id": "sonic",
                           "voice": {"mode": "id", "id": self.voice},
                           "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000},
                           **extra})

    async def _cartesia_done(self, ws: ClientConnection, cid: str) -> None:
        while True:
            m = await self._json(ws)
            if m.get("context_id") != cid:
                continue
            if m.get("type") == "done":
                return
            if m.get("type") == "error" and m.get("done"):
                raise Typed(m.get("error"))

    async def _cartesia(self, http: httpx.AsyncClient) -> None:
        async with self._connect("/tts/websocket?cartesia_version=2025-04-16") as ws:
            cid = uuid.uuid4().hex
            await ws.send(self._generation(cid, self._text(), False))
            await self._cartesia_done(ws, cid)

    async def _cartesia_cancel(self, http: httpx.AsyncClient) -> None:
        async with self._connect("/tts/websocket?cartesia_version=2025-04-16") as ws:
            cid = uuid.uuid4().hex
            await ws.send(self._generation(cid, LONG, True))
            while (await self._json(ws)).get("type") != "chunk":
                pass
            await ws.send(json.dumps({"context_id": cid, "cancel": True}))  # barge-in
            nxt = uuid.uuid4().hex
            await ws.send(self._generation(nxt, self._text(), False))
            await self._cartesia_done(ws, nxt)

    # -- ElevenLabs -----------------------------------------------------------------------------
    async def _final(self, ws: ClientConnection, cid: str | None = None) -> None:
        while True:
            m = await self._json(ws)
            if "error" in m:
                raise Typed(m["error"])
            if m.get("isFinal") is True and m.get("contextId") == cid:
                return

    async def _elevenlabs(self, http: httpx.AsyncClient) -> None:
        async with self._connect(f"/v1/text-to-speech/{self.voice}/stream-input?output_format=pcm_24000") as ws:
            await ws.send(json.dumps({"text": " ", "voice_settings": {"speed": 1.0}}))
            for word in self._text().split():
                await ws.send(json.dumps({"text": word + " "}))
            await ws.send(json.dumps({"text": ""}))  # end of input
            await self._final(ws)
            await self._closed(ws)

    async def _elevenlabs_barge(self, http: httpx.AsyncClient) -> None:
        async with self._connect(f"/v1/text-to-speech/{self.voice}/multi-stream-input?output_format=pcm_24000") as ws:
            await ws.send(json.dumps({"text": " ", "context_id": "a"}))
            await ws.send(json.dumps({"text": LONG, "context_id": "a"}))
            while "audio" not in await self._json(ws):
                pass
            await ws.send(json.dumps({"context_id": "a", "close_context": True}))  # barge-in, never flushed
            await self._final(ws, "a")
            await ws.send(json.dumps({"text": self._text(), "context_id": "b", "flush": True}))
            await ws.send(json.dumps({"context_id": "b", "close_context": True}))
            await self._final(ws, "b")
            await ws.send(json.dumps({"close_socket": True}))
            await self._closed(ws)

    async def _elevenlabs_vanish(self, http: httpx.AsyncClient) -> None:
        async with self._connect(f"/v1/text-to-speech/{self.voice}/stream-input?output_format=pcm_24000") as ws:
            await ws.send(json.dumps({"text": " "}))
            await ws.send(json.dumps({"text": LONG, "flush": True}))
            while "audio" not in await self._json(ws):
                pass
            ws.transport.abort()


async def run_mix(churn: Churn, units: list[str], concurrency: int, *, every: int = 0,
                  sample: Any = None) -> float:
    """Run ``units`` with ``concurrency`` clients (each takes the next unit when its last is done);
    ``sample(done)`` is called every ``every`` units. Returns the wall time."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    it = iter(enumerate(units))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=churn.base, timeout=churn.timeout_s, limits=limits) as http:

        async def client() -> None:
            for i, kind in it:
                await churn.one(kind, http)
                if every and sample is not None and (i + 1) % every == 0:
                    sample(i + 1)

        await asyncio.gather(*(client() for _ in range(concurrency)))
    return loop.time() - t0

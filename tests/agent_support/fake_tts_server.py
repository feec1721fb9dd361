"""A tiny TTS server that follows DESIGN.md §4's WebSocket contract exactly, with a tone for a voice.

It stands in for the real server where the real one cannot run (and let the agent be built before the
server landed). What it keeps of the contract:

* ``/invocations-bidirectional-stream`` accepts text and binary frames alike and decodes UTF-8 JSON
  from either; requests may be pipelined and are answered strictly in order, one at a time;
* per request: text ``synthesis_start``, one binary PCM s16le frame per segment (sentence), each sent
  when "synthesised", text ``synthesis_complete``;
* ``cancel`` (one id or all) drops queued and in-flight work; ``close`` finishes the queue, then
  closes with 1000; errors are text frames and the session stays open; an oversize message closes
  with 1009; ``GET /ping`` answers 200 once started.

Knobs: ``seconds_per_char`` of audio produced, ``synth_rtf`` (synthesis time / audio time). Every
frame received is recorded in ``received`` as ``(frame type, decoded JSON or None)``, and ``log``
orders receipts and completions, for assertions.
Runs on its own event loop in a thread (``start()``/``stop()``) or as ``python -m`` for a subprocess.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import re
import struct
import threading
import time
import uuid
from collections import deque
from http import HTTPStatus

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

SAMPLE_RATE = 24_000
VOICES = ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo")
PATH = "/invocations-bidirectional-stream"


def tone(seconds: float, freq: float = 220.0) -> bytes:
    n = max(1, int(seconds * SAMPLE_RATE))
    return struct.pack(f"<{n}h", *(int(9000 * math.sin(2 * math.pi * freq * i / SAMPLE_RATE)) for i in range(n)))


class FakeTTSServer:
    def __init__(self, *, seconds_per_char: float = 0.06, synth_rtf: float = 0.1, max_text_chars: int = 5000,
                 max_message_bytes: int = 1 << 20) -> None:
        self.seconds_per_char = seconds_per_char
        self.synth_rtf = synth_rtf
        self.max_text_chars = max_text_chars
        self.max_message_bytes = max_message_bytes
        self.received: list[tuple[str, object]] = []
        self.cancelled: list[str] = []
        self.log: list[tuple[str, str | None]] = []  # ("received", type) / ("complete", request_id)
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}{PATH}"

    # ------------------------------------------------------------------------------------------
    def _process_request(self, connection: ServerConnection, request):
        if request.path == "/ping":
            return connection.respond(HTTPStatus.OK, json.dumps({"status": "healthy", "backend": "fake"}) + "\n")
        if request.path.split("?")[0] != PATH:
            return connection.respond(HTTPStatus.NOT_FOUND, "not found\n")
        return None

    async def _handler(self, ws: ServerConnection) -> None:
        queue: deque[dict] = deque()
        wake = asyncio.Event()
        state = {"closing": False, "current": None}
        current_task: dict[str, asyncio.Task | None] = {"task": None}

        async def send_error(rid, code: str, message: str) -> None:
            await ws.send(json.dumps({"type": "error", "request_id": rid, "code": code, "message": message}))

        async def synthesize(req: dict) -> None:
            rid = req["request_id"]
            t0 = time.monotonic()
            await ws.send(json.dumps({"type": "synthesis_start", "request_id": rid, "sample_rate": SAMPLE_RATE,
                                      "encoding": "pcm_s16le", "channels": 1}))
            segments = [s for s in re.split(r"(?<=[.!?])\s+", req["text"].strip()) if s] or [req["text"]]
            audio_s = 0.0
            ttfa = None
            for seg in segments:
                seconds = len(seg) * self.seconds_per_char / float(req.get("speed") or 1.0)
                await asyncio.sleep(seconds * self.synth_rtf)
                pcm = tone(seconds)
                await ws.send(pcm)
                audio_s += len(pcm) / 2 / SAMPLE_RATE
                if ttfa is None:
                    ttfa = (time.monotonic() - t0) * 1000
            self.log.append(("complete", rid))
            await ws.send(json.dumps({"type": "synthesis_complete", "request_id": rid,
                                      "audio_duration_s": round(audio_s, 3),
                                      "elapsed_s": round(time.monotonic() - t0, 3), "ttfa_ms": round(ttfa, 1)}))

        async def worker() -> None:
            while True:
                while not queue:
                    if state["closing"]:
                        await ws.close(1000)
                        return
                    wake.clear()
                    await wake.wait()
                req = queue.popleft()
                state["current"] = req["request_id"]
                task = asyncio.create_task(synthesize(req))
                current_task["task"] = task
                try:
                    await asyncio.wait({task})  # a cancel of this request does not stop the worker
                except asyncio.CancelledError:
                    task.cancel()
                    raise
                current_task["task"] = None
                if not task.cancelled() and task.exception() is not None:
                    return  # the connection is gone
                state["current"] = None

        work = asyncio.create_task(worker())
        try:
            async for frame in ws:
                kind = "text" if isinstance(frame, str) else "binary"
                try:
                    msg = json.loads(frame)
                    if not isinstance(msg, dict):
                        raise ValueError("not an object")
                except ValueError:
                    self.received.append((kind, None))
                    await send_error(None, "invalid_json", "message is not a JSON object")
                    continue
                self.received.append((kind, msg))
                self.log.append(("received", msg.get("request_id") or msg.get("type")))
                mtype = msg.get("type", "synthesize")
                rid = msg.get("request_id")
                if mtype == "cancel":
                    drop = [r for r in queue if rid is None or r["request_id"] == rid]
                    for r in drop:
                        queue.remove(r)
                        self.cancelled.append(r["request_id"])
                    if current_task["task"] is not None and (rid is None or state["current"] == rid):
                        self.cancelled.append(state["current"])
                        current_task["task"].cancel()
                    continue
                if mtype == "close":
                    state["closing"] = True
                    wake.set()
                    continue
                text = msg.get("text")
                if not isinstance(text, str) or not text.strip():
                    await send_error(rid, "invalid_request", "text is required")
                    continue
                if len(text) > self.max_text_chars:
                    await send_error(rid, "text_too_long", f"text exceeds {self.max_text_chars} characters")
                    continue
                if msg.get("voice") not in (None, *VOICES):
                    await send_error(rid, "unknown_voice", f"unknown voice {msg.get('voice')!r}")
                    continue
                speed = msg.get("speed")
                if speed is not None and not (0.5 <= float(speed) <= 2.0):
                    await send_error(rid, "invalid_request", "speed must be within 0.5-2.0")
                    continue
                queue.append({**msg, "request_id": rid or uuid.uuid4().hex})
                wake.set()
        except ConnectionClosed:
            pass
        finally:
            # After our own close(1000) the worker has already returned; otherwise the client went
            # away and the rest of its work is dropped.
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await work

    async def serve_forever(self, host: str = "127.0.0.1", port: int = 0, ready: threading.Event | None = None):
        self._stop = asyncio.Event()
        async with serve(self._handler, host, port, process_request=self._process_request,
                         max_size=self.max_message_bytes, compression=None) as server:
            self.port = server.sockets[0].getsockname()[1]
            if ready is not None:
                ready.set()
            await self._stop.wait()

    def start(self) -> FakeTTSServer:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self.serve_forever(ready=ready))

        self._thread = threading.Thread(target=run, name="fake-tts", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fake TTS server did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description="Fake Kokoro TTS server (DESIGN.md §4 WebSocket contract)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--synth-rtf", type=float, default=0.1)
    args = parser.parse_args()
    asyncio.run(FakeTTSServer(synth_rtf=args.synth_rtf).serve_forever(args.host, args.port))


if __name__ == "__main__":
    main()

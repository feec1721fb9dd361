"""Edge cases of the WebSocket sessions, each with the test that would have caught it: a Cartesia
context id reused right after its cancel, a Cartesia socket closing with audio pending, a bidi
``cancel`` racing the end of its request, and a refused HTTP request while draining."""

from __future__ import annotations

import asyncio
import json

from server.streaming.events import StreamOptions
from server.streaming.stream_set import StreamSet
from server.websocket.turn_queue import TurnQueue
from tests.support.app import build_app, fake_synth
from tests.support.asgi import _BASE, WSConn, running
from tests.support.inproc import client

CARTESIA = "/tts/websocket"
BIDI = "/invocations-bidirectional-stream"


def cartesia(cid: str, transcript: str, **fields) -> str:
    return json.dumps({"context_id": cid, "transcript": transcript, "voice": {"mode": "id", "id": "af_test"},
                       "continue": False, **fields})


async def reached(condition, within_s: float = 20.0) -> None:
    """Poll until ``condition()`` holds (a state to reach, not a timing assertion)."""
    for _ in range(int(within_s / 0.005)):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not reached")


async def ready(app) -> None:
    await reached(lambda: app.state.kokoro.status() == "ok")


async def test_a_cartesia_context_id_reused_after_its_cancel_speaks_the_new_text():
    """The cancelled context used to linger until its pump saw the acknowledgement: new text on the
    same id, read before that, went into the cancelled stream and was dropped without a word."""
    app = build_app(fake_synth(segment_s=0.01))
    async with running(app):
        await ready(app)
        conn = await WSConn.open(app, CARTESIA)
        # all three read back to back, before any context's pump runs
        await conn.send(cartesia("turn", "A long first reply. With a second sentence in it. ", **{"continue": True}))
        await conn.send(json.dumps({"context_id": "turn", "cancel": True}))
        await conn.send(cartesia("turn", "The new reply."))
        messages: list[dict] = []
        async with asyncio.timeout(20):
            while not messages or messages[-1].get("type") not in ("done", "error"):
                messages.append(await conn.recv())
        await conn.disconnect()
    assert messages[-1] == {"kind": "text", "type": "done", "context_id": "turn", "status_code": 200, "done": True}
    assert any(m.get("type") == "chunk" for m in messages)


async def test_no_event_of_a_removed_context_reaches_the_mapper():
    """Removing a context (a cancel, the socket closing) while its pump was still sending let the
    pump hand one more event to the mapper for a context it no longer knew: Cartesia's send raised
    KeyError (an ERROR log, and the session's close turned 1011)."""
    app = build_app(fake_synth())
    async with running(app):
        await ready(app)
        known: list[bool] = []
        gate = asyncio.Event()

        async def send(cid: str, event: object) -> None:
            known.append(cid in streams)
            await gate.wait()  # a client slow to take this frame

        streams = StreamSet(app.state.kokoro, "cartesia", send, max_contexts=2)
        stream = streams.open("a", StreamOptions(voice="af_test"))
        stream.push("One sentence here. Another one follows. And a third one ends it.")
        stream.end()
        await reached(lambda: bool(known) and not stream._out.empty())  # the pump is sending; more audio waits
        removing = asyncio.create_task(streams.remove("a"))
        await asyncio.sleep(0)
        gate.set()
        await removing
        await asyncio.sleep(0.05)
    assert known and all(known)


class RacingClient:
    """A bidi client whose ``cancel`` reaches the server while the server is sending the request's
    ``synthesis_complete`` (the send yields to the reader before it returns)."""

    def __init__(self, app) -> None:
        self.to_app: asyncio.Queue = asyncio.Queue()
        self.events: list[dict] = []
        scope = {"type": "websocket", "scheme": "ws", "path": BIDI, "raw_path": BIDI.encode(), "subprotocols": [],
                 "headers": [], "extensions": {}, **_BASE}
        self.task = asyncio.create_task(app(scope, self.to_app.get, self.send))

    async def send(self, message: dict) -> None:
        if message.get("text"):
            event = json.loads(message["text"])
            self.events.append(event)
            if event["type"] == "synthesis_complete":
                await self.to_app.put({"type": "websocket.receive",
                                       "text": json.dumps({"type": "cancel", "request_id": event["request_id"]})})
                for _ in range(5):
                    await asyncio.sleep(0)  # the reader takes the cancel while this send is under way
        elif message["type"] == "websocket.close":
            self.events.append({"type": "close", "code": message.get("code")})


async def test_a_cancel_racing_the_end_of_its_request_never_adds_a_second_terminal_event():
    """A cancel that arrived while ``synthesis_complete`` was being sent used to interrupt that send
    and add ``error cancelled`` for the same request: two terminal events."""
    app = build_app(fake_synth())
    async with running(app):
        await ready(app)
        conn = RacingClient(app)
        await conn.to_app.put({"type": "websocket.connect"})
        for i in range(3):
            await conn.to_app.put({"type": "websocket.receive", "text": json.dumps({"text": "Hi.", "request_id": i})})
        await conn.to_app.put({"type": "websocket.receive", "text": json.dumps({"type": "close"})})
        await asyncio.wait_for(conn.task, 20)
    terminal = [(e["request_id"], e["type"]) for e in conn.events if e["type"] in ("synthesis_complete", "error")]
    assert terminal == [(0, "synthesis_complete"), (1, "synthesis_complete"), (2, "synthesis_complete")]
    assert conn.events[-1] == {"type": "close", "code": 1000}


async def test_an_answer_that_is_finishing_cannot_be_interrupted():
    sent: list[str] = []
    release = asyncio.Event()
    queue: TurnQueue[str] = TurnQueue(4, answer=None, interrupted=None)  # type: ignore[arg-type]

    async def answer(item: str) -> None:
        queue.finishing()
        await release.wait()  # the terminal event is being sent
        sent.append(f"{item}: complete")

    async def interrupted(item: str) -> None:
        sent.append(f"{item}: cancelled")

    queue._answer, queue._interrupted = answer, interrupted
    queue.put("a")
    queue.end()
    worker = asyncio.create_task(queue.run())
    await reached(lambda: queue.current is not None)
    await asyncio.sleep(0)
    assert queue.interrupt() is False
    release.set()
    await worker
    assert sent == ["a: complete"]


def test_a_refusal_while_draining_says_when_to_retry():
    with client() as c:
        c.app.state.kokoro.draining = True
        r = c.post("/invocations", json={"text": "Too late."})
    assert r.status_code == 503 and r.json()["error"]["code"] == "not_ready" and r.headers["retry-after"] == "1"

"""Capacity is never leaked: 10,000 bad requests — malformed bodies, wrong fields, unknown
voices and languages, oversize texts and bodies, empty texts, runtime faults, refused upgrades,
sessions dropped mid-queue — and afterwards every counter reads zero and the server takes as much
work as it did at the start (a peer went permanently 503 after two malformed requests).

Tight limits (2 sessions, 2 queued requests per session, a backend queue of 2) make a leak of a
single slot visible. In process, real app and backends, fake synthesizer.
"""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from server.settings import Settings
from tests.support.app import build_app, fake_synth
from tests.support.asgi import WSConn, post, running
from tests.support.inproc import WS, metric

SESSIONS, PER_SESSION, BACKEND_QUEUE = 2, 2, 2
POST_BAD = [
    (b"{", 400), (b"", 400), (b"\xff\xfe", 400), (b"[]", 400), (b"null", 400), (b'{"text": 1}', 400),
    (b'{"text": "   "}', 400), (b'{"text": "\\u0000\\u200b"}', 400), (b'{"text": "Hi.", "speed": 9}', 400),
    (b'{"text": "Hi.", "voice": "zz_nobody"}', 404), (b'{"text": "Hi.", "voice": "../etc"}', 400),
    (b'{"text": "Hi.", "lang": "xx-bogus"}', 400), (b'{"text": "Hi.", "format": "ogg"}', 400),
    (json.dumps({"text": "x" * 301}).encode(), 413), (b'{"text": "' + b"y" * 5000 + b'"}', 413),
    (b'{"text": "Boom goes the runtime."}', 500), (b'{"text": "...!?"}', 400),
]
WS_BAD = [b"{", b"\xff", "[1, 2]", '{"text": null}', '{"text": ""}', '{"text": "Hi.", "voice": "zz"}',
          '{"text": "Hi.", "lang": "xx"}', '{"text": "Hi.", "type": "dance"}', '{"text": "Boom here."}',
          '{"text": "Hi.", "sample_rate": 11}', json.dumps({"text": "x" * 301})]


def _counters(app) -> dict[str, float]:
    state = app.state.kokoro
    text = state.metrics.render().decode()
    return {
        "sessions": metric(text, "kokoro_active_sessions"),
        "inflight_post": metric(text, 'kokoro_inflight_requests{route="invocations"}'),
        "inflight_openai": metric(text, 'kokoro_inflight_requests{route="openai"}'),
        "state_inflight": state.inflight,
        "state_sessions": len(state.sessions),
        "backend_queue": state.backend.queue_depth,
        "backend_active": getattr(state.backend, "active_requests", 0),
    }


async def _full_capacity_works(app) -> None:
    """Every session slot and every queue slot, used at once: all answered, none refused."""

    async def session(i: int) -> list[tuple[str, str]]:
        ws = await WSConn.open(app, WS)
        assert ws.status == 101
        for j in range(PER_SESSION):
            await ws.send(json.dumps({"text": f"Good {i} {j}.", "request_id": f"{i}-{j}"}))
        ends = [(await ws.answer())[-1] for _ in range(PER_SESSION)]
        await ws.disconnect()
        return [(e["type"], e["request_id"]) for e in ends]

    results = await asyncio.gather(*(session(i) for i in range(SESSIONS)))
    for i, ends in enumerate(results):
        assert ends == [("synthesis_complete", f"{i}-{j}") for j in range(PER_SESSION)]
    assert (await post(app, "/invocations", b'{"text": "Good post."}'))[0] == 200


@pytest.mark.parametrize("mode", ["sequential", "concurrent"])
async def test_ten_thousand_bad_requests_leave_full_capacity(mode):
    synth = fake_synth(fail_on="Boom")
    limits = Settings(max_sessions=SESSIONS, max_queued_per_session=PER_SESSION, max_text_chars=300,
                      max_message_bytes=4096)
    app = build_app(synth, mode, settings=limits, max_queue=BACKEND_QUEUE)
    await app.state.kokoro.backend.start()  # loaded and warmed up: the lifespan only marks it ready
    async with running(app):
        assert app.state.kokoro.ready
        zero = _counters(app)
        assert not any(zero.values())
        await _full_capacity_works(app)
        sent = 0
        bodies = itertools.cycle(POST_BAD)
        for _ in range(3000):
            body, status = next(bodies)
            got, content = await post(app, "/invocations", body)
            assert got == status, (body[:60], got, content[:200])
            sent += 1
        for _ in range(200):
            got, _ = await post(app, "/v1/audio/speech", b'{"model": "kokoro", "input": "", "voice": "af_test"}')
            assert got == 400
            sent += 1
        messages = itertools.cycle(WS_BAD)
        for round_ in range(25):
            ws, ws2 = await WSConn.open(app, WS), await WSConn.open(app, WS)
            refused = await WSConn.open(app, WS)  # a third session is refused at the upgrade: a bad request too
            assert (ws.status, ws2.status, refused.status) == (101, 101, 503)
            sent += 1
            for _ in range(270):
                await ws.send(next(messages))
                assert (await ws.answer())[-1]["type"] == "error"
                sent += 1
            # Leave with requests queued (and one in flight) on the second socket.
            for j in range(PER_SESSION + 2):
                await ws2.send(json.dumps({"text": f"Left behind {round_} {j}.", "request_id": j}))
            sent += PER_SESSION + 2
            await ws2.disconnect(1006)
            await ws.disconnect()
        assert sent >= 10_000
        assert _counters(app) == zero
        await _full_capacity_works(app)
        assert _counters(app) == zero
        assert app.state.kokoro.ready

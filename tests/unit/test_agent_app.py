"""The AgentCore app in-process (httpx ASGI transport) with the scripted model and the real TTS server
(over the fake runtime, behind a tap that records its frames): the SSE event sequence of a turn in bidi
and batch modes, request validation, the page."""

from __future__ import annotations

import httpx
import pytest

from agent.agent import DEFAULT_REPLY
from agent.app import AgentSettings, create_app
from tests.agent_support.sse import parse_sse, pcm_of
from tests.agent_support.wire_tap import WireTap
from tests.support.live import free_port

REPLY = "Hello there, friend. This is the second sentence. And here is a third one to finish."


@pytest.fixture(scope="module")
def tts_server(fake_server):
    """The suite's shared fake-runtime server (``fake_server``)."""
    return fake_server


@pytest.fixture
def server(tts_server):
    with WireTap(tts_server.ws_url) as tap:
        yield tap


def app_for(tts_url: str, **kw):
    settings = AgentSettings(model="scripted", tokens_per_second=kw.pop("tokens_per_second", 60),
                             scripted_reply=kw.pop("reply", REPLY), tts_url=tts_url, **kw)
    return create_app(settings)


async def turn(app, payload: dict) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent") as client:
        return await client.post("/invocations", json=payload, timeout=60)


def types(events):
    return [e["type"] for e in events]


async def test_bidi_turn_speaks_while_writing(server):
    resp = await turn(app_for(server.url, tokens_per_second=20), {"prompt": "Say hello", "mode": "bidi"})
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(resp.text)
    kinds = types(events)

    assert kinds[0] == "agent_start" and kinds[-1] == "agent_end"
    assert "error" not in kinds
    assert "".join(e["text"] for e in events if e["type"] == "text_delta") == REPLY
    last_text = max(i for i, k in enumerate(kinds) if k == "text_delta")
    first_audio = kinds.index("audio_chunk")
    assert kinds.index("audio_stream_start") < first_audio < last_text  # speech began mid-reply
    assert kinds.index("audio_stream_end") > max(i for i, k in enumerate(kinds) if k == "audio_chunk")

    # Each sentence went to the server as its own binary-frame request, as it ended.
    requests = [m for kind, m in server.received if m.get("type") == "synthesize"]
    assert [r["text"] for r in requests] == ["Hello there, friend.", "This is the second sentence.",
                                             "And here is a third one to finish."]
    assert {kind for kind, _ in server.received} == {"binary"}
    first_chunks = [e for e in events if e["type"] == "audio_chunk" and "text" in e]
    assert [e["text"] for e in first_chunks] == [r["text"] for r in requests]

    end = events[-1]
    assert end["text"] == REPLY and end["sentences"] == 3 and end["mode"] == "bidi"
    assert end["first_audio_ms"] < end["total_ms"]
    pcm = pcm_of(events)
    assert len(pcm) % 2 == 0 and len(pcm) == events[kinds.index("audio_stream_end")]["bytes"]


async def test_batch_turn_speaks_after_writing(server):
    resp = await turn(app_for(server.url), {"prompt": "Say hello", "mode": "batch"})
    events = parse_sse(resp.text)
    kinds = types(events)
    last_text = max(i for i, k in enumerate(kinds) if k == "text_delta")
    assert kinds.index("audio_chunk") > last_text
    requests = [m for _, m in server.received if m.get("type") == "synthesize"]
    assert [r["text"] for r in requests] == [REPLY]  # one synthesis of the whole reply
    assert events[-1]["type"] == "agent_end" and events[-1]["sentences"] == 1


async def test_voice_and_speed_reach_the_server(server):
    await turn(app_for(server.url), {"prompt": "x", "voice": "jm_kumo", "speed": 1.25})
    requests = [m for _, m in server.received if m.get("type") == "synthesize"]
    assert requests and all(r["voice"] == "jm_kumo" and r["speed"] == 1.25 for r in requests)


async def test_refused_voice_is_reported_and_the_turn_completes(server):
    events = parse_sse((await turn(app_for(server.url), {"prompt": "x", "voice": "zz_nobody"})).text)
    errors = [e for e in events if e["type"] == "error"]
    assert errors and errors[0]["code"] == "unknown_voice" and errors[0]["fatal"] is False
    assert events[-1]["type"] == "agent_end" and events[-1]["text"] == REPLY


async def test_unreachable_tts_is_an_error_event_but_text_still_streams():
    app = app_for(f"http://127.0.0.1:{free_port()}", tts_reconnect_tries=2, tts_reconnect_delay_s=0.01)
    events = parse_sse((await turn(app, {"prompt": "x"})).text)
    errors = [e for e in events if e["type"] == "error"]
    # The client tried again (the tries in the settings), then gave up with a clear, final error.
    assert [e["code"] for e in errors] == ["tts_unavailable"] and errors[0]["retryable"] is False
    assert "2 attempts" in errors[0]["message"] and "Connect call failed" in errors[0]["message"]
    assert "".join(e["text"] for e in events if e["type"] == "text_delta") == REPLY
    assert events[-1]["type"] == "agent_end"


@pytest.mark.parametrize(
    "payload",
    [{}, {"prompt": ""}, {"prompt": 3}, {"prompt": "x", "mode": "stream"}, {"prompt": "x", "speed": 3},
     {"prompt": "x", "speed": "fast"}, {"prompt": "x", "voice": 7}, ["prompt"]],
)
async def test_bad_requests_are_400(payload):
    resp = await turn(app_for("http://127.0.0.1:9"), payload)
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "invalid_request"


async def test_page_and_assets_are_served():
    app = app_for("http://127.0.0.1:9")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent") as client:
        page = await client.get("/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert 'id="prompt"' in page.text and "/static/app.js" in page.text
        js = await client.get("/static/app.js")
        assert js.status_code == 200 and "AudioContext" in js.text
        info = (await client.get("/info")).json()
        assert info["model"] == "scripted" and info["tts"] == "http://127.0.0.1:9"
        assert (await client.get("/ping")).status_code == 200


def test_default_reply_has_several_sentences():
    from backends.text.chunker import SentenceChunker

    chunker = SentenceChunker()
    assert len(chunker.push(DEFAULT_REPLY) + chunker.flush()) >= 3


@pytest.mark.parametrize(("url", "ping"), [
    ("ws://tts:8080/invocations-bidirectional-stream", "http://tts:8080/ping"),
    ("wss://tts.example/invocations-bidirectional-stream", "https://tts.example/ping"),
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080/ping"),
    ("127.0.0.1:8080", "http://127.0.0.1:8080/ping"),
])
def test_the_tts_servers_ping_url(url, ping):
    from agent.app import ping_url

    assert ping_url(url) == ping


async def test_tts_status_relays_the_servers_ping(tts_server):
    async def status(app) -> dict:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent") as client:
            return (await client.get("/tts-status")).json()

    assert await status(app_for(tts_server.ws_url)) == {"reachable": True, "status": "ok", "warnings": []}
    gone = await status(app_for(f"http://127.0.0.1:{free_port()}"))
    assert gone["reachable"] is False and "Connection refused" in gone["error"]

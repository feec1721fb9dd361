"""The Bedrock path with the real ``BedrockModel`` (boto3 + botocore's event-stream parser + Strands)
pointed at a local stand-in that speaks ConverseStream's ``application/vnd.amazon.eventstream``; and
the offline ``scripted`` model against Strands' Model interface."""

from __future__ import annotations

import pytest

from agent.agent import ScriptedModel, build_agent, build_model, converse, text_deltas, tokenize
from agent.tts_client import TTSClient
from tests.agent_support.bedrock_standin import BedrockStandIn
from tests.agent_support.wire_tap import WireTap

REPLY = "Bedrock says hello. This second sentence arrives token by token. The end."


@pytest.fixture(autouse=True)
def fake_aws_env(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDSTANDIN")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "standin-secret")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture(scope="module")
def tts_process(fake_server):
    """The suite's shared fake-runtime server (``fake_server``)."""
    return fake_server


@pytest.fixture
def tts_server(tts_process):
    with WireTap(tts_process.ws_url) as tap:
        yield tap


@pytest.fixture
def bedrock():
    standin = BedrockStandIn(REPLY, seconds_per_token=0.03).start()
    yield standin
    standin.stop()


def bedrock_model(url: str):
    return build_model("bedrock", bedrock_model_id="standin.model-v1", region="us-east-1", endpoint_url=url)


@pytest.mark.cloud
async def test_real_bedrock_model_streams_text_from_converse_stream(bedrock):
    agent = build_agent(bedrock_model(bedrock.url))
    deltas = [d async for d in text_deltas(agent, "Greet me")]
    assert "".join(deltas) == REPLY
    assert len(deltas) == len(tokenize(REPLY))  # streamed token by token, not in one piece

    (request,) = bedrock.requests
    assert request["path"] == "/model/standin.model-v1/converse-stream"
    assert request["headers"]["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDSTANDIN/")
    assert "/us-east-1/bedrock/aws4_request" in request["headers"]["Authorization"]
    body = request["body"]
    assert body["messages"][-1] == {"role": "user", "content": [{"text": "Greet me"}]}
    assert "voice assistant" in body["system"][0]["text"]


@pytest.mark.cloud
async def test_bedrock_turn_is_spoken_while_it_streams(bedrock, tts_server):
    events = [e async for e in converse(build_agent(bedrock_model(bedrock.url)), TTSClient.websocket(tts_server.url),
                                        "Greet me")]
    kinds = [e["type"] for e in events]
    assert "error" not in kinds
    assert kinds.index("audio_chunk") < max(i for i, k in enumerate(kinds) if k == "text_delta")
    assert [m["text"] for _, m in tts_server.received if m.get("type") == "synthesize"] == [
        "Bedrock says hello.", "This second sentence arrives token by token.", "The end."]


@pytest.mark.cloud
async def test_bedrock_stream_exception_is_an_error_event(tts_server):
    standin = BedrockStandIn(REPLY, exception="validationException").start()
    try:
        events = [e async for e in converse(build_agent(bedrock_model(standin.url)),
                                            TTSClient.websocket(tts_server.url), "Greet me")]
    finally:
        standin.stop()
    errors = [e for e in events if e["type"] == "error"]
    assert len(errors) == 1 and errors[0]["fatal"] and "stand-in failure" in errors[0]["message"]
    assert events[-1]["type"] == "agent_end"


async def test_scripted_model_speaks_strands_stream_events():
    model = ScriptedModel("One. Two three.", tokens_per_second=0)
    events = [e async for e in model.stream([{"role": "user", "content": [{"text": "hi"}]}])]
    assert events[0] == {"messageStart": {"role": "assistant"}}
    assert events[1] == {"contentBlockStart": {"start": {}}}
    deltas = [e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e]
    assert "".join(deltas) == "One. Two three." and len(deltas) == 5
    assert {"messageStop": {"stopReason": "end_turn"}} in events
    assert events[-1]["metadata"]["usage"]["outputTokens"] == 5
    # And through a real Strands Agent, the conversation records the reply.
    agent = build_agent(ScriptedModel(lambda prompt: f"You said {prompt}.", tokens_per_second=0))
    assert "".join([d async for d in text_deltas(agent, "hello")]) == "You said hello."
    assert agent.messages[-1]["content"][0]["text"] == "You said hello."


async def test_scripted_model_paces_tokens_at_its_rate(monkeypatch):
    import asyncio

    waits: list[float] = []

    async def no_wait(delay, result=None):
        waits.append(delay)

    monkeypatch.setattr(asyncio, "sleep", no_wait)
    model = ScriptedModel("a b c d e f g h i j", tokens_per_second=50)  # 10 tokens: 0.2 s in all
    [e async for e in model.stream([])]
    # Paced against a fixed schedule: token i is due at i / rate from the start (time does not move
    # here, so each wait is the whole way to its token's slot).
    assert waits == pytest.approx([i / 50 for i in range(1, 11)], abs=0.01)

"""The SageMaker bidirectional transport against a faithful stand-in of the SDK's stream object and of
SageMaker's routing to the container (tests/agent_support/sagemaker_standin.py), with the real server
(over the fake runtime) as the container, behind a tap that records its frames. The real SDK types are checked under Python 3.12 in
tests/agent_py312."""

from __future__ import annotations

import asyncio
import sys
from types import SimpleNamespace

import pytest

from agent.messages import AudioChunk, SynthesisComplete, SynthesisStart, TTSError
from agent.sagemaker_transport import (
    BotoCredentialsResolver,
    SageMakerConnector,
    SageMakerTransport,
    runtime_endpoint,
)
from agent.tts_client import TTSClient
from tests.agent_support import sagemaker_standin
from tests.agent_support.wire_tap import WireTap, fake_runtime_server

pytestmark = pytest.mark.cloud

SENTENCES = ["The first sentence is here.", "A second one follows, a little longer than the first."]


@pytest.fixture(scope="module")
def container(fake_server):
    """The suite's shared fake-runtime server (``fake_server``)."""
    return fake_server


@pytest.fixture(scope="module")
def slow_container(tmp_path_factory):
    with fake_runtime_server(tmp_path_factory.mktemp("slow"), segment_s=0.4) as srv:
        yield srv


@pytest.fixture
def server(container):
    with WireTap(container.ws_url) as tap:
        yield tap


async def listed(items):
    for item in items:
        yield item


def client_for(standin, **kwargs) -> TTSClient:
    connector = SageMakerConnector("kokoro-endpoint", "us-east-1", client=standin, models=sagemaker_standin.models,
                                   **kwargs)
    return TTSClient(connector.open)


async def test_speaks_through_payload_parts(server):
    standin = sagemaker_standin.SageMakerStandIn(server.url, max_part_bytes=1000)
    events = [e async for e in client_for(standin).speak(listed(SENTENCES))]

    assert [e.text for e in events if isinstance(e, SynthesisStart)] == SENTENCES
    complete = [e for e in events if isinstance(e, SynthesisComplete)]
    audio = [e for e in events if isinstance(e, AudioChunk)]
    # PARTIAL parts were joined back into the container's frames: one chunk per segment, not per part.
    assert len(audio) == server.audio_frames >= 2
    assert sum(len(a.pcm) for a in audio) / 48_000 == pytest.approx(sum(c.audio_duration_s for c in complete), abs=0.01)
    assert any(p.completion_state == "PARTIAL" for p in standin.streams[0]._bridge.response_parts)

    assert standin.invocations[0].endpoint_name == "kokoro-endpoint"
    bridge = standin.streams[0]._bridge
    assert set(bridge.container_frames) == {"binary"}  # no data type: SageMaker delivers binary
    assert [m.get("type") for _, m in server.received] == ["synthesize", "synthesize", "close"]
    assert [m["text"] for m in server.messages("synthesize")] == SENTENCES
    assert all(isinstance(e, sagemaker_standin.RequestStreamEventPayloadPart)
               for e in standin.streams[0].input_stream.sent)


async def test_utf8_data_type_reaches_the_container_as_text(server):
    standin = sagemaker_standin.SageMakerStandIn(server.url)
    [e async for e in client_for(standin, data_type="UTF8").speak(listed(SENTENCES[:1]))]
    assert {kind for kind, _ in server.received} == {"text"}


@pytest.mark.subprocess
async def test_listener_going_away_sends_cancel(slow_container):
    with WireTap(slow_container.ws_url) as server:
        await _leave_early(server)


async def _leave_early(server: WireTap) -> None:
    standin = sagemaker_standin.SageMakerStandIn(server.url)
    stream = client_for(standin).speak(listed(["One part here. Two part here. Three part here.", *SENTENCES]))
    async for event in stream:
        if isinstance(event, AudioChunk):
            break
    await stream.aclose()
    for _ in range(100):
        if {"type": "cancel"} in [m for _, m in server.received]:
            break
        await asyncio.sleep(0.02)
    assert {"type": "cancel"} in [m for _, m in server.received]
    assert standin.streams[0].input_stream._closed


async def test_model_stream_error_ends_the_session_with_its_code(server):
    standin = sagemaker_standin.SageMakerStandIn(server.url, fail_after_events=2)
    with pytest.raises(TTSError) as info:
        [e async for e in client_for(standin).speak(listed(SENTENCES))]
    assert info.value.code == "model_stream_error"
    assert not info.value.retryable  # a client-fault modelled error


def test_frame_type_without_a_data_type_header():
    assert SageMakerTransport._frame(b'{"type": "synthesis_start"}', None) == '{"type": "synthesis_start"}'
    assert SageMakerTransport._frame(b"{\x00\x01\x02}", None) == b"{\x00\x01\x02}"
    assert SageMakerTransport._frame(b'{"a": 1}', "BINARY") == b'{"a": 1}'
    assert SageMakerTransport._frame(b"ok", "UTF8") == "ok"


def test_runtime_endpoint_uses_port_8443():
    assert runtime_endpoint("eu-west-1") == "https://runtime.sagemaker.eu-west-1.amazonaws.com:8443"
    assert SageMakerConnector("e", "us-west-2").endpoint_uri.endswith(".amazonaws.com:8443")


async def test_boto_credentials_bridge():
    import boto3

    session = boto3.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret",
                            aws_session_token="token", region_name="us-east-1")
    identity = await BotoCredentialsResolver(session, SimpleNamespace).get_identity(properties={})
    assert (identity.access_key_id, identity.secret_access_key, identity.session_token) == (
        "AKIDEXAMPLE", "secret", "token")


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the SDK exists on 3.12")
async def test_without_the_sdk_the_error_says_what_is_needed():
    with pytest.raises(TTSError) as info:
        [e async for e in TTSClient.sagemaker("e", "us-east-1").speak(listed(["hi"]))]
    assert info.value.code == "sdk_unavailable" and "3.12" in info.value.message

"""The SageMaker transport with the real ``aws-sdk-sagemaker-runtime-http2`` types (Python >= 3.12).

Run by a separate invocation in the py3.12 venv (the 3.11 suite does not collect this folder):

    .venv312/bin/python -m pytest --noconftest -q -p no:cacheprovider tests/agent_py312

What it shows: the stand-in used by the 3.11 tests has the real types' fields; the real client is
built as the transport builds it (awscrt, port 8443, boto3 credentials bridged into the SDK's
identity interface); what the transport sends encodes, through the SDK's own event-stream
serializer, into ``PayloadPart`` events carrying our JSON; and a whole session runs over the
stand-in stream built from the real SDK classes, against the real server (over the fake runtime) run
by the project's Python 3.11 interpreter: ``$SERVER_PYTHON``, by default the repository's
``.venv/bin/python``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys

import pytest

# The 3.11 suite does not collect this folder (tests/conftest.py); here the SDK must be importable.
assert sys.version_info >= (3, 12), "run with .venv312 (make test does)"
import aws_sdk_sagemaker_runtime_http2.models as sdk_models  # noqa: E402

from agent.sagemaker_transport import BotoCredentialsResolver, SageMakerConnector  # noqa: E402
from agent.tts_client import AudioChunk, SynthesisStart, TTSClient, TTSError  # noqa: E402
from tests.agent_support import sagemaker_standin  # noqa: E402

SENTENCES = ["The first sentence is here.", "And a second one."]


def fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


@pytest.mark.parametrize(
    "name",
    ["RequestPayloadPart", "ResponsePayloadPart", "RequestStreamEventPayloadPart", "ResponseStreamEventPayloadPart",
     "InvokeEndpointWithBidirectionalStreamInput", "ResponseStreamEventModelStreamError",
     "ResponseStreamEventInternalStreamFailure"],
)
def test_standin_types_have_the_real_fields(name):
    assert fields(getattr(sagemaker_standin, name)) == fields(getattr(sdk_models, name))


def test_standin_errors_carry_the_real_error_attributes():
    for name in ("ModelStreamError", "InternalStreamFailure"):
        real, standin = getattr(sdk_models, name), getattr(sagemaker_standin, name)
        assert {"message", "fault"} <= fields(real)
        assert fields(standin) <= fields(real)


async def test_real_client_is_built_with_crt_port_8443_and_boto_credentials():
    import boto3
    from aws_sdk_sagemaker_runtime_http2.client import AsyncSageMakerRuntimeHTTP2Client
    from smithy_aws_core.identity import AWSCredentialsIdentity
    from smithy_http.aio.crt import AWSCRTHTTPClient

    session = boto3.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret",
                            aws_session_token="token", region_name="eu-west-1")
    connector = SageMakerConnector("kokoro-ep", "eu-west-1", boto_session=session)
    client, models = await connector._ensure_client()
    assert isinstance(client, AsyncSageMakerRuntimeHTTP2Client) and models is sdk_models
    config = client._config
    assert str(config.endpoint_uri) == "https://runtime.sagemaker.eu-west-1.amazonaws.com:8443"
    assert config.region == "eu-west-1"
    assert isinstance(config.transport, AWSCRTHTTPClient)
    resolver = config.aws_credentials_identity_resolver
    assert isinstance(resolver, BotoCredentialsResolver)
    identity = await resolver.get_identity(properties={})
    assert isinstance(identity, AWSCredentialsIdentity)
    assert (identity.access_key_id, identity.secret_access_key, identity.session_token) == (
        "AKIDEXAMPLE", "secret", "token")
    await connector.aclose()


@pytest.mark.parametrize("data_type", [None, "UTF8"])
async def test_sent_events_encode_as_payload_parts_with_our_json(data_type):
    from smithy_aws_event_stream._private.serializers import EventSerializer
    from smithy_aws_event_stream.events import Event
    from smithy_core.aio.types import AsyncBytesReader
    from smithy_json import JSONCodec

    class CapturingStream:
        def __init__(self):
            self.sent = []
            self.input_stream = self

        async def send(self, event):
            self.sent.append(event)

        async def close(self):
            pass

        async def await_output(self):
            raise RuntimeError("no output in this test")

    from agent.sagemaker_transport import SageMakerTransport

    stream = CapturingStream()
    transport = SageMakerTransport(stream, sdk_models, data_type=data_type)
    await transport.send({"type": "synthesize", "text": "Héllo.", "request_id": "r1"})
    await transport.aclose()
    (event,) = stream.sent
    assert isinstance(event, sdk_models.RequestStreamEventPayloadPart)

    serializer = EventSerializer(payload_codec=JSONCodec())
    event.serialize(serializer)
    wire = serializer.get_result().encode()
    decoded = await Event.decode_async(AsyncBytesReader(wire))
    headers = decoded.message.headers
    assert headers[":event-type"] == "PayloadPart" and headers[":message-type"] == "event"
    assert headers.get("DataType") == data_type
    assert json.loads(decoded.message.payload) == {"type": "synthesize", "text": "Héllo.", "request_id": "r1"}


@pytest.fixture(scope="module")
def container(tmp_path_factory):
    """The real server (fake runtime) under the project's 3.11 interpreter (``$SERVER_PYTHON``)."""
    from tests.agent_support.wire_tap import fake_runtime_server

    with fake_runtime_server(tmp_path_factory.mktemp("container"), segment_s=0.02) as srv:
        yield srv


@pytest.fixture
def server(container):
    from tests.agent_support.wire_tap import WireTap

    with WireTap(container.ws_url) as tap:
        yield tap


async def listed(items):
    for item in items:
        yield item


async def test_session_over_a_stream_of_real_sdk_types(server):
    standin = sagemaker_standin.SageMakerStandIn(server.url, models=sdk_models, max_part_bytes=4096)
    connector = SageMakerConnector("kokoro-ep", "us-east-1", client=standin, models=sdk_models)
    events = [e async for e in TTSClient(connector.open).speak(listed(SENTENCES))]
    assert [e.text for e in events if isinstance(e, SynthesisStart)] == SENTENCES
    assert sum(len(e.pcm) for e in events if isinstance(e, AudioChunk)) > 0
    assert isinstance(standin.invocations[0], sdk_models.InvokeEndpointWithBidirectionalStreamInput)
    assert [m.get("type") for _, m in server.received] == ["synthesize", "synthesize", "close"]


async def test_real_model_stream_error_maps_to_its_code(server):
    standin = sagemaker_standin.SageMakerStandIn(server.url, models=sdk_models, fail_after_events=1)
    connector = SageMakerConnector("kokoro-ep", "us-east-1", client=standin, models=sdk_models)
    with pytest.raises(TTSError) as info:
        [e async for e in TTSClient(connector.open).speak(listed(SENTENCES))]
    assert info.value.code == "model_stream_error"


async def test_whole_session_through_the_real_sdk_client(server, monkeypatch):
    """The real client end to end, only the network replaced (see sagemaker_http_standin)."""
    import boto3

    from tests.agent_py312.sagemaker_http_standin import SageMakerHTTPStandIn

    http = SageMakerHTTPStandIn(server.url)
    monkeypatch.setattr("smithy_http.aio.crt.AWSCRTHTTPClient", lambda *a, **k: http)
    session = boto3.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret", region_name="us-east-1")
    connector = SageMakerConnector("kokoro-ep", "us-east-1", boto_session=session)
    client = TTSClient(connector.open, voice="jm_kumo")

    events = [e async for e in client.speak(listed(SENTENCES))]

    assert [e.text for e in events if isinstance(e, SynthesisStart)] == SENTENCES
    assert sum(len(e.pcm) for e in events if isinstance(e, AudioChunk)) > 0
    (request,) = http.requests
    assert request.method == "POST"
    assert request.destination.host == "runtime.sagemaker.us-east-1.amazonaws.com"
    assert request.destination.port == 8443
    assert request.destination.path == "/endpoints/kokoro-ep/invocations-bidirectional-stream"
    assert request.fields["authorization"].as_string().startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert set(http.container_frames) == {"binary"}  # no DataType: delivered as binary frames
    assert [m.get("type") for _, m in server.received] == ["synthesize", "synthesize", "close"]
    await asyncio.wait_for(http.input_ended.wait(), 5)  # the input was closed with the signed empty frame
    await connector.aclose()

"""SageMaker's runtime as a stand-in *HTTP transport* for the real SDK client (Python >= 3.12).

The real ``AsyncSageMakerRuntimeHTTP2Client`` runs unchanged — request serialisation, SigV4 signing of
the request and of every event, the event-stream encoder and decoder, ``DuplexEventStream`` — and only
the network is replaced: this transport (``SUPPORTS_DUPLEX_STREAMING``, as the SDK requires of a duplex
transport) reads the signed request body as SageMaker does, unwraps each signed event, and forwards
its ``PayloadPart`` to the container's WebSocket (a text frame when ``DataType`` is ``UTF8``, else
binary); every container message goes back as a ``PayloadPart`` event with ``DataType`` ``UTF8`` or
``BINARY`` and ``CompletionState`` ``COMPLETE``. The empty signed frame that ends the input closes the
container's WebSocket; the container closing ends the response body. As SageMaker does, a request
with the ``X-Amzn-SageMaker-Model-Invocation-Path`` header (and ``-Model-Query-String``) opens the
container's WebSocket at that path and query instead of ``/invocations-bidirectional-stream``.
"""

from __future__ import annotations

import asyncio
import io

from smithy_aws_event_stream.events import Event, EventMessage
from smithy_core.aio.types import AsyncBytesProvider, AsyncBytesReader
from smithy_http import Field, Fields
from smithy_http.aio import HTTPResponse
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.agent_support.sagemaker_standin import container_target

INVOCATION_PATH = "x-amzn-sagemaker-model-invocation-path"
QUERY_STRING = "x-amzn-sagemaker-model-query-string"


class SageMakerHTTPStandIn:
    SUPPORTS_DUPLEX_STREAMING = True

    def __init__(self, container_url: str) -> None:
        self.container_url = container_url
        self.requests: list = []
        self.signed_events = 0
        self.container_frames: list[str] = []
        self.targets: list[str] = []
        self.input_ended = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()

    def __deepcopy__(self, memo) -> SageMakerHTTPStandIn:
        return self  # some SDK versions copy their config: the network stays this one object

    def __copy__(self) -> SageMakerHTTPStandIn:
        return self

    async def send(self, request, *, request_config=None) -> HTTPResponse:
        self.requests.append(request)
        target = container_target(self.container_url, _header(request, INVOCATION_PATH), _header(request, QUERY_STRING))
        self.targets.append(target)
        ws = await connect(target, compression=None, max_size=2**24)
        body = AsyncBytesProvider()
        for coro in (self._requests_to_container(request.body, ws), self._container_to_response(ws, body)):
            task = asyncio.create_task(coro)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        fields = Fields([Field(name="content-type", values=["application/vnd.amazon.eventstream"]),
                         Field(name="x-amzn-requestid", values=["standin"])])
        return HTTPResponse(status=200, fields=fields, body=body)

    async def _requests_to_container(self, source, ws) -> None:
        reader = AsyncBytesReader(source)
        try:
            while (outer := await Event.decode_async(reader)) is not None:
                assert ":chunk-signature" in outer.message.headers, "events must be SigV4-signed"
                self.signed_events += 1
                if not outer.message.payload:  # the signed empty frame: end of the input stream
                    break
                inner = Event.decode(io.BytesIO(outer.message.payload)).message
                assert inner.headers[":event-type"] == "PayloadPart"
                if inner.headers.get("DataType") == "UTF8":
                    self.container_frames.append("text")
                    await ws.send(inner.payload.decode("utf-8"))
                else:
                    self.container_frames.append("binary")
                    await ws.send(inner.payload)
        finally:
            self.input_ended.set()
            await ws.close()

    async def _container_to_response(self, ws, body: AsyncBytesProvider) -> None:
        try:
            async for frame in ws:
                data, data_type = (frame.encode(), "UTF8") if isinstance(frame, str) else (frame, "BINARY")
                message = EventMessage(headers={
                    ":message-type": "event", ":event-type": "PayloadPart",
                    ":content-type": "application/octet-stream", "DataType": data_type,
                    "CompletionState": "COMPLETE",
                }, payload=data)
                await body.write(message.encode())
        except ConnectionClosed:
            pass
        finally:
            await body.close()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()


def _header(request, name: str) -> str | None:
    try:
        return request.fields[name].as_string()
    except KeyError:
        return None

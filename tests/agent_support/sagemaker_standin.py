"""A stand-in for the SageMaker HTTP/2 bidirectional stream: the SDK's stream object, and SageMaker's
routing between payload parts and the container's WebSocket.

It mirrors ``aws-sdk-sagemaker-runtime-http2`` 0.12 (read from its code; tests/agent_py312 checks the
field names against the real package):

* ``client.invoke_endpoint_with_bidirectional_stream(input)`` (async) returns a duplex stream with
  ``input_stream`` (``async send(event)``, ``async close()``; a send after close raises ``OSError``,
  as ``AWSEventPublisher`` does), ``async await_output() -> (output, receiver)`` (cached in
  ``output``/``output_stream``) and ``async close()``;
* the receiver's ``async receive()`` returns one event or None at the end, and *raises* the modelled
  error an error event carries (``ModelStreamError``, ``InternalStreamFailure``), as
  ``AWSEventReceiver`` does;
* events are ``RequestStreamEventPayloadPart(value=RequestPayloadPart(bytes_, data_type,
  completion_state))`` in, ``ResponseStreamEventPayloadPart(value=ResponsePayloadPart(...))`` out.

SageMaker's side: each request part becomes one WebSocket message to the container — binary unless
``data_type == "UTF8"``; each container message becomes response parts with ``data_type`` ``"UTF8"``
(text frame) or ``"BINARY"`` (binary frame), split into pieces of at most ``max_part_bytes`` marked
``PARTIAL`` … ``COMPLETE``. A normal close by the container ends the output; an abnormal one is a
``ModelStreamError``. Closing the input closes the container's WebSocket. Where the invocation gives
a ``model_invocation_path`` (Pipecat's Deepgram services: ``v1/speak``) SageMaker opens the
container's WebSocket at that path with ``model_query_string`` as its query, instead of
``/invocations-bidirectional-stream`` (:func:`container_target`; the HTTP stand-in does the same
with the ``X-Amzn-SageMaker-Model-Invocation-Path`` / ``-Model-Query-String`` headers).

``models`` here has no dependencies so the py3.12 venv can compare it with the real one; the bridge
imports ``websockets`` when used.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

BIDI_PATH = "/invocations-bidirectional-stream"


def container_target(container_url: str, invocation_path: str | None = None, query_string: str | None = None) -> str:
    """The container WebSocket SageMaker opens for one invocation: ``/<invocation_path>?<query_string>``
    when a model invocation path is given, else the container's ``/invocations-bidirectional-stream``
    (``container_url`` is the container's address, with or without that path)."""
    parts = urlsplit(container_url)
    if invocation_path:
        path = "/" + invocation_path.lstrip("/")
    else:
        path = parts.path if parts.path not in ("", "/") else BIDI_PATH
    return urlunsplit((parts.scheme, parts.netloc, path, query_string or "", ""))


@dataclass(kw_only=True)
class RequestPayloadPart:
    bytes_: bytes | None = field(repr=False, default=None)
    data_type: str | None = None
    completion_state: str | None = None
    p: str | None = None


@dataclass
class RequestStreamEventPayloadPart:
    value: RequestPayloadPart


@dataclass(kw_only=True)
class ResponsePayloadPart:
    bytes_: bytes | None = field(repr=False, default=None)
    data_type: str | None = None
    completion_state: str | None = None
    p: str | None = None


@dataclass
class ResponseStreamEventPayloadPart:
    value: ResponsePayloadPart


@dataclass(kw_only=True)
class InvokeEndpointWithBidirectionalStreamInput:
    endpoint_name: str | None = None
    target_variant: str | None = None
    model_invocation_path: str | None = None
    model_query_string: str | None = None


@dataclass(kw_only=True)
class InvokeEndpointWithBidirectionalStreamOutput:
    invoked_production_variant: str | None = None


@dataclass(kw_only=True)
class ModelStreamError(Exception):
    message: str = ""
    fault: Literal["client", "server"] | None = "client"
    error_code: str | None = None


@dataclass(kw_only=True)
class InternalStreamFailure(Exception):
    message: str = ""
    fault: Literal["client", "server"] | None = "server"


@dataclass
class ResponseStreamEventModelStreamError:
    value: ModelStreamError


@dataclass
class ResponseStreamEventInternalStreamFailure:
    value: InternalStreamFailure


models = SimpleNamespace(
    RequestPayloadPart=RequestPayloadPart,
    RequestStreamEventPayloadPart=RequestStreamEventPayloadPart,
    ResponsePayloadPart=ResponsePayloadPart,
    ResponseStreamEventPayloadPart=ResponseStreamEventPayloadPart,
    InvokeEndpointWithBidirectionalStreamInput=InvokeEndpointWithBidirectionalStreamInput,
    InvokeEndpointWithBidirectionalStreamOutput=InvokeEndpointWithBidirectionalStreamOutput,
    ModelStreamError=ModelStreamError,
    InternalStreamFailure=InternalStreamFailure,
    ResponseStreamEventModelStreamError=ResponseStreamEventModelStreamError,
    ResponseStreamEventInternalStreamFailure=ResponseStreamEventInternalStreamFailure,
)


class _InputStream:
    def __init__(self, bridge: _Bridge) -> None:
        self._bridge = bridge
        self._closed = False
        self.sent: list[Any] = []

    async def send(self, event: Any) -> None:
        if self._closed:
            raise OSError("Attempted to write to closed stream.")
        m = self._bridge.models
        if not isinstance(event, m.RequestStreamEventPayloadPart) or not isinstance(event.value, m.RequestPayloadPart):
            raise TypeError(f"not a request payload part event: {event!r}")
        if event.value.bytes_ is None:
            raise ValueError("payload part without bytes")
        self.sent.append(event)
        await self._bridge.to_container(event.value)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._bridge.input_closed()


class _OutputStream:
    def __init__(self, bridge: _Bridge) -> None:
        self._bridge = bridge
        self._closed = False

    async def receive(self) -> Any:
        if self._closed:
            return None
        event = await self._bridge.events.get()
        if event is None:
            self._bridge.events.put_nowait(None)
            return None
        value = getattr(event, "value", None)
        if isinstance(value, Exception):
            await self.close()
            raise value
        return event

    async def close(self) -> None:
        self._closed = True

    def __aiter__(self):
        return self

    async def __anext__(self) -> Any:
        event = await self.receive()
        if event is None:
            raise StopAsyncIteration
        return event


class _Bridge:
    """SageMaker's router between payload parts and one container WebSocket."""

    def __init__(self, ws: Any, models: Any, max_part_bytes: int, fail_after_events: int | None) -> None:
        self.ws = ws
        self.models = models
        self.max_part_bytes = max_part_bytes
        self.fail_after_events = fail_after_events
        self.events: asyncio.Queue[Any] = asyncio.Queue()
        self.container_frames: list[str] = []  # frame types the container received
        self.response_parts: list[Any] = []
        self._pump = asyncio.create_task(self._from_container())

    async def to_container(self, part: Any) -> None:
        if part.data_type == "UTF8":
            self.container_frames.append("text")
            await self.ws.send(part.bytes_.decode("utf-8"))
        else:
            self.container_frames.append("binary")
            await self.ws.send(part.bytes_)

    async def input_closed(self) -> None:
        await self.ws.close()

    async def _from_container(self) -> None:
        from websockets.exceptions import ConnectionClosedError, ConnectionClosedOK

        m = self.models
        count = 0
        try:
            while True:
                frame = await self.ws.recv()
                data, data_type = (frame.encode(), "UTF8") if isinstance(frame, str) else (frame, "BINARY")
                pieces = [data[i : i + self.max_part_bytes] for i in range(0, len(data), self.max_part_bytes)] or [b""]
                for i, piece in enumerate(pieces):
                    state = "COMPLETE" if i == len(pieces) - 1 else "PARTIAL"
                    part = m.ResponsePayloadPart(bytes_=piece, data_type=data_type, completion_state=state)
                    self.response_parts.append(part)
                    self.events.put_nowait(m.ResponseStreamEventPayloadPart(value=part))
                    count += 1
                    if self.fail_after_events is not None and count >= self.fail_after_events:
                        err = m.ModelStreamError(message="Model stream failed", error_code="ModelStreamError")
                        self.events.put_nowait(m.ResponseStreamEventModelStreamError(value=err))
                        return
        except ConnectionClosedOK:
            self.events.put_nowait(None)
        except ConnectionClosedError as exc:
            err = m.ModelStreamError(message=f"container closed the stream: {exc}", error_code="ModelStreamError")
            self.events.put_nowait(m.ResponseStreamEventModelStreamError(value=err))


class DuplexStream:
    def __init__(self, bridge: _Bridge) -> None:
        self.input_stream = _InputStream(bridge)
        self.output_stream: _OutputStream | None = None
        self.output: Any = None
        self._bridge = bridge

    async def await_output(self) -> tuple[Any, _OutputStream]:
        if self.output_stream is None:
            await asyncio.sleep(0)  # the initial response arrives asynchronously
            self.output = self._bridge.models.InvokeEndpointWithBidirectionalStreamOutput(
                invoked_production_variant="AllTraffic"
            )
            self.output_stream = _OutputStream(self._bridge)
        return self.output, self.output_stream

    async def close(self) -> None:
        if self.output_stream is None:
            await self.await_output()
        await self.input_stream.close()
        await self.output_stream.close()


class SageMakerStandIn:
    """The stand-in client: each invoke opens a WebSocket to the container at ``container_url`` —
    at its ``/invocations-bidirectional-stream``, or at the invocation's model invocation path and
    query (:func:`container_target`). ``invocations`` records every input given, ``targets`` every
    URL opened."""

    def __init__(self, container_url: str, *, models: Any = models, max_part_bytes: int = 16_384,
                 fail_after_events: int | None = None) -> None:
        self.container_url = container_url
        self.models = models
        self.max_part_bytes = max_part_bytes
        self.fail_after_events = fail_after_events
        self.invocations: list[Any] = []
        self.targets: list[str] = []
        self.streams: list[DuplexStream] = []

    async def invoke_endpoint_with_bidirectional_stream(self, input: Any, plugins: Any = None) -> DuplexStream:
        from websockets.asyncio.client import connect

        if not isinstance(input, self.models.InvokeEndpointWithBidirectionalStreamInput):
            raise TypeError("input must be InvokeEndpointWithBidirectionalStreamInput")
        self.invocations.append(input)
        target = container_target(self.container_url, input.model_invocation_path, input.model_query_string)
        self.targets.append(target)
        ws = await connect(target, compression=None, max_size=2**24)
        stream = DuplexStream(_Bridge(ws, self.models, self.max_part_bytes, self.fail_after_events))
        self.streams.append(stream)
        return stream

    async def close(self) -> None:
        return None

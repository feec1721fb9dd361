"""SageMaker HTTP/2 bidirectional stream as a :class:`agent.messages.Transport`.

``InvokeEndpointWithBidirectionalStream`` (``aws-sdk-sagemaker-runtime-http2[awscrt]``, Python >= 3.12,
imported only when this transport is used) carries *payload parts* both ways. SageMaker turns each
request part into one WebSocket message to the container's ``/invocations-bidirectional-stream`` —
binary unless the part's ``data_type`` is ``"UTF8"`` — and each message from the container into a
response part whose ``data_type`` says which frame type it was: ``"UTF8"`` (text: control JSON) or
``"BINARY"`` (PCM audio). Parts marked ``completion_state="PARTIAL"`` are pieces of one message and
are joined until the part that is not partial. When a part carries no data type, the AWS sample's
rule decides: a payload that parses as a JSON object is control.

Facts this module relies on:

* The runtime endpoint is ``https://runtime.sagemaker.<region>.amazonaws.com:8443`` (port 8443, not
  443), reached through the awscrt HTTP client (the only transport of the SDK that does duplex).
* Credentials come from a boto3 session, bridged into the SDK's identity-resolver interface, so
  whatever boto3 finds — environment, profile, SSO, container or instance IAM role — signs the stream.
* The input side stays open until the output has ended: closing it right after the last message makes
  SageMaker tear the connection down before the container has answered. The session ends with the
  ``close`` message; the container then closes the WebSocket and the output stream ends.

Threading/cancellation: all on the caller's event loop except reading boto3 credentials (a worker
thread, as refreshing them may do network I/O). One background task reads the output stream into a
queue, so :meth:`SageMakerTransport.receive` may be cancelled at any time without losing or tearing a
message.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import re
import sys
from typing import Any

from .messages import TTSError, encode

logger = logging.getLogger(__name__)

RUNTIME_PORT = 8443
_SDK = "aws_sdk_sagemaker_runtime_http2"
_END = object()


def runtime_endpoint(region: str) -> str:
    return f"https://runtime.sagemaker.{region}.amazonaws.com:{RUNTIME_PORT}"


def _load_sdk_models() -> Any:
    if sys.version_info < (3, 12):
        raise TTSError(
            "sdk_unavailable",
            "the SageMaker bidirectional stream needs Python >= 3.12 (aws-sdk-sagemaker-runtime-http2)",
        )
    try:
        return importlib.import_module(f"{_SDK}.models")
    except ImportError as exc:
        raise TTSError(
            "sdk_unavailable", "pip install 'aws-sdk-sagemaker-runtime-http2[awscrt]' (Python >= 3.12)"
        ) from exc


class BotoCredentialsResolver:
    """The SDK's ``IdentityResolver`` interface over a boto3 session's credential chain.

    ``identity_cls`` is the SDK's ``AWSCredentialsIdentity``; ``get_identity`` runs boto3 in a worker
    thread because a refresh (STS, IMDS, container endpoint) blocks.
    """

    def __init__(self, session: Any, identity_cls: Any) -> None:
        self._session = session
        self._identity_cls = identity_cls

    def _frozen(self) -> Any:
        credentials = self._session.get_credentials()
        if credentials is None:
            raise TTSError("no_credentials", "boto3 found no AWS credentials")
        return credentials.get_frozen_credentials()

    async def get_identity(self, *, properties: Any = None) -> Any:
        frozen = await asyncio.to_thread(self._frozen)
        return self._identity_cls(
            access_key_id=frozen.access_key,
            secret_access_key=frozen.secret_key,
            session_token=frozen.token,
        )

    async def invalidate(self) -> None:
        return None  # boto3 refreshes expiring credentials itself


def _error_code(exc: BaseException) -> str:
    """``ModelStreamError`` -> ``model_stream_error`` (from the modelled code, else the class name)."""
    name = str(getattr(exc, "error_code", None) or type(exc).__name__)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).replace(".", "_").lower()


def _as_tts_error(exc: BaseException) -> TTSError:
    if isinstance(exc, TTSError):
        return exc
    retryable = getattr(exc, "fault", None) == "server" or isinstance(exc, OSError)
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return TTSError(_error_code(exc), message, retryable=retryable)


class SageMakerConnector:
    """Opens :class:`SageMakerTransport` sessions to one endpoint, sharing one SDK client (and so its
    HTTP/2 connection pool) across sessions.

    ``client`` and ``models`` may be given to use a stand-in for the SDK (tests); otherwise the real
    client is built on first use with the awscrt transport, the 8443 runtime endpoint and the boto3
    credential bridge.
    """

    def __init__(
        self,
        endpoint_name: str,
        region: str,
        *,
        boto_session: Any = None,
        target_variant: str | None = None,
        model_invocation_path: str | None = None,
        model_query_string: str | None = None,
        endpoint_uri: str | None = None,
        client: Any = None,
        models: Any = None,
        data_type: str | None = None,
    ) -> None:
        self.endpoint_name = endpoint_name
        self.region = region
        self.endpoint_uri = endpoint_uri or runtime_endpoint(region)
        self.target_variant = target_variant
        self.model_invocation_path = model_invocation_path
        self.model_query_string = model_query_string
        self.data_type = data_type  # None: SageMaker delivers a binary frame
        self._boto_session = boto_session
        self._client = client
        self._models = models
        self._lock = asyncio.Lock()

    async def _ensure_client(self) -> tuple[Any, Any]:
        async with self._lock:
            if self._models is None:
                self._models = _load_sdk_models()
            if self._client is None:
                self._client = await self._build_client()
        return self._client, self._models

    async def _build_client(self) -> Any:
        from aws_sdk_sagemaker_runtime_http2.client import AsyncSageMakerRuntimeHTTP2Client
        from aws_sdk_sagemaker_runtime_http2.config import AsyncSageMakerRuntimeHTTP2Config
        from smithy_aws_core.identity import AWSCredentialsIdentity
        from smithy_http.aio.crt import AWSCRTHTTPClient

        session = self._boto_session
        if session is None:
            import boto3

            session = await asyncio.to_thread(boto3.Session, region_name=self.region)
        config = await AsyncSageMakerRuntimeHTTP2Config.resolve(
            region=self.region,
            endpoint_uri=self.endpoint_uri,
            transport=AWSCRTHTTPClient(),
            aws_credentials_identity_resolver=BotoCredentialsResolver(session, AWSCredentialsIdentity),
        )
        return AsyncSageMakerRuntimeHTTP2Client(config=config)

    async def open(self) -> SageMakerTransport:
        client, models = await self._ensure_client()
        request = models.InvokeEndpointWithBidirectionalStreamInput(
            endpoint_name=self.endpoint_name,
            target_variant=self.target_variant,
            model_invocation_path=self.model_invocation_path,
            model_query_string=self.model_query_string,
        )
        try:
            stream = await client.invoke_endpoint_with_bidirectional_stream(request)
        except Exception as exc:
            raise _as_tts_error(exc) from exc
        return SageMakerTransport(stream, models, data_type=self.data_type)

    async def aclose(self) -> None:
        if self._client is not None and hasattr(self._client, "close"):
            await self._client.close()


class SageMakerTransport:
    """One bidirectional stream (see the module docstring). Build it with :meth:`connect` or
    :meth:`SageMakerConnector.open`."""

    def __init__(self, stream: Any, models: Any, *, data_type: str | None = None) -> None:
        self._stream = stream
        self._models = models
        self._data_type = data_type
        self._frames: asyncio.Queue[Any] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read_output(), name="sagemaker-bidi-read")
        self._closed = False

    @classmethod
    async def connect(cls, endpoint_name: str, region: str, **kwargs: Any) -> SageMakerTransport:
        return await SageMakerConnector(endpoint_name, region, **kwargs).open()

    async def send(self, message: dict[str, Any]) -> None:
        part = self._models.RequestPayloadPart(bytes_=encode(message), data_type=self._data_type)
        try:
            await self._stream.input_stream.send(self._models.RequestStreamEventPayloadPart(value=part))
        except Exception as exc:
            raise TTSError("connection_lost", f"send failed: {exc}", retryable=True) from exc

    async def receive(self) -> str | bytes | None:
        item = await self._frames.get()
        if item is _END:
            self._frames.put_nowait(_END)  # later calls see the end too
            return None
        if isinstance(item, BaseException):
            self._frames.put_nowait(item)
            raise item
        return item

    async def _read_output(self) -> None:
        parts: list[bytes] = []
        try:
            _, output = await self._stream.await_output()
            while True:
                event = await output.receive()
                if event is None:
                    break
                value = getattr(event, "value", None)
                payload = getattr(value, "bytes_", None)
                if payload is None:
                    logger.debug("response event without payload ignored: %s", type(event).__name__)
                    continue
                parts.append(payload)
                if getattr(value, "completion_state", None) == "PARTIAL":
                    continue
                data = b"".join(parts)
                parts.clear()
                self._frames.put_nowait(self._frame(data, getattr(value, "data_type", None)))
            self._frames.put_nowait(_END)
        except asyncio.CancelledError:
            self._frames.put_nowait(_END)
            raise
        except Exception as exc:
            self._frames.put_nowait(_as_tts_error(exc))

    @staticmethod
    def _frame(data: bytes, data_type: str | None) -> str | bytes:
        if data_type == "UTF8":
            return data.decode("utf-8", errors="replace")
        if data_type == "BINARY":
            return data
        # No header: the AWS sample's rule, a payload that parses as a JSON object is control.
        if data[:1] == b"{":
            with contextlib.suppress(ValueError):
                if isinstance(json.loads(data), dict):
                    return data.decode("utf-8")
        return data

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            await self._stream.input_stream.close()
        if not self._reader.done():
            # Give the server a moment to finish the output after our input ended.
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._reader), 2.0)
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader
        output = getattr(self._stream, "output_stream", None)
        if output is not None:
            with contextlib.suppress(Exception):
                await output.close()

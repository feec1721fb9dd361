"""The HTTP clients for ``compare``: ``POST /invocations`` (:class:`InvocationsClient`), the OpenAI
speech API (:class:`OpenAIClient`, ``response_format=pcm``, streamed) and SageMaker's
``InvokeEndpointWithResponseStream`` through boto3 (:class:`SageMakerInvocationsClient`), plus the
health probe (:class:`HealthProbe`) every HTTP-reachable target shares.

A plain HTTP request carries one text, so a "session" sends a list of texts one after another
(nothing is pipelined; ``pipelines`` is False) with times from the first send. ``first_audio_s`` is
the first body byte (``pcm`` bodies are audio only), ``complete_s`` the last. boto3 calls block, so
each runs in a worker thread; httpx runs on the caller's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..clients import Timing
from .targets import UNKNOWN_VOICE, Target, Unsupported

INVALID_JSON = b'{"text": "an unterminated string'
OPENAI_MODEL = "kokoro"


def http_base(url: str) -> str:
    """``scheme://host:port`` of ``url``, with ``ws``/``wss``/``openai+http`` turned into HTTP."""
    parts = urlsplit(url)
    scheme = parts.scheme.removeprefix("openai+")
    scheme = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    return f"{scheme}://{parts.netloc}"


class HealthProbe:
    """``GET`` the first of ``paths`` the target has (404 means it has not); ``await probe()`` returns
    ``(path, status, milliseconds)``. Remembers the route it found."""

    def __init__(self, base: str, paths: tuple[str, ...], *, api_key: str | None = None):
        self.base, self.paths = base, paths
        self._http = httpx.AsyncClient(timeout=10.0, headers=_auth(api_key))
        self._found: str | None = None

    async def __call__(self) -> tuple[str, int, float]:
        for path in (self._found,) if self._found else self.paths:
            t0 = time.perf_counter()
            r = await self._http.get(self.base + path)
            ms = (time.perf_counter() - t0) * 1000
            if r.status_code not in (404, 405):
                self._found = path
                return path, r.status_code, ms
        raise Unsupported(f"no health route: {' and '.join(self.paths)} answer 404")

    async def aclose(self) -> None:
        await self._http.aclose()


def _auth(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class HttpSession:
    """Texts one after another through ``post(text, t0, voice)``, times from the first send."""

    def __init__(self, post: Any, voice: str | None):
        self.post, self.voice = post, voice

    async def request(self, texts: list[str] | tuple[str, ...]) -> list[Timing]:
        t0 = time.perf_counter()
        return [await self.post(text, t0, self.voice) for text in texts]


class _HttpClient:
    pipelines = False
    health_paths: tuple[str, ...] = ("/ping",)

    def __init__(self, target: Target, *, api_key: str | None = None, timeout_s: float = 120.0):
        self.target, self.api_key, self.timeout_s = target, api_key, timeout_s
        self.http = httpx.AsyncClient(timeout=timeout_s, headers=_auth(api_key), limits=httpx.Limits(max_connections=64))
        self._health: HealthProbe | None = None

    @property
    def speech_url(self) -> str:
        raise NotImplementedError

    def body(self, text: str, voice: str | None) -> dict[str, Any]:
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[HttpSession]:
        yield HttpSession(self.post, self.target.voice)

    async def post(self, text: str, t0: float, voice: str | None) -> Timing:
        timing = Timing("http")
        try:
            async with self.http.stream("POST", self.speech_url, json=self.body(text, voice)) as r:
                if r.status_code != 200:
                    timing.error = f"HTTP {r.status_code}: {(await r.aread())[:200].decode(errors='replace')}"
                    return timing
                async for chunk in r.aiter_raw():
                    if chunk and timing.first_audio_s is None:
                        timing.first_audio_s = time.perf_counter() - t0
                    timing.audio_bytes += len(chunk)
        except httpx.HTTPError as exc:
            timing.error = f"{type(exc).__name__}: {exc}"
            return timing
        timing.complete_s = time.perf_counter() - t0
        return timing

    async def health(self) -> tuple[str, int, float]:
        if self._health is None:
            self._health = HealthProbe(http_base(self.target.url), self.health_paths, api_key=self.api_key)
        return await self._health()

    async def bad_input(self, case: str, text: str, next_text: str) -> dict[str, Any]:
        voice = UNKNOWN_VOICE if case == "unknown_voice" else self.target.voice
        kwargs: dict[str, Any] = (
            {"content": INVALID_JSON, "headers": {"Content-Type": "application/json"}}
            if case == "invalid_json" else {"json": self.body(text, voice)}
        )
        async with self.http.stream("POST", self.speech_url, **kwargs) as r:
            if r.status_code == 200:
                first = await anext(r.aiter_raw(), b"")
                answer = f"HTTP 200: audio streamed ({len(first)} bytes read, then the client hung up)" if first \
                    else "HTTP 200 with an empty body"
            else:
                answer = f"HTTP {r.status_code}: {(await r.aread())[:200].decode(errors='replace')}"
        nxt = await self.post(next_text, time.perf_counter(), self.target.voice)
        return {"answer": answer, "next_ok": nxt.error is None and nxt.audio_bytes > 0, "next_error": nxt.error,
                "next_on_new_session": False}

    async def aclose(self) -> None:
        await self.http.aclose()
        if self._health is not None:
            await self._health.aclose()


class InvocationsClient(_HttpClient):
    """``http(s)://host:port/invocations``: the streamed POST contract, ``format=pcm``."""

    @property
    def speech_url(self) -> str:
        return self.target.url

    def body(self, text: str, voice: str | None) -> dict[str, Any]:
        return {"text": text, "format": "pcm", "stream": True, **({"voice": voice} if voice else {})}


class OpenAIClient(_HttpClient):
    """``openai+http(s)://host:port/v1``: ``POST /v1/audio/speech``, ``response_format=pcm``, streamed;
    health is ``/ping`` or, where that is what the server has (Kokoro-FastAPI), ``/health``."""

    health_paths = ("/ping", "/health")

    @property
    def speech_url(self) -> str:
        return self.target.url.removeprefix("openai+").rstrip("/") + "/audio/speech"

    def body(self, text: str, voice: str | None) -> dict[str, Any]:
        return {"model": OPENAI_MODEL, "input": text, "voice": voice or "jm_kumo", "response_format": "pcm",
                "stream": True}


class SageMakerInvocationsClient(InvocationsClient):
    """``sagemaker+invocations://ENDPOINT?region=R``: ``InvokeEndpointWithResponseStream`` (boto3, AWS
    credentials from its usual chain), the body of ``POST /invocations``."""

    def __init__(self, target: Target, **kwargs: Any):
        super().__init__(target, **kwargs)
        self._runtime: Any = None

    def _client(self) -> Any:
        if self._runtime is None:
            try:
                import boto3
            except ImportError as exc:
                raise Unsupported("boto3 is not installed") from exc
            self._runtime = boto3.client("sagemaker-runtime", region_name=self.target.region)
        return self._runtime

    def _invoke(self, body: bytes, t0: float) -> Timing:
        timing = Timing("sagemaker")
        try:
            resp = self._client().invoke_endpoint_with_response_stream(
                EndpointName=self.target.host, ContentType="application/json", Body=body)
            for event in resp["Body"]:
                part = event.get("PayloadPart")
                if part is None:
                    timing.error = f"stream error: {json.dumps(event, default=str)[:200]}"
                    return timing
                if part.get("Bytes") and timing.first_audio_s is None:
                    timing.first_audio_s = time.perf_counter() - t0
                timing.audio_bytes += len(part.get("Bytes", b""))
        except Unsupported:
            raise
        except Exception as exc:  # botocore ClientError (ValidationError, ModelError), connection errors
            timing.error = f"{type(exc).__name__}: {str(exc)[:200]}"
            return timing
        timing.complete_s = time.perf_counter() - t0
        return timing

    async def post(self, text: str, t0: float, voice: str | None) -> Timing:
        return await asyncio.to_thread(self._invoke, json.dumps(self.body(text, voice)).encode(), t0)

    async def health(self) -> tuple[str, int, float]:
        raise Unsupported("SageMaker does not expose the container's /ping to clients")

    async def bad_input(self, case: str, text: str, next_text: str) -> dict[str, Any]:
        voice = UNKNOWN_VOICE if case == "unknown_voice" else self.target.voice
        body = INVALID_JSON if case == "invalid_json" else json.dumps(self.body(text, voice)).encode()
        probe = await asyncio.to_thread(self._invoke, body, time.perf_counter())
        answer = probe.error or f"accepted: {probe.audio_s:.2f} s of audio"
        nxt = await self.post(next_text, time.perf_counter(), self.target.voice)
        return {"answer": answer, "next_ok": nxt.error is None and nxt.audio_bytes > 0, "next_error": nxt.error,
                "next_on_new_session": False}

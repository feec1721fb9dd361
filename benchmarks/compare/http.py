"""The HTTP clients for ``compare``: ``POST /invocations`` (:class:`InvocationsClient`), the OpenAI
speech API (:class:`OpenAIClient`, streamed) and SageMaker's ``InvokeEndpointWithResponseStream``
through boto3 (:class:`SageMakerInvocationsClient`), plus the health probe (:class:`HealthProbe`)
every HTTP-reachable target shares.

A plain HTTP request carries one text, so a "session" sends a list of texts one after another
(nothing is pipelined; ``pipelines`` is False) with times from the first send. Bodies are asked as
``pcm`` (audio only) unless the target says ``#format=wav``; a target that refuses ``pcm`` with a 400
is asked for ``wav`` from then on (the AWS sample's POST does). A ``wav`` body's header is read past
(:class:`benchmarks.clients.WavReader`), so ``first_audio_s`` is the first byte of audio in either format and
``audio_bytes`` counts audio only; ``complete_s`` is the last byte. boto3 calls block, so each runs
in a worker thread; httpx runs on the caller's event loop.
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

from ..clients import Timing, post
from .targets import UNKNOWN_VOICE, Target, Unsupported

INVALID_JSON = b'{"text": "an unterminated string'
OPENAI_MODEL = "kokoro"
#: How long a bad-input probe waits for the target's answer before hanging up.
PROBE_TIMEOUT_S = 15.0
#: How long the normal request after a probe may take before the target counts as still busy.
NEXT_TIMEOUT_S = 30.0


def next_after_probe(answer: str, nxt: Timing, *, same_session_error: str | None = None) -> dict[str, Any]:
    """One bad-input sample: the target's answer, then the normal request sent after it — always on a
    new connection or session, so a failure of that request is the target's, not this client's.
    ``same_session_error``: what the same session said first, where the target closed it."""
    ok = nxt.error is None and nxt.audio_bytes > 0
    return {"answer": answer, "next_ok": ok,
            "next_error": None if ok else (nxt.error or "answered without audio"),
            "next_on_new_session": True,
            **({"same_session_error": same_session_error} if same_session_error else {})}


def http_base(url: str) -> str:
    """``scheme://host:port`` of ``url``, with ``ws``/``wss``/``openai+http`` turned into HTTP."""
    parts = urlsplit(url)
    scheme = parts.scheme.removeprefix("openai+")
    scheme = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    return f"{scheme}://{parts.netloc}"


HEALTH_TIMEOUT_S = 5.0


class HealthProbe:
    """``GET`` the first of ``paths`` the target has (404 means it has not); ``await probe()`` returns
    ``(path, status, milliseconds)``. Remembers the route it found. A poll that gets no answer within
    ``timeout_s`` counts as ``(path, None, timeout_s in ms)`` — the wait a caller of that route had —
    so a stalled route weighs in the figures instead of dropping out of them."""

    def __init__(self, base: str, paths: tuple[str, ...], *, api_key: str | None = None,
                 timeout_s: float = HEALTH_TIMEOUT_S):
        self.base, self.paths, self.timeout_s = base, paths, timeout_s
        self._http = httpx.AsyncClient(timeout=timeout_s, headers=_auth(api_key))
        self._found: str | None = None

    async def __call__(self) -> tuple[str, int | None, float]:
        for path in (self._found,) if self._found else self.paths:
            t0 = time.perf_counter()
            try:
                r = await self._http.get(self.base + path)
            except httpx.TimeoutException:
                return path, None, self.timeout_s * 1000
            ms = (time.perf_counter() - t0) * 1000
            if r.status_code not in (404, 405):
                self._found = path
                return path, r.status_code, ms
        raise Unsupported(f"no health route: {' and '.join(self.paths)} answer 404")

    async def aclose(self) -> None:
        await self._http.aclose()


def _auth(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class Client:
    """What every target's client shares: the target, its key and timeouts, and the health probe of
    a target reachable over HTTP (the first of ``health_paths`` it has, on its host)."""

    pipelines = False
    health_paths: tuple[str, ...] = ("/ping",)

    def __init__(self, target: Target, *, api_key: str | None = None, timeout_s: float = 120.0,
                 health_timeout_s: float = HEALTH_TIMEOUT_S):
        self.target, self.api_key, self.timeout_s = target, api_key, timeout_s
        self.health_timeout_s = health_timeout_s
        self._health: HealthProbe | None = None

    async def health(self) -> tuple[str, int | None, float]:
        if self._health is None:
            self._health = HealthProbe(http_base(self.target.url), self.health_paths, api_key=self.api_key,
                                       timeout_s=self.health_timeout_s)
        return await self._health()

    async def aclose(self) -> None:
        if self._health is not None:
            await self._health.aclose()


class _HttpClient(Client):
    def __init__(self, target: Target, **kwargs: Any):
        super().__init__(target, **kwargs)
        self.http = self._new_http()
        #: the format asked for: the target's own, else pcm until the target refuses it
        self.audio_format = target.audio_format or "pcm"

    def _new_http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=self.timeout_s, headers=_auth(self.api_key),
                                 limits=httpx.Limits(max_connections=64))

    async def reconnect(self) -> None:
        """Drop every pooled connection (a peer may have closed one after an error) and open anew."""
        await self.http.aclose()
        self.http = self._new_http()

    @property
    def speech_url(self) -> str:
        raise NotImplementedError

    def body(self, text: str, voice: str | None) -> dict[str, Any]:
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[_HttpClient]:
        """No session over plain HTTP: the client itself, whose :meth:`request` sends texts one after
        another, times from the first send."""
        yield self

    async def request(self, texts: list[str] | tuple[str, ...]) -> list[Timing]:
        t0 = time.perf_counter()
        return [await self.post(text, t0, self.target.voice) for text in texts]

    async def post(self, text: str, t0: float, voice: str | None) -> Timing:
        timing = await self._post(text, t0, voice)
        if timing.error and timing.error.startswith("HTTP 400") and self.audio_format == "pcm" \
                and self.target.audio_format is None:
            self.audio_format = "wav"  # the target refuses pcm (the AWS sample's POST does): wav from now on
            retry = await self._post(text, t0, voice)
            if retry.error is None:
                return retry
            self.audio_format = "pcm"
        return timing

    async def _post(self, text: str, t0: float, voice: str | None) -> Timing:
        return await post(self.http, self.speech_url, self.body(text, voice), t0=t0, wav=self.audio_format == "wav")

    async def bad_input(self, case: str, text: str, next_text: str) -> dict[str, Any]:
        """What the target answers to one malformed request (waiting at most ``PROBE_TIMEOUT_S`` for
        it, then hanging up), and whether a normal request on a new connection works after it."""
        voice = UNKNOWN_VOICE if case == "unknown_voice" else self.target.voice
        kwargs: dict[str, Any] = (
            {"content": INVALID_JSON, "headers": {"Content-Type": "application/json"}}
            if case == "invalid_json" else {"json": self.body(text, voice)}
        )
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S), self.http.stream("POST", self.speech_url, **kwargs) as r:
                if r.status_code == 200:
                    first = await anext(r.aiter_raw(), b"")
                    answer = f"HTTP 200: audio streamed ({len(first)} bytes read, then the client hung up)" if first \
                        else "HTTP 200 with an empty body"
                else:
                    answer = f"HTTP {r.status_code}: {(await r.aread())[:200].decode(errors='replace')}"
        except TimeoutError:
            answer = f"no answer within {PROBE_TIMEOUT_S:.0f} s (the client hung up)"
        except httpx.HTTPError as exc:
            answer = f"connection failed: {type(exc).__name__}: {exc}"
        await self.reconnect()
        return next_after_probe(answer, await self._next(next_text))

    async def _next(self, text: str) -> Timing:
        try:
            async with asyncio.timeout(NEXT_TIMEOUT_S):
                return await self.post(text, time.perf_counter(), self.target.voice)
        except TimeoutError:
            return Timing("next", error=f"no audio within {NEXT_TIMEOUT_S:.0f} s (still busy with the probe?)")

    async def aclose(self) -> None:
        await self.http.aclose()
        await super().aclose()


class InvocationsClient(_HttpClient):
    """``http(s)://host:port/invocations``: the streamed POST contract, ``format=pcm`` (or ``wav``)."""

    @property
    def speech_url(self) -> str:
        return self.target.url

    def body(self, text: str, voice: str | None) -> dict[str, Any]:
        return {"text": text, "format": self.audio_format, "stream": True, **({"voice": voice} if voice else {}),
                **self.target.extra}


class OpenAIClient(_HttpClient):
    """``openai+http(s)://host:port/v1``: ``POST /v1/audio/speech``, ``response_format=pcm``, streamed;
    health is ``/ping`` or, where that is what the server has (Kokoro-FastAPI), ``/health``."""

    health_paths = ("/ping", "/health")

    @property
    def speech_url(self) -> str:
        return self.target.url.removeprefix("openai+").rstrip("/") + "/audio/speech"

    def body(self, text: str, voice: str | None) -> dict[str, Any]:
        return {"model": OPENAI_MODEL, "input": text, "voice": voice or "jm_kumo",
                "response_format": self.audio_format, "stream": True, **self.target.extra}


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
                timing.heard(time.perf_counter() - t0, part.get("Bytes", b""))
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
        return next_after_probe(answer, await self.post(next_text, time.perf_counter(), self.target.voice))

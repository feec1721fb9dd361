"""``compare``'s clients over plain HTTP, on :func:`benchmarks.clients.post`: ``POST /invocations``
(:class:`InvocationsClient`), the OpenAI speech API (:class:`OpenAIClient`) and SageMaker's
``InvokeEndpointWithResponseStream`` through boto3 (:class:`SageMakerInvocationsClient`, each call in
a worker thread), with :class:`Client`, what every target's client shares.

A request carries one text, so a session sends its texts one after another (``pipelines`` is False),
times from the first send; ``pcm``, or ``wav`` where the target asks or refuses pcm (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from ..clients import HEALTH_TIMEOUT_S, HealthProbe, Timing, Unsupported, WavReader, bearer, http_base, post
from .targets import UNKNOWN_VOICE, Target

INVALID_JSON = b'{"text": "an unterminated string'
OPENAI_MODEL = "kokoro"
#: How long a bad-input probe waits for the target's answer before hanging up.
PROBE_TIMEOUT_S = 15.0
#: How long the normal request after a probe may take before the target counts as still busy.
NEXT_TIMEOUT_S = 30.0


class Client:
    """What every target's client shares: the target, its key and timeouts, and the health probe of
    a target reachable over HTTP (the first of ``health_paths`` it has, on its host)."""

    pipelines = False
    health_paths: tuple[str, ...] = ("/ping",)

    def __init__(self, target: Target, *, api_key: str | None = None, timeout_s: float = 120.0,
                 health_timeout_s: float = HEALTH_TIMEOUT_S):
        self.target, self.api_key, self.timeout_s = target, api_key, timeout_s
        self._health = HealthProbe(http_base(target.url), self.health_paths, api_key=api_key,
                                   timeout_s=health_timeout_s)

    async def health(self) -> tuple[str, int | None, float]:
        if self.target.kind.startswith("sagemaker"):
            raise Unsupported("SageMaker does not expose the container's /ping to clients")
        return await self._health()

    async def bad_input(self, case: str, text: str, next_text: str) -> dict[str, Any]:
        """What the target answers to one malformed request (within ``PROBE_TIMEOUT_S``), and whether a
        normal request then gets audio: on the same session where the protocol has one, else (or where
        the target broke it) on a new one — row 6 of docs/benchmarks.md."""
        async with self.session() as s:
            try:
                answer = await asyncio.wait_for(self.probe(s, case, text), PROBE_TIMEOUT_S)
            except TimeoutError:
                answer = f"no answer within {PROBE_TIMEOUT_S:.0f} s"
            same = await _next(s, next_text) if self.pipelines else None
        if same is not None and same.error is None and same.audio_bytes > 0:
            nxt, broke = same, None
        else:  # a new connection or session, so a failure of the next request is the target's
            broke = None if same is None else (same.error or "answered without audio")
            await self.reconnect()
            async with self.session() as s:
                nxt = await _next(s, next_text)
        ok = nxt.error is None and nxt.audio_bytes > 0
        return {"answer": answer, "next_ok": ok, "next_error": None if ok else (nxt.error or "answered without audio"),
                "next_on_new_session": nxt is not same, **({"same_session_error": broke} if broke else {})}

    async def probe(self, s: Any, case: str, text: str) -> str:
        """What the target says to the malformed request ``case`` sent on the session ``s``."""
        raise NotImplementedError

    async def reconnect(self) -> None:
        """Drop any connection a peer may have closed after an error (a session is opened anew anyway)."""

    async def aclose(self) -> None:
        await self._health.aclose()


async def _next(session: Any, text: str) -> Timing:
    try:
        return (await asyncio.wait_for(session.request([text]), NEXT_TIMEOUT_S))[0]
    except TimeoutError:
        return Timing("next", error=f"no audio within {NEXT_TIMEOUT_S:.0f} s (still busy with the probe?)")
    except Exception as exc:  # an error event, a closed or broken session: the sample says which
        return Timing("next", error=f"{type(exc).__name__}: {exc}")


class _HttpClient(Client):
    def __init__(self, target: Target, **kwargs: Any):
        super().__init__(target, **kwargs)
        self.http = self._new_http()
        #: the format asked for: the target's own, else pcm until the target refuses it
        self.audio_format = target.audio_format or "pcm"

    def _new_http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=self.timeout_s, headers=bearer(self.api_key),
                                 limits=httpx.Limits(max_connections=64))

    async def reconnect(self) -> None:
        await self.http.aclose()
        self.http = self._new_http()

    @property
    def speech_url(self) -> str:
        """Where the POST goes: the target's URL (``/invocations``) unless the protocol says otherwise."""
        return self.target.url

    def body(self, text: str, voice: str | None) -> dict[str, Any]:
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[_HttpClient]:
        """No session over plain HTTP: the client itself, whose :meth:`request` sends texts one after
        another, times from the first send."""
        yield self

    async def request(self, texts: list[str] | tuple[str, ...]) -> list[Timing]:
        t0 = time.perf_counter()
        return [await self.post(text, t0) for text in texts]

    async def post(self, text: str, t0: float) -> Timing:
        timing = await self.send(self.body(text, self.target.voice), t0)
        if timing.error and timing.error.startswith("HTTP 400") and self.audio_format == "pcm" \
                and self.target.audio_format is None:
            self.audio_format = "wav"  # the target refuses pcm (the AWS sample's POST does): wav from now on
            retry = await self.send(self.body(text, self.target.voice), t0)
            if retry.error is None:
                return retry
            self.audio_format = "pcm"
        return timing

    async def send(self, body: dict[str, Any] | bytes, t0: float, *, probe: bool = False) -> Timing:
        """One request of ``body``; a ``probe`` counts the body's bytes and hangs up at the first."""
        if probe:
            return await post(self.http, self.speech_url, body, t0=t0, on_audio=lambda *_: True,
                              headers={"Content-Type": "application/json"})
        return await post(self.http, self.speech_url, body, t0=t0, wav=self.audio_format == "wav")

    async def probe(self, s: Any, case: str, text: str) -> str:
        voice = UNKNOWN_VOICE if case == "unknown_voice" else self.target.voice
        probe = await self.send(INVALID_JSON if case == "invalid_json" else self.body(text, voice),
                                time.perf_counter(), probe=True)
        return probe.error or (f"HTTP 200: audio streamed ({probe.audio_bytes} bytes read, then the client hung up)"
                               if probe.audio_bytes else "HTTP 200 with an empty body")

    async def aclose(self) -> None:
        await self.http.aclose()
        await super().aclose()


class InvocationsClient(_HttpClient):
    """``http(s)://host:port/invocations``: the streamed POST contract, ``format=pcm`` (or ``wav``)."""

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

    @functools.cached_property
    def _runtime(self) -> Any:
        try:
            import boto3
        except ImportError as exc:
            raise Unsupported("boto3 is not installed") from exc
        return boto3.client("sagemaker-runtime", region_name=self.target.region)

    def _invoke(self, body: bytes, t0: float, probe: bool) -> Timing:
        timing = Timing("sagemaker")
        reader = WavReader() if self.audio_format == "wav" and not probe else None
        runtime = self._runtime  # Unsupported without boto3
        try:
            resp = runtime.invoke_endpoint_with_response_stream(
                EndpointName=self.target.host, ContentType="application/json", Body=body)
            for event in resp["Body"]:
                part = event.get("PayloadPart")
                if part is None:
                    timing.error = f"stream error: {json.dumps(event, default=str)[:200]}"
                    return timing
                chunk = part.get("Bytes", b"")
                timing.heard(time.perf_counter() - t0, reader.feed(chunk) if reader else chunk)
                if probe:
                    return timing
        except Exception as exc:  # botocore ClientError (ValidationError, ModelError), connection errors
            timing.error = f"{type(exc).__name__}: {str(exc)[:200]}"
            return timing
        timing.complete_s = time.perf_counter() - t0
        return timing

    async def send(self, body: dict[str, Any] | bytes, t0: float, *, probe: bool = False) -> Timing:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return await asyncio.to_thread(self._invoke, data, t0, probe)

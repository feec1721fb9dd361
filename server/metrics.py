"""Prometheus metrics, one registry per app (the series: docs/operating.md).

:class:`Metrics` is also the backend's *observer*: the backend calls ``segment_done``,
``batch_done``, ``interrupted`` (worker threads), ``queue_depth``, ``underrun`` and ``load`` (event loop). prometheus-client objects are
thread-safe, so every method here may be called from any thread.

Series (all prefixed ``kokoro_``):

* ``requests_total{route,status}`` — finished requests; ``status`` is the HTTP status the outcome
  maps to (WebSocket requests too: ``200`` done, ``400``/``404``/``413`` rejected, ``503``
  overloaded or shutting down, ``500``/``504`` runtime fault or timeout, ``499`` cancelled or the
  client went away).
* ``errors_total{route,code}`` — the same failures by wire error code.
* ``send_timeouts_total{route}`` — sessions closed / responses cut because the client stopped
  reading (a send made no progress for ``send_timeout_s``).
* ``time_to_first_audio_seconds{route}`` — request received -> first audio handed to the socket.
* ``segment_synthesis_seconds`` — runtime time per segment; ``audio_seconds_total`` — audio
  synthesised; ``realtime_factor`` — synthesis time / audio time per segment (< 1 is faster than
  real time).
* ``active_sessions`` — open WebSocket sessions; ``inflight_requests{route}`` — requests being
  answered; ``queue_depth`` — segments waiting for the runtime (not those being synthesised, in
  both modes); ``batch_size`` — segments per runtime call (concurrent mode); ``ready`` — 1 when
  /ping answers 200.
* ``playback_underrun_seconds_total`` — how late segments were past their playback deadline,
  summed: the silence a client playing each request in real time hears between segments (the
  backend's scheduler keeps it at zero when it can; see ``backends/engine/policy.py``).
* ``interrupted_calls_total`` / ``interrupted_seconds_total`` — runtime calls of later segments
  interrupted so that a listener who heard nothing yet got first audio sooner, and the runtime time
  they had run (work done again; see ``backends/engine/policy.py``).
* ``audio_demanded_seconds_per_second`` / ``audio_delivered_seconds_per_second`` — what the
  requests in progress asked for (one audio-second per second each, averaged) against what the
  runtime made, both over the last ``KOKORO_LOAD_WINDOW_S``; ``overloaded`` — 1 while demand
  exceeds supply by the policy's rule (``backends/engine/load.py``: by a tenth and a quarter of a
  listener while the runtime is busy, until supply covers demand again), which the log says too
  and ``KOKORO_OVERLOAD=refuse`` acts on (an alert, or a scaling signal: publish the ratio as a
  custom CloudWatch metric for SageMaker).
* ``state_entries{table}`` — entries in each table the server and the backend keep per session,
  request or runtime call (the scheduler's queue and round, listeners, running calls, admitted
  requests, open sessions, requests in flight; names in docs/operating.md), read at scrape time:
  each is 0 at rest once the last audio has run out, so one that grows while nothing runs is
  state kept past its session.
* ``process_*`` — the server process's CPU seconds, memory, open files and start time
  (prometheus-client's process collector, on this registry; Linux).

The observer calls also feed :attr:`Metrics.realtime`, the slow-machine watch
(``server.realtime_watch``) behind ``/ping``'s ``warnings``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from server.realtime_watch import RealtimeWatch

_LATENCY_BUCKETS = (0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
_RTF_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0)
_BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)

CANCELLED_STATUS = 499


class Metrics:
    """All series of one app, in their own :class:`CollectorRegistry`."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, registry: CollectorRegistry | None = None, realtime: RealtimeWatch | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        self.realtime = realtime if realtime is not None else RealtimeWatch()
        r = self.registry
        ProcessCollector(registry=r)
        self.requests = Counter(
            "kokoro_requests", "Finished requests by route and (HTTP-equivalent) status.",
            ["route", "status"], registry=r,
        )
        self.errors = Counter("kokoro_errors", "Failed requests by route and error code.", ["route", "code"], registry=r)
        self.send_timeouts = Counter(
            "kokoro_send_timeouts", "Sessions closed or responses cut because the client stopped reading.",
            ["route"], registry=r,
        )
        self.ttfa = Histogram(
            "kokoro_time_to_first_audio_seconds", "Request received to first audio sent.",
            ["route"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.segment_seconds = Histogram(
            "kokoro_segment_synthesis_seconds", "Runtime time per segment.", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.audio_seconds = Counter("kokoro_audio_seconds", "Seconds of audio synthesised.", registry=r)
        self.rtf = Histogram(
            "kokoro_realtime_factor", "Synthesis time divided by audio time, per segment.",
            buckets=_RTF_BUCKETS, registry=r,
        )
        self.active_sessions = Gauge("kokoro_active_sessions", "Open WebSocket sessions.", registry=r)
        self.inflight = Gauge("kokoro_inflight_requests", "Requests being answered.", ["route"], registry=r)
        self.queue = Gauge("kokoro_queue_depth", "Segments waiting for the runtime (not those being synthesised).",
                           registry=r)
        self.batch_size = Histogram(
            "kokoro_batch_size", "Segments per runtime call (concurrent mode).", buckets=_BATCH_BUCKETS, registry=r
        )
        self.underrun_seconds = Counter(
            "kokoro_playback_underrun_seconds",
            "Seconds segments were ready after their listener's audio ran out (gaps heard in real-time playback).",
            registry=r,
        )
        self.interrupted_calls = Counter(
            "kokoro_interrupted_calls", "Runtime calls interrupted for a listener's first audio (run again).", registry=r
        )
        self.interrupted_seconds = Counter(
            "kokoro_interrupted_seconds", "Runtime seconds of interrupted calls (work done again).", registry=r
        )
        self.demanded = Gauge(
            "kokoro_audio_demanded_seconds_per_second",
            "Audio-seconds per second the requests in progress asked for over KOKORO_LOAD_WINDOW_S (one each: "
            "listeners play in real time).",
            registry=r,
        )
        self.delivered = Gauge(
            "kokoro_audio_delivered_seconds_per_second",
            "Audio-seconds per second the runtime made over KOKORO_LOAD_WINDOW_S.",
            registry=r,
        )
        self.overloaded = Gauge(
            "kokoro_overloaded",
            "1 while the runtime is overloaded: demanded above delivered (with hysteresis; docs/runtimes.md).",
            registry=r,
        )
        # the load as last reported, read at scrape: the policy reports it at every admission and every
        # call, and a gauge's set takes a lock each time
        self._load = (0.0, 0.0, 0)
        self.demanded.set_function(lambda: self._load[0])
        self.delivered.set_function(lambda: self._load[1])
        self.overloaded.set_function(lambda: self._load[2])
        self.ready = Gauge("kokoro_ready", "1 when the server takes requests (/ping is 200).", registry=r)
        # labelled series by their labels, looked up once (``labels()`` validates and sorts on every call)
        self._requests, self._errors = _Children(self.requests), _Children(self.errors)
        self._ttfa, self._inflight = _Children(self.ttfa), _Children(self.inflight)
        self._send_timeouts = _Children(self.send_timeouts)

    # -- the backend observer (called from worker threads) -------------------------------------
    def segment_done(self, synth_seconds: float, audio_seconds: float) -> None:
        self.segment_seconds.observe(synth_seconds)
        self.audio_seconds.inc(audio_seconds)
        if audio_seconds > 0:
            self.rtf.observe(synth_seconds / audio_seconds)
        self.realtime.segment_done(synth_seconds, audio_seconds)

    def batch_done(self, size: int) -> None:
        self.batch_size.observe(size)

    def queue_depth(self, n: int) -> None:
        self.queue.set(n)

    def underrun(self, seconds: float) -> None:
        self.underrun_seconds.inc(seconds)
        self.realtime.underrun(seconds)

    def interrupted(self, seconds: float) -> None:
        self.interrupted_calls.inc()
        self.interrupted_seconds.inc(seconds)

    def load(self, demanded: float, delivered: float, *, overloaded: bool = False) -> None:
        self._load = (demanded, delivered, 1 if overloaded else 0)

    # -- the server's own -------------------------------------------------------------------------
    def request_done(self, route: str, status: int, code: str | None = None) -> None:
        self._requests(route, str(status)).inc()
        if code is not None:
            self._errors(route, code).inc()

    def send_timed_out(self, route: str) -> None:
        self._send_timeouts(route).inc()

    def first_audio(self, route: str, seconds: float) -> None:
        self._ttfa(route).observe(seconds)

    def inflight_for(self, route: str) -> Gauge:
        """``inflight_requests{route}``."""
        return self._inflight(route)

    def watch_tables(self, sizes: Callable[[], dict[str, int]]) -> None:
        """Publish ``sizes()`` (table name -> entries) as ``kokoro_state_entries{table}`` at each
        scrape (the app passes its state's :meth:`~server.state.ServerState.table_sizes`)."""
        self.registry.register(_Tables(sizes))

    def render(self) -> bytes:
        return generate_latest(self.registry)


_M = TypeVar("_M", Counter, Gauge, Histogram)


class _Children(Generic[_M]):
    """A labelled series' children by their label values (in the metric's label order), each looked
    up in prometheus_client once. The label sets are the metric's own (routes, statuses, codes)."""

    def __init__(self, metric: _M):
        self._metric: _M = metric
        self._children: dict[tuple[str, ...], _M] = {}

    def __call__(self, *values: str) -> _M:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


class _Tables(Collector):
    """``kokoro_state_entries{table}``, read when scraped (on the event loop: ``/metrics``)."""

    def __init__(self, sizes: Callable[[], dict[str, int]]):
        self._sizes = sizes

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # read only at scrape: the backend may not be built when the registry checks names

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("kokoro_state_entries", "Entries in each table kept per session, request or "
                                   "runtime call (0 at rest).", labels=["table"])
        for table, n in sorted(self._sizes().items()):
            family.add_metric([table], n)
        yield family

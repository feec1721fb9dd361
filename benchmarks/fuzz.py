"""Fuzz: random and malformed frames at every WebSocket protocol of a server process, over loopback.
``python -m benchmarks fuzz`` (``--frames N`` per protocol; default 10,000, ``--quick`` 300) sends,
per protocol (bidi, Deepgram, Cartesia, ElevenLabs multi-stream), frames from
``benchmarks.fuzz_frames`` one at a time, each followed by the protocol's probe (a request that must
be answered: the session is still up and in order). Goals: every server message is one the
protocol defines (a typed event, warning or error; audio in binary frames), no close but the
protocol's own (1000 on a client's close, 1008 / 1009 at a limit; then the fuzzer reconnects), every
probe answered, ``/ping`` 200 throughout (polled every 0.2 s) and after.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from .fuzz_frames import Protocol, frame, protocols
from .live import LiveServer
from .results import Result, command_line, load_average, markdown_table

FRAMES = (10_000, 300)
MAX_MESSAGE_BYTES = 65536
PROBE_TIMEOUT_S = 30.0


class _Tally:
    def __init__(self) -> None:
        self.frames = self.probes = self.typed = self.audio = self.reconnects = 0
        self.closes: dict[str, int] = {}
        self.failures: list[str] = []

    def fail(self, what: str) -> None:
        if len(self.failures) < 20:
            self.failures.append(what)
        self.failures_n = getattr(self, "failures_n", 0) + 1

    def as_dict(self) -> dict[str, Any]:
        return {"frames": self.frames, "probes_answered": self.probes, "typed_messages": self.typed,
                "audio_frames": self.audio, "reconnects": self.reconnects, "closes": self.closes,
                "failures": getattr(self, "failures_n", 0), "failure_examples": self.failures}


async def _exchange(ws: ClientConnection, proto: Protocol, payload: bytes | str, n: int, tally: _Tally) -> None:
    """Send one fuzzed frame and the probe; read until the probe's answer."""
    await ws.send(payload)
    for message in proto.probe(n):
        await ws.send(json.dumps(message))
    async with asyncio.timeout(PROBE_TIMEOUT_S):
        while True:
            m = await ws.recv()
            if isinstance(m, bytes):
                tally.audio += 1
                continue
            try:
                obj = json.loads(m)
            except ValueError:
                tally.fail(f"frame {n}: not JSON: {m[:80]!r}")
                continue
            if not isinstance(obj, dict) or not proto.typed(obj):
                tally.fail(f"frame {n}: untyped {str(obj)[:160]}")
                continue
            tally.typed += 1
            if proto.answered(n, obj):
                tally.probes += 1
                return


async def fuzz_protocol(base_ws: str, name: str, proto: Protocol, frames: int, seed: int = 1) -> dict[str, Any]:
    rng = random.Random(f"{name}-{seed}")
    tally = _Tally()
    ws: ClientConnection | None = None
    try:
        for n in range(frames):
            if ws is None:
                ws = await connect(base_ws + proto.path, compression=None, max_size=None, open_timeout=30)
            payload = frame(rng, proto.valid, MAX_MESSAGE_BYTES)
            tally.frames += 1
            try:
                await _exchange(ws, proto, payload, n, tally)
            except ConnectionClosed as e:
                code = e.rcvd.code if e.rcvd is not None else None
                if code is None and len(payload) > MAX_MESSAGE_BYTES:
                    # The server closed (1009) while the probe was on its way: its kernel answered the
                    # probe with a reset, which drops the close frame unread on this side.
                    code = 1009
                tally.closes[str(code)] = tally.closes.get(str(code), 0) + 1
                if code not in proto.closes:
                    tally.fail(f"frame {n}: closed {code} after {str(payload)[:120]!r}")
                ws, tally.reconnects = None, tally.reconnects + 1
            except TimeoutError:
                tally.fail(f"frame {n}: probe unanswered after {str(payload)[:120]!r}")
                await ws.close()
                ws, tally.reconnects = None, tally.reconnects + 1
    finally:
        if ws is not None:
            await ws.close()
    return {"protocol": name, **tally.as_dict()}


async def fuzz_all(url: str, voice: str, frames: int, log: Any = print) -> dict[str, Any]:
    """Every protocol in turn, ``/ping`` polled throughout."""
    pings: dict[str, int] = {}
    stop = asyncio.Event()

    async def poll() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=5) as http:
            while not stop.is_set():
                try:
                    status = str((await http.get("/ping")).status_code)
                except httpx.HTTPError as e:
                    status = type(e).__name__
                pings[status] = pings.get(status, 0) + 1
                with_timeout = asyncio.ensure_future(stop.wait())
                await asyncio.wait({with_timeout}, timeout=0.2)
                with_timeout.cancel()

    poller = asyncio.create_task(poll())
    rows = []
    try:
        for name, proto in protocols(voice).items():
            t0 = time.perf_counter()
            row = await fuzz_protocol("ws" + url.removeprefix("http"), name, proto, frames)
            row["wall_s"] = round(time.perf_counter() - t0, 1)
            log(f"    {name}: {row['frames']} frames, {row['probes_answered']} probes answered, "
                f"{row['failures']} failures, closes {row['closes']}, {row['wall_s']} s")
            rows.append(row)
    finally:
        stop.set()
        await poller
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        after = (await http.get("/ping")).status_code
    return {"protocols": rows, "pings": pings, "ping_after": after}


def run(*, quick: bool = False, model_dir: Any = None, log: Any = print, backend: str | None = None,
        frames: int | None = None) -> Result:
    runtime = backend or "fake"
    n = frames or FRAMES[1 if quick else 0]
    result = Result(benchmark="fuzz", quick=quick, command=command_line("fuzz", quick))
    env = {"KOKORO_MAX_MESSAGE_BYTES": str(MAX_MESSAGE_BYTES)}
    log(f"  fuzz {runtime}: {n} frames per protocol, load {load_average()}")
    with LiveServer(backend=runtime, mode="sequential", env=env, model_dir=model_dir, log=log) as srv:
        voice = httpx.get(f"{srv.url}/v1/audio/voices", timeout=10).json()["voices"][0]
        out = asyncio.run(fuzz_all(srv.url, voice, n, log))
    out["load_after"] = load_average()
    result.samples.append(out)
    for row in out["protocols"]:
        p = row["protocol"]
        result.target(f"{p}: frames with an untyped answer, an unanswered probe or a close the protocol does not send",
                      "0", row["failures"], row["failures"] == 0, any_runtime=True)
        result.target(f"{p}: probes answered", f"{row['frames'] - row['reconnects']}+", row["probes_answered"],
                      row["probes_answered"] >= row["frames"] - row["reconnects"], any_runtime=True)
    bad = {k: v for k, v in out["pings"].items() if k != "200"}
    result.target("/ping during the fuzz", "200 every time", bad or "200 every time", not bad and out["ping_after"] == 200, any_runtime=True)
    result.config = {"runtime": runtime, "frames_per_protocol": n, "max_message_bytes": MAX_MESSAGE_BYTES,
                     "probe_timeout_s": PROBE_TIMEOUT_S}
    result.summary = {row["protocol"]: {"frames": row["frames"], "failures": row["failures"]} for row in out["protocols"]}
    return result


def body(data: dict[str, Any]) -> str:
    s = data["samples"][0]
    rows = [[r["protocol"], r["frames"], r["probes_answered"], r["typed_messages"], r["audio_frames"],
             ", ".join(f"{k}: {v}" for k, v in sorted(r["closes"].items())) or "—", r["failures"], r["wall_s"]]
            for r in s["protocols"]]
    return (f"Each fuzzed frame is followed by a probe the protocol must answer; /ping polled every 0.2 s: "
            f"{s['pings']}, after: {s['ping_after']}; load average after: {s['load_after']}.\n\n"
            + markdown_table(["protocol", "frames", "probes answered", "typed messages", "audio frames",
                              "closes (then reconnected)", "failures", "wall s"], rows))

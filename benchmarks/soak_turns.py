"""The soak's streaming phase (``python -m benchmarks soak --workload streaming``): conversations over
the four WebSocket protocols — the bidi route, Deepgram's ``/v1/speak``, Cartesia's
``/tts/websocket`` and ElevenLabs' ``multi-stream-input`` — each one socket carrying several turns.

A turn is a reply sent in pieces as an LLM writes it and read to the protocol's terminal: word by
word on the three voice-agent protocols, then flushed (Deepgram ``Flush`` to ``Flushed``; Cartesia
``continue: false`` to ``done``; ElevenLabs ``flush`` and ``close_context`` to ``isFinal``), and
sentence by sentence on the bidi route, whose requests are whole texts (each to its
``synthesis_complete``). A share of the turns is interrupted after its first audio — a barge-in, as
each protocol does it: bidi ``cancel`` (every request of the turn still gets its one terminal
event), Deepgram ``Clear`` (to ``Cleared``), Cartesia ``cancel`` of the context, ElevenLabs
``close_context`` of the unflushed reply (to ``isFinal``) — and the next turn follows on the same
socket.

:class:`Turns` is the churn mix's client (:class:`benchmarks.churn_mix.Churn`: its connections,
readers and terminals) driving turns instead of one-off sessions; :func:`streaming_soak` runs it
against a live server, sampling the server's RSS, and finds the state tables back at rest.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Awaitable
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import WebSocketException

from .churn_mix import TEXTS as CHURN_TEXTS
from .churn_mix import Churn, Typed, Unanswered
from .live import LiveServer, RssSamples, at_rest, growth
from .results import Result, load_average, markdown_table

PROTOCOLS = ("bidi", "deepgram", "cartesia", "elevenlabs")
#: The share of turns interrupted after their first audio.
BARGE_SHARE = 0.25
#: Turns per socket (drawn uniformly).
TURNS_PER_SOCKET = (2, 6)
#: What leaves a turn unanswered: no terminal in time, a close the protocol does not send, a refused upgrade.
FAILURES = (TimeoutError, Unanswered, WebSocketException, OSError)


def conversations(turns: int, seed: int = 7) -> list[tuple[str, int]]:
    """Sockets, ``(protocol, turns)``, in turn through the protocols, ``turns`` turns in all."""
    rng, left = random.Random(seed), turns
    out: list[tuple[str, int]] = []
    while left > 0:
        n = min(left, rng.randint(*TURNS_PER_SOCKET))
        out.append((PROTOCOLS[len(out) % len(PROTOCOLS)], n))
        left -= n
    return out


class Turns(Churn):
    """Streaming turns against one server (``base`` http URL, ``voice`` one of its voices); replies
    are drawn from ``texts``, spoken at ``speed`` where the protocol takes one (all but Deepgram). ``counts`` is by turn: ``<protocol>`` and ``<protocol>_barge``
    (``<protocol>_socket`` for a socket that could not be opened or closed as its protocol says)."""

    def __init__(self, base: str, voice: str, texts: list[str], *, barge_share: float = BARGE_SHARE,
                 speed: float = 1.0, timeout_s: float = 60.0, seed: int = 1):
        super().__init__(base, voice, timeout_s=timeout_s, seed=seed)
        self.texts, self.barge_share, self.speed = texts, barge_share, speed

    def _reply(self, barge: bool) -> list[str]:
        """A reply's sentences: three for one that will be interrupted (audio still owed at the barge-in)."""
        return [self.rng.choice(self.texts) for _ in range(3 if barge else self.rng.randint(1, 2))]

    def _pieces(self, barge: bool) -> list[str]:
        return [word + " " for sentence in self._reply(barge) for word in sentence.split()]

    async def conversation(self, protocol: str, turns: int) -> int:
        """One socket of ``protocol`` carrying ``turns`` turns, each counted; a turn left unanswered
        ends the conversation (the socket is dropped). Returns the turns run."""
        paths = {"bidi": "/invocations-bidirectional-stream",
                 "deepgram": f"/v1/speak?model={self.voice}&encoding=linear16&sample_rate=24000",
                 "cartesia": "/tts/websocket?cartesia_version=2025-04-16",
                 "elevenlabs": f"/v1/text-to-speech/{self.voice}/multi-stream-input?output_format=pcm_24000"}
        run = 0
        try:
            async with self._connect(paths[protocol]) as ws:
                if protocol == "deepgram" and (await self._bounded(self._json(ws))).get("type") != "Metadata":
                    raise Unanswered("no Metadata")
                for t in range(turns):
                    barge = self.rng.random() < self.barge_share
                    run += 1
                    if not await self._turn(f"{protocol}_barge" if barge else protocol,
                                            getattr(self, f"_{protocol}_turn")(ws, t, barge)):
                        ws.transport.abort()
                        return run
                await self._bounded(self._goodbye(protocol, ws))
        except FAILURES as e:
            self._failed(f"{protocol}_socket", e)
        return run

    async def _bounded(self, step: Awaitable[Any]) -> Any:
        async with asyncio.timeout(self.timeout_s):
            return await step

    def _failed(self, kind: str, e: BaseException) -> None:
        self._count(kind, "unanswered")
        if len(self.unanswered) < 20:
            self.unanswered.append(f"{kind}: {type(e).__name__}: {e}")

    async def _turn(self, kind: str, turn: Awaitable[None]) -> bool:
        """One turn, counted; False when it was left unanswered."""
        try:
            await self._bounded(turn)
        except Typed:
            self._count(kind, "typed")
            return True
        except FAILURES as e:
            self._failed(kind, e)
            return False
        self._count(kind, "answered")
        return True

    async def _goodbye(self, protocol: str, ws: ClientConnection) -> None:
        """The protocol's own end of a socket, read to the server's close."""
        bye = {"bidi": {"type": "close"}, "deepgram": {"type": "Close"}, "elevenlabs": {"close_socket": True}}
        if protocol in bye:
            await ws.send(json.dumps(bye[protocol]))
            await self._closed(ws)

    # -- one turn per protocol -------------------------------------------------------------------
    async def _bidi_turn(self, ws: ClientConnection, t: int, barge: bool) -> None:
        owed: dict[Any, str] = {}
        for k, sentence in enumerate(self._reply(barge)):
            owed[f"t{t}-{k}"] = sentence
            await ws.send(json.dumps({"text": sentence, "voice": self.voice, "request_id": f"t{t}-{k}",
                                      "speed": self.speed}))
        if barge:
            await self._audio(ws)
            await ws.send(json.dumps({"type": "cancel"}))
        while owed:  # every request gets exactly one terminal event, a cancelled one too
            event = await self._json(ws)
            rid, kind = event.get("request_id"), event.get("type")
            if kind == "synthesis_complete" or (kind == "error" and barge and event.get("code") == "cancelled"):
                owed.pop(rid, None)
            elif kind == "error":
                raise Typed(event.get("code"))

    async def _deepgram_turn(self, ws: ClientConnection, t: int, barge: bool) -> None:
        for piece in self._pieces(barge):
            await ws.send(json.dumps({"type": "Speak", "text": piece}))
        await ws.send(json.dumps({"type": "Flush"}))
        if barge:
            await self._audio(ws)
            await ws.send(json.dumps({"type": "Clear"}))
        want = "Cleared" if barge else "Flushed"
        while (m := await self._json(ws)).get("type") != want:
            if m.get("type") not in ("Warning", "Flushed"):
                raise Unanswered(f"unexpected {m}")

    async def _cartesia_turn(self, ws: ClientConnection, t: int, barge: bool) -> None:
        cid = uuid.uuid4().hex
        for piece in self._pieces(barge):
            await ws.send(self._generation(cid, piece, True, speed=self.speed))
        if not barge:
            await ws.send(self._generation(cid, "", False, speed=self.speed))
            await self._cartesia_done(ws, cid)
            return
        while True:  # the reply's first audio, then the barge-in
            m = await self._json(ws)
            if m.get("context_id") == cid and m.get("type") == "chunk":
                break
            if m.get("context_id") == cid and m.get("type") == "error" and m.get("done"):
                raise Typed(m.get("error"))
        await ws.send(json.dumps({"context_id": cid, "cancel": True}))

    async def _elevenlabs_turn(self, ws: ClientConnection, t: int, barge: bool) -> None:
        cid = f"t{t}"
        await ws.send(json.dumps({"text": " ", "context_id": cid, "voice_settings": {"speed": self.speed}}))
        for piece in self._pieces(barge):
            await ws.send(json.dumps({"text": piece, "context_id": cid}))
        if barge:  # interrupted before its flush: the audio of what was said so far, then closed
            while "audio" not in (m := await self._json(ws)) or m.get("contextId", cid) != cid:
                if "error" in m:
                    raise Typed(m["error"])
        else:
            await ws.send(json.dumps({"context_id": cid, "flush": True}))
        await ws.send(json.dumps({"context_id": cid, "close_context": True}))
        await self._final(ws, cid)


async def streaming_soak(url: str, pid: int, client: Turns, turns: int, concurrency: int, every: int,
                         warmup: float, log: Any = print) -> dict[str, Any]:
    """``concurrency`` clients through :func:`conversations` (each takes the next socket when its last
    is done) until ``turns`` turns were run, the server's RSS sampled every ``every`` turns (growth
    measured after the first ``warmup`` share); then the state tables once at rest, ``/ping``."""
    plan = iter(conversations(turns))
    samples = RssSamples(pid)
    done = 0
    t0 = time.perf_counter()

    def sample() -> None:
        mib = samples.take(done)
        if len(samples) % 10 == 0:
            log(f"    {done} turns, RSS {mib} MiB, load {load_average()}")

    async def worker() -> None:
        nonlocal done
        for protocol, n in plan:
            made = await client.conversation(protocol, n)
            done += made
            if done // every > (done - made) // every:
                sample()

    sample()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    sizes, rest_s = await asyncio.to_thread(at_rest, url)
    sample()
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        ping = (await http.get("/ping")).status_code
    counts = client.counts
    return {"turns": done, "barged": sum(c["answered"] + c["typed"] for k, c in counts.items() if k.endswith("_barge")),
            **growth(samples, warmup), "wall_s": round(wall, 1), "turns_per_s": round(done / wall, 2),
            "unanswered": sum(c["unanswered"] for c in counts.values()), "unanswered_examples": client.unanswered,
            "counts": counts, "tables_at_rest": sizes, "tables_rest_after_s": rest_s, "ping_after": ping,
            "load_after": load_average(), "rss_samples": samples}


#: Turns per run by runtime: (full, --quick).
SIZES = {"fake": (1000, 200), "onnx": (1000, 40), "torch": (1000, 40)}
#: Sockets at once: on the real runtime two, one a core of the machines it was sized on.
CONCURRENCY = {"fake": 4, "onnx": 2, "torch": 2}
#: Replies for the real runtime on a small CPU: short sentences, so 1,000 turns take minutes.
SHORT_TEXTS = ["Hello there.", "Short one.", "Memory check.", "One more time.", "Still here.", "Right away."]


def run_streaming(result: Result, *, quick: bool, model_dir: Any, log: Any, turns: int | None, mode: str,
                  backend: str | None, warmup: float, allocator_env: dict[str, dict[str, str]]) -> None:
    """The streaming phase on each runtime asked for (``backend``; default fake then onnx) and allocator:
    its samples (``workload: streaming``) and targets go into ``result``."""
    runtimes = [backend] if backend else ["fake", "onnx"]
    for runtime in runtimes:
        for env in allocator_env.values():
            n = turns or SIZES[runtime][1 if quick else 0]
            fake = runtime == "fake"
            env = {**({"KOKORO_FAKE_SEGMENT_S": "0.005"} if fake else {}), **env}
            log(f"  soak streaming {runtime}/{mode} {env or ''}: {n} turns, load {load_average()}")
            with LiveServer(backend=runtime, mode=mode, env=env, model_dir=model_dir, log=log) as srv:
                voice = httpx.get(f"{srv.url}/v1/audio/voices", timeout=10).json()["voices"][0]
                assert srv.proc is not None
                # (the real runtime at speed 2, as the mixed phase: half the audio to make per turn)
                client = Turns(srv.url, voice, CHURN_TEXTS if fake else SHORT_TEXTS, speed=1.0 if fake else 2.0,
                               timeout_s=60 if fake else 300)
                out = asyncio.run(streaming_soak(srv.url, srv.proc.pid, client, n, CONCURRENCY.get(runtime, 2),
                                                 max(1, n // 100), warmup, log))
            s = {"workload": "streaming", "runtime": runtime, "mode": mode, "env": env, **out}
            log(f"  {runtime}: RSS {s['rss_after_warmup_mib']} -> {s['rss_end_mib']} MiB ({s['growth_pct']:+.2f}%), "
                f"{s['turns']} turns ({s['barged']} barged), {s['unanswered']} unanswered, tables {s['tables_at_rest']}")
            result.samples.append(s)
            label = " ".join([f"streaming {runtime}/{mode}", *(f"{k}={v}" for k, v in env.items() if k.startswith("MALLOC"))])
            label += f", {s['turns']} turns"
            result.target(f"{label}: RSS growth after warm-up", "< 5%", f"{s['growth_pct']}%", s["growth_pct"] < 5)
            result.target(f"{label}: unanswered turns", "0", s["unanswered"], s["unanswered"] == 0, any_runtime=True)
            result.target(f"{label}: tables at rest (kokoro_state_entries)", "all 0",
                          {k: v for k, v in s["tables_at_rest"].items() if v} or "all 0",
                          not any(s["tables_at_rest"].values()), any_runtime=True)
            result.target(f"{label}: /ping after", "200", s["ping_after"], s["ping_after"] == 200, any_runtime=True)
    result.config["streaming"] = {"protocols": list(PROTOCOLS), "barge_share": BARGE_SHARE,
                                  "turns_per_socket": list(TURNS_PER_SOCKET), "concurrency": CONCURRENCY,
                                  "rss_sample_every": "1% of the turns"}


def streaming_body(samples: list[dict[str, Any]]) -> str:
    """The streaming phase's tables: memory per run, then turns by protocol and outcome."""
    rows = [[s["runtime"], " ".join(f"{k}={v}" for k, v in s["env"].items() if k.startswith("MALLOC")) or "default",
             s["mode"], s["turns"], s["barged"], s["rss_start_mib"], s["rss_after_warmup_mib"], s["rss_end_mib"],
             s["rss_peak_mib"], f"{s['growth_pct']:+.2f}%", f"{s['second_half_growth_pct']:+.2f}%",
             s["slope_kib_per_request"], s["unanswered"], s["wall_s"]] for s in samples]
    out = ("Streaming turns: sockets of the bidi route, Deepgram, Cartesia and ElevenLabs (multi-stream) in turn, "
           f"{TURNS_PER_SOCKET[0]}-{TURNS_PER_SOCKET[1]} turns each, the reply sent word by word (bidi: sentence by "
           f"sentence) and flushed, {BARGE_SHARE:.0%} of the turns interrupted after their first audio; RSS sampled "
           "every 1% of the turns.\n\n"
           + markdown_table(["runtime", "allocator", "mode", "turns", "barged", "RSS start MiB",
                             "RSS after warm-up MiB", "RSS end MiB", "RSS peak MiB", "growth", "growth, 2nd half",
                             "slope KiB/turn", "unanswered", "wall s"], rows))
    for s in samples:
        counts = [[kind, c["answered"], c["typed"], c["unanswered"]] for kind, c in sorted(s["counts"].items())]
        out += (f"\n\n{s['runtime']}: tables at rest after {s['tables_rest_after_s']} s: "
                f"{({k: v for k, v in s['tables_at_rest'].items() if v}) or 'all 0'}; /ping after: {s['ping_after']}; "
                f"load average after: {s['load_after']}.\n\n"
                + markdown_table(["turn", "answered", "typed error", "unanswered"], counts))
    return out

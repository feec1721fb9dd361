"""Soak: a live server kept busy for a long while, watching its memory (goal: RSS grows by less than
5% after warm-up). Two workloads (``--workload``; default both, in turn):

* ``mixed`` — 1,000 mixed requests: every good request succeeds, every bad one gets its typed
  error, the counters read zero at the end.
* ``streaming`` — 1,000 streaming turns over the four WebSocket protocols, text sent in pieces as an
  LLM writes it, a quarter interrupted mid-reply by a barge-in (``benchmarks.soak_turns``): 0 turns
  unanswered, every state table (``kokoro_state_entries``) back at rest.

``python -m benchmarks soak`` (its options: ``--help``) writes ``benchmarks/results/soak.{json,md}``
(``soak_streaming.{json,md}`` for ``--workload streaming`` alone); the mixes and the method:
docs/benchmarks.md ("Load and soak").
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import httpx

from agent.messages import AudioChunk, SynthesisFailed
from agent.ws_client import ContractSession

from . import prom
from .clients import post
from .live import LiveServer, RssSamples, growth
from .loop import closed_loop
from .results import Result, command_line, markdown_table

TEXTS = [
    "Short one.",
    "A sentence of middling length, with a clause or two in it.",
    "The soak test keeps asking for speech, over and over, to see whether memory creeps upward.",
    "Numbers like 3.14 and dates like June 5th are read out, too.",
    "First sentence here. And a second one follows it, a little longer than the first.",
]
#: For real inference on a small CPU: short texts, so a run of a few hundred requests takes minutes.
SHORT_TEXTS = ["Short one.", "Hello there.", "Memory check.", "One more time.", "Still here."]
BAD_POST = [b"{", b'{"text": ""}', b'{"text": "Hi.", "voice": "zz_nobody"}', b'{"text": "Hi.", "speed": 9}',
            b'{"text": "\\u3053\\u3093\\u306b\\u3061\\u306f", "lang": "en-us"}', b"\xff\xfe", b'{"text": "Hi.", "lang": "xx"}']
BAD_WS = ["{", '{"text": 5}', '{"text": "Hi.", "voice": "../x"}', '{"text": "   "}', '{"type": "dance"}']
#: The share of the requests (or turns) counted as warm-up, before RSS growth is measured.
WARMUP_FRACTION = 0.2
KINDS = ["ws"] * 8 + ["post"] * 6 + ["openai"] * 2 + ["bad_post"] * 2 + ["bad_ws"] + ["vanish"]


class Soak:
    """The mix's units against one server (``one(kind, i, http)``), the counts made and the failures seen."""

    def __init__(self, ws_url: str, voices: list[str], speed: float, texts: list[str], seed: int = 1):
        self.ws_url, self.voices, self.speed, self.texts = ws_url, voices, speed, texts
        self.rng = random.Random(seed)
        self.counts: dict[str, int] = {}
        self.failures: list[str] = []

    def _voice(self) -> str:
        if len(self.voices) > 1 and self.rng.random() < 0.3:  # a blend with fresh weights
            a, b = self.rng.sample(self.voices, 2)
            return f"{a}({self.rng.randint(1, 9)}.{self.rng.randint(0, 99)})+{b}(1)"
        return self.rng.choice(self.voices)

    def _request(self, rid: str) -> dict[str, Any]:
        body = {"text": self.rng.choice(self.texts), "request_id": rid, "voice": self._voice(), "speed": self.speed}
        if self.rng.random() < 0.2:
            body["sample_rate"] = self.rng.choice([16000, 22050, 48000])
        return body

    async def one(self, kind: str, i: int, http: httpx.AsyncClient) -> int:
        """Run one unit of the mix; returns how many requests it made."""
        run = getattr(self, f"_{kind}")
        try:
            n = await run(i, http)
        except Exception as e:  # a soak records failures and goes on
            if kind != "vanish":
                self.failures.append(f"{kind} {i}: {type(e).__name__}: {e}")
            n = 1
        self.counts[kind] = self.counts.get(kind, 0) + n
        return n

    async def _session(self) -> ContractSession:
        return await ContractSession.connect(self.ws_url, frames="text", max_size=None, open_timeout=60)

    async def _send(self, session: ContractSession, rid: str, **override: Any) -> None:
        body = {**self._request(rid), **override}
        await session.synthesize(body.pop("text"), body.pop("request_id"), **body)

    async def _ws(self, i: int, http: httpx.AsyncClient) -> int:
        n = self.rng.randint(1, 3)
        async with await self._session() as session:
            for j in range(n):
                await self._send(session, f"{i}-{j}")
            await session.close()  # the server answers what is queued, then closes
            async for event in session.events():
                if isinstance(event, SynthesisFailed):
                    self.failures.append(f"ws {i}: {event.code}: {event.message}")
        return n

    async def _post(self, i: int, http: httpx.AsyncClient) -> int:
        fmt = ("wav", "pcm", "mp3")[i % 3]
        t = await post(http, "/invocations", {**self._request(str(i)), "format": fmt})
        if t.error or t.audio_bytes <= 44:
            self.failures.append(f"post {i}: {t.error or 'HTTP 200'} ({t.audio_bytes} bytes)")
        return 1

    async def _openai(self, i: int, http: httpx.AsyncClient) -> int:
        t = await post(http, "/v1/audio/speech", {"model": "kokoro", "input": self.rng.choice(self.texts),
                                                  "voice": self.rng.choice(self.voices),
                                                  "response_format": ("mp3", "wav", "opus")[i % 3]})
        if t.error or not t.audio_bytes:
            self.failures.append(f"openai {i}: {t.error or 'HTTP 200 with an empty body'}")
        return 1

    async def _bad_post(self, i: int, http: httpx.AsyncClient) -> int:
        r = await http.post("/invocations", content=BAD_POST[i % len(BAD_POST)])
        if not (400 <= r.status_code < 500 and r.json()["error"]["code"]):
            self.failures.append(f"bad_post {i}: {r.status_code}")
        return 1

    async def _bad_ws(self, i: int, http: httpx.AsyncClient) -> int:
        async with await self._session() as session:
            await session.send_raw(BAD_WS[i % len(BAD_WS)].encode())
            event = await session.next_event()
            if not isinstance(event, SynthesisFailed):
                self.failures.append(f"bad_ws {i}: {event}")
        return 1

    async def _vanish(self, i: int, http: httpx.AsyncClient) -> int:
        """A client that leaves after the first audio, work still queued."""
        session = await self._session()
        await self._send(session, f"{i}-a", text=" ".join(self.texts))
        await self._send(session, f"{i}-b")
        while not isinstance(await session.next_event(), AudioChunk):
            pass
        session.abort()
        return 2


async def _soak(srv: Any, requests: int, concurrency: int, soak: Soak, every: int, log) -> dict[str, Any]:
    """``concurrency`` clients through the shuffled plan (client ``c`` takes units ``c``,
    ``c + concurrency``, ...) until ``requests`` requests are made, RSS sampled every ``every``."""
    pid = srv.proc.pid
    plan = [KINDS[i % len(KINDS)] for i in range(requests)]
    random.Random(7).shuffle(plan)
    samples = RssSamples(pid)
    done = 0
    t0 = time.perf_counter()

    def sample() -> None:
        samples.take(done)

    sample()
    async with httpx.AsyncClient(base_url=srv.url, timeout=120) as http:

        async def unit(_s: None, c: int, r: int) -> None:
            nonlocal done
            i = r * concurrency + c
            if i >= len(plan) or done >= requests:  # the plan's requests are made: the rest pass
                return
            made = await soak.one(plan[i], i, http)  # not `done += await ...`: that reads `done` before awaiting
            done += made
            if done // every > (done - made) // every:
                sample()
                if len(samples) % 8 == 0:
                    log(f"    {done} requests, RSS {samples[-1]['rss_mib']} MiB")

        loop = await closed_loop(unit, concurrency, per_client=-(-len(plan) // concurrency))
        if loop.failures:
            raise loop.failures[0]
        await asyncio.sleep(0.5)  # let vanished sessions unwind
        metrics, ping = prom.parse((await http.get("/metrics")).text), (await http.get("/ping")).status_code
    sample()
    leftovers = {
        "active_sessions": prom.value(metrics, "kokoro_active_sessions"),
        "inflight_invocations": prom.value(metrics, "kokoro_inflight_requests", {"route": "invocations"}),
        "inflight_openai": prom.value(metrics, "kokoro_inflight_requests", {"route": "openai"}),
        "queue_depth": prom.value(metrics, "kokoro_queue_depth"),
    }
    return {"requests": done, **growth(samples, WARMUP_FRACTION), "wall_s": round(time.perf_counter() - t0, 1), "counts": soak.counts,
            "failures": len(soak.failures), "failure_examples": soak.failures[:10], "leftovers": leftovers,
            "ping_after": ping, "rss_samples": samples}


def soak_run(runtime: str, mode: str, requests: int, *, env: dict[str, str] | None = None, model_dir=None,
             log=print) -> dict[str, Any]:
    fake = runtime == "fake"
    env = {**({"KOKORO_FAKE_SEGMENT_S": "0.005"} if fake else {}), **(env or {})}
    every = 25 if fake else 10
    with LiveServer(backend=runtime, mode=mode, env=env, model_dir=model_dir, log=log) as srv:
        names = httpx.get(f"{srv.url}/v1/audio/voices", timeout=10).json()["voices"][:3]
        soak = Soak(srv.ws_url, names, 1.0 if fake else 2.0, TEXTS if fake else SHORT_TEXTS)
        return {"runtime": runtime, "mode": mode, "env": env,
                **asyncio.run(_soak(srv, requests, 4 if fake else 2, soak, every, log))}


def run(*, quick: bool = False, model_dir=None, log=print, requests: int | None = None, mode: str = "sequential",
        allocators: list[str] | None = None, backend: str | None = None, workloads: list[str] | None = None,
        turns: int | None = None) -> Result:
    workloads = workloads or ["mixed", "streaming"]
    name = "soak_streaming" if workloads == ["streaming"] else "soak"
    result = Result(benchmark=name, quick=quick, command=command_line("soak", quick))
    # glibc gives each thread that allocates its own malloc arena, and RSS climbs in steps as the
    # thread pools touch theirs; MALLOC_ARENA_MAX=2 shows what is left once that is taken out.
    allocator_env = {"default": {}, "arena2": {"MALLOC_ARENA_MAX": "2"}}
    sizes = {"fake": 100 if quick else 1000, "onnx": 40 if quick else 1000}  # quick on fake: every kind of the mix a few times
    plans = [(runtime, requests or n, env) for runtime, n in sizes.items() for allocator, env in allocator_env.items()
             if (backend is None or runtime == backend) and (not allocators or allocator in allocators)]
    if "mixed" not in workloads:
        plans = []
    for runtime, n, env in plans:
        log(f"  soak {runtime}/{mode} {env or ''}: {n} requests")
        sample = soak_run(runtime, mode, n, env=env, model_dir=model_dir, log=log)
        log(f"  {runtime}: RSS {sample['rss_after_warmup_mib']} -> {sample['rss_end_mib']} MiB "
            f"({sample['growth_pct']:+.2f}%), {sample['failures']} failures, leftovers {sample['leftovers']}")
        result.samples.append(sample)
        label = " ".join([f"{runtime}/{mode}", *(f"{k}={v}" for k, v in env.items())]) + f", {sample['requests']} requests"
        result.target(f"{label}: RSS growth after warm-up", "< 5%", f"{sample['growth_pct']}%",
                      sample["growth_pct"] < 5)
        result.target(f"{label}: failed good requests", "0", sample["failures"], sample["failures"] == 0,
                      any_runtime=True)
        result.target(f"{label}: counters at rest", "all 0", sample["leftovers"],
                      not any(sample["leftovers"].values()), any_runtime=True)
    if "streaming" in workloads:
        from .soak_turns import run_streaming

        run_streaming(result, quick=quick, model_dir=model_dir, log=log, turns=turns, mode=mode, backend=backend,
                      warmup=WARMUP_FRACTION,
                      allocator_env={k: v for k, v in allocator_env.items() if k in (allocators or ["default"])})
    result.config = {"mode": mode, "workloads": workloads, "mix": {k: KINDS.count(k) for k in dict.fromkeys(KINDS)},
                     "rss_sample_every": {"fake": 25, "onnx": 10}, "warmup_fraction": WARMUP_FRACTION,
                     **result.config}
    result.summary = {" ".join([s.get("workload", "mixed"), s["runtime"],
                                *(f"{k}={v}" for k, v in s["env"].items() if k.startswith("MALLOC"))]): {
        "growth_pct": s["growth_pct"], "slope_kib_per_request": s["slope_kib_per_request"],
        "rss_end_mib": s["rss_end_mib"]} for s in result.samples}
    result.notes.append("RSS is the server process's VmRSS. Growth is measured from the sample after the "
                        "first 20% of requests or turns (warm-up) to the last; the slope is a least-squares fit "
                        "over the same samples. What earlier runs found, and why the ONNX run is 1,000 requests: "
                        "docs/benchmarks.md (Load and soak).")
    return result


def body(data: dict[str, Any]) -> str:
    from .soak_turns import streaming_body

    mixed = [s for s in data["samples"] if s.get("workload", "mixed") == "mixed"]
    streaming = [s for s in data["samples"] if s.get("workload") == "streaming"]
    return "\n\n".join(([mixed_body(mixed)] if mixed else []) + ([streaming_body(streaming)] if streaming else []))


def mixed_body(samples: list[dict[str, Any]]) -> str:
    rows = [[s["runtime"], " ".join(f"{k}={v}" for k, v in s["env"].items() if k.startswith("MALLOC")) or "default",
             s["mode"], s["requests"], s["rss_start_mib"], s["rss_after_warmup_mib"],
             s["rss_end_mib"], s["rss_peak_mib"], f"{s['growth_pct']:+.2f}%", f"{s['second_half_growth_pct']:+.2f}%",
             s["slope_kib_per_request"],
             s["failures"], s["wall_s"]] for s in samples]
    return ("A fixed shuffled mix of WebSocket sessions, streamed POSTs (wav/pcm/mp3), OpenAI speech, bad "
            "requests and vanishing clients against a live server; RSS sampled every 25 requests (every 10 with the "
            "real runtime).\n\n"
            + markdown_table(["runtime", "allocator", "mode", "requests", "RSS start MiB", "RSS after warm-up MiB",
                              "RSS end MiB", "RSS peak MiB", "growth", "growth, 2nd half", "slope KiB/req", "failures", "wall s"],
                             rows))

"""Word timings on ONNX cost nothing: the timed model (the shipped export with its predicted
durations as a second output, ``backends/assets/onnx_timed.py``) against today's export.

* speed — today's export, the timed model and a control (today's export again: the noise floor)
  in this process, one intra-op thread each (a spinning thread pool under contention adds CPU
  time that belongs to neither), on the same segments, the order rotating segment by segment and
  round by round; medians of the per-segment ratios to today's export, of wall time and of the
  process's CPU time in the call (far steadier when other processes take the cores).
* sameness — log-spectral distance and sample identity of the two models' audio per segment;
  then ``/v1/audio/speech`` on a server of today's export against ``/v1/audio/speech/timed`` on
  the default (timed) one, on the same clips: the audio compared the same way, each transcribed
  by pocketsphinx (word error rate), and the word times checked monotonic and inside the audio.
"""

from __future__ import annotations

import base64
import io
import itertools
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from . import speech_measures as sm
from .loop import paired_calls
from .raw import LANG, VOICE, model_files
from .results import Result, command_line, markdown_table, mean, median, rnd
from .texts import CLIPS, SENTENCES

TARGET_RATIO, TARGET_LSD_DB = 1.03, 0.1


def _lsd(a: np.ndarray, b: np.ndarray) -> float | None:
    """Log-spectral distance (dB) over every frame, 1024-sample frames 256 apart."""
    return rnd(sm.log_spectral_distance(a, b, n_fft=1024, hop=256, centred=False), 4)


def _wer(text: str, heard: list[str]) -> float | None:
    reference = sm.words(text)
    return rnd(sm.word_edits(reference, heard) / max(1, len(reference)), 3)


def _synthesizers(files) -> tuple[dict[str, Any], list[Any]]:
    """The ONNX runtimes (today's export, the timed model, today's export again), loaded, and the
    segments they speak."""
    from backends.assets.build import OFFLINE_ONNX
    from backends.assets.voices import VoiceStore
    from backends.config import BackendConfig
    from backends.factory import create_pipeline
    from backends.runtimes.onnx import OnnxSynthesizer

    if not files.onnx_durations:
        raise RuntimeError(f"{files.root} has no timed model; run `kokoro-serve assets`")
    voices = VoiceStore.from_path(files.voices)
    plain_files = replace(files, onnx=files.root / OFFLINE_ONNX)
    synths = {
        "plain": OnnxSynthesizer(plain_files, voices, threads=1),
        "timed": OnnxSynthesizer(files, voices, threads=1),
        "control": OnnxSynthesizer(plain_files, voices, threads=1),  # today's export again: the noise floor
    }
    for synth in synths.values():
        synth.window_graphs = None  # the export and its timed twin themselves, not the pair in their place
        synth.load()
    pipeline = create_pipeline(BackendConfig.defaults(), files)
    segments = [pipeline.plan(t, voice=VOICE, speed=1.0, lang=LANG, fast_first=False)[0] for t in SEGMENT_TEXTS]
    return synths, segments


SEGMENT_TEXTS = (*SENTENCES, *CLIPS[:2])


def _runtime_rounds(synths: dict[str, Any], segments, rounds: int, log) -> list[dict]:
    """Each segment through the three sessions in turn; who goes first rotates."""
    calls = {
        "plain": synths["plain"].synthesize,
        "timed": lambda s: synths["timed"].synthesize_timed(s)[0],
        "control": synths["control"].synthesize,
    }

    def compare(seg, audio: dict[str, Any]) -> dict[str, Any]:
        return {"text": seg.text, "audio_s": rnd(len(audio["plain"]) / 24_000, 3),
                "identical": bool(np.array_equal(audio["plain"], audio["timed"])),
                "lsd_db": _lsd(audio["plain"], audio["timed"])}

    def report(sample: dict[str, Any]) -> None:
        log(f"  round {sample['round']} segment {sample['segment']}: plain {sample['plain_ms']:8.1f} ms  timed / plain "
            f"{sample['timed_ratio']:.3f} (CPU {sample['timed_cpu_ratio']:.3f})  control / plain "
            f"{sample['control_ratio']:.3f} (CPU {sample['control_cpu_ratio']:.3f})  identical {sample['identical']}")

    return paired_calls(calls, segments, rounds, compare, report)


def _decode_wav(data: bytes) -> tuple[np.ndarray, int]:
    import soundfile

    audio, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    return audio, rate


def _monotonic_inside(words: list[dict], duration: float) -> bool:
    times = [0.0, *(t for w in words for t in (w["start"], w["end"])), duration + 0.001]
    return all(a <= b for a, b in itertools.pairwise(times))


def _server_clips(files, clips: list[str], log) -> list[dict]:
    """Today's export behind one server, the timed model behind another; the same clips to each."""
    import httpx

    from backends.assets.build import CONFIG, OFFLINE_ONNX

    from .live import LiveServer

    transcribe = sm.Transcriber()
    samples = []
    with tempfile.TemporaryDirectory(prefix="kokoro-plain-") as tmp:
        plain_dir = Path(tmp)
        for name in (OFFLINE_ONNX, CONFIG, files.voices.name):
            (plain_dir / name).symlink_to(files.root / name)
        with LiveServer(model_dir=plain_dir, log=log, name="plain") as plain_srv, \
                LiveServer(model_dir=files.root, log=log, name="timed") as timed_srv, \
                httpx.Client(timeout=300) as http:
            models = {"plain": plain_srv.ping.get("model"), "timed": timed_srv.ping.get("model")}
            for i, text in enumerate(clips):
                body = {"model": "kokoro", "input": text, "voice": VOICE, "response_format": "wav"}
                t0 = time.perf_counter()
                r_plain = http.post(plain_srv.url + "/v1/audio/speech", json=body)
                t1 = time.perf_counter()
                r_timed = http.post(timed_srv.url + "/v1/audio/speech/timed", json=body)
                t2 = time.perf_counter()
                r_plain.raise_for_status()
                r_timed.raise_for_status()
                plain_audio, rate = _decode_wav(r_plain.content)
                timed_json = r_timed.json()
                timed_audio, _ = _decode_wav(base64.b64decode(timed_json["audio"]))
                heard_plain, heard_timed = transcribe(plain_audio, rate), transcribe(timed_audio, rate)
                sample = {
                    "clip": i, "text": text, "plain_ms": rnd((t1 - t0) * 1000, 1), "timed_ms": rnd((t2 - t1) * 1000, 1),
                    "audio_s": rnd(len(plain_audio) / rate, 3),
                    "identical": bool(np.array_equal(plain_audio, timed_audio)),
                    "lsd_db": _lsd(plain_audio, timed_audio),
                    "heard_plain": " ".join(heard_plain), "heard_timed": " ".join(heard_timed),
                    "wer_plain": _wer(text, heard_plain), "wer_timed": _wer(text, heard_timed),
                    "words": len(timed_json["words"]),
                    "words_monotonic_inside": _monotonic_inside(timed_json["words"], len(timed_audio) / rate),
                }
                samples.append(sample)
                log(f"  clip {i}: identical {sample['identical']}  WER plain {sample['wer_plain']:.2f} "
                    f"timed {sample['wer_timed']:.2f}  words ok {sample['words_monotonic_inside']}")
    for s in samples:
        s["models"] = models
    return samples


def run(*, quick: bool = False, model_dir=None, log=print) -> Result:
    from backends.assets.build import OFFLINE_ONNX

    files = model_files(model_dir)
    rounds = 2 if quick else 3
    texts = SEGMENT_TEXTS[:3] if quick else SEGMENT_TEXTS
    clips = list(CLIPS[:3] if quick else CLIPS[:8])
    result = Result("onnx_durations", quick, command_line("onnx_durations", quick))
    synths, segments = _synthesizers(files)
    segments = segments[: len(texts)]
    result.config = {
        "voice": VOICE, "rounds": rounds, "segments": len(segments), "server_clips": len(clips),
        "plain_model": OFFLINE_ONNX, "timed_model": files.onnx.name, "control_model": OFFLINE_ONNX, "threads": 1,
    }
    log(f"runtime: {len(segments)} segments x {rounds} rounds, today's export / timed / today's export again")
    raw = _runtime_rounds(synths, segments, rounds, log)
    del synths  # free the sessions before the servers load theirs
    log(f"servers: {len(clips)} clips, /v1/audio/speech (plain) vs /v1/audio/speech/timed (timed)")
    served = _server_clips(files, clips, log)
    result.samples = [{"phase": "runtime", **s} for s in raw] + [{"phase": "server", **s} for s in served]
    lsd = max(s["lsd_db"] for s in raw + served)
    result.medians = {f"runtime_{n}_{unit}": rnd(median(s[f"{n}_{unit}"] for s in raw), 1)
                      for n in ("plain", "timed", "control") for unit in ("ms", "cpu_ms")}
    result.medians |= {f"runtime_{n}_{kind}": rnd(median(s[f"{n}_{kind}"] for s in raw), 4)
                       for n in ("timed", "control") for kind in ("ratio", "cpu_ratio")}
    result.medians |= {f"server_{n}_ms": rnd(median(s[f"{n}_ms"] for s in served), 1) for n in ("plain", "timed")}
    result.summary = {
        "runtime_identical": sum(s["identical"] for s in raw), "runtime_samples": len(raw),
        "server_identical": sum(s["identical"] for s in served), "server_clips": len(served),
        "max_lsd_db": lsd,
        "wer_plain": rnd(mean(s["wer_plain"] for s in served), 3),
        "wer_timed": rnd(mean(s["wer_timed"] for s in served), 3),
        "word_times_ok": sum(s["words_monotonic_inside"] for s in served),
    }
    m = result.medians
    for kind, label in (("cpu_ratio", "CPU time"), ("ratio", "wall time")):
        ratio, control = m[f"runtime_timed_{kind}"], m[f"runtime_control_{kind}"]
        allowed = 1 + max(TARGET_RATIO - 1, abs(control - 1))
        result.target(f"timed / plain per-segment {label} (median of paired calls)",
                      f"<= {TARGET_RATIO}x, or within the control's {control}x", ratio, ratio <= allowed)
    result.target("log-spectral distance to today's output (max)", f"<= {TARGET_LSD_DB} dB", lsd, lsd <= TARGET_LSD_DB)
    result.target("pocketsphinx word error rate, timed vs plain (mean)", "no higher",
                  result.summary["wer_timed"], result.summary["wer_timed"] <= result.summary["wer_plain"])
    result.notes.append("the three sessions run in one process with one intra-op thread each; the control is a "
                        "second session of today's export, so its ratio to the first is what the shared cores and "
                        "the sessions' placement in memory alone make of two identical models")
    result.notes.append("the server's timed route also aligns each word to the phonemes (G2P per word) and "
                        "base64-encodes the audio: its request time includes that work, the runtime call does not")
    return result


def body(data: dict) -> str:
    m, s = data["medians"], data["summary"]
    ident = f"{s['runtime_identical']}/{s['runtime_samples']}"
    rows = [
        ["runtime call, CPU", m["runtime_plain_cpu_ms"], m["runtime_timed_cpu_ms"], m["runtime_timed_cpu_ratio"],
         m["runtime_control_cpu_ratio"], ident],
        ["runtime call, wall", m["runtime_plain_ms"], m["runtime_timed_ms"], m["runtime_timed_ratio"],
         m["runtime_control_ratio"], ident],
        ["server request (whole clip)", m["server_plain_ms"], m["server_timed_ms"],
         rnd(m["server_timed_ms"] / m["server_plain_ms"], 4) if m["server_plain_ms"] else None, None,
         f"{s['server_identical']}/{s['server_clips']}"],
    ]
    table = markdown_table(["path", "today's export ms (median)", "timed model ms (median)", "timed / today",
                            "control / today", "identical audio"], rows)
    return (
        f"Per segment the timed model takes **{m['runtime_timed_cpu_ratio']}x** the CPU time of today's export "
        f"(a second session of today's export, the control: {m['runtime_control_cpu_ratio']}x) and "
        f"{m['runtime_timed_ratio']}x its wall time (control {m['runtime_control_ratio']}x); medians of "
        f"{s['runtime_samples']} rotating calls. Its audio is the same: log-spectral distance at most "
        f"**{s['max_lsd_db']} dB**, identical samples in {ident} runtime calls and "
        f"{s['server_identical']}/{s['server_clips']} server clips. pocketsphinx hears both alike (mean word error "
        f"rate {s['wer_plain']} today, {s['wer_timed']} timed; jm_kumo is a Japanese voice reading English, so "
        f"neither is low), and the timed route's word times were monotonic and inside the audio in "
        f"{s['word_times_ok']}/{s['server_clips']} clips.\n\n{table}"
    )

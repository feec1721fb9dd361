"""An early cut that keeps the sentence's prosody: the decoder over a window of the whole sentence.

The runtime's windowed decode (``synthesize`` of a segment that carries its sentence;
docs/speech-quality.md explains it) against today's fragment read alone, for each text of
:data:`benchmarks.texts.QUALITY_TEXTS` whose first sentence the default planner cuts inside a
clause, on the torch runtime (deterministic source, voice jm_kumo) or, with ``--runtime onnx``, the
ONNX runtime's predict and decode graphs, both against one reading of the whole sentence:
log-spectral distance over its speech frames, pitch at the cut (at the same frames, and through the
quality benchmark's DTW path, :func:`benchmarks.quality.measure`), 2–8 kHz energy at the join and
its excess over the reference's there, and the CPU and wall time of the first call, interleaved in
the same run. Each context tried is set as the runtime's ``window_context``. ``--quick``: the
runtime's own (:data:`backends.runtimes.windowing.WINDOW_CONTEXT`), two timing rounds; the full run also
tries 0, 4 and 16 frames.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from backends.runtimes.windowing import WINDOW_CONTEXT

from . import speech_measures as sm
from .quality import cut_summary, measure, pitch_target
from .raw import LANG, VOICE, model_files
from .results import Result, command_line, load_average, markdown_table, mean, rnd
from .texts import QUALITY_TEXTS

CONTEXTS = (0, 4, 8, 16)
QUICK_CONTEXTS = (WINDOW_CONTEXT,)
#: The goal for the 2-8 kHz energy at a windowed join over the reading's there; the pitch goal is quality's.
BURST_DB = 3.0


def _first_sentence(pipeline: Any, text: str, windowed: bool) -> list[Any]:
    """The default plan's segments of the first sentence (a short first segment: five words);
    ``windowed``: as planned for a runtime that decodes windows (each carries the sentence)."""
    segments = pipeline.plan(text, voice=VOICE, lang=LANG, short_first_words=5, windowed=windowed)
    end = next((i for i, seg in enumerate(segments) if seg.ends == "sentence"), len(segments) - 1)
    return segments[: end + 1]


def summarise(samples: list[dict[str, Any]], contexts: tuple[int, ...]) -> dict[str, Any]:
    """Per way of cutting ("alone", "window_<context>"): the means and worsts of its samples."""
    summary: dict[str, Any] = {}
    for name in ("alone", *(f"window_{c}" for c in contexts)):
        x = [s[name] for s in samples]
        summary[name] = {**cut_summary(v["cut_st"] for v in x), "click_db_worst": rnd(max(v["click_db"] for v in x))}
        if name != "alone":
            same = [abs(v["cut_st_same_frames"]) for v in x if v["cut_st_same_frames"] is not None]
            summary[name].update({
                "lsd_db": rnd(mean(v["lsd_db"] for v in x), 2), "lsd_whole_db": rnd(mean(v["lsd_whole_db"] for v in x), 2),
                "cut_st_same_frames_mean": rnd(mean(same), 2), "cut_st_same_frames_worst": rnd(max(same, default=None), 2),
                "burst_db_worst": rnd(max(v["burst_db"] for v in x))})
        for key in ("first_call_s", "first_call_wall_s"):
            summary[name][key] = rnd(mean(s[key][name] for s in samples), 3)
    return summary


def _load(onnx: bool, model_dir: Path | None) -> tuple[Any, Any]:
    """The runtime, loaded, and its model files: ONNX on one thread, or torch on the CPU in float32
    with the deterministic source."""
    from backends.assets.voices import VoiceStore
    from backends.runtimes.onnx import OnnxSynthesizer
    from backends.runtimes.torch import TorchSynthesizer

    files = model_files(model_dir, torch=not onnx)
    voices = VoiceStore.from_path(files.voices, VOICE)
    if onnx:
        synth: Any = OnnxSynthesizer(files, voices, threads=1)
    else:
        synth = TorchSynthesizer(files.root, voices, device="cpu", dtype="float32", deterministic=True)
    synth.load()
    if not synth.capabilities.windowed:
        raise RuntimeError(f"{files.root} has no predict and decode graphs; run `kokoro-serve assets`")
    return synth, files


def run(*, quick: bool, model_dir: Path | None = None, log=print, runtime: str | None = None, **_: Any) -> Result:
    from backends.api import Segment
    from backends.config import BackendConfig
    from backends.engine.joins import shape_segment
    from backends.factory import create_pipeline

    result = Result("windowed_decoder", quick, command_line("windowed_decoder", quick))
    onnx = runtime == "onnx"
    synth, files = _load(onnx, model_dir)
    pipeline = create_pipeline(BackendConfig.defaults(), files)
    contexts = QUICK_CONTEXTS if quick else CONTEXTS
    rounds = 2 if quick else 5
    cases = [(t, segs) for t in QUALITY_TEXTS if (segs := _first_sentence(pipeline, t, True))[0].ends == "phrase"
             and segs[0].sentence is not None]
    result.config.update({"runtime": "onnx (CPU, int8 export, one thread)" if onnx
                          else "torch (CPU, float32, deterministic source)", "voice": VOICE,
                          "contexts_frames": list(contexts), "timing_rounds": rounds, "texts": [t for t, _ in cases],
                          "load_average_at_start": load_average()})
    for text, segments in cases:
        plain = _first_sentence(pipeline, text, False)
        reference = synth.synthesize(Segment(text, segments[0].sentence.phonemes, VOICE, lang=LANG))
        sample: dict[str, Any] = {"text": text, "fragment": segments[0].text, "segments": len(segments)}
        # today: each segment alone, joined as the engine joins them
        chunks = [(shape_segment(seg, synth.synthesize(seg), None)[0], seg.ends) for seg in plain]
        today = measure(text, chunks, reference, words=False)["joins"][0]
        sample["alone"] = {"cut_st": today["cut_st"], "click_db": today["click_db"]}
        f0_ref = sm.pitch(reference)
        for context in contexts:
            synth.window_context = context
            decoded = [synth.synthesize(seg) for seg in segments]
            windows = [shape_segment(seg, w, None)[0] for seg, w in zip(segments, decoded, strict=True)]
            joined = np.concatenate(windows)
            cut = len(decoded[0])  # the first window starts at the sentence's first frame
            f0 = sm.pitch(joined)
            same = sm.cut_pitch(f0, f0_ref, np.arange(len(f0)), cut // sm.WINDOW)
            dtw = measure(text, [(w, s.ends) for w, s in zip(windows, segments, strict=True)], reference, words=False)
            sample[f"window_{context}"] = {
                "lsd_db": round(sm.log_spectral_distance(decoded[0], reference[:cut], speech_only=True), 2),
                "lsd_whole_db": round(sm.log_spectral_distance(joined, reference, speech_only=True), 2),
                "cut_st_same_frames": round(sm.semitones(*same), 2) if same else None,
                "cut_st": dtw["joins"][0]["cut_st"],
                "click_db": round(sm.band_db(joined, cut), 1),
                "burst_db": round(sm.band_db(joined, cut) - sm.band_db(reference, cut), 1),
                "jump": round(float(abs(joined[cut] - joined[cut - 1])), 4),
                "reference_jump": round(float(abs(reference[cut] - reference[cut - 1])), 4),
            }
        # CPU time of the first call (process time: every thread's, less inflated by other load than
        # wall time) and wall time, interleaved: the fragment alone, and its window per context
        calls = {"alone": (plain[0], WINDOW_CONTEXT), **{f"window_{c}": (segments[0], c) for c in contexts}}
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in calls}
        for _ in range(rounds):
            for name, (segment, context) in calls.items():
                synth.window_context = context
                c0, w0 = time.process_time(), time.perf_counter()
                synth.synthesize(segment)
                times[name].append((time.process_time() - c0, time.perf_counter() - w0))
        sample["first_call_s"] = {k: round(float(np.median([c for c, _ in v])), 3) for k, v in times.items()}
        sample["first_call_wall_s"] = {k: round(float(np.median([w for _, w in v])), 3) for k, v in times.items()}
        result.samples.append(sample)
        log(f"  {segments[0].text!r}: alone {sample['alone']}, "
            + ", ".join(f"ctx {c}: {sample[f'window_{c}']}" for c in contexts) + f", time {sample['first_call_s']}")
    result.summary = summary = summarise(result.samples, contexts)
    result.medians = {k: dict(v) for k, v in summary.items()}
    best = summary[f"window_{max(contexts)}"]
    pitch_target(result, "pitch at an early cut vs the reading, windowed (mean / worst)", best)
    result.target("2-8 kHz at the windowed join over the whole reading's at the same place", f"<= {BURST_DB} dB",
                  best["burst_db_worst"], best["burst_db_worst"] <= BURST_DB)
    result.notes.append("The sentence's tokens are its segments' phonemes joined by spaces, and the style row is the "
                        "sentence's (the voice pack is indexed by length); the fragment alone uses its own, as today.")
    result.notes.append("Times are medians of interleaved rounds on a shared machine (see the load average): compare "
                        "the rows, not the absolute figures.")
    return result


def body(data: dict[str, Any]) -> str:
    rows = []
    for name, s in data["summary"].items():
        label = "fragment alone (today)" if name == "alone" else f"windowed, context {name.split('_')[1]} frames"
        rows.append([label, s.get("lsd_db", "—"), s.get("lsd_whole_db", "—"),
                     f"{s['cut_st_signed_mean']} ({s['cut_st_mean']} / {s['cut_st_worst']})",
                     f"{s['cut_st_same_frames_mean']} / {s['cut_st_same_frames_worst']}" if name != "alone" else "—",
                     s["click_db_worst"], s.get("burst_db_worst", "—"), s["first_call_s"],
                     s["first_call_wall_s"]])
    table = markdown_table(
        ["first sentence", "LSD fragment dB", "LSD sentence dB", "pitch at the cut st: signed mean (mean / worst)",
         "same frames st mean / worst", "2-8 kHz at the join dB worst", "over the reading's dB worst",
         "first call CPU s", "wall s"], rows)
    return (f"{table}\n\nLSD: log-spectral distance to one decode of the whole sentence over its speech frames. "
            "Pitch at the cut: as `python -m benchmarks quality` measures it (DTW against the whole sentence's "
            "reading); same frames: against the whole decode at the identical frames. 2-8 kHz at the join: dB re "
            "speech, as the quality benchmark measures a click; a windowed join sits inside speech, so what counts is "
            "its excess over the whole reading at the same place. First call: seconds to the fragment's audio, "
            "process CPU time (all threads) and wall time, medians of interleaved rounds (the windowed call includes "
            "the predictor over the whole sentence).")

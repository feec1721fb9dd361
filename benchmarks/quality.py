"""Speech quality of streamed audio against one reading of the whole text, per text and setting.

Each text of :data:`benchmarks.texts.QUALITY_TEXTS` is synthesised once whole (one model call: the
reference) and streamed in this process through the sequential backend the server builds, started
for each setting of :data:`SETTINGS` (:func:`benchmarks.inprocess.started`; a fresh session per
text, so the first segment is cut as for a new listener). The joined chunks are measured against
the reference (:func:`measure`, :mod:`benchmarks.speech_measures`): speech span over the
reference's, the gap at each join against the reading's pause there, pitch at each cut, 2–8 kHz
energy across each join, the share of words pocketsphinx hears, and when the first chunk left the
backend. docs/speech-quality.md explains the measures, goals and results.
``--quick``: two texts, the default setting and the model's own joins, no intelligibility.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from backends.engine.joins import sound_extent

from . import speech_measures as sm
from .raw import LANG, VOICE, model_files
from .results import Result, command_line, load_average, markdown_table, mean, rnd
from .texts import QUALITY_TEXTS

#: name -> the backend settings it changes
SETTINGS: dict[str, dict[str, Any]] = {
    "model joins": {"join_pauses": False, "phrase_end_mark": "", "windowed_first_segment": False},
    "default": {},
    "fragment alone": {"windowed_first_segment": False},
    "comma mark": {"phrase_end_mark": ","},
    "clause first": {"short_first_segment": "never"},
}
QUICK_SETTINGS = ("model joins", "default")
#: Where intelligibility is measured in a full run (pocketsphinx is the slow part of the analysis).
WORDS_SETTINGS = ("model joins", "default")
GOALS = {"gap_mean_s": 0.1, "gap_worst_s": 0.25, "click_db": -40.0, "click_over_reading_db": 3.0,
         "excess_pct": 3.0, "cut_st_mean": 1.5, "cut_st_worst": 4.0}


def measure(text: str, chunks: list[tuple[np.ndarray, str]], reference: np.ndarray, *, words: bool = True) -> dict[str, Any]:
    """The measures of one streamed reading (``chunks``: audio and the kind of boundary it ends at);
    ``words``: with intelligibility (pocketsphinx: seconds per second of audio on a busy machine).
    The gap at a join is the silent run that holds it; the reading's pause there is the reference's
    silent run (30 ms or longer) that the gap's DTW-aligned frames overlap most (none: 0). Beside the
    2–8 kHz level at a join, the reading's at the DTW-aligned place: a join inside speech (a windowed
    join, where the reading has no pause) is judged against the reading there, not against silence."""
    stream = np.concatenate([a for a, _ in chunks])
    path = sm.align(stream, reference)
    runs_s, runs_r = sm.silent_runs(stream), sm.silent_runs(reference, min_s=0.03)
    f0_s, f0_r = sm.pitch(stream), sm.pitch(reference)
    joins, at = [], 0
    for audio, kind in chunks[:-1]:
        at += len(audio)
        k = at // sm.WINDOW
        run = sm.run_at(runs_s, k)
        start, end = run if run else (k, k)
        mapped = path[max(0, start - 1) : min(len(path), end + 1)]
        lo, hi = int(mapped.min()), int(mapped.max())
        overlap = [(min(e, hi + 1) - max(s, lo), s, e) for s, e in runs_r if s <= hi and e >= lo]
        ref = max(overlap)[1:] if overlap else None
        cut = sm.cut_pitch(f0_s, f0_r, path, start)
        joins.append({
            "kind": kind, "gap_s": round((end - start) * sm.HOP_S, 3),
            "reading_pause_s": round((ref[1] - ref[0]) * sm.HOP_S, 3) if ref else 0.0,
            "cut_hz": rnd(cut[0]) if cut else None, "reading_hz": rnd(cut[1]) if cut else None,
            "cut_st": round(sm.semitones(*cut), 2) if cut else None,
            "click_db": round(sm.band_db(stream, at), 1),
            "reading_click_db": round(sm.band_db(reference, int(path[min(k, len(path) - 1)]) * sm.WINDOW), 1),
        })
    speech_s, reference_s = speech_span(stream), speech_span(reference)
    return {
        "seconds": round(len(stream) / sm.SR, 3), "reference_seconds": round(len(reference) / sm.SR, 3),
        "speech_s": round(speech_s, 3), "reference_speech_s": round(reference_s, 3),
        "excess_pct": round(100 * (speech_s - reference_s) / reference_s, 2), "joins": joins,
        "words_heard": round(sm.words_heard(stream, text), 3) if words else None,
    }


def speech_span(audio: np.ndarray) -> float:
    """Seconds from the first to the last sound."""
    extent = sound_extent(audio)
    return 0.0 if extent is None else (extent[1] - extent[0]) / sm.SR


async def _stream(backend: Any, text: str, session: str) -> tuple[list[tuple[np.ndarray, str]], float]:
    from backends.api import SynthesisRequest

    request = await backend.prepare(SynthesisRequest(text=text, voice=VOICE, lang=LANG, session=session))
    t0, first, chunks = time.perf_counter(), None, []
    async for chunk in backend.stream(request):
        first = first if first is not None else time.perf_counter() - t0
        chunks.append((chunk.audio, request.segments[chunk.index].ends))
    return chunks, first or 0.0


def cut_summary(cuts: Iterable[float | None]) -> dict[str, float | None]:
    """Pitch at the cuts against the reading, st: the mean and worst distance, and the signed mean."""
    st = [c for c in cuts if c is not None]
    return {"cut_st_mean": rnd(mean(abs(c) for c in st), 2), "cut_st_signed_mean": rnd(mean(st), 2),
            "cut_st_worst": rnd(max((abs(c) for c in st), default=None), 2)}


def pitch_target(result: Result, label: str, s: dict[str, Any]) -> None:
    """The goal for the pitch at an early cut (``s``: a :func:`cut_summary`)."""
    met = None if s["cut_st_mean"] is None else (s["cut_st_mean"] <= GOALS["cut_st_mean"]
                                                 and s["cut_st_worst"] <= GOALS["cut_st_worst"])
    result.target(label, f"<= {GOALS['cut_st_mean']} / {GOALS['cut_st_worst']} st",
                  f"{s['cut_st_mean']} / {s['cut_st_worst']}", met)


def summarise(samples: list[dict[str, Any]]) -> dict[str, Any]:
    joins = [j for s in samples for j in s["joins"]]
    errors = [abs(j["gap_s"] - j["reading_pause_s"]) for j in joins]
    early = [j["cut_st"] for j in joins if j["kind"] == "phrase" and j["cut_st"] is not None]
    by_kind = {k: {"joins": len(g), "gap_s": rnd(mean(j["gap_s"] for j in g), 3),
                   "reading_pause_s": rnd(statistics.median([j["reading_pause_s"] for j in g]), 3)}
               for k in ("sentence", "clause", "phrase") if (g := [j for j in joins if j["kind"] == k])}
    return {
        "texts": len(samples), "joins": len(joins), "by_kind": by_kind,
        "gap_error_mean_s": rnd(mean(errors), 3), "gap_error_worst_s": rnd(max(errors, default=None), 3),
        **cut_summary(early), "early_cuts": len(early),
        "click_db_worst": rnd(max((j["click_db"] for j in joins), default=None)),
        # joins audible in the band (not silent) against the reading at the same place
        "click_over_reading_db_worst": rnd(max((j["click_db"] - j["reading_click_db"] for j in joins
                                               if j["click_db"] >= GOALS["click_db"] and "reading_click_db" in j),
                                              default=None)),
        "excess_pct_mean": rnd(mean(s["excess_pct"] for s in samples), 2),
        "excess_pct_worst": rnd(max(s["excess_pct"] for s in samples), 2),
        "first_audio_s": rnd(mean(s["first_audio_s"] for s in samples), 3),
        "words_heard": rnd(mean(s["words_heard"] for s in samples), 3),
        "reference_words_heard": rnd(mean(s["reference_words_heard"] for s in samples), 3),
    }


async def _run(quick: bool, model_dir: Path | None, log) -> Result:
    from backends.api import Segment
    from backends.config import BackendConfig
    from backends.text.planner import normalize

    from .inprocess import started

    result = Result("quality", quick, command_line("quality", quick))
    files = model_files(model_dir)
    texts = QUALITY_TEXTS[1:3] if quick else QUALITY_TEXTS
    names = QUICK_SETTINGS if quick else tuple(SETTINGS)
    result.config.update({"runtime": "onnx", "voice": VOICE, "texts": list(texts), "settings": {
        n: SETTINGS[n] for n in names}, "load_average_at_start": load_average()})
    references: dict[str, np.ndarray] = {}
    heard: dict[str, float | None] = {}
    for name in names:
        config = BackendConfig.defaults(backend="onnx", model_dir=files.root, **SETTINGS[name])
        async with started(config) as backend:  # the engine the server runs, with this setting
            for text in texts:  # once: one reading of each whole text (the runtime is the same in each)
                if text not in references:
                    whole = Segment(text, backend.pipeline.phonemes(normalize(text), LANG), VOICE, lang=LANG)
                    references[text] = await asyncio.to_thread(backend.synthesizer.synthesize, whole)
                    heard[text] = None if quick else round(sm.words_heard(references[text], text), 3)
            for i, text in enumerate(texts):
                chunks, first = await _stream(backend, text, f"{name}-{i}")
                sample = await asyncio.to_thread(measure, text, chunks, references[text],
                                                 words=not quick and name in WORDS_SETTINGS)
                sample.update({"setting": name, "text": text, "first_audio_s": round(first, 3),
                               "segments": len(chunks), "reference_words_heard": heard[text]})
                result.samples.append(sample)
                log(f"  {name}: {text[:40]!r}… excess {sample['excess_pct']:+.1f}%, "
                    f"gaps {[j['gap_s'] for j in sample['joins']]} vs {[j['reading_pause_s'] for j in sample['joins']]}")
    result.summary = {name: summarise([s for s in result.samples if s["setting"] == name]) for name in names}
    result.medians = {name: {k: v for k, v in s.items() if k != "by_kind"} for name, s in result.summary.items()}
    d = result.summary["default"]
    for label, key, goal, unit in (("mean join gap vs the reading's pause", "gap_error_mean_s", "gap_mean_s", "s"),
                                   ("worst join gap vs the reading's pause", "gap_error_worst_s", "gap_worst_s", "s"),
                                   ("speech duration over the reading (mean)", "excess_pct_mean", "excess_pct", "%")):
        result.target(label, f"<= {GOALS[goal]} {unit}", d[key], None if d[key] is None else abs(d[key]) <= GOALS[goal])
    over = d["click_over_reading_db_worst"]
    result.target("2-8 kHz at a join: below the goal re speech, or (a join inside speech) within the goal of "
                  "the reading there", f"< {GOALS['click_db']} dB / <= +{GOALS['click_over_reading_db']} dB",
                  f"{d['click_db_worst']} dB / {'—' if over is None else f'{over:+.1f}'} dB",
                  None if d["click_db_worst"] is None else (over is None or over <= GOALS["click_over_reading_db"]))
    pitch_target(result, "pitch at an early cut vs the reading (mean / worst)", d)
    result.notes.append("Duration excess compares speech spans (first to last sound): the trimmed lead of the first "
                        "segment and the tail after the last are not counted against either reading.")
    return result


def run(*, quick: bool, model_dir: Path | None = None, log=print, **_: Any) -> Result:
    return asyncio.run(_run(quick, model_dir, log))


def _or_dash(value: Any) -> str:
    return "—" if value is None else str(value)


def body(data: dict[str, Any]) -> str:
    rows = []
    for name, s in data["summary"].items():
        rows.append([name, s["first_audio_s"], s["excess_pct_mean"], s["excess_pct_worst"], s["gap_error_mean_s"],
                     s["gap_error_worst_s"], f"{s['cut_st_mean']} / {s['cut_st_worst']} ({s['early_cuts']})",
                     s["click_db_worst"] if s.get("click_over_reading_db_worst") is None
                     else f"{s['click_db_worst']} ({s['click_over_reading_db_worst']:+} over the reading)",
                     f"{_or_dash(s['words_heard'])} ({_or_dash(s['reference_words_heard'])})"])
    table = markdown_table(
        ["setting", "first audio s", "duration +% mean", "+% worst", "gap error mean s", "worst s",
         "early-cut pitch st mean / worst (cuts)", "click dB worst", "words heard (reading)"], rows)
    kinds = []
    for name, s in data["summary"].items():
        for kind, k in s["by_kind"].items():
            kinds.append([name, kind, k["joins"], k["gap_s"], k["reading_pause_s"]])
    pauses = markdown_table(["setting", "boundary", "joins", "mean gap s", "reading's pause s (median)"], kinds)
    return (f"{table}\n\nJoins by kind of boundary:\n\n{pauses}\n\n"
            "First audio here is in process (the first chunk out of the backend); `python -m benchmarks ttfa` "
            "measures it through the server.")

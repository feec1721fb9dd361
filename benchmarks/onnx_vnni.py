"""The ONNX runtime's VNNI twins (the predict and decode graphs with their int8 convolutions as
integer matrix products, ``backends/assets/onnx_vnni.py``) against the plain pair they replace.

In this process, on the same segments: the plain pair, the VNNI twins, and a control (the plain
pair again: the noise floor), each an ONNX runtime with one intra-op thread (as the concurrent
mode's calls) and then with every core (as the sequential mode's); the order rotates segment by
segment and round by round. Per call: wall time, the process's CPU time, and whether the twins'
audio and durations are the plain pair's sample for sample. Needs a CPU with VNNI, where the runtime
opens the twins (elsewhere the suite says so and stops).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .loop import paired_calls
from .onnx_durations import SEGMENT_TEXTS
from .raw import LANG, VOICE, model_files
from .results import Result, command_line, markdown_table, median, rnd

NAMES = ("plain", "vnni", "control")


def _synthesizers(files, threads: int) -> dict[str, Any]:
    from backends.assets.voices import VoiceStore
    from backends.runtimes.onnx import OnnxSynthesizer

    voices = VoiceStore.from_path(files.voices)
    graphs = {"plain": files.onnx_windowed, "vnni": files.onnx_windowed_vnni, "control": files.onnx_windowed}
    synths = {}
    for name, pair in graphs.items():
        synth = OnnxSynthesizer(files, voices, threads=threads)
        synth.window_graphs = pair
        synth.load()
        synths[name] = synth
    return synths


def _rounds(synths: dict[str, Any], segments: list[Any], rounds: int, threads: int, log) -> list[dict]:
    def compare(_segment, out: dict[str, Any]) -> dict[str, Any]:
        return {"threads": threads, "audio_s": rnd(len(out["plain"][0]) / 24_000, 3),
                "identical": bool(np.array_equal(out["plain"][0], out["vnni"][0])
                                  and np.array_equal(out["plain"][1], out["vnni"][1]))}

    def report(sample: dict[str, Any]) -> None:
        log(f"  {threads} thread(s) round {sample['round']} segment {sample['segment']}: plain "
            f"{sample['plain_cpu_ms']:8.1f} ms CPU  vnni / plain {sample['vnni_cpu_ratio']:.3f}  control / plain "
            f"{sample['control_cpu_ratio']:.3f}  identical {sample['identical']}")

    calls = {name: synths[name].synthesize_timed for name in NAMES}
    return paired_calls(calls, segments, rounds, compare, report)


def run(*, quick: bool = False, model_dir=None, log=print) -> Result:
    from backends.assets.onnx_vnni import cpu_has_vnni

    files = model_files(model_dir)
    result = Result("onnx_vnni", quick, command_line("onnx_vnni", quick))
    if not cpu_has_vnni() or files.onnx_windowed_vnni is None:
        why = "this CPU has no VNNI" if not cpu_has_vnni() else f"{files.root} has no VNNI twins (kokoro-serve assets)"
        raise RuntimeError(f"{why}: the runtime reads the plain pair here, there is nothing to compare")
    from backends.config import BackendConfig
    from backends.factory import create_pipeline

    pipeline = create_pipeline(BackendConfig.defaults(), files)
    texts = SEGMENT_TEXTS[:3] if quick else SEGMENT_TEXTS
    segments = [pipeline.plan(t, voice=VOICE, speed=1.0, lang=LANG, fast_first=False)[0] for t in texts]
    rounds = 1 if quick else 3
    every = os.cpu_count() or 1
    result.config = {"voice": VOICE, "segments": len(segments), "rounds": rounds, "threads": sorted({1, every}),
                     "plain": [p.name for p in files.onnx_windowed], "vnni": [p.name for p in files.onnx_windowed_vnni]}
    for threads in sorted({1, every}):
        log(f"{len(segments)} segments x {rounds} rounds, {threads} intra-op thread(s): plain / vnni / control")
        synths = _synthesizers(files, threads)
        result.samples += _rounds(synths, segments, rounds, threads, log)
        del synths
    for threads in sorted({1, every}):
        rows = [s for s in result.samples if s["threads"] == threads]
        for key in ("plain_cpu_ms", "vnni_cpu_ms", "plain_ms", "vnni_ms",
                    "vnni_cpu_ratio", "control_cpu_ratio", "vnni_ratio", "control_ratio"):
            result.medians[f"t{threads}_{key}"] = rnd(median(s[key] for s in rows), 4 if "ratio" in key else 1)
    same = sum(s["identical"] for s in result.samples)
    result.summary = {"identical": same, "calls": len(result.samples)}
    result.target("VNNI twins' audio and durations, the plain pair's sample for sample", "every call",
                  f"{same}/{len(result.samples)}", same == len(result.samples))
    for threads in sorted({1, every}):
        ratio = result.medians[f"t{threads}_vnni_cpu_ratio"]
        result.target(f"vnni / plain CPU time per segment, {threads} thread(s) (median of paired calls)", "< 1",
                      ratio, ratio < 1)
    result.notes.append("the runtimes share this process and its cores; the control is the plain pair in a second "
                        "runtime, so its ratio to the first is what placement and noise alone make of two identical "
                        "graphs")
    return result


def body(data: dict) -> str:
    m, s = data["medians"], data["summary"]
    rows = [[f"{t} thread(s)", m[f"t{t}_plain_cpu_ms"], m[f"t{t}_vnni_cpu_ms"], m[f"t{t}_vnni_cpu_ratio"],
             m[f"t{t}_control_cpu_ratio"], m[f"t{t}_plain_ms"], m[f"t{t}_vnni_ms"], m[f"t{t}_vnni_ratio"]]
            for t in data["config"]["threads"]]
    table = markdown_table(["intra-op threads", "plain CPU ms", "vnni CPU ms", "vnni / plain CPU", "control / plain CPU",
                            "plain wall ms", "vnni wall ms", "vnni / plain wall"], rows)
    return (f"Medians per segment over {data['config']['segments']} segments x {data['config']['rounds']} rounds, "
            f"the order rotating. The twins' audio and durations were the plain pair's sample for sample in "
            f"**{s['identical']}/{s['calls']}** calls.\n\n{table}")

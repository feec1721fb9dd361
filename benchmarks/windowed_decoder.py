"""An early cut that keeps the sentence's prosody: the decoder over a window of the whole sentence.

The windowed decode (:func:`backends.torch_forward.decode_window`; docs/speech-quality.md explains
it) against today's fragment read alone, for each text of :data:`benchmarks.texts.QUALITY_TEXTS`
whose first sentence the default planner cuts inside a clause, on the torch runtime (deterministic
source, voice jm_kumo) or, with ``--runtime onnx``, the ONNX runtime's predict and decode graphs
(:mod:`backends.onnx_windowed`), both against one decode of the whole sentence: log-spectral distance over
its speech frames, pitch at the cut (at the same frames, and through the quality benchmark's DTW
path, :func:`benchmarks.quality.measure`), 2–8 kHz energy at the join and its excess over the
reference's there, and the CPU and wall time of the first call, interleaved in the same run.
``--quick``: context 8 frames (the runtime's), two timing rounds; the full run also tries 0, 4 and
16 frames.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from . import speech_measures as sm
from .quality import cut_summary, measure, pitch_target
from .raw import LANG, VOICE, model_files
from .results import Result, command_line, load_average, markdown_table, mean, rnd
from .texts import QUALITY_TEXTS

CONTEXTS = (0, 4, 8, 16)
QUICK_CONTEXTS = (8,)
#: The goal for the 2-8 kHz energy at a windowed join over the reading's there; the pitch goal is quality's.
BURST_DB = 3.0


def _first_sentence(pipeline: Any, text: str, windowed: bool) -> list[Any]:
    """The default plan's segments of the first sentence (a short first segment: five words);
    ``windowed``: as planned for a runtime that decodes windows (each carries the sentence)."""
    segments = pipeline.plan(text, voice=VOICE, lang=LANG, short_first_words=5, windowed=windowed)
    out = []
    for seg in segments:
        out.append(seg)
        if seg.ends == "sentence":
            break
    return out


class _Model:
    """The torch model and voice, with the calls this benchmark compares."""

    def __init__(self, synth: Any):
        import torch

        self.torch, self.synth, self.model = torch, synth, synth._model

    def style(self, n_tokens: int) -> Any:
        return self.torch.from_numpy(self.synth._style(VOICE, n_tokens)[None].copy())

    def alone(self, tokens: list[int]) -> np.ndarray:
        from backends.torch_forward import forward_batch

        with self.torch.inference_mode():
            out = forward_batch(self.model, [tokens], self.style(len(tokens)), self.torch.ones(1), deterministic=True)
            return out.audio[0, : int(out.audio_lengths[0])].numpy()

    def windows(self, tokens: list[int], ranges: list[tuple[int, int]], context: int,
                only_first: bool = False) -> tuple[list[np.ndarray], list[tuple[int, int]]]:
        """Each token range's window of the sentence (audio, frame range); ``only_first``: the
        first window alone (what the first call of a request computes)."""
        from backends.torch_forward import boundary_frame, decode_window, predict

        with self.torch.inference_mode():
            style = self.style(len(tokens))
            p = predict(self.model, [tokens], style, self.torch.ones(1))
            frames = [(boundary_frame(p, a, len(tokens)), boundary_frame(p, b, len(tokens))) for a, b in ranges]
            picked = frames[:1] if only_first else frames
            return [decode_window(self.model, p, style, a, b, context).numpy() for a, b in picked], frames


class _OnnxModel:
    """The ONNX runtime's graphs (the whole model, and its predict and decode graphs), with the
    calls this benchmark compares."""

    def __init__(self, synth: Any):
        self.synth = synth
        self.predict, self.decode = synth._windows[False]

    def _style(self, n_tokens: int) -> np.ndarray:
        style: np.ndarray = self.synth.voices.style(VOICE, n_tokens).reshape(1, -1).astype(np.float32)
        return style

    def _inputs(self, tokens: list[int]) -> dict[str, np.ndarray]:
        return {self.synth._tokens_input: np.array([[0, *tokens, 0]], np.int64), "style": self._style(len(tokens)),
                "speed": np.ones(1, self.synth._speed_dtype)}

    def alone(self, tokens: list[int]) -> np.ndarray:
        audio: np.ndarray = self.synth._session.run([self.synth._audio_output], self._inputs(tokens))[0]
        return audio.reshape(-1)

    def windows(self, tokens: list[int], ranges: list[tuple[int, int]], context: int,
                only_first: bool = False) -> tuple[list[np.ndarray], list[tuple[int, int]]]:
        """As :meth:`_Model.windows`, on the predict and decode graphs."""
        from backends.onnx_windowed import DURATIONS, FRAME_SAMPLES, WINDOW_TENSORS
        from backends.windows import boundary_frame, decode_range

        names = [DURATIONS, *WINDOW_TENSORS]
        p = dict(zip(names, self.predict.run(names, self._inputs(tokens)), strict=True))
        per_token, energy = p[DURATIONS].reshape(-1), p["n"].reshape(-1)
        frames = [(boundary_frame(per_token, energy, a, len(tokens)), boundary_frame(per_token, energy, b, len(tokens)))
                  for a, b in ranges]
        out = []
        for start, stop in frames[:1] if only_first else frames:
            lo, hi = decode_range(start, stop, int(p["asr"].shape[-1]), context)
            feed = {"asr": p["asr"][:, :, lo:hi], "f0": p["f0"][:, 2 * lo : 2 * hi], "n": p["n"][:, 2 * lo : 2 * hi],
                    "source": p["source"][:, lo * FRAME_SAMPLES : hi * FRAME_SAMPLES], "style": self._style(len(tokens))}
            audio = self.decode.run(["audio"], feed)[0].reshape(-1)
            out.append(audio[(start - lo) * FRAME_SAMPLES : (stop - lo) * FRAME_SAMPLES])
        return out, frames


def _onnx_synth(files: Any, voices: Any, scratch: Path) -> Any:
    """The ONNX runtime (one thread) with the predict and decode graphs, made in ``scratch`` beside
    links to the model directory's files when it lacks them."""
    from backends.assets import ModelFiles
    from backends.onnx_runtime import OnnxSynthesizer
    from backends.onnx_timed import source_name
    from backends.onnx_windowed import decode_name, predict_name, split_model

    if files.onnx_windowed is None:
        src = files.root / source_name(files.onnx.name)
        for path in {files.onnx, src, files.voices, files.config}:
            (scratch / path.name).symlink_to(path.resolve())
        with open(scratch / predict_name(src.name), "wb") as pred, open(scratch / decode_name(src.name), "wb") as dec:
            split_model(src, pred, dec)
        files = ModelFiles.discover(scratch)
    synth = OnnxSynthesizer(files, voices, threads=1)
    synth.load()
    return synth


def _tokens(synth: Any, segments: list[Any]) -> tuple[list[int], list[tuple[int, int]]]:
    """The sentence's tokens and each segment's range of them (its share of the sentence)."""
    context = segments[0].sentence
    ranges = [(len(synth.tokens(context.phonemes[: s.sentence.start])), len(synth.tokens(context.phonemes[: s.sentence.end])))
              for s in segments]
    return synth.tokens(context.phonemes), ranges


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


def run(*, quick: bool, model_dir: Path | None = None, log=print, runtime: str | None = None, **_: Any) -> Result:
    import tempfile

    from backends.config import BackendConfig
    from backends.factory import create_pipeline
    from backends.joins import shape_segment
    from backends.torch_runtime import TorchSynthesizer
    from backends.voices import VoiceStore

    result = Result("windowed_decoder", quick, command_line("windowed_decoder", quick))
    onnx = runtime == "onnx"
    files = model_files(model_dir, torch=not onnx)
    voices = VoiceStore.from_path(files.voices, VOICE)
    m: Any
    if onnx:
        with tempfile.TemporaryDirectory(prefix="windowed-onnx-") as scratch:  # the sessions hold the graphs
            synth: Any = _onnx_synth(files, voices, Path(scratch))
        m = _OnnxModel(synth)
    else:
        synth = TorchSynthesizer(files.root, voices, device="cpu", dtype="float32", deterministic=True)
        synth.load()
        m = _Model(synth)
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
        tokens, ranges = _tokens(synth, segments)
        reference = m.alone(tokens)
        sample: dict[str, Any] = {"text": text, "fragment": segments[0].text, "segments": len(segments)}
        # today: each segment alone, joined as the engine joins them
        chunks = []
        for seg in _first_sentence(pipeline, text, False):
            audio, _ = shape_segment(seg, m.alone(synth.tokens(seg.phonemes)), None)
            chunks.append((audio, seg.ends))
        today = measure(text, chunks, reference, words=False)["joins"][0]
        sample["alone"] = {"cut_st": today["cut_st"], "click_db": today["click_db"]}
        f0_ref = sm.pitch(reference)
        for context in contexts:
            decoded, frames = m.windows(tokens, ranges, context)
            windows = [shape_segment(seg, w, None)[0] for seg, w in zip(segments, decoded, strict=True)]
            joined = np.concatenate(windows)
            cut = frames[0][1] * 600
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
        # wall time) and wall time, interleaved
        times: dict[str, list[tuple[float, float]]] = {"alone": [], **{f"window_{c}": [] for c in contexts}}
        fragment = tokens[ranges[0][0] : ranges[0][1]]
        for _ in range(rounds):
            for name in times:
                c0, w0 = time.process_time(), time.perf_counter()
                if name == "alone":
                    m.alone(fragment)
                else:
                    m.windows(tokens, ranges, int(name.split("_")[1]), only_first=True)
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

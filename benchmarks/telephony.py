"""Telephony: is 8 kHz G.711 still the same speech? A live server reads the held-out plain sentences
over Deepgram's REST route (``POST /v1/speak``, as a telephony agent's client asks) four times each:
24 kHz linear16 (the reference), 8 kHz linear16 (the control: the telephone band with no codec),
8 kHz μ-law (``encoding=mulaw&sample_rate=8000``, what Twilio and other SIP/PSTN bridges carry) and
8 kHz A-law. Each is decoded (FFmpeg's G.711 decoders, PyAV) and transcribed by pocketsphinx; the
word error rate against the sentence's spoken form, per format. The band's cost is the 8 kHz PCM
reading's WER against the 24 kHz one; G.711's own cost is each codec's WER against the 8 kHz PCM
reading, so the codec is judged against the band limit and not blamed for it. The length of each
8 kHz reading against the reference's checks that no audio was lost. docs/voice-agents.md quotes
the result.
"""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np

from . import speech_measures as sm
from .languages import spoken_words
from .live import LiveServer
from .raw import VOICE
from .results import Result, command_line, load_average, markdown_table, rnd
from .texts import PLAIN_SENTENCES

#: The reference reading, the control (the telephone band, no codec) and the codecs judged against it.
REFERENCE, CONTROL = "linear16 24 kHz", "linear16 8 kHz"
CODECS = ("mu-law 8 kHz", "A-law 8 kHz")
#: How many points of WER the telephone band may cost (8 kHz PCM against 24 kHz PCM), and G.711 on
#: top of it (each codec against 8 kHz PCM): the band drops everything above 4 kHz, the codec only
#: adds quantisation noise some 38 dB down.
BAND_POINTS, CODEC_POINTS = 10.0, 5.0
#: label -> the query of ``POST /v1/speak`` and the rate it answers at
FORMATS: dict[str, tuple[dict[str, Any], int]] = {
    REFERENCE: ({"encoding": "linear16", "container": "none", "sample_rate": 24000}, 24000),
    CONTROL: ({"encoding": "linear16", "container": "none", "sample_rate": 8000}, 8000),
    CODECS[0]: ({"encoding": "mulaw", "container": "none", "sample_rate": 8000}, 8000),
    CODECS[1]: ({"encoding": "alaw", "container": "none", "sample_rate": 8000}, 8000),
}


def decode(data: bytes, encoding: str, rate: int) -> np.ndarray:
    """float samples in [-1, 1] of raw linear16 or G.711 bytes."""
    if encoding == "linear16":
        return np.frombuffer(data, "<i2").astype(np.float32) / 32768
    import av

    ctx = av.CodecContext.create("pcm_mulaw" if encoding == "mulaw" else "pcm_alaw", "r")
    ctx.sample_rate = rate
    ctx.layout = "mono"
    frames = ctx.decode(av.Packet(data))
    return np.concatenate([f.to_ndarray().reshape(-1) for f in frames]).astype(np.float32) / 32768


def run(*, quick: bool = False, model_dir=None, log=print) -> Result:
    sentences = PLAIN_SENTENCES[:4] if quick else PLAIN_SENTENCES
    result = Result("telephony", quick, command_line("telephony", quick),
                    config={"voice": VOICE, "sentences": list(sentences), "formats": {k: v[0] for k, v in FORMATS.items()},
                            "load_average_at_start": load_average()})
    with LiveServer(env={"KOKORO_DEFAULT_VOICE": VOICE}, model_dir=model_dir, log=log) as srv:
        for sentence in sentences:
            ref = spoken_words(sentence)
            lengths: dict[str, float] = {}
            for label, (query, rate) in FORMATS.items():
                r = httpx.post(f"{srv.url}/v1/speak", params={"model": VOICE, **query}, json={"text": sentence},
                               timeout=300)
                r.raise_for_status()
                audio = decode(r.content, query["encoding"], rate)
                lengths[label] = len(audio) / rate
                heard = sm.Transcriber()(audio, rate)
                result.samples.append({"format": label, "sentence": sentence, "heard": " ".join(heard),
                                       "edits": sm.word_edits(ref, heard), "words": len(ref),
                                       "seconds": rnd(lengths[label], 3)})
            log(f"  {sentence[:40]!r}: " + ", ".join(f"{k} {v:.2f} s" for k, v in lengths.items()))
    table = {}
    for label in FORMATS:
        rows = [s for s in result.samples if s["format"] == label]
        table[label] = {"wer_percent": rnd(100.0 * sum(r["edits"] for r in rows) / max(1, sum(r["words"] for r in rows)), 1),
                        "seconds": rnd(sum(r["seconds"] for r in rows), 2)}
    result.medians = table
    result.summary = {"formats": table}
    ref_wer, control_wer = table[REFERENCE]["wer_percent"], table[CONTROL]["wer_percent"]
    result.summary["band_cost_points"] = rnd(control_wer - ref_wer, 1)
    result.summary["codec_cost_points"] = {label: rnd(table[label]["wer_percent"] - control_wer, 1)
                                           for label in CODECS}
    result.target(f"{CONTROL}: word error rate within {BAND_POINTS:.0f} points of {REFERENCE} (the band's cost)",
                  f"<= {ref_wer + BAND_POINTS:.1f} %", control_wer, control_wer <= ref_wer + BAND_POINTS)
    for label in CODECS:
        wer = table[label]["wer_percent"]
        result.target(f"{label}: word error rate within {CODEC_POINTS:.0f} points of {CONTROL} (the codec's cost)",
                      f"<= {control_wer + CODEC_POINTS:.1f} %", wer, wer <= control_wer + CODEC_POINTS)
    for label in (CONTROL, *CODECS):
        lost = abs(table[label]["seconds"] - table[REFERENCE]["seconds"])
        result.target(f"{label}: the same length as the 24 kHz reading", "within 0.05 s a sentence", rnd(lost, 3),
                      lost <= 0.05 * len(sentences))
    result.notes.append("pocketsphinx's en-us model hears 16 kHz: the 24 kHz reading is resampled down to it, the "
                        "8 kHz ones up (the telephone band is what is left of them)")
    result.notes.append("measured on a shared 2-core machine; the load averages are in config and machine")
    return result


def body(data: dict[str, Any]) -> str:
    rows = [[label, v["wer_percent"], v["seconds"]] for label, v in data["summary"]["formats"].items()]
    text = ("Word error rate of the same sentences (pocketsphinx, %, lower is better) by wire format:\n\n"
            + markdown_table(["format", "WER (%)", "audio (s)"], rows))
    summary = data["summary"]
    if "band_cost_points" in summary:
        codec = ", ".join(f"{k} {v:+.1f}" for k, v in summary["codec_cost_points"].items())
        text += (f"\n\nThe telephone band (8 kHz PCM against 24 kHz PCM): {summary['band_cost_points']:+.1f} points. "
                 f"G.711 on top of the band (against 8 kHz PCM): {codec} points.")
    return text

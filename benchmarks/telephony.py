"""Telephony: is 8 kHz G.711 still the same speech? A live server reads the held-out plain sentences
over Deepgram's REST route (``POST /v1/speak``, as a telephony agent's client asks) twice each: 24 kHz
linear16 (the reference) and 8 kHz μ-law (``encoding=mulaw&sample_rate=8000``, what Twilio and other
SIP/PSTN bridges carry), and A-law for the same. Each is decoded (FFmpeg's G.711 decoders, PyAV) and
transcribed by pocketsphinx; the word error rate against the sentence's spoken form, per format.
The length of each telephony reading against the reference's checks that no audio was lost.
docs/voice-agents.md quotes the result; what counts is the difference from the 24 kHz reading.
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

#: label -> the query of ``POST /v1/speak`` and the rate it answers at
FORMATS: dict[str, tuple[dict[str, Any], int]] = {
    "linear16 24 kHz": ({"encoding": "linear16", "container": "none", "sample_rate": 24000}, 24000),
    "mu-law 8 kHz": ({"encoding": "mulaw", "container": "none", "sample_rate": 8000}, 8000),
    "A-law 8 kHz": ({"encoding": "alaw", "container": "none", "sample_rate": 8000}, 8000),
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
    ref_wer = table["linear16 24 kHz"]["wer_percent"]
    for label in ("mu-law 8 kHz", "A-law 8 kHz"):
        wer = table[label]["wer_percent"]
        result.target(f"{label}: word error rate within 10 points of 24 kHz linear16", f"<= {ref_wer + 10:.1f} %", wer,
                      wer <= ref_wer + 10)
        lost = abs(table[label]["seconds"] - table["linear16 24 kHz"]["seconds"])
        result.target(f"{label}: the same length as the 24 kHz reading", "within 0.05 s a sentence", rnd(lost, 3),
                      lost <= 0.05 * len(sentences))
    result.notes.append("pocketsphinx's en-us model hears 16 kHz: the 24 kHz reading is resampled down to it, the "
                        "8 kHz ones up (the telephone band is what is left of them)")
    result.notes.append("measured on a shared 2-core machine; the load averages are in config and machine")
    return result


def body(data: dict[str, Any]) -> str:
    rows = [[label, v["wer_percent"], v["seconds"]] for label, v in data["summary"]["formats"].items()]
    return ("Word error rate of the same sentences (pocketsphinx, %, lower is better) by wire format:\n\n"
            + markdown_table(["format", "WER (%)", "audio (s)"], rows))

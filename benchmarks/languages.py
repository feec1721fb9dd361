"""Languages: what each G2P front end costs, and which English G2P the listener understands better.

Front-end cost: a fresh Python process per front end (``backends.text.g2p.frontends.G2P``) imports it, builds it
and phonemises one sentence (time, and growth of peak RSS). English intelligibility: a live server
per ``KOKORO_ENGLISH_G2P`` reads the held-out sentences over ``POST /invocations`` and pocketsphinx
transcribes each; the word error rate is against the sentence's spoken form (``backends.text.normalize``),
for plain sentences and for numbers, money, dates and abbreviations. docs/languages.md explains
the method and the results; what counts is the difference between the two G2Ps.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import httpx
import numpy as np

from backends.config import BackendConfig

from . import speech_measures as sm
from .live import LiveServer
from .raw import VOICE
from .results import Result, command_line, load_average, markdown_table, rnd
from .texts import PLAIN_SENTENCES, WRITTEN_SENTENCES

#: Front ends measured: (label, language, KOKORO_ENGLISH_G2P value).
FRONT_ENDS = (
    ("English, misaki", "en-us", "misaki"),
    ("English, espeak-ng", "en-us", "espeak"),
    ("Japanese (OpenJTalk + misaki romaniser)", "ja", "misaki"),
    ("Mandarin (misaki)", "cmn", "espeak"),
    ("Spanish (espeak-ng)", "es", "misaki"),
)
SAMPLES = {"en-us": "The train leaves at seven.", "ja": "東京駅から新幹線で大阪へ行きます。",
           "cmn": "今天天气很好。", "es": "El tren sale a las siete."}
_PROBE = """
import json, resource, sys, time
def rss(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
import backends.text.g2p.frontends as g
g2p = g.G2P(english=sys.argv[2], torch_free=True)  # as an ONNX server builds it
g2p.phonemize("a", "fr-fr")  # espeak-ng itself, which every server loads: not the front end's cost
base, t0 = rss(), time.perf_counter()
g2p.preload(sys.argv[1])
built = time.perf_counter() - t0
t1 = time.perf_counter(); g2p.phonemize(sys.argv[3], sys.argv[1]); first = time.perf_counter() - t1
t2 = time.perf_counter(); g2p.phonemize(sys.argv[3], sys.argv[1]); again = time.perf_counter() - t2
print(json.dumps({"load_s": built, "first_call_s": first, "call_s": again, "rss_mib": rss() - base}))
"""


def front_end_cost(lang: str, english: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _PROBE, lang, english, SAMPLES[lang]],
                         capture_output=True, text=True, check=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


#: Spellings the recogniser and the normaliser write differently for one spoken form.
_SAME = ((r"\b(?:pee em|p m)\b", "pm"), (r"\b(?:ay em|a m)\b", "am"))


def _fold(words: str) -> list[str]:
    for pattern, repl in _SAME:
        words = re.sub(pattern, repl, words)
    return words.split()


def spoken_words(sentence: str) -> list[str]:
    from backends.text.normalize import normalize_english

    return _fold(" ".join(sm.words(normalize_english(sentence).replace("-", " "))))


def _intelligibility(english: str, sets: dict[str, tuple[str, ...]], model_dir, log) -> dict[str, Any]:
    transcribe = sm.Transcriber()
    rows: list[dict[str, Any]] = []
    with LiveServer(env={"KOKORO_ENGLISH_G2P": english, "KOKORO_DEFAULT_VOICE": VOICE}, model_dir=model_dir,
                    log=log) as srv, httpx.Client(timeout=120.0) as client:
        for set_name, sentences in sets.items():
            for sentence in sentences:
                r = client.post(f"{srv.url}/invocations", json={"text": sentence, "format": "pcm", "voice": VOICE})
                r.raise_for_status()
                ref, audio = spoken_words(sentence), np.frombuffer(r.content, "<i2").astype(np.float32) / 32768
                heard = _fold(" ".join(transcribe(audio)))
                edits, n = sm.word_edits(ref, heard), len(ref)
                rows.append({"g2p": english, "set": set_name, "text": sentence, "reference": " ".join(ref),
                             "heard": " ".join(heard), "edits": edits, "words": n})
                log(f"  {english:7} {set_name:8} WER {edits}/{n}  {sentence!r} -> {' '.join(heard)!r}")
    return {"rows": rows, "startup_s": srv.startup_s, "peak_rss_mib": srv.peak_rss_mib}


def run(*, quick: bool = False, model_dir=None, log=print) -> Result:
    sets = {"plain": PLAIN_SENTENCES, "written": WRITTEN_SENTENCES}
    sets = {k: v[:6] if quick else v for k, v in sets.items()}
    result = Result("languages", quick, command_line("languages", quick),
                    config={"voice": VOICE, "sets": {k: list(v) for k, v in sets.items()},
                            "load_average_at_start": load_average()})
    costs = {}
    for label, lang, english in FRONT_ENDS:
        costs[label] = {k: rnd(v, 3) for k, v in front_end_cost(lang, english).items()}
        log(f"  front end {label}: {costs[label]}")
    servers = {}
    for english in ("espeak", "misaki"):
        measured = _intelligibility(english, sets, model_dir, log)
        result.samples.extend(measured["rows"])
        servers[english] = {"startup_s": rnd(measured["startup_s"], 2), "peak_rss_mib": measured["peak_rss_mib"]}
    table: dict[str, dict[str, float | None]] = {}
    for english in ("espeak", "misaki"):
        for set_name in sets:
            rows = [s for s in result.samples if s["g2p"] == english and s["set"] == set_name]
            table.setdefault(english, {})[set_name] = rnd(
                100.0 * sum(r["edits"] for r in rows) / max(1, sum(r["words"] for r in rows)), 1)
    result.medians = {"wer_percent": table}
    result.summary = {"front_ends": costs, "servers": servers, "wer_percent": table}
    default = BackendConfig.defaults().english_g2p
    best = min(table[g]["written"] for g in table)
    result.target(f"the default English G2P ({default}) within one point of the best WER on written forms",
                  f"<= {best + 1.0:.1f} %", table[default]["written"], table[default]["written"] <= best + 1.0)
    result.target("misaki's WER on plain sentences no worse than espeak-ng's", "<= espeak-ng",
                  table["misaki"]["plain"], table["misaki"]["plain"] <= table["espeak"]["plain"])
    result.notes.append("measured on a shared 2-core machine; the load averages are in config and machine")
    return result


def body(data: dict[str, Any]) -> str:
    s = data["summary"]
    wer_rows = [[g, v["plain"], v["written"], s["servers"][g]["startup_s"], s["servers"][g]["peak_rss_mib"]]
                for g, v in s["wer_percent"].items()]
    cost_rows = [[label, c["load_s"], c["first_call_s"], c["call_s"], c["rss_mib"]] for label, c in s["front_ends"].items()]
    return (
        "English word error rate (pocketsphinx, %, lower is better) and server start-up:\n\n"
        + markdown_table(["English G2P", "plain", "numbers, money, dates", "server start (s)", "server peak RSS (MiB)"],
                         wer_rows)
        + "\n\nFront ends (a fresh process each; load = import + build, RSS growth over espeak-ng):\n\n"
        + markdown_table(["front end", "load (s)", "first call (s)", "next call (s)", "RSS (MiB)"], cost_rows)
    )

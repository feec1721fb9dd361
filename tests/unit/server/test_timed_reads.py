"""A timed request reads its text once: word timings are cut at the word spans of the reading each
segment was synthesised from, so asking for them costs no G2P call (and no front-end lock) on any
timed route — OpenAI's ``/v1/audio/speech/timed``, ElevenLabs' ``/with-timestamps``, Cartesia's
word timestamps — and the timed words are the text's, in order, inside the audio. The real app,
backend and text pipeline with a G2P that counts its front-end reads; the fake runtime reports
durations (as torch and the timed ONNX model do)."""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from backends.runtimes.onnx import load_vocab
from backends.text.g2p.frontends import G2P, FrontEnd
from backends.text.planner import TextPipeline
from server.settings import Settings
from tests.support.app import build_app, fake_synth, wait_for

TEXT = "Hello there, this is a short test. Pi is about 3.14, and the date was 2024-03-05!"
ONE_SEGMENT = "Hello there."


class CountingG2P(G2P):
    """The server's G2P, counting every text its front ends read."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def front_end(self, lang: str) -> FrontEnd:
        inner = super().front_end(lang)

        def counted(text: str) -> Any:
            self.reads.append(text)
            return inner(text)

        return counted


@pytest.fixture
def counted() -> tuple[CountingG2P, TestClient]:
    import kokoro_onnx

    g2p = CountingG2P()
    vocab = load_vocab(Path(kokoro_onnx.__file__).parent / "config.json")
    pipeline = TextPipeline(g2p.phonemize, vocab, segment_phonemes=60, read=g2p.phonemize_words)
    app = build_app(fake_synth(timed=True), pipeline=pipeline, settings=Settings())
    with TestClient(app) as client:
        wait_for(lambda: client.get("/ping").status_code == 200)
        yield g2p, client


def reads_of(g2p: CountingG2P, call: Callable[[], Any]) -> tuple[int, Any]:
    before = len(g2p.reads)
    out = call()
    return len(g2p.reads) - before, out


def test_openai_timed_speech_reads_no_more_than_untimed_speech(counted):
    g2p, client = counted
    body = {"model": "kokoro", "input": TEXT, "voice": "af_test", "response_format": "pcm"}
    untimed, r = reads_of(g2p, lambda: client.post("/v1/audio/speech", json=body))
    assert r.status_code == 200
    timed, r = reads_of(g2p, lambda: client.post("/v1/audio/speech/timed", json=body))
    assert r.status_code == 200, r.text
    assert timed == untimed  # the old code read each word again: 16 more
    result = r.json()
    words = result["words"]
    assert [w["word"] for w in words] == TEXT.split()
    assert all(a["end"] <= b["start"] + 1e-3 for a, b in itertools.pairwise(words))
    assert 0 <= words[0]["start"] and words[-1]["end"] <= result["duration"] + 1e-3
    assert all(w["end"] > w["start"] for w in words)


def test_a_one_segment_timed_request_is_read_once(counted):
    g2p, client = counted
    body = {"model": "kokoro", "input": ONE_SEGMENT, "voice": "af_test", "response_format": "pcm"}
    reads, r = reads_of(g2p, lambda: client.post("/v1/audio/speech/timed", json=body))
    assert r.status_code == 200 and [w["word"] for w in r.json()["words"]] == ["Hello", "there."]
    assert reads == 1


def test_elevenlabs_with_timestamps_reads_no_more_than_plain_audio(counted):
    g2p, client = counted
    base = "/v1/text-to-speech/af_test"
    body = {"text": TEXT}
    untimed, r = reads_of(g2p, lambda: client.post(base, params={"output_format": "pcm_24000"}, json=body))
    assert r.status_code == 200
    timed, r = reads_of(g2p, lambda: client.post(f"{base}/with-timestamps", params={"output_format": "pcm_24000"},
                                                 json=body))
    assert r.status_code == 200, r.text
    assert timed == untimed
    alignment = r.json()["alignment"]
    assert "".join(alignment["characters"]).split() == TEXT.split()
    starts = alignment["character_start_times_seconds"]
    assert starts == sorted(starts)


def test_cartesia_word_timestamps_read_no_more_than_untimed(counted):
    g2p, client = counted

    def speak(timestamps: bool) -> list[dict]:
        with client.websocket_connect("/tts/websocket?cartesia_version=2026-03-01") as ws:
            ws.send_text(json.dumps({
                "context_id": "c", "transcript": TEXT, "continue": False, "model_id": "sonic-3",
                "voice": {"mode": "id", "id": "af_test"}, "add_timestamps": timestamps,
                "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000},
            }))
            out = []
            while not out or out[-1]["type"] not in ("done", "error"):
                out.append(json.loads(ws.receive_text()))
            return out

    untimed, _ = reads_of(g2p, lambda: speak(False))
    timed, messages = reads_of(g2p, lambda: speak(True))
    assert timed == untimed
    stamps = [m["word_timestamps"] for m in messages if m["type"] == "timestamps"]
    words = [w for s in stamps for w in s["words"]]
    starts = [t for s in stamps for t in s["start"]]
    assert words == TEXT.split() and starts == sorted(starts)
    audio = sum(len(base64.b64decode(m["data"])) for m in messages if m["type"] == "chunk") / 2 / 24000
    assert max(t for s in stamps for t in s["end"]) <= audio + 1e-3

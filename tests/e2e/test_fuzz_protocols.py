"""The fuzz suite's quick run (``python -m benchmarks fuzz --quick --backend fake``: 300 random and
malformed frames at each WebSocket protocol — bidi, Deepgram, Cartesia, ElevenLabs — against a server
process, each frame followed by a probe the protocol must answer): every server message is one the
protocol defines, no close but the protocol's own (1009 for an oversized message), every probe
answered (the session stays up, in order) and ``/ping`` 200 throughout. The 10,000-frame run is the
suite's default (docs/benchmarks.md); the bidi route's decoders are fuzzed in process, with
hypothesis, in tests/contract/test_reliability_fuzz.py."""

from __future__ import annotations

import json

import pytest

from benchmarks.__main__ import main
from benchmarks.results import validate

pytestmark = [pytest.mark.bench, pytest.mark.subprocess]


def test_fuzz_quick_every_frame_answered_or_ignored_and_everything_stays_up(tmp_path, model_dir, monkeypatch):
    monkeypatch.setenv("KOKORO_MODEL_DIR", str(model_dir))
    status = main(["fuzz", "--quick", "--backend", "fake", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "fuzz.json").read_text())
    assert validate(data) == []
    rows = data["samples"][0]["protocols"]
    assert [r["protocol"] for r in rows] == ["bidi", "deepgram", "cartesia", "elevenlabs"]
    for row in rows:
        assert row["failures"] == 0, row["failure_examples"]
        assert row["frames"] == 300 and row["probes_answered"] >= row["frames"] - row["reconnects"]
        assert row["typed_messages"] > row["probes_answered"]  # the fuzzed frames got answers of their own
        assert set(row["closes"]) <= {"1000", "1008", "1009"}
    assert set(data["samples"][0]["pings"]) == {"200"} and data["samples"][0]["ping_after"] == 200
    assert status == 0

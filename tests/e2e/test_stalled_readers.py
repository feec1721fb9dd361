"""A sentence behind clients that never read, against ``python -m server serve`` as a real
subprocess (fake runtime, sequential mode) over real loopback sockets.

Two sessions ask for long texts and never read; while the kernel's socket buffers take their
audio the server cannot tell them from listeners who fell behind, and they soon are behind (the
fake is set slower than two real-time streams need: overload, which the server logs). A third
session's sentence must still complete within its time alone plus one segment of theirs: clients
that do not read are never streams a newcomer waits behind.
"""

from __future__ import annotations

import json

import pytest

from tests.support.app import wait_for
from tests.support.live import RawWS, ServerProcess, answer

pytestmark = pytest.mark.subprocess

LONG = " ".join(f"Sentence number {i} keeps the synthesis going for quite a while longer." for i in range(60))
SENTENCE = "Could you tell me the time of the next train to the coast, please?"
PHONEME_S = 0.06  # runtime seconds per phoneme: 0.075 s of fake audio per phoneme, two streams ask 0.075
SEGMENT_PHONEMES = 60  # a long segment: ~3.6 s of runtime


def test_a_sentence_completes_within_its_time_alone_plus_one_segment(tmp_path):
    log = tmp_path / "server.log"
    srv = ServerProcess(log, KOKORO_BACKEND="fake", KOKORO_MODE="sequential", KOKORO_FAKE_SEGMENT_S="0",
                        KOKORO_FAKE_PHONEME_S=str(PHONEME_S), KOKORO_SEGMENT_PHONEMES=str(SEGMENT_PHONEMES))
    stalled: list[RawWS] = []
    try:
        srv.wait_ready()
        alone = answer(srv.ws_url, SENTENCE, "sentence")["elapsed_s"]
        for i in range(2):
            ws = RawWS(srv.port)
            ws.send_text(json.dumps({"text": LONG, "request_id": f"stalled-{i}"}))
            stalled.append(ws)
        wait_for(lambda: "overloaded:" in log.read_text(), timeout=90)  # the two streams fell behind
        behind = answer(srv.ws_url, SENTENCE, "sentence")["elapsed_s"]
        one_segment = SEGMENT_PHONEMES * PHONEME_S * 1.5  # a long segment, with room for a loaded machine
        assert behind <= alone + one_segment, (behind, alone)
    finally:
        for ws in stalled:
            ws.abort()
        srv.stop()

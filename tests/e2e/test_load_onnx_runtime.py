"""The load check with real inference: ``python -m server serve`` with the real ONNX
runtime, 4 sessions x 2 pipelined sentences at once — 0 lost, 0 misordered, every request answered
with speech, /ping answered 200 throughout while inference holds the cores (p99 printed; the
numbers live in benchmarks/results/load.json)."""

from __future__ import annotations

import httpx
import pytest

from benchmarks.load import load_run
from tests.support.inproc import metric
from tests.support.live import ServerProcess

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(300)]  # real inference under load: minutes on a loaded CPU

#: Four distinct sentences, each about 1.7 s of speech at speed 2 (the benchmark's own are longer, ~2.5 s
#: at 1.5): ordering, loss and /ping under load need real inference, not long inference.
SENTENCES = ["Every request is answered in order.", "Pipelined sentences never interleave.",
             "Answers come back in the order sent.", "A journey begins with a single step."]


@pytest.mark.slow
def test_four_sessions_of_two_pipelined_sentences_with_real_inference(model_dir, tmp_path):
    server = ServerProcess(tmp_path / "server.log", KOKORO_MODEL_DIR=str(model_dir), KOKORO_MODE="concurrent")
    try:
        server.wait_ready()
        stats = load_run(server.url, server.ws_url, sessions=4, per_session=2, speed=2.0, sentences=SENTENCES)
        text = httpx.get(f"{server.url}/metrics", timeout=10).text
    finally:
        assert server.stop() == 0, server.log()
    print(f"\n[load onnx concurrent] 4x2: audio {stats['audio_s']} s; ping p50 {stats['ping']['p50_ms']} ms, "
          f"p99 {stats['ping']['p99_ms']} ms "
          f"over {stats['ping']['probes']} probes; TTFA p50 {stats['ttfa_ms_p50']} ms; wall {stats['wall_s']} s")
    assert (stats["requests"], stats["completed"], stats["lost"]) == (8, 8, 0)
    assert stats["misordered_sessions"] == 0 and stats["violations"] == 0 and stats["closed_normally"] == 4
    assert stats["audio_s"] > 8 * 1.0  # speech, not slivers: each sentence is over a second
    assert set(stats["ping"]["statuses"]) == {200}
    assert metric(text, 'kokoro_requests_total{route="ws",status="200"}') == 8

"""Faults cost the one request they hit: a runtime that raises on a chosen segment, a
runtime that hangs, a runtime that returns nothing, a decoder bug — each is a typed error for that
request, and the next request on the same session succeeds. Both scheduling modes.

The real app, backends and text pipeline run in process; the fake synthesizer supplies the faults.
"""

from __future__ import annotations

import json
import threading

import pytest

from tests.support.app import fake_synth as fake
from tests.support.inproc import WS, answer, audio_bytes, client, metric, wait_for

MODES = ["sequential", "concurrent"]
TWO_PARTS = "This first sentence is perfectly fine. Then {marker} happens in the second one."


def kinds(frames: list[dict]) -> list[str]:
    out: list[str] = []
    for f in frames:
        k = f.get("type", f["kind"])
        if not (out and out[-1] == k == "audio"):
            out.append(k)
    return out


@pytest.mark.parametrize("mode", MODES)
def test_a_segment_that_raises_fails_its_request_only(mode):
    synth = fake(fail_on="Boom")
    with client(synth, mode=mode) as c, c.websocket_connect(WS) as ws:
        ws.send_text(json.dumps({"text": TWO_PARTS.format(marker="Boom"), "request_id": "bad"}))
        ws.send_text(json.dumps({"text": "The next one is fine.", "request_id": "next"}))
        bad, nxt = answer(ws), answer(ws)
        metrics = c.get("/metrics").text
    assert kinds(bad) == ["synthesis_start", "audio", "error"]  # the first segment's audio, then the error
    assert bad[-1]["request_id"] == "bad" and bad[-1]["code"] == "backend_error"
    assert kinds(nxt) == ["synthesis_start", "audio", "synthesis_complete"] and nxt[-1]["request_id"] == "next"
    assert metric(metrics, 'kokoro_errors_total{code="backend_error",route="ws"}') == 1


@pytest.mark.parametrize("mode", MODES)
def test_post_fault_in_the_first_segment_is_a_500_json_error(mode):
    with client(fake(fail_on="Boom"), mode=mode) as c:
        r = c.post("/invocations", json={"text": "Boom goes the first segment."})
        ok = c.post("/invocations", json={"text": "Fine."})
    assert r.status_code == 500 and r.json()["error"]["code"] == "backend_error"
    assert ok.status_code == 200 and len(ok.content) > 44


@pytest.mark.parametrize("mode", MODES)
def test_a_hung_runtime_times_the_request_out_and_ping_still_answers(mode):
    synth = fake(hang_on="Stuck")
    with client(synth, mode=mode, backend_kw={"request_timeout_s": 0.5}) as c:
        with c.websocket_connect(WS) as ws:
            ws.send_text(json.dumps({"text": "Stuck right here.", "request_id": "hung"}))
            hung = answer(ws)
            ping = c.get("/ping")  # the loop is free while a runtime thread hangs
            synth.release()  # the runtime recovers
            ws.send_text(json.dumps({"text": "Moving on.", "request_id": "after"}))
            after = answer(ws)
        post_synth_stuck = c.post("/invocations", json={"text": "Fine."})
    assert hung == [{"kind": "text", "type": "error", "request_id": "hung", "code": "timeout",
                     "message": hung[0]["message"]}]
    assert ping.status_code in (200, 503)  # answered: the loop is free (503 once the call counts as stuck)
    assert after[-1]["type"] == "synthesis_complete" and audio_bytes(after) > 0
    assert post_synth_stuck.status_code == 200


def test_post_on_a_hung_runtime_is_a_504():
    synth = fake(hang_on="Stuck")
    with client(synth, backend_kw={"request_timeout_s": 0.5}) as c:
        r = c.post("/invocations", json={"text": "Stuck again."})
    assert r.status_code == 504 and r.json()["error"]["code"] == "timeout"


@pytest.mark.parametrize("mode", MODES)
def test_a_runtime_that_returns_no_audio_is_an_error_never_a_silent_success(mode):
    """A runtime returning zero samples used to be a 'synthesis_complete' with 0 s of audio, a
    44-byte WAV with 200, and an MP3 encoder crash (500 internal_error)."""
    with client(fake(empty_on="Silent"), mode=mode) as c:
        with c.websocket_connect(WS) as ws:
            ws.send_text(json.dumps({"text": "Silent here.", "request_id": "s1"}))
            whole = answer(ws)
            ws.send_text(json.dumps({"text": TWO_PARTS.format(marker="Silent"), "request_id": "s2"}))
            partial = answer(ws)
        posts = {fmt: c.post("/invocations", json={"text": "Silent here.", "format": fmt}) for fmt in ("wav", "pcm", "mp3")}
        buffered = c.post("/invocations", json={"text": "Silent here.", "stream": False})
        openai = c.post("/v1/audio/speech", json={"model": "kokoro", "input": "Silent here.", "voice": "af_test"})
    assert kinds(whole) == ["error"] and whole[0]["code"] == "backend_error"
    assert kinds(partial) == ["synthesis_start", "audio", "error"]
    for r in (*posts.values(), buffered):
        assert r.status_code == 500 and r.json()["error"]["code"] == "backend_error"
    assert openai.status_code >= 500


def test_a_decoder_bug_costs_one_message_not_the_session(monkeypatch):
    """An unexpected exception while reading a message used to kill the reader: close 1011."""
    import server.sagemaker.bidi

    real = server.sagemaker.bidi.parse_synthesis

    def buggy(obj, **kw):
        if obj.get("text") == "trigger":
            raise ZeroDivisionError("a bug")
        return real(obj, **kw)

    monkeypatch.setattr(server.sagemaker.bidi, "parse_synthesis", buggy)
    with client() as c, c.websocket_connect(WS) as ws:
        ws.send_text(json.dumps({"text": "trigger", "request_id": "t"}))
        ws.send_text(json.dumps({"text": "Fine.", "request_id": "f"}))
        bug, fine = answer(ws), answer(ws)
    assert [(f["type"], f["request_id"], f["code"]) for f in bug] == [("error", "t", "internal_error")]
    assert fine[-1]["type"] == "synthesis_complete"


@pytest.mark.parametrize("mode", MODES)
def test_faults_under_concurrency_fail_only_their_own_requests(mode):
    """Eight sessions at once, every other request faulty: each faulty request gets its error, every
    good one completes with audio, in order, on every session."""
    synth = fake(fail_on="Boom", segment_s=0.002)
    results: dict[int, list[list[dict]]] = {}
    with client(synth, mode=mode) as c:
        def session(i: int) -> None:
            with c.websocket_connect(WS) as ws:
                for j in range(4):
                    marker = "Boom" if j % 2 else "fine"
                    ws.send_text(json.dumps({"text": TWO_PARTS.format(marker=marker), "request_id": f"{i}-{j}"}))
                results[i] = [answer(ws) for _ in range(4)]

        threads = [threading.Thread(target=session, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        text = c.get("/metrics").text
    assert sorted(results) == list(range(8))
    for i, answers in results.items():
        assert [a[-1]["request_id"] for a in answers] == [f"{i}-{j}" for j in range(4)]
        assert [a[-1]["type"] for a in answers] == ["synthesis_complete", "error"] * 2
    assert metric(text, 'kokoro_errors_total{code="backend_error",route="ws"}') == 16
    assert metric(text, "kokoro_active_sessions") == 0


@pytest.mark.parametrize("mode", MODES)
def test_a_runtime_stuck_past_the_request_timeout_turns_ping_unhealthy_until_it_recovers(mode):
    """A hung runtime fails every request by timeout; /ping saying 200 meanwhile would keep a load
    balancer (or SageMaker) sending traffic to a useless instance."""
    synth = fake(hang_on="Stuck")
    with client(synth, mode=mode, backend_kw={"request_timeout_s": 0.3}) as c:
        with c.websocket_connect(WS) as ws:
            ws.send_text(json.dumps({"text": "Stuck right here.", "request_id": "hung"}))
            assert answer(ws)[-1]["code"] == "timeout"
            wait_for(lambda: c.get("/ping").status_code == 503)
            ping = c.get("/ping").json()
            synth.release()
            wait_for(lambda: c.get("/ping").status_code == 200)
            ws.send_text(json.dumps({"text": "Recovered.", "request_id": "ok"}))
            assert answer(ws)[-1]["type"] == "synthesis_complete"
    assert ping["status"] == "unhealthy" and "stuck" in ping["error"]

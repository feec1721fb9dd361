"""The agent app under faults, end to end over real sockets: the agent (``python -m agent serve``) and
the TTS server (``python -m server serve``, fake runtime) as subprocesses, the TTS server killed with
SIGKILL mid-reply — and started again, or not —, down from the start, and the Bedrock stand-in failing
or killed mid-stream.

What the browser sees: the text keeps streaming whatever happens to the voice; a dropped voice is
``voice_lost`` then ``voice_restored`` and every sentence is still spoken exactly once; a voice that
does not come back, or a model that fails, is one typed ``error`` event; and every turn ends with a
clean ``agent_end`` — never a hung request.
"""

from __future__ import annotations

import re
import subprocess
import sys

import httpx
import pytest

from tests.agent_support.process import agent_process
from tests.agent_support.sse import iter_sse
from tests.support.live import REPO, ServerProcess, free_port

pytestmark = [pytest.mark.subprocess, pytest.mark.cloud]

REPLY = ("The first sentence comes quickly. The second one follows it closely. A third sentence is here. "
         "Number four keeps going. The fifth is almost the last. And the sixth ends the reply.")
SENTENCES = [s.strip() for s in re.findall(r"[^.]+\.", REPLY)]
TTS_ENV = {"KOKORO_BACKEND": "fake", "KOKORO_FAKE_SEGMENT_S": "0.2"}


def _tts(tmp_path, port: int, name: str) -> ServerProcess:
    return ServerProcess(tmp_path / f"tts-{name}.log", port=port, **TTS_ENV)


def _turn(url: str, on_event=None) -> list[dict]:
    """Every SSE event of one turn; the read timeout makes a hung turn a failure, not a hang."""
    events: list[dict] = []
    with httpx.Client(timeout=httpx.Timeout(60, read=30)) as client, \
            client.stream("POST", f"{url}/invocations", json={"prompt": "hi", "mode": "bidi"}) as resp:
        assert resp.status_code == 200
        for _, event in iter_sse(resp):
            events.append(event)
            if on_event is not None:
                on_event(event, events)
    return events


def _ends_cleanly(events: list[dict]) -> None:
    assert events[-1]["type"] == "agent_end"
    assert sum(e["type"] == "agent_end" for e in events) == 1
    assert "".join(e["text"] for e in events if e["type"] == "text_delta") == REPLY  # the text kept streaming


def _agent(tts_url: str, tries: int):
    return agent_process(tts_url, tokens_per_second=40, reply=REPLY,
                         env={"KOKORO_AGENT_TTS_RECONNECT_TRIES": str(tries),
                              "KOKORO_AGENT_TTS_RECONNECT_DELAY_S": "0.1",
                              "KOKORO_AGENT_TTS_RECONNECT_MAX_DELAY_S": "0.5"})


def test_the_reply_survives_the_tts_server_killed_and_restarted(tmp_path):
    port = free_port()
    first = _tts(tmp_path, port, "first").wait_ready()
    restarted: list[ServerProcess] = []
    agent = _agent(f"http://127.0.0.1:{port}", tries=60).wait_ready()

    def kill_mid_reply(event: dict, events: list[dict]) -> None:
        if not restarted and event["type"] == "audio_chunk" and event.get("text") == SENTENCES[1]:
            first.proc.kill()  # SIGKILL while the second sentence is being spoken
            first.proc.wait()
            restarted.append(_tts(tmp_path, port, "second").wait_ready())

    try:
        events = _turn(agent.url, kill_mid_reply)
    finally:
        agent.stop()
        first.stop()
        for proc in restarted:
            proc.stop()
    assert restarted, "the TTS server was never killed"
    _ends_cleanly(events)
    kinds = [e["type"] for e in events]
    assert "error" not in kinds, [e for e in events if e["type"] == "error"]
    assert kinds.count("voice_lost") == 1 and kinds.count("voice_restored") == 1
    assert kinds.index("voice_lost") < kinds.index("voice_restored")
    # Each sentence's audio starts once (its first chunk carries its text), in order.
    assert [e["text"] for e in events if e["type"] == "audio_chunk" and "text" in e] == SENTENCES
    assert events[-1]["sentences"] == len(SENTENCES)


def test_a_tts_server_killed_for_good_is_an_error_and_a_clean_end(tmp_path):
    port = free_port()
    tts = _tts(tmp_path, port, "only").wait_ready()
    agent = _agent(f"http://127.0.0.1:{port}", tries=2).wait_ready()

    def kill(event: dict, events: list[dict]) -> None:
        if event["type"] == "audio_chunk" and tts.proc.poll() is None:
            tts.proc.kill()

    try:
        events = _turn(agent.url, kill)
    finally:
        agent.stop()
        tts.stop()
    _ends_cleanly(events)
    errors = [e for e in events if e["type"] == "error"]
    assert [(e["code"], e["fatal"]) for e in errors] == [("tts_unavailable", True)]
    assert [e["type"] for e in events].count("voice_lost") == 1


def test_a_tts_server_down_at_the_start_is_an_error_and_a_clean_end():
    agent = _agent(f"http://127.0.0.1:{free_port()}", tries=2).wait_ready()
    try:
        events = _turn(agent.url)
    finally:
        agent.stop()
    _ends_cleanly(events)
    errors = [e for e in events if e["type"] == "error"]
    assert [(e["code"], e["fatal"]) for e in errors] == [("tts_unavailable", True)]
    assert not any(e["type"] == "audio_chunk" for e in events)


STANDIN = """
import sys, time
from tests.agent_support.bedrock_standin import BedrockStandIn
standin = BedrockStandIn(sys.argv[1], seconds_per_token=float(sys.argv[2]),
                         exception=sys.argv[3] or None).start()
print(standin.url, flush=True)
time.sleep(3600)
"""


def _bedrock_agent(tts: ServerProcess, exception: str = "", seconds_per_token: float = 0.05):
    """The agent on the real BedrockModel, against a Bedrock stand-in in its own process."""
    standin = subprocess.Popen([sys.executable, "-c", STANDIN, REPLY, str(seconds_per_token), exception],
                               cwd=REPO, stdout=subprocess.PIPE, text=True)
    url = standin.stdout.readline().strip()
    env = {"KOKORO_AGENT_MODEL": "bedrock", "KOKORO_AGENT_BEDROCK_ENDPOINT_URL": url, "AWS_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true"}
    port = free_port()
    agent = ServerProcess(tts.log_path.with_name("agent.log"), port=port, **env,
                          argv=[sys.executable, "-m", "agent", "serve", "--port", str(port), "--tts-url", tts.url,
                                "--log-level", "warning"]).wait_ready()
    return standin, agent


def _bedrock_turn(tts: ServerProcess, standin: subprocess.Popen, agent: ServerProcess, on_event=None) -> list[dict]:
    try:
        return _turn(agent.url, on_event)
    finally:
        agent.stop()
        standin.kill()
        standin.wait()
        tts.stop()


def _model_failed(events: list[dict]) -> None:
    assert events[-1]["type"] == "agent_end" and sum(e["type"] == "agent_end" for e in events) == 1
    errors = [e for e in events if e["type"] == "error"]
    assert len(errors) == 1 and errors[0]["fatal"], errors
    written = "".join(e["text"] for e in events if e["type"] == "text_delta")
    assert written and REPLY.startswith(written) and written != REPLY


def test_the_bedrock_stream_failing_mid_stream_is_an_error_and_a_clean_end(tmp_path):
    tts = _tts(tmp_path, free_port(), "bedrock-error").wait_ready()
    standin, agent = _bedrock_agent(tts, exception="modelStreamErrorException")
    _model_failed(_bedrock_turn(tts, standin, agent))


def test_the_bedrock_stand_in_killed_mid_stream_is_an_error_and_a_clean_end(tmp_path):
    tts = _tts(tmp_path, free_port(), "bedrock-kill").wait_ready()
    standin, agent = _bedrock_agent(tts, seconds_per_token=0.1)

    def kill(event: dict, events: list[dict]) -> None:
        if event["type"] == "text_delta" and len(events) > 5 and standin.poll() is None:
            standin.kill()  # SIGKILL mid-stream

    _model_failed(_bedrock_turn(tts, standin, agent, kill))

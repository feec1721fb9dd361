"""The browser page in real headless Chromium (Debian's ``chromium``, driven by Playwright; no browser
download): after a prompt, the reply text appears and the audio chunks are scheduled back to back for
playback; a TTS server killed and restarted mid-reply shows as a lost, then restored voice. A
screenshot is kept in tests/artifacts/agent_page.png."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from playwright import sync_api

from tests.agent_support.process import agent_process
from tests.agent_support.wire_tap import fake_runtime_server
from tests.support.live import ServerProcess, free_port

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]

CHROMIUM = shutil.which("chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
REPLY = "Hello from the browser test. The audio is scheduled without gaps. That is all for now."
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run", "--autoplay-policy=no-user-gesture-required"]

@pytest.fixture(autouse=True)
def chromium() -> None:
    """`make test` installs Debian's chromium: without it these tests fail, they never skip."""
    assert CHROMIUM is not None, "Debian chromium is not installed (apt-get install chromium)"


@pytest.fixture
def agent_url(tmp_path):
    with fake_runtime_server(tmp_path, segment_s=0.05) as tts:
        proc = agent_process(tts.ws_url, tokens_per_second=40, reply=REPLY).wait_ready()
        yield proc.url
        proc.stop()


def test_prompt_streams_text_and_schedules_audio(agent_url):
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(agent_url + "/")
            page.fill("#prompt", "Say hello to the browser")
            page.select_option("#mode", "bidi")
            page.click("#send")
            page.wait_for_selector("body[data-state=done]", timeout=30_000)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.locator("details").evaluate("d => d.open = true")
            page.screenshot(path=str(ARTIFACTS / "agent_page.png"), full_page=True)

            assert page.inner_text("#text") == REPLY
            chunks = page.locator("#chunks li")
            assert chunks.count() >= 3  # one per sentence at least
            starts = [float(x) for x in chunks.evaluate_all("els => els.map(e => e.dataset.start)")]
            durations = [float(x) for x in chunks.evaluate_all("els => els.map(e => e.dataset.duration)")]
            assert all(d > 0 for d in durations)
            # Gapless: each chunk starts where the previous one ends (all arrived before playback caught up).
            for i in range(1, len(starts)):
                assert starts[i] == pytest.approx(starts[i - 1] + durations[i - 1], abs=2e-3)
            first_audio = page.inner_text("#first-audio-ms")
            assert first_audio.isdigit() and int(first_audio) > 0
            state = page.evaluate("window.kokoroAgent")
            assert len(state["scheduled"]) == chunks.count()
            assert state["server"]["sentences"] == 3
            assert not errors
        finally:
            browser.close()


LONG_REPLY = " ".join(f"Sentence number {i} is spoken in the browser." for i in range(1, 9))


def test_a_lost_and_restored_voice_shows_on_the_page_and_the_text_keeps_streaming(tmp_path):
    """The TTS server SIGKILLed mid-reply and started again on its port: the page shows the voice
    lost, then restored, and the reply is complete with every sentence's audio once."""
    port = free_port()
    env = {"KOKORO_BACKEND": "fake", "KOKORO_FAKE_SEGMENT_S": "0.2"}
    first = ServerProcess(tmp_path / "tts-first.log", port=port, **env).wait_ready()
    second = None
    agent = agent_process(f"http://127.0.0.1:{port}", tokens_per_second=40, reply=LONG_REPLY,
                          env={"KOKORO_AGENT_TTS_RECONNECT_TRIES": "60", "KOKORO_AGENT_TTS_RECONNECT_DELAY_S": "0.1",
                               "KOKORO_AGENT_TTS_RECONNECT_MAX_DELAY_S": "0.5"}).wait_ready()
    try:
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                page = browser.new_page()
                page.goto(agent.url + "/")
                page.click("#send")
                page.wait_for_function("window.kokoroAgent.scheduled.length > 0", timeout=30_000)
                first.proc.kill()
                first.proc.wait()
                page.wait_for_selector("#voice-status[data-status=lost]", timeout=30_000)
                second = ServerProcess(tmp_path / "tts-second.log", port=port, **env).wait_ready()
                page.wait_for_selector("body[data-state=done]", timeout=60_000)
                assert page.get_attribute("#voice-status", "data-status") == "restored"
                assert page.inner_text("#text") == LONG_REPLY
                state = page.evaluate("window.kokoroAgent")
                assert state["voice"] == ["ok", "lost", "restored"]
                assert state["server"]["sentences"] == 8
                texts = page.locator("#chunks li").evaluate_all("els => els.map(e => e.textContent)")
                spoken = [t for t in texts if " — " in t]
                assert [t.split(" — ", 1)[1] for t in spoken] == [f"Sentence number {i} is spoken in the browser."
                                                                  for i in range(1, 9)]
                assert page.is_hidden("#error")
            finally:
                browser.close()
    finally:
        agent.stop()
        first.stop()
        if second is not None:
            second.stop()


def test_a_tts_server_slower_than_real_time_shows_on_the_page_with_what_to_do(tmp_path):
    """A runtime at about twice real time (0.15 s per phoneme of 0.075 s of audio): playback waits
    between sentences, and the page says so with the server's own warning and its advice."""
    port = free_port()
    tts = ServerProcess(tmp_path / "tts.log", port=port, KOKORO_BACKEND="fake", KOKORO_FAKE_SEGMENT_S="0",
                        KOKORO_FAKE_PHONEME_S="0.15", KOKORO_THREADS="1").wait_ready()
    agent = agent_process(f"http://127.0.0.1:{port}", tokens_per_second=40,
                          reply="One two three. Four five six.").wait_ready()
    try:
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                page = browser.new_page()
                page.goto(agent.url + "/")
                assert page.is_hidden("#slow")  # nothing synthesised yet: nothing to say
                page.click("#send")
                page.wait_for_selector("body[data-state=done]", timeout=60_000)
                page.wait_for_function("window.kokoroAgent.ttsWarnings.length > 0", timeout=10_000)
                state = page.evaluate("window.kokoroAgent")
                assert state["gapS"] >= 0.5
                text = page.inner_text("#slow")
                assert page.is_visible("#slow")
                assert "Playback waited" in text and "falling behind real time" in text
                assert "KOKORO_THREADS" in text and "now 1" in text and "--device cuda" in text
            finally:
                browser.close()
    finally:
        agent.stop()
        tts.stop()

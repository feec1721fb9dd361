"""The browser page in real headless Chromium (Debian's ``chromium``, driven by Playwright; no browser
download): after a prompt, the reply text appears and the audio chunks are scheduled back to back for
playback. A screenshot is kept in tests/artifacts/agent_page.png."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.agent_support.process import agent_process
from tests.agent_support.wire_tap import fake_runtime_server

CHROMIUM = shutil.which("chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
REPLY = "Hello from the browser test. The audio is scheduled without gaps. That is all for now."
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run", "--autoplay-policy=no-user-gesture-required"]

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (apt-get install chromium)")


@pytest.fixture
def agent_url(tmp_path):
    with fake_runtime_server(tmp_path, segment_s=0.05) as tts:
        proc = agent_process(tts.ws_url, tokens_per_second=40, reply=REPLY).start()
        yield proc.url
        proc.stop()


def test_prompt_streams_text_and_schedules_audio(agent_url):
    sync_api = pytest.importorskip("playwright.sync_api")
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

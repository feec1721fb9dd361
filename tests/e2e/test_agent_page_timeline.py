"""The agent page as a listener uses it, in real headless Chromium (Debian's ``chromium`` through
Playwright): Stop stays active until the reply's audio has been heard (and cuts it), the page asks
for no favicon it does not have, and the reply's timing is drawn as one timeline — text arriving,
audio as scheduled, the gaps a listener heard, first audio. Screenshots are kept in tests/artifacts/
(agent_timeline.png, agent_timeline_gaps.png)."""

from __future__ import annotations

import itertools
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
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run", "--autoplay-policy=no-user-gesture-required"]
REPLY = ("Hello from the timeline test. The audio plays on after the text is complete. "
         "Stop stays active until it ends.")


@pytest.fixture
def browser():
    assert CHROMIUM is not None, "Debian chromium is not installed (apt-get install chromium)"
    with sync_api.sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def agent_url(tmp_path):
    with fake_runtime_server(tmp_path, segment_s=0.05) as tts:
        proc = agent_process(tts.ws_url, tokens_per_second=40, reply=REPLY).wait_ready()
        yield proc.url
        proc.stop()


def open_page(browser, url: str) -> tuple[sync_api.Page, list[str], list[str]]:
    page = browser.new_page(viewport={"width": 1000, "height": 1000})
    requests: list[str] = []
    problems: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on("response", lambda r: problems.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    page.goto(url + "/")
    return page, requests, problems


AUDIO_LEFT = "(performance.now() - kokoroAgent.t0) / 1000"


def test_stop_stays_active_until_the_audio_ends_and_the_timeline_is_drawn(browser, agent_url):
    page, requests, problems = open_page(browser, agent_url)
    page.click("#send")
    page.wait_for_function("window.kokoroAgent.server", timeout=30_000)  # the reply is complete
    state = page.evaluate("window.kokoroAgent")
    last = state["scheduled"][-1]
    assert last["plays"] + last["duration"] > page.evaluate(AUDIO_LEFT) + 0.5  # audio still to hear
    assert page.get_attribute("body", "data-state") == "playing"
    assert page.is_enabled("#stop")
    page.wait_for_selector("body[data-state=done]", timeout=60_000)
    assert page.evaluate(AUDIO_LEFT) >= last["plays"] + last["duration"] - 0.05  # done once it was heard
    assert page.is_disabled("#stop")

    state = page.evaluate("window.kokoroAgent")
    assert len(state["textS"]) > 0 and page.locator("#timeline line.text").count() == len(state["textS"])
    bars = page.locator("#timeline rect.audio")
    assert bars.count() == len(state["scheduled"]) >= 3
    xs = bars.evaluate_all("els => els.map(e => [+e.getAttribute('x'), +e.getAttribute('width')])")
    assert all(b[0] >= a[0] for a, b in itertools.pairwise(xs))  # in time order, on one axis
    assert page.locator("#timeline line.first").count() == 1
    assert page.locator("#timeline rect.gap").count() == len(state["gaps"])
    assert page.locator("#chunks").is_hidden()  # the numbers are there, folded away, not the display
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "agent_timeline.png"), full_page=True)

    assert not [u for u in requests if u.endswith("/favicon.ico")]
    assert problems == []


def test_stop_while_the_audio_plays_out_cuts_it(browser, agent_url):
    page, _requests, problems = open_page(browser, agent_url)
    page.click("#send")
    page.wait_for_selector("body[data-state=playing]", timeout=30_000)
    page.click("#stop")
    assert page.get_attribute("body", "data-state") == "stopped"
    assert page.is_disabled("#stop") and page.is_enabled("#send")
    assert problems == []


def test_the_gaps_a_listener_heard_are_drawn(browser, tmp_path):
    """A runtime at about twice real time: playback waits between sentences, drawn in red."""
    port = free_port()
    tts = ServerProcess(tmp_path / "tts.log", port=port, KOKORO_BACKEND="fake", KOKORO_FAKE_SEGMENT_S="0",
                        KOKORO_FAKE_PHONEME_S="0.15", KOKORO_THREADS="1").wait_ready()
    agent = agent_process(f"http://127.0.0.1:{port}", tokens_per_second=40,
                          reply="One two three. Four five six. Seven eight.").wait_ready()
    try:
        page, _requests, problems = open_page(browser, agent.url)
        page.click("#send")
        page.wait_for_selector("body[data-state=done]", timeout=90_000)
        state = page.evaluate("window.kokoroAgent")
        assert state["gaps"] and sum(g["end"] - g["start"] for g in state["gaps"]) == pytest.approx(state["gapS"],
                                                                                                 abs=0.01)
        gaps = page.locator("#timeline rect.gap")
        assert gaps.count() == len(state["gaps"])
        assert all(float(w) >= 2 for w in gaps.evaluate_all("els => els.map(e => e.getAttribute('width'))"))
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "agent_timeline_gaps.png"), full_page=True)
        assert problems == []
    finally:
        agent.stop()
        tts.stop()

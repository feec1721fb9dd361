"""Fixtures for the server's fast tests: the real app, the real sequential backend and text pipeline
(espeak-ng G2P, offline), over the fake runtime (:class:`backends.runtimes.fake.FakeSynthesizer`), whose
knobs these tests turn: ``gate`` holds a segment mid-synthesis, ``fail_on`` makes a chosen segment
fail, ``load_gate`` keeps the model "loading". The real runtime is exercised in tests/contract and
tests/e2e.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from functools import partial

import pytest
from starlette.testclient import TestClient

from backends.runtimes.fake import FakeSynthesizer
from server.settings import Settings
from tests.support.app import build_app, fake_synth, wait_for
from tests.support.inproc import answer, client
from tests.support.live import ThreadServer


@pytest.fixture
def synth() -> Iterator[FakeSynthesizer]:
    synth = fake_synth()
    yield synth
    synth.release()


@pytest.fixture
def make_client(synth) -> Callable[..., AbstractContextManager[TestClient]]:
    """``with make_client(wait_ready=True, backend_kw=None, **settings) as client:`` — the real app
    over the fake synthesizer."""
    return partial(client, synth)


@pytest.fixture
def wait():
    return wait_for


@pytest.fixture
def collect():
    return answer


@pytest.fixture
def live_server(synth) -> Iterator[Callable[..., str]]:
    """``url = live_server(**settings)``: the app under a real uvicorn on a loopback port, in a
    thread (for what the in-process client cannot show: chunked transfer, truncation)."""
    servers: list[ThreadServer] = []

    def start(**settings) -> str:
        server = ThreadServer(build_app(synth, settings=Settings(**settings)))
        servers.append(server.__enter__())
        return server.url

    yield start
    synth.release()
    for server in servers:
        server.__exit__(None, None, None)

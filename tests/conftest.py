"""The suite's shared fixtures, markers and lanes.

Fixtures, each built once per test process (a pytest-xdist worker is a process of its own): the model
directory (built idempotently: ``make install`` has built it before any worker starts), the real ONNX
runtime, the text pipeline, the speech transcriber; and three shared pieces that tests use instead of
starting their own:

* ``torch_synth`` — the PyTorch runtime on the real weights (CPU, deterministic, loaded);
* ``onnx_server`` — ``python -m server serve`` on the real ONNX model with its default settings;
* ``fake_server`` — ``python -m server serve`` on the fake runtime (``KOKORO_BACKEND=fake``, 20 ms a
  segment), everything else as shipped.

A test that uses a shared server only talks to it over the wire: it changes no setting, sends it no
signal, kills nothing, and reads counters as differences (another test ran before it). A test that
needs other settings, or stops or kills its server, starts its own (``tests.support.live.ServerProcess``).

Markers (registered in pyproject's ``[tool.pytest.ini_options]``; ``make check`` runs none of them):
``model``, ``torch`` and ``subprocess`` are set here from the fixtures a test uses, and by hand where a
test starts a process or loads a model itself; ``browser``, ``cloud`` and ``bench`` by hand.

Parallel runs (``pytest -n N --dist loadgroup``): every test of a module goes to one worker (so its
module fixtures are built once), and so do all the tests of a shared server or of ``torch_synth`` (so
each is built once per run); the shared fixtures' groups and those that hold the longest tests are
handed out first.

Property tests draw the same examples on every run (the ``derandomized`` profile, loaded here), so a
run's result depends on the code alone; ``pytest --hypothesis-profile=explore`` draws new ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Four workers and their servers share two cores: OpenMP threads (torch on the CPU) that spin while they
# wait burn the cores the others need. Waiting passively, three torch processes at once took 15 CPU-s
# each instead of 26 (and 22 s instead of 39); alone it changes nothing. Set before torch loads OpenMP,
# and inherited by every process a test starts.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The SageMaker HTTP/2 SDK needs Python >= 3.12: `make test` runs that folder with .venv312.
collect_ignore = ["agent_py312"] if sys.version_info < (3, 12) else []

settings.register_profile("derandomized", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile("derandomized")

#: A shared fixture -> the xdist group its tests run in (one worker builds it once), the markers it
#: implies, and the marker by which a test of the same module that asks for it at run time
#: (``request.getfixturevalue``) is known.
SHARED = {
    "onnx_server": ("onnx_server", ("model", "subprocess"), None),
    "fake_server": ("fake_server", ("subprocess",), None),
    "torch_synth": ("torch", ("model", "torch"), "torch"),
}
#: A torch test's time limit: the runtime's first load is charged to whichever test asks first, and
#: torch on a CPU shared with other workers is slow at anything.
TORCH_TIMEOUT_S = 300
#: Fixtures that read the installed model directory: a test that uses one needs the model.
MODEL_FIXTURES = ("model_dir",)
#: Folders in the order their groups are handed to the workers: the longest tests first, the many
#: short ones last, where they fill the gaps.
FOLDER_ORDER = ("e2e", "integration", "contract", "unit")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast-lane", action="store_true",
        help="fail any test that starts a process or reaches the model directory (what `make check` runs "
             "under: a test that does either must carry the `subprocess` or `model` marker)")


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _explicit_group(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("xdist_group")
    if marker is None:
        return None
    return str(marker.kwargs.get("name") or marker.args[0])


def _shared_fixtures(item: pytest.Item) -> list[str]:
    """The shared fixtures of this file a test uses (not a module's own fixture of the same name)."""
    defs = getattr(item, "_fixtureinfo", None)
    if defs is None:
        return []
    return [name for name in SHARED
            if name in item.fixturenames and (chain := defs.name2fixturedefs.get(name))
            and chain[-1].func.__module__ == __name__]


def _group(item: pytest.Item, shared_modules: dict[str, set[str]]) -> str:
    """A test's xdist group: its shared fixture's, or its module's."""
    for name in _shared_fixtures(item):
        return SHARED[name][0]
    for name, (group, _marks, marker) in SHARED.items():
        if marker and item.get_closest_marker(marker) and _module(item) in shared_modules[name]:
            return group
    return _module(item)


def _rank(item: pytest.Item) -> tuple[int, int]:
    """When a test's group is handed out: the shared fixtures' groups (each the most work one worker
    does) first, then by ``FOLDER_ORDER``, a ``slow`` test's group first within its folder."""
    if _explicit_group(item) in {group for group, _marks, _marker in SHARED.values()}:
        return -1, 0
    parts = Path(_module(item)).parts
    folder = parts[1] if len(parts) > 2 else ""
    order = FOLDER_ORDER.index(folder) if folder in FOLDER_ORDER else len(FOLDER_ORDER)
    return order, 0 if item.get_closest_marker("slow") is not None else 1


# First among the hooks: pytest-xdist reads each item's ``xdist_group`` marker in its own hook (to name the
# group in the node id), so the markers must be set before it runs or every test is a group of its own.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shared_modules: dict[str, set[str]] = {name: set() for name in SHARED}
    for item in items:
        for name in _shared_fixtures(item):
            shared_modules[name].add(_module(item))
    for item in items:
        names = set(item.fixturenames)
        if names.intersection(MODEL_FIXTURES):
            item.add_marker("model")
        for name in _shared_fixtures(item):
            for mark in SHARED[name][1]:
                item.add_marker(mark)
        if item.get_closest_marker("torch") and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TORCH_TIMEOUT_S))
        if _explicit_group(item) is None:
            item.add_marker(pytest.mark.xdist_group(_group(item, shared_modules)))

    # Whole groups move, each keeping its tests' order; a group goes where its first-ranked test goes.
    group_rank: dict[str, tuple[int, int]] = {}
    for item in items:
        group = _explicit_group(item) or ""
        group_rank[group] = min(group_rank.get(group, (99, 99)), _rank(item))
    position = {group: i for i, group in enumerate(group_rank)}
    items.sort(key=lambda item: (group_rank[_explicit_group(item) or ""], position[_explicit_group(item) or ""]))


# ---------------------------------------------------------------------------------------------
# The fast lane: no process, no model
# ---------------------------------------------------------------------------------------------
#: Standard-library modules whose own short lookups (a child process each) the fast lane allows.
STDLIB_LOOKUPS = frozenset({"ctypes.util", "platform"})


class FastLaneViolation(AssertionError):
    """A test run by ``make check`` started a process or reached the model directory."""


@pytest.fixture(scope="session", autouse=True)
def _fast_lane_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Under ``--fast-lane``, starting a process fails the test that does it (mark it ``subprocess``)."""
    if not request.config.getoption("--fast-lane"):
        yield
        return

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise FastLaneViolation("the fast lane starts no process: mark this test `subprocess`")

    execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def popen(self: subprocess.Popen, *args: Any, **kwargs: Any) -> Any:
        # The standard library's own lookups are not processes a test starts: ctypes.util.find_library
        # asks ldconfig where a shared library is (phonemizer's import of libespeak-ng), platform asks
        # `uname -p` and `file` what the machine is.
        caller = sys._getframe(1)
        while caller.f_back is not None and caller.f_globals.get("__name__") == "subprocess":
            caller = caller.f_back
        if caller.f_globals.get("__name__") not in STDLIB_LOOKUPS:
            refuse()
        return execute_child(self, *args, **kwargs)

    patch = pytest.MonkeyPatch()
    patch.setattr(subprocess.Popen, "_execute_child", popen)  # where every Popen (and asyncio's) forks
    patch.setattr(os, "system", refuse)
    patch.setattr(os, "posix_spawn", refuse)
    patch.setattr(os, "posix_spawnp", refuse)
    try:
        yield
    finally:
        patch.undo()


# ---------------------------------------------------------------------------------------------
# The model and what is read from it
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def model_dir(request: pytest.FixtureRequest) -> Path:
    if request.config.getoption("--fast-lane"):
        raise FastLaneViolation("the fast lane reads no model: mark this test `model`")
    from backends.assets.build import build_assets, default_model_dir

    path = Path(os.environ.get("KOKORO_MODEL_DIR") or default_model_dir())
    build_assets(path, torch=False)
    return path


@pytest.fixture(scope="session")
def model_files(model_dir):
    from backends.assets.build import ModelFiles

    return ModelFiles.discover(model_dir)


@pytest.fixture(scope="session")
def voices(model_files):
    from backends.assets.voices import VoiceStore

    return VoiceStore.from_path(model_files.voices)


@pytest.fixture(scope="session")
def vocab(model_files):
    from backends.runtimes.onnx import load_vocab

    return load_vocab(model_files.config)


@pytest.fixture(scope="session")
def g2p():
    """espeak-ng alone (the G2P of Spanish, French, Hindi, Italian, Portuguese)."""
    from backends.text.g2p.frontends import EspeakG2P

    return EspeakG2P()


@pytest.fixture(scope="session")
def server_g2p():
    """The server's G2P with its default settings: every language's front end (espeak-ng for English), each built
    on first use."""
    from backends.text.g2p.frontends import G2P

    return G2P()


@pytest.fixture(scope="session")
def pipeline(vocab, server_g2p):
    """The server's text pipeline."""
    from backends.text.planner import TextPipeline

    return TextPipeline(server_g2p.phonemize, vocab, read=server_g2p.phonemize_words)


@pytest.fixture(scope="session")
def onnx_synth(model_files, voices):
    from backends.runtimes.onnx import OnnxSynthesizer

    synth = OnnxSynthesizer(model_files, voices)
    synth.load()
    return synth


@pytest.fixture(scope="session")
def torch_synth(model_dir, voices):
    """The PyTorch runtime on the real weights, loaded once per run (its tests share one worker):
    on the CPU, deterministic (no sine-source noise, like the ONNX export), so its outputs can be
    compared. Wrap it in ``tests.support.app.LoadedRuntime`` to serve it from an app; a test that needs
    it unloaded, or with other options, builds its own."""
    from backends.runtimes.torch import TorchSynthesizer

    synth = TorchSynthesizer(model_dir, voices, device="cpu", deterministic=True)
    synth.load()  # rebuilds kokoro-v1_0.rebuilt.pth into the model dir once when it is missing
    return synth


@pytest.fixture(scope="session")
def transcribe():
    """Transcribe 24 kHz float audio with pocketsphinx's bundled en-us model; returns lower-case words."""
    import numpy as np
    import soxr
    from pocketsphinx import Decoder

    decoder = Decoder(samprate=16000)

    def run(audio) -> list[str]:
        pcm = (np.clip(soxr.resample(audio, 24000, 16000), -1, 1) * 32767).astype(np.int16).tobytes()
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp()
        return hyp.hypstr.lower().split() if hyp else []

    return run


# ---------------------------------------------------------------------------------------------
# Shared servers
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def onnx_server(model_dir, tmp_path_factory):
    """``python -m server serve`` on the real ONNX model, default settings, ready (``url``, ``ws_url``).
    Shared: talk to it over the wire only, read its counters as differences. It must exit 0 at the end."""
    from tests.support.live import ServerProcess

    proc = ServerProcess(tmp_path_factory.mktemp("onnx-server") / "server.log", KOKORO_MODEL_DIR=str(model_dir))
    try:
        yield proc.wait_ready()
    finally:
        assert proc.stop() == 0, proc.log_tail()


#: The shared fake runtime's latency per segment: quick, yet long enough that a reply is still being
#: spoken while the next message arrives.
FAKE_SEGMENT_S = 0.02


@pytest.fixture(scope="session")
def fake_server(tmp_path_factory):
    """``python -m server serve`` on the fake runtime (``KOKORO_BACKEND=fake``, ``FAKE_SEGMENT_S`` a
    segment), everything else as shipped, ready. Shared as ``onnx_server`` is."""
    from tests.support.live import ServerProcess

    proc = ServerProcess(tmp_path_factory.mktemp("fake-server") / "server.log", KOKORO_BACKEND="fake",
                         KOKORO_FAKE_SEGMENT_S=str(FAKE_SEGMENT_S))
    try:
        yield proc.wait_ready()
    finally:
        assert proc.stop() == 0, proc.log_tail()

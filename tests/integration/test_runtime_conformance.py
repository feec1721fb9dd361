"""One conformance test of the runtime interface (:class:`~backends.api.Synthesizer`), passed by
every runtime: ONNX, torch on the CPU, and the fake as shipped and with every capability on.

Each runtime is loaded once here (torch's is the run's one torch runtime, ``torch_synth``, loaded by
the same ``load()``); what it declares (:class:`~backends.api.Capabilities`) is
checked against what it does: float32 audio at 24 kHz in [-1, 1]; frame durations that add up
to the audio where it is ``timed``; batch outputs in input order where it has ``batch``; an
:class:`~backends.api.Interrupt` that stops a call where it is ``interruptible`` (and the next
call speaks as before), and that changes nothing where it is not; the same audio from calls on
two threads at once where it is ``thread_safe``; threads settable before ``load()`` only. A
method outside its capabilities raises :class:`~backends.api.Unsupported`. The real models say
one short sentence per check (two for a batch, a longer one to interrupt); a plain call's audio of a
sentence is the reference the checks compare with, said once per runtime (every runtime here is
deterministic).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from backends.api import (
    SAMPLE_RATE,
    Capabilities,
    Interrupt,
    Interrupted,
    Segment,
    Synthesizer,
    Unsupported,
)
from backends.runtimes.fake import FakeSynthesizer

FRAME = 600  # samples per duration frame
SHORT = ["Open the door.", "Yes."]  # (of different lengths: a batch answered out of order shows)
LONG = ("Here is the long answer you asked for, and it goes on for a while, "
        "and then it goes on some more, clause after clause, until it ends.")


def make(name: str, model_files, voices) -> Synthesizer:
    """A runtime of kind ``name``, not loaded."""
    if name == "onnx":
        from backends.runtimes.onnx import OnnxSynthesizer

        return OnnxSynthesizer(model_files, voices)
    if name == "torch":
        from backends.runtimes.torch import TorchSynthesizer

        # deterministic: no sine-source noise (as the ONNX export), so samples can be compared
        return TorchSynthesizer(model_files.root, voices, device="cpu", deterministic=True, warmup=False)
    # 5 ms a phoneme: the long sentence takes most of a second, so an interrupt 20 ms into it lands
    # inside the call however loaded the machine is (the short ones take a tenth of that)
    if name == "fake":
        return FakeSynthesizer(voices, segment_s=0.05, phoneme_s=0.005)
    return FakeSynthesizer(voices, segment_s=0.05, phoneme_s=0.005, batch=True, timed=True, thread_safe=False,
                           solo_calls=False, device="cuda")


#: Each runtime kind, loaded here by its own instance (the checks include loading it), but torch: its
#: tests run beside the run's one torch runtime (``torch_synth``'s group), which a second load would
#: only repeat at seconds of CPU.
RUNTIMES = ["onnx", pytest.param("torch", marks=[pytest.mark.torch, pytest.mark.xdist_group("torch")]), "fake",
            "fake-every-capability"]


@pytest.fixture(scope="module", params=RUNTIMES)
def runtime(request, model_files, voices):
    """(the runtime loaded, whether it said it was loaded before ``load()``)."""
    synth = make(request.param, model_files, voices)
    before = synth.loaded
    if request.param == "torch":  # the run's one (CPU, deterministic), loaded by the same load()
        return request.getfixturevalue("torch_synth"), before
    synth.load()
    return synth, before


@pytest.fixture(scope="module")
def spoken(runtime):
    """A plain call's audio of a segment, said once per runtime and text: the reference a batch, an
    interrupted call's successor and a solo call are compared with."""
    synth, _ = runtime
    said: dict[str, np.ndarray] = {}

    def say(seg: Segment) -> np.ndarray:
        if seg.text not in said:
            said[seg.text] = synth.synthesize(seg)
        return said[seg.text]

    return say


@pytest.fixture(scope="module")
def segment(g2p):
    def plan(text: str) -> Segment:
        return Segment(text=text, phonemes=g2p.phonemize(text, "en-us"), voice="jm_kumo")

    return plan


def assert_audio(audio: np.ndarray) -> None:
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert audio.size > SAMPLE_RATE // 10  # a short sentence: audible, not a click
    assert np.isfinite(audio).all() and np.abs(audio).max() <= 1.0


def test_it_loads_and_declares_what_it_is(runtime):
    synth, before = runtime
    assert isinstance(synth, Synthesizer) and not before and synth.loaded
    caps = synth.capabilities
    assert isinstance(caps, Capabilities)
    assert synth.sample_rate == SAMPLE_RATE and synth.name and synth.model_name
    assert caps.device in ("cpu", "cuda") and caps.dtype in ("float32", "float16", "bfloat16")


def test_it_speaks_float32_at_24khz_clipped(spoken, segment):
    assert_audio(spoken(segment(SHORT[0])))


def test_timed_output_adds_up_to_the_audio_where_declared(runtime, segment):
    synth, _ = runtime
    seg = segment(SHORT[0])
    if not synth.capabilities.timed:
        with pytest.raises(Unsupported):
            synth.synthesize_timed(seg)
        return
    audio, durations = synth.synthesize_timed(seg)
    assert_audio(audio)
    assert durations.dtype == np.int64 and (durations >= 0).all()
    assert len(durations) >= 3  # bos, each phoneme, eos
    assert durations.sum() * FRAME == pytest.approx(len(audio), abs=FRAME)


def test_batch_outputs_come_in_input_order_where_declared(runtime, segment, spoken):
    synth, _ = runtime
    segs = [segment(t) for t in SHORT]
    caps = synth.capabilities
    if not caps.batch:
        with pytest.raises(Unsupported):
            synth.synthesize_batch(segs)
        with pytest.raises(Unsupported):
            synth.synthesize_batch_timed(segs)
        return
    alone = [spoken(s) for s in segs]
    together = synth.synthesize_batch(list(reversed(segs)))[::-1]
    assert [len(a) for a in together] == [len(a) for a in alone]  # each output is its own segment's
    assert len(alone[0]) != len(alone[1])
    for audio in together:
        assert_audio(audio)
    if caps.timed:
        timed = synth.synthesize_batch_timed(segs)
        assert [len(a) for a, _ in timed] == [len(a) for a in alone]
        for audio, durations in timed:
            assert durations.sum() * FRAME == pytest.approx(len(audio), abs=FRAME)


def test_an_interrupt_stops_a_call_where_declared_and_the_next_call_speaks_as_before(runtime, segment, spoken):
    synth, _ = runtime
    short, long_ = segment(SHORT[0]), segment(LONG)
    reference = spoken(short)  # (said before this interrupt)
    interrupt = Interrupt()
    if not synth.capabilities.interruptible:  # declared not: an interrupt changes nothing
        interrupt.set()
        np.testing.assert_array_equal(synth.synthesize(short, interrupt=interrupt), reference)
        return
    timer = threading.Timer(0.02, interrupt.set)  # in the call's first moments
    timer.start()
    with pytest.raises(Interrupted):
        synth.synthesize(long_, interrupt=interrupt)
    timer.join()
    already = Interrupt()
    already.set()
    with pytest.raises(Interrupted):  # set before the call began
        synth.synthesize(short, interrupt=already)
    np.testing.assert_allclose(synth.synthesize(short, interrupt=Interrupt()), reference, atol=1e-4)
    np.testing.assert_allclose(synth.synthesize(short), reference, atol=1e-4)


@pytest.mark.parametrize("name", ["onnx", "fake"])  # the runtimes that declare thread_safe
def test_calls_from_two_threads_at_once_give_what_calls_one_at_a_time_give(name, model_files, voices, segment):
    synth = make(name, model_files, voices)
    synth.set_threads(1)  # as the concurrent mode runs parallel calls: a share of the cores each
    synth.load()
    assert synth.capabilities.thread_safe
    segs = [segment(t) for t in SHORT]
    alone = [synth.synthesize(s) for s in segs]
    both = threading.Barrier(2)

    def call(s: Segment) -> np.ndarray:
        both.wait(30)  # the two calls start together
        return synth.synthesize(s)

    with ThreadPoolExecutor(max_workers=2) as pool:
        together = list(pool.map(call, segs))
    for a, b in zip(alone, together, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_a_solo_call_speaks_as_a_shared_one(runtime, segment, spoken):
    synth, _ = runtime
    seg = segment(SHORT[0])
    np.testing.assert_allclose(synth.synthesize(seg, solo=True), spoken(seg), atol=1e-3)


@pytest.mark.parametrize("name", RUNTIMES)
def test_threads_are_settable_before_load_only_where_declared(name, model_files, voices):
    synth = make(name, model_files, voices)
    caps = synth.capabilities
    if not caps.threads_settable:
        with pytest.raises(Unsupported):
            synth.set_threads(1)
        return
    synth.set_threads(1, solo=2)
    assert synth.threads == 1 and synth.solo_threads == (2 if caps.solo_calls else None)
    if name == "torch":
        return  # (loading torch twice costs seconds; its loaded state is checked above)
    synth.load()
    with pytest.raises(RuntimeError):
        synth.set_threads(2)

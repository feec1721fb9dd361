"""The PyTorch runtime on the real weights (rebuilt from the int8 ONNX export, or the official .pth).

What a user would notice, checked on a few short sentences (CPU):
* speech of plausible length and loudness, with per-token durations that add up to the audio;
* ``synthesize_batch`` gives each segment what it gets alone: the same durations and length, and
  the same spectrum; in float64 the same samples (the masking is exact; in float32 the model's own
  sensitivity to rounding moves samples by a few percent of energy, which the spectrum does not show);
* the same speech as the ONNX runtime on the same tokens and voice: durations within a frame or
  two, a predicted F0 contour that correlates > 0.999 and a closely matching spectrum — far closer
  than another voice or sentence comes;
* the same computation as ``KModel.forward_with_tokens``;
* word timings through both backend modes: every chunk carries the runtime's durations, and they
  add up to its audio, whether the segment went alone or in a batch;
* precision: ``KOKORO_DTYPE`` resolves per device and bfloat16 autocast still speaks;
* a late listener is served as on ONNX: in both modes a newcomer's first segment interrupts a
  running later segment between two modules of the forward pass, runs first, and the interrupted
  segment runs again after it (virtual time: the policy's clock is injected).
The runtime's dependencies are required: without torch or kokoro this module fails, never skips.
(torch is imported by the tests that use it: every worker of a parallel run collects this module,
and all but one never run it.)
"""

from __future__ import annotations

import asyncio
import copy
import threading

import numpy as np
import pytest

from backends.api import MAX_PHONEMES, SAMPLE_RATE, Segment, SynthesisRequest, Unsupported
from backends.config import BackendConfig
from backends.engine.concurrent import ConcurrentBackend
from backends.engine.joins import pause_for, shape
from backends.engine.sequential import SequentialBackend
from backends.runtimes.torch import reduced_precision_problem, resolve_dtype
from tests.support.observer import Recorder
from tests.support.virtual_time import VirtualClock

pytestmark = pytest.mark.torch

FRAME = 600  # samples per predicted duration frame
SENTENCES = ["Please open the door and turn on the light.", "We will meet at the station at seven o'clock."]


@pytest.fixture(scope="module")
def segments(g2p):
    def make(text, voice="jm_kumo", speed=1.0):
        return Segment(text=text, phonemes=g2p.phonemize(text, "en-us"), voice=voice, speed=speed)

    return make


@pytest.fixture(scope="module")
def speak(torch_synth, segments):
    """Unbatched synthesis, memoised across this module's tests (CPU time is shared here)."""
    done: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def run(text, voice="jm_kumo", speed=1.0):
        key = (text, voice, speed)
        if key not in done:
            done[key] = torch_synth.synthesize_timed(segments(text, voice, speed))
        return done[key]

    return run


# ----------------------------------------------------------------------------- audio measures
def log_mel(audio: np.ndarray, n_fft: int = 1024, hop: int = 240, n_mels: int = 64) -> np.ndarray:
    """Loudness-normalised log-mel spectrogram in dB (80 dB floor), frames x mels."""
    a = np.asarray(audio, np.float64)
    a = a / (np.sqrt(np.mean(a**2)) + 1e-9)
    frames = np.lib.stride_tricks.sliding_window_view(np.pad(a, n_fft // 2), n_fft)[::hop] * np.hanning(n_fft)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    freqs = np.linspace(0, SAMPLE_RATE / 2, n_fft // 2 + 1)
    mel_edges = np.linspace(2595 * np.log10(1 + 50 / 700), 2595 * np.log10(1 + 8000 / 700), n_mels + 2)
    hz = 700 * (10 ** (mel_edges / 2595) - 1)
    lo, mid, hi = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    bank = np.clip(np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)), 0, None)
    db = 10 * np.log10(power @ bank.T + 1e-10)
    return np.maximum(db, db.max() - 80)


def aligned_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Mean dB distance between two log-mel spectrograms along their best (DTW) time alignment,
    so a phoneme a frame early or late costs little and different sounds cost a lot."""
    cost = np.abs(a[:, None, :] - b[None, :, :]).mean(-1)
    acc = np.full((len(a) + 1, len(b) + 1), np.inf)
    acc[0, 0] = 0.0
    for i in range(1, len(a) + 1):
        from_above = np.minimum(acc[i - 1, :-1], acc[i - 1, 1:]) + cost[i - 1]
        row = acc[i]
        for j in range(1, len(b) + 1):
            row[j] = min(from_above[j - 1], row[j - 1] + cost[i - 1, j - 1])
    return float(acc[-1, -1] / (len(a) + len(b)))


# --------------------------------------------------------------------------------------- tests
def test_speech_is_audible_of_plausible_length_and_timed(torch_synth, segments, speak):
    seg = segments(SENTENCES[0])
    audio, durations = speak(SENTENCES[0])
    assert audio.dtype == np.float32 and np.isfinite(audio).all() and np.abs(audio).max() <= 1.0
    assert 1.5 < len(audio) / SAMPLE_RATE < 8.0  # nine words, spoken
    assert np.sqrt(np.mean(audio**2)) > 0.02  # not silence
    assert len(durations) == len(torch_synth.tokens(seg.phonemes)) + 2  # bos, phonemes, eos
    assert durations.min() >= 1 and durations.sum() * FRAME == len(audio)


def test_speed_and_unknown_phonemes(torch_synth, segments):
    normal, fast = torch_synth.synthesize_batch(
        [segments("Turn on the light."), segments("Turn on the light.", speed=2.0)]
    )
    assert len(fast) < 0.75 * len(normal)
    nothing = Segment(text="?", phonemes="\u2603\u2603", voice="jm_kumo")  # no vocabulary character
    out = torch_synth.synthesize_batch([nothing, segments("Yes."), nothing])
    assert [len(a) for a in out][::2] == [0, 0] and len(out[1]) > 0
    assert torch_synth.tokens("a" * (MAX_PHONEMES + 50)) == [torch_synth.tokens("a")[0]] * MAX_PHONEMES


def test_batched_equals_single_in_float32(torch_synth, segments, speak):
    """Tolerance: identical durations and length; per-frame log-mel within 0.5 dB on average;
    waveform error below 15% of its energy (rounding, amplified by the vocoder's phase inputs)."""
    items = [("Open the door.", "jm_kumo", 1.0), ("Yes.", "jf_alpha", 1.2)]
    together = torch_synth.synthesize_batch_timed([segments(*item) for item in items])
    for item, (audio, durations) in zip(items, together, strict=True):
        alone, alone_durations = speak(*item)
        np.testing.assert_array_equal(durations, alone_durations)
        assert len(audio) == len(alone)
        assert np.abs(log_mel(audio) - log_mel(alone)).mean() < 0.5
        assert np.linalg.norm(audio - alone) < 0.15 * np.linalg.norm(alone)
    # Deterministic mode: the same input gives the same samples.
    np.testing.assert_array_equal(torch_synth.synthesize(segments(*items[1])), speak(*items[1])[0])


def test_batched_equals_single_exactly_in_float64(torch_synth, voices, vocab, g2p):
    """In float64 rounding no longer hides anything: a padding or masking mistake would show. The
    items are spoken fast: float64 convolutions on a CPU cost in proportion to the frames."""
    import torch

    from backends.runtimes.torch_forward import forward_batch

    model = copy.deepcopy(torch_synth._model).double()
    texts = ["Yes, sir.", "No."]
    tokens = [[vocab[c] for c in g2p.phonemize(t, "en-us") if c in vocab] for t in texts]
    styles = torch.from_numpy(np.stack([voices.get("jm_kumo")[len(t) - 1, 0] for t in tokens])).double()
    speeds = torch.tensor([1.4, 1.2], dtype=torch.float64)
    with torch.inference_mode():
        batch = forward_batch(model, tokens, styles, speeds, deterministic=True)
        # the second item is padded in both: tokens and frames
        assert len(tokens[1]) < len(tokens[0]) and int(batch.audio_lengths[1]) < int(batch.audio_lengths[0])
        for i, toks in enumerate(tokens):
            alone = forward_batch(model, [toks], styles[i : i + 1], speeds[i : i + 1], deterministic=True)
            n = int(alone.audio_lengths[0])
            assert int(batch.audio_lengths[i]) == n
            torch.testing.assert_close(batch.audio[i, :n], alone.audio[0], rtol=0, atol=1e-8)
            assert not batch.audio[i, n:].any()  # nothing past the item's end


def test_same_computation_as_kmodel_forward(torch_synth, vocab, voices, g2p, speak, monkeypatch):
    """The batched forward at batch size 1 against the kokoro package's own forward pass."""
    import torch

    text = "Open the door."
    tokens = [vocab[c] for c in g2p.phonemize(text, "en-us") if c in vocab]
    style = torch.from_numpy(voices.get("jm_kumo")[len(tokens) - 1])
    ours, our_durations = speak(text)
    # KModel's sine source draws random phases and noise; zero them as deterministic mode does.
    monkeypatch.setattr(torch, "rand", lambda *a, **k: torch.zeros(*a, device=k.get("device")))
    monkeypatch.setattr(torch, "randn_like", lambda x, *a, **k: torch.zeros_like(x))
    with torch.inference_mode():
        audio, durations = torch_synth._model.forward_with_tokens(torch.tensor([[0, *tokens, 0]]), style, 1.0)
    np.testing.assert_array_equal(our_durations, durations.numpy())
    assert len(ours) == audio.shape[-1]
    assert np.abs(log_mel(ours) - log_mel(audio.numpy())).mean() < 0.5


def _onnx_prosody(onnx_path, tokens, style, speed=1.0):
    """Durations and the F0 curve from inside the ONNX graph (only that part of it runs)."""
    import onnx
    import onnxruntime as ort

    proto = onnx.load(str(onnx_path))
    del proto.graph.output[:]
    for name in ("/encoder/Clip_output_0", "/encoder/Squeeze_output_0"):
        proto.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {
        "tokens": np.array([[0, *tokens, 0]], np.int64),
        "style": style,
        "speed": np.array([speed], np.float32),
    }
    durations, f0 = session.run(None, feeds)
    return np.asarray(durations).reshape(-1).astype(np.int64), np.asarray(f0).reshape(-1)


def _torch_f0(model, tokens, style, durations):
    """KModel's F0 curve for given durations (the ONNX ones, so both curves share a time axis)."""
    import torch

    ids = torch.tensor([[0, *tokens, 0]])
    mask = torch.zeros_like(ids, dtype=torch.bool)
    with torch.inference_mode():
        d_en = model.bert_encoder(model.bert(ids, attention_mask=(~mask).int())).transpose(-1, -2)
        d = model.predictor.text_encoder(d_en, style[:, 128:], torch.tensor([ids.shape[1]]), mask)
        frame_token = torch.repeat_interleave(torch.arange(ids.shape[1]), torch.from_numpy(durations))
        en = d.transpose(-1, -2)[:, :, frame_token]
        f0, _ = model.predictor.F0Ntrain(en, style[:, 128:])
    return f0.reshape(-1).numpy()


def test_parity_with_the_onnx_runtime(torch_synth, onnx_synth, segments, speak, model_dir, voices):
    """Thresholds from measurement: the same voice and words score ~0.8 dB on the aligned
    spectrogram distance where another voice or sentence scores ~5 dB."""
    import torch

    seg = segments(SENTENCES[0])
    ours, durations = speak(SENTENCES[0])
    theirs = onnx_synth.synthesize(seg)
    # Segment durations: the int8 graph rounds a token's duration differently now and then.
    assert abs(len(ours) - len(theirs)) <= 3 * FRAME
    tokens = torch_synth.tokens(seg.phonemes)
    style = voices.get("jm_kumo")[len(tokens) - 1]
    onnx_durations, onnx_f0 = _onnx_prosody(model_dir / "kokoro-v1.0.int8.onnx", tokens, style)
    assert len(onnx_durations) == len(durations)
    assert np.abs(onnx_durations - durations).max() <= 2 and np.mean(onnx_durations != durations) < 0.1
    # Same weights: on the same time axis the predicted F0 contours agree.
    f0 = _torch_f0(torch_synth._model, tokens, torch.from_numpy(style), onnx_durations)
    assert np.corrcoef(f0, onnx_f0)[0, 1] > 0.999
    # Spectra, aligned in time and over the whole utterance.
    assert aligned_distance(log_mel(ours), log_mel(theirs)) < 2.0
    assert np.abs(log_mel(ours).mean(0) - log_mel(theirs).mean(0)).mean() < 1.5


# Sequential; concurrent with single calls (a CPU's default); concurrent batching both requests
# into one call (batch_on_cpu; the fill waits for the second request rather than a timer).
BACKEND_MODES = {
    "sequential": (SequentialBackend, {}),
    "concurrent": (ConcurrentBackend, {}),
    "concurrent-batched": (ConcurrentBackend, {"batch_on_cpu": True, "max_batch_size": 2, "max_wait_ms": 10_000}),
}


@pytest.mark.parametrize("mode", sorted(BACKEND_MODES))
async def test_word_timings_survive_every_mode(torch_synth, pipeline, voices, speak, mode):
    """Regression: the concurrent mode dropped the runtime's durations (timed speech answered 501)."""
    cls, config = BACKEND_MODES[mode]
    recorder = Recorder()
    backend = cls(torch_synth, pipeline, voices, BackendConfig.defaults(**config), observer=recorder)
    try:
        assert backend.info.capabilities.word_timings
        texts = ["Yes, sir.", "No, thanks."]
        requests = [await backend.prepare(SynthesisRequest(text=t, voice="jm_kumo", session=t)) for t in texts]

        async def collect(request):
            return [chunk async for chunk in backend.stream(request)]

        answered = await asyncio.gather(*(collect(r) for r in requests))
    finally:
        await backend.aclose()
    for text, chunks in zip(texts, answered, strict=True):
        (chunk,) = chunks
        assert chunk.durations is not None and chunk.durations.sum() * FRAME == len(chunk.audio)
        assert len(chunk.durations) == len(torch_synth.tokens(chunk.phonemes)) + 2  # bos, phonemes, eos
        alone = shape(*speak(text), pause_for("sentence"))  # what the runtime says alone, ends shaped for the join
        np.testing.assert_array_equal(chunk.durations, alone[1])
    assert recorder.batches == ([2] if mode == "concurrent-batched" else [1, 1])


def test_dtype_resolves_per_device():
    assert resolve_dtype("auto", "cuda") == "float16" and resolve_dtype("auto", "cpu") == "float32"
    assert resolve_dtype("float16", "cpu") == "float32"  # float16 needs CUDA
    assert resolve_dtype("bfloat16", "cpu") == "bfloat16"
    with pytest.raises(ValueError):
        resolve_dtype("half", "cpu")


def test_bfloat16_on_cpu_still_speaks(torch_synth, segments, speak):
    """The precision is the runtime's setting (KOKORO_DTYPE): autocast, not a different model."""
    text = "Open the door."
    low = copy.copy(torch_synth)  # the same loaded model, another precision
    low.dtype = "bfloat16"
    if reduced_precision_problem("bfloat16", "cpu"):  # an AVX2-only CPU: refused with what to do, not a crash
        with pytest.raises(Unsupported, match=r"AVX-512.*float32") as refused:
            low.synthesize_timed(segments(text))
        assert refused.value.code == "unsupported_dtype"
        return
    audio, durations = low.synthesize_timed(segments(text))
    ref_audio, _ = speak(text)
    assert durations.sum() * FRAME == len(audio) and abs(len(audio) - len(ref_audio)) <= 3 * FRAME
    assert not np.array_equal(audio, ref_audio)  # computed in another precision...
    # ...and the same speech: measured ~0.6 dB here, where another voice and sentence score ~4.7 dB.
    assert np.abs(log_mel(audio).mean(0) - log_mel(ref_audio).mean(0)).mean() < 1.5


@pytest.mark.slow
def test_speech_is_intelligible(speak, transcribe):
    """pocketsphinx's bundled en-us model hears most of the words (the ONNX runtime's bar)."""
    hit = total = 0
    for text in [*SENTENCES, "The train leaves in the morning."]:
        expected = [w.strip(".,'").lower() for w in text.split()]
        heard = set(transcribe(speak(text)[0]))
        hit += sum(w in heard for w in expected)
        total += len(expected)
    assert hit / total >= 0.6, f"only {hit}/{total} words recognised"


@pytest.mark.parametrize("mode", ["sequential", "concurrent"])
async def test_a_late_listener_interrupts_a_running_torch_call_between_modules(torch_synth, pipeline, voices, mode):
    """The policy's rule 5 on the torch runtime (single calls, as on a CPU torch server): the
    later segment's call is held inside its forward pass (after the BERT encoder) until the
    newcomer is queued, then stops at the next module; the newcomer's audio comes first."""
    cls, config = BACKEND_MODES[mode]
    clock, recorder = VirtualClock(), Recorder()
    backend = cls(torch_synth, pipeline, voices, BackendConfig.defaults(**config), observer=recorder, clock=clock)
    assert backend.interrupts
    backend.policy.cost.measured("solo", 1.0, 10)  # a call is expected to take 0.1 s a token
    armed, inside, go = threading.Event(), threading.Event(), threading.Event()

    def hold(_module, _args):
        if armed.is_set():
            armed.clear()
            inside.set()
            go.wait(60)

    handle = torch_synth._model.bert_encoder.register_forward_pre_hook(hold)
    heard: list[str] = []
    try:
        long_ = await backend.prepare(SynthesisRequest(text="Yes, sir. We will meet at seven.",
                                                       voice="jm_kumo", session="long", created=clock()))
        new = await backend.prepare(SynthesisRequest(text="Hello.", voice="jm_kumo", session="new", created=clock()))
        assert len(long_.segments) == 2
        stream = backend.stream(long_)
        heard.append((await anext(stream)).text)  # its listener hears the first segment
        armed.set()
        second = asyncio.create_task(anext(stream))
        assert await asyncio.to_thread(inside.wait, 60)  # the second segment's call is inside the model

        async def newcomer():
            async for chunk in backend.stream(new):
                heard.append(chunk.text)

        first_audio = asyncio.create_task(newcomer())
        for _ in range(10_000):  # until the newcomer's segment is queued (the interrupt is set then)
            if backend.queue_depth:
                break
            await asyncio.sleep(0)  # (a turn of the event loop)
        assert backend.queue_depth == 1
        go.set()
        await first_audio
        heard.append((await second).text)
        with pytest.raises(StopAsyncIteration):
            await anext(stream)
    finally:
        go.set()
        handle.remove()
        await backend.aclose()
    assert heard == [long_.segments[0].text, new.segments[0].text, long_.segments[1].text]
    assert len(recorder.interruptions) == 1

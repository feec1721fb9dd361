"""PyTorch synthesizer on the `kokoro` package's ``KModel`` (CUDA or CPU), with a batched path.

Weights: the official ``kokoro-v1_0.pth`` when it is in the model directory, else
``kokoro-v1_0.rebuilt.pth`` (rebuilt offline from the int8 ONNX export by
:mod:`backends.assets.torch_convert`; built on first load when missing and the directory is writable).
Either is loaded strictly. The config (vocab, dims) is the model directory's ``config.json``;
nothing is fetched from a model hub.

Tokens are the config vocabulary's ids of the segment's phoneme characters (unknown characters
dropped, at most 510), and the style is row ``len(tokens) - 1`` of the voice pack, as in
kokoro-onnx, so both runtimes read the same inputs.

``synthesize_batch`` runs one forward pass over segments of different lengths (see
:mod:`backends.runtimes.torch_forward`): each item gets the durations and audio it would get alone, up to
float rounding. The model is sensitive to rounding (the phase of near-silent STFT bins feeds the
vocoder), so in float32 a batched item differs from its unbatched synthesis by a few percent of
waveform energy in scattered bursts while durations, length and spectrum agree; in float64 they
agree to ~1e-11. ``deterministic=True`` drops the sine source's random phases and noise (the ONNX
export has neither); the default keeps them, as the official PyTorch model does.

Threading: calls are serialised by an internal lock (one forward at a time per synthesizer;
``thread_safe`` is False because a second thread gains nothing). ``set_threads`` (before
``load()``) sets torch's intra-op thread count on a CPU, which is process-wide. Blocking: call from
a worker thread, never the event loop.

Interrupting a call (``interruptible``): every leaf module of the model carries a forward
pre-hook that raises :class:`~backends.api.Interrupted` when the running single call's
:class:`~backends.api.Interrupt` is set, so a call stops before its next module (a convolution,
an LSTM, a linear layer: milliseconds on a CPU) and nothing of it is kept; the next call runs as
before (the model holds no state between calls). A batch call is never interrupted. The checks
cost nothing measurable: 347 hook calls in the forward pass of one sentence, against seconds of
compute on a CPU.

Its :class:`~backends.api.Capabilities`: a batch path, timed, interruptible, threads settable; not
thread-safe, no solo calls; ``device`` and ``dtype`` as resolved by ``load()``.

Precision (``dtype``, ``KOKORO_DTYPE``): ``auto`` is float16 on CUDA and float32 elsewhere;
float16 and bfloat16 run the forward pass under ``torch.autocast`` (weights stay float32; the
normalisation statistics and phases stay float32, see :mod:`backends.runtimes.torch_forward`). float16
needs CUDA: asked for on a CPU, the runtime warns and runs float32. ``dtype`` reports the
precision in use once loaded.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from backends.api import (
    MAX_PHONEMES,
    SAMPLE_RATE,
    BackendFault,
    Capabilities,
    Interrupt,
    Interrupted,
    NotReady,
    Segment,
    Synthesizer,
    Unsupported,
    clip_audio,
)
from backends.runtimes.torch_model import (
    REBUILT_PTH,
    build_kmodel,
    find_checkpoint,
    load_checkpoint,
    read_config,
)
from backends.runtimes.windowing import (
    WINDOW_CONTEXT,
    Predictions,
    fold_durations,
    prediction_key,
    token_range,
)

log = logging.getLogger(__name__)

OFFLINE_ONNX = "kokoro-v1.0.int8.onnx"
WARMUP_PHONEMES = "həlˈoʊ wˈɜːld."


class VoiceSource(Protocol):
    def get(self, spec: str) -> np.ndarray: ...


DTYPES = ("auto", "float32", "float16", "bfloat16")


def resolve_dtype(dtype: str, device: str) -> str:
    """The precision ``dtype`` means on ``device`` (``auto``: float16 on CUDA, else float32)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    cuda = device.startswith("cuda")
    if dtype == "auto":
        return "float16" if cuda else "float32"
    if dtype == "float16" and not cuda:
        log.warning("float16 needs CUDA; running float32 on %s", device)
        return "float32"
    return dtype


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is usable, else ``cpu``; ``cuda`` without one is an error."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested but torch sees no CUDA device")
    if device != "cpu" and not device.startswith("cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, not {device!r}")
    return device


class InterruptWatch:
    """The forward pre-hook on every leaf module: the running call stops there once its interrupt
    is set. A copy of the model (``copy.deepcopy``) shares the watch instead of copying the
    synthesizer, its lock and its model along with it."""

    def __init__(self) -> None:
        self.interrupt: Interrupt | None = None

    def __call__(self, module: Any, args: Any) -> None:
        interrupt = self.interrupt
        if interrupt is not None and interrupt.is_set:
            raise Interrupted("the call was interrupted")

    def __deepcopy__(self, memo: dict[int, Any]) -> InterruptWatch:
        return self


class TorchSynthesizer(Synthesizer):
    """Kokoro-82M on PyTorch. ``load()`` once (seconds; may rebuild the checkpoint), then
    ``synthesize``, ``synthesize_timed`` or ``synthesize_batch`` from worker threads."""

    name = "torch"
    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        model_dir: Path,
        voices: VoiceSource,
        *,
        device: str = "auto",
        dtype: str = "auto",
        threads: int | None = None,
        deterministic: bool = False,
        warmup: bool = True,
    ):
        self.model_dir = Path(model_dir)
        self.voices = voices
        self.requested_device = device
        self.requested_dtype = dtype
        #: The precision in use (resolved by ``load()``; until then what was asked for).
        self.dtype = dtype
        self.threads = threads
        self.deterministic = deterministic
        #: Frames a window decodes on each side of the segment's (and crops after).
        self.window_context = WINDOW_CONTEXT
        #: Each sentence's prosody while its windows are read (the predictor runs once a sentence).
        self.predictions: Predictions[Any] = Predictions()
        self.warmup = warmup
        #: The device in use (resolved by ``load()``; until then what was asked for).
        self.device = device
        self.checkpoint: Path | None = None
        self.model_name = "kokoro-v1_0"
        self.load_seconds: float | None = None
        self._model: Any = None
        self._vocab: dict[str, int] = {}
        self._lock = threading.Lock()
        self._watch = InterruptWatch()  # the running call's interrupt (calls are serialised)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(batch=True, timed=True, interruptible=True, threads_settable=True, windowed=True,
                            device=self.device, dtype=self.dtype)

    # ---------------------------------------------------------------------------------- loading
    def load(self) -> None:
        import torch

        started = time.perf_counter()
        self.device = resolve_device(self.requested_device)
        self.dtype = resolve_dtype(self.requested_dtype, self.device)
        problem = reduced_precision_problem(self.dtype, self.device)
        if problem:
            raise Unsupported(problem, code="unsupported_dtype")
        if self.device == "cpu" and self.threads:  # (set_threads: before load)
            torch.set_num_threads(self.threads)
        config = read_config(self.model_dir / "config.json")
        self._vocab = config["vocab"]
        self.checkpoint = find_checkpoint(self.model_dir) or self._rebuild()
        self.model_name = self.checkpoint.name
        model = build_kmodel(config)
        load_checkpoint(model, self.checkpoint)
        _remove_weight_norm(model)
        model = model.to(self.device).eval()
        for module in model.modules():
            if not any(True for _ in module.children()):
                module.register_forward_pre_hook(self._watch)
        self._model = model
        if self.warmup:  # first-call allocations and kernel selection, off the request path
            self._forward([self.tokens(WARMUP_PHONEMES)] * 2, np.zeros((2, 256), np.float32), [1.0, 1.0])
        self.load_seconds = time.perf_counter() - started
        log.info("torch runtime: %s on %s (%s) in %.1fs", self.model_name, self.device, self.dtype, self.load_seconds)

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def _rebuild(self) -> Path:
        from backends.assets.torch_convert import rebuild_checkpoint

        onnx = self.model_dir / OFFLINE_ONNX
        if not onnx.is_file():
            raise FileNotFoundError(
                f"{self.model_dir} has neither kokoro-v1_0.pth nor {REBUILT_PTH} nor {OFFLINE_ONNX} to "
                "rebuild it from; run `kokoro-serve assets`"
            )
        if not os.access(self.model_dir, os.W_OK):
            raise PermissionError(
                f"{self.model_dir} is read-only; run `kokoro-serve assets` to add {REBUILT_PTH}"
            )
        log.warning("torch runtime: no PyTorch checkpoint in %s; rebuilding %s from %s once (about a minute; "
                    "`kokoro-serve assets --torch` builds it ahead)", self.model_dir, REBUILT_PTH, onnx.name)
        report = rebuild_checkpoint(onnx, self.model_dir / "config.json", self.model_dir / REBUILT_PTH)
        log.info("rebuilt: %s/%s keys in %.1fs", report["mapped"], report["total"], report["seconds"])
        return self.model_dir / REBUILT_PTH

    # ------------------------------------------------------------------------------- synthesis
    def tokens(self, phonemes: str) -> list[int]:
        return [self._vocab[c] for c in phonemes if c in self._vocab][:MAX_PHONEMES]

    def _style(self, voice: str, n_tokens: int) -> np.ndarray:
        pack = np.asarray(self.voices.get(voice), dtype=np.float32).reshape(-1, 256)
        row: np.ndarray = pack[max(1, min(n_tokens, len(pack))) - 1]
        return row

    def synthesize(self, segment: Segment, *, interrupt: Interrupt | None = None, solo: bool = False) -> np.ndarray:
        """float32 audio in [-1, 1] at 24 kHz (empty when no phoneme is in the vocabulary)."""
        return self._timed_batch([segment], interrupt)[0][0]

    def synthesize_timed(
        self, segment: Segment, *, interrupt: Interrupt | None = None, solo: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """(audio, frame durations per token: bos, each vocabulary phoneme, eos; 600 samples each)."""
        return self._timed_batch([segment], interrupt)[0]

    def synthesize_batch(self, segments: Sequence[Segment]) -> list[np.ndarray]:
        """One forward pass over all ``segments`` (any lengths, voices, speeds); outputs in order."""
        return [audio for audio, _ in self.synthesize_batch_timed(segments)]

    def synthesize_batch_timed(self, segments: Sequence[Segment]) -> list[tuple[np.ndarray, np.ndarray]]:
        """``synthesize_batch`` with each segment's per-token frame durations."""
        return self._timed_batch(segments, None)

    def _timed_batch(
        self, segments: Sequence[Segment], interrupt: Interrupt | None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        if self._model is None:
            raise NotReady("torch runtime used before load()")
        results = [(np.zeros(0, np.float32), np.zeros(0, np.int64))] * len(segments)
        for i, seg in enumerate(segments):
            if seg.sentence is not None and self.tokens(seg.phonemes):
                results[i] = self._window(seg, interrupt)
        work = [(i, toks, seg) for i, seg in enumerate(segments)
                if seg.sentence is None and (toks := self.tokens(seg.phonemes))]
        if work:
            styles = np.stack([self._style(seg.voice, len(toks)) for _, toks, seg in work])
            speeds = [float(seg.speed) for _, _, seg in work]
            outputs = self._forward([t for _, t, _ in work], styles, speeds, interrupt)
            for (i, _, _), output in zip(work, outputs, strict=True):
                results[i] = output
        return results

    def _forward(
        self, tokens: list[list[int]], styles: np.ndarray, speeds: list[float], interrupt: Interrupt | None = None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        import torch

        from backends.runtimes.torch_forward import forward_batch

        try:
            with self._lock, self._interrupted_by(interrupt), torch.inference_mode(), self._autocast():
                out = forward_batch(
                    self._model,
                    tokens,
                    torch.from_numpy(styles).to(self.device),
                    torch.tensor(speeds, dtype=torch.float32, device=self.device),
                    deterministic=self.deterministic,
                )
                audio = out.audio.float().cpu().numpy()
                durations = out.durations.cpu().numpy()
        except torch.cuda.OutOfMemoryError as e:
            raise BackendFault(f"out of GPU memory for a batch of {len(tokens)}: {e}") from e
        lengths, token_lengths = out.audio_lengths.numpy(), out.token_lengths.numpy()
        return [
            (clip_audio(audio[row, : lengths[row]]), durations[row, : token_lengths[row]].astype(np.int64))
            for row in range(len(tokens))
        ]

    def _window(self, segment: Segment, interrupt: Interrupt | None) -> tuple[np.ndarray, np.ndarray]:
        """A segment that is a window of its sentence: the prosody of the whole sentence, the decoder
        over the segment's frames (``torch_forward.decode_window``); durations per token of the
        segment (bos and eos take the frames of the sentence's tokens on either side of it;
        :mod:`backends.runtimes.windowing`)."""
        import torch

        from backends.runtimes.torch_forward import boundary_frame, decode_window, predict

        span = token_range(segment, self.tokens)
        tokens = span.tokens
        vector = self._style(segment.voice, len(tokens))
        style = torch.from_numpy(vector[None].copy()).to(self.device)
        speed = torch.tensor([float(segment.speed)], device=self.device)
        try:
            with self._lock, self._interrupted_by(interrupt), torch.inference_mode(), self._autocast():
                p = self.predictions.get(prediction_key(tokens, vector, segment.speed),
                                         lambda: predict(self._model, [tokens], style, speed),
                                         last=span.end >= len(tokens))
                lo, hi = boundary_frame(p, span.first, len(tokens)), boundary_frame(p, span.end, len(tokens))
                audio = decode_window(self._model, p, style, lo, hi, self.window_context).float().cpu().numpy()
                per_token = p.durations[0].cpu().numpy().astype(np.int64)
        except torch.cuda.OutOfMemoryError as e:
            raise BackendFault(f"out of GPU memory for a window of a sentence: {e}") from e
        return clip_audio(audio), fold_durations(per_token, lo, hi, span.first, span.own)

    @contextlib.contextmanager
    def _interrupted_by(self, interrupt: Interrupt | None) -> Any:
        """The module hooks watch ``interrupt`` for the duration of one call (under the lock)."""
        if interrupt is not None and interrupt.is_set:
            raise Interrupted("the call was interrupted before it began")
        self._watch.interrupt = interrupt
        try:
            yield
        finally:
            self._watch.interrupt = None

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        import torch

        if self.dtype == "float32":
            return contextlib.nullcontext()
        problem = reduced_precision_problem(self.dtype, self.device)
        if problem:
            raise Unsupported(problem, code="unsupported_dtype")
        device_type = "cuda" if str(self.device).startswith("cuda") else "cpu"
        return torch.autocast(device_type, dtype=getattr(torch, self.dtype))


def reduced_precision_problem(dtype: str, device: str) -> str | None:
    """Why ``dtype`` cannot run on ``device`` here, or None. On a CPU, oneDNN's reduced-precision
    LSTM needs AVX-512: an AVX2-only machine fails the first call ("could not create a primitive
    descriptor for the LSTM forward propagation primitive"), so the runtime refuses the setting up
    front instead."""
    import torch

    if dtype == "float32" or str(device).startswith("cuda"):
        return None
    capability = torch.backends.cpu.get_cpu_capability()
    if capability.upper().startswith("AVX512"):
        return None
    return (f"KOKORO_DTYPE={dtype} cannot run on this CPU ({capability}): PyTorch's reduced-precision LSTM needs "
            "AVX-512; use KOKORO_DTYPE=float32 (or auto)")


def _remove_weight_norm(model: Any) -> None:
    """Fold weight norm into plain weights once: the forward pass then skips recomputing it."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        for module in model.modules():
            if hasattr(module, "weight_g") and hasattr(module, "weight_v"):
                torch.nn.utils.remove_weight_norm(module)

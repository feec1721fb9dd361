"""ONNX Runtime synthesizer (CPU by default): the offline default runtime.

We own the ``InferenceSession`` (rather than going through ``kokoro_onnx.Kokoro``) so thread counts
and providers are settable; the vocabulary comes from the Kokoro config that ships in
``kokoro_onnx``. ``InferenceSession.run`` is thread-safe, so ``thread_safe`` is True; the
sequential backend still runs one synthesis at a time by design. Blocking: call from a thread.
Its :class:`~backends.api.Capabilities`: no batch path, timed with a timed model (below),
interruptible, solo calls, thread-safe, threads settable before ``load()``; ``cpu`` unless the
first provider is CUDA's.

ONNX Runtime fixes a session's intra-op threads when it is built. The concurrent mode runs parallel
calls with a share of the cores each, which leaves cores idle when only one call is runnable; with
``solo_threads`` set before ``load()``, a second session of the same model with that many threads
serves ``synthesize(segment, solo=True)`` (a call that runs alone; set by
``set_threads(threads, solo=n)``). Measured here: a session of the int8 model holds about
200-250 MiB of resident memory, so the second one costs that much (less with the shared arena).

A call can be stopped while it runs (``interruptible``): an :class:`~backends.api.Interrupt` set from
another thread sets the call's ``RunOptions.terminate``, and ONNX Runtime stops at its next node
(within ~50 ms here); the call raises :class:`~backends.api.Interrupted` and the session serves
the next call as before.

Word timings: with a timed twin of the model (``*.timed.onnx``, written by ``kokoro-serve assets``;
see :mod:`backends.assets.onnx_timed`), ``synthesize_timed`` returns the audio and the per-token frame
durations the graph predicted (``<bos>``, each phoneme, ``<eos>``; 600 samples a frame), from the
same single run that makes the audio — the audio is the plain model's, bit for bit.
``reports_durations`` (``capabilities.timed``) says whether the model has them; without, the
engine calls ``synthesize``.

Windows of a sentence (``capabilities.windowed``): with the model's predict and decode graphs
beside it (``<name>.predict.onnx``, ``<name>.decode.onnx``; :mod:`backends.assets.onnx_windowed`), a
segment that carries its sentence (:attr:`~backends.api.Segment.sentence`) runs the predict graph
over the whole sentence (durations, aligned features, F0, energy, harmonic source) and the decode
graph over the segment's frames and ``window_context`` more on each side (default
:data:`~backends.runtimes.windowing.WINDOW_CONTEXT`), cropped after; its durations are the window's frames
per token of the segment (:mod:`backends.runtimes.windowing`, as on torch). The prediction is kept
while the sentence's windows are read (:class:`~backends.runtimes.windowing.Predictions`), so the
predictor runs once a sentence, and let go after its last window. The pair computes the export bit
for bit, so with it the export itself is not opened: every segment runs the two graphs (a segment
without its sentence is a window of its whole reading) and durations always come with the audio.
Without both graphs nothing changes: ``windowed`` is False and the planner gives no segment its
sentence. On a CPU with VNNI (x86-64 with AVX-512 VNNI or AVX-VNNI) the runtime opens the pair's VNNI
twins instead (``<name>.predict.vnni.onnx``, ``<name>.decode.vnni.onnx``;
:mod:`backends.assets.onnx_vnni`): the int8 convolutions as integer matrix products on ONNX Runtime's
uint8 x int8 kernel, the same audio bit for bit in about two thirds of the CPU time (measured on a
Zen 4 core; see docs/runtimes.md).

Memory: on the CPU every session allocates its activations from one arena of the process's
(``session.use_env_allocators``), not an arena each that keeps its own high-water mark.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from backends.api import (
    MAX_PHONEMES,
    SAMPLE_RATE,
    BackendFault,
    Capabilities,
    Interrupt,
    Interrupted,
    Segment,
    Synthesizer,
    clip_audio,
)
from backends.assets.build import OFFLINE_ONNX, ModelFiles
from backends.assets.onnx_timed import DURATIONS_OUTPUT, source_name
from backends.assets.onnx_vnni import cpu_has_vnni
from backends.assets.onnx_windowed import DURATIONS, FRAME_SAMPLES, WINDOW_TENSORS
from backends.assets.voices import VoiceStore
from backends.runtimes.windowing import (
    WINDOW_CONTEXT,
    Predictions,
    TokenRange,
    boundary_frame,
    decode_range,
    fold_durations,
    prediction_key,
    token_range,
)

log = logging.getLogger(__name__)


_SHARED_ARENA = threading.Lock()
_shared_arena: bool | None = None


def shared_arena(providers: list[str]) -> bool:
    """Registers, once per process, the CPU arena every CPU session of this runtime allocates its
    activations from (``session.use_env_allocators``); False where it cannot (another provider
    first, or an ONNX Runtime without it)."""
    global _shared_arena
    if not providers or providers[0] != "CPUExecutionProvider":
        return False
    with _SHARED_ARENA:
        if _shared_arena is None:
            import onnxruntime as ort

            try:
                info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
                ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, -1, -1, -1))
                _shared_arena = True
            except Exception as e:  # an ONNX Runtime without it: each session keeps its own arena
                log.info("no shared ONNX Runtime arena (%s): each session allocates its own", e)
                _shared_arena = False
        return _shared_arena


def load_vocab(config_path: Path) -> dict[str, int]:
    vocab: dict[str, int] = json.loads(Path(config_path).read_text(encoding="utf-8"))["vocab"]
    return vocab


class OnnxSynthesizer(Synthesizer):
    """Kokoro-82M on ONNX Runtime (see the module docstring)."""

    name = "onnx"
    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        files: ModelFiles,
        voices: VoiceStore,
        *,
        threads: int | None = None,
        providers: list[str] | None = None,
    ):
        if files.onnx is None:
            raise FileNotFoundError(f"no ONNX model in {files.root}")
        self.files = files
        self.voices = voices
        self.vocab = load_vocab(files.config)
        self.threads = threads
        #: Intra-op threads of a second session for calls that run alone (None: no second session).
        self.solo_threads: int | None = None
        self.providers = providers or ["CPUExecutionProvider"]
        self.model_name = files.model_name
        #: The model reports per-token durations (a timed twin): ``synthesize_timed`` works.
        self.reports_durations = files.onnx_durations
        self._audio_output = "audio"
        self._session: Any = None  # onnxruntime.InferenceSession, once loaded
        self._solo_session: Any = None
        self._onnx: Path = files.onnx
        #: The predict and decode graphs (windows of a sentence), when the model has them: on a CPU with
        #: VNNI, their twins with the convolutions as integer matrix products (the same audio, faster).
        self.window_graphs = files.onnx_windowed
        self._vnni_twins = files.onnx_windowed_vnni if self._vnni_would_help() else None
        if self._vnni_twins is not None:
            self.window_graphs = self._vnni_twins
        self._windows: dict[bool, tuple[Any, Any]] = {}  # solo? -> (predict, decode) sessions
        #: Frames a window decodes on each side of the segment's (and crops after).
        self.window_context = WINDOW_CONTEXT
        #: Each sentence's prediction while its windows are read (the predictor runs once a sentence).
        self.predictions: Predictions[dict[str, Any]] = Predictions()

    def load(self) -> None:
        threads = self.threads or (os.cpu_count() or 1)
        solo = bool(self.solo_threads and self.solo_threads != self.threads)
        if self.window_graphs is not None:
            # The pair computes the export bit for bit (a window of the whole sentence is its
            # reading), so the export itself is not opened: one copy of the weights, not two.
            predict, decode = self.window_graphs
            vnni = self._vnni_twins is not None and self.window_graphs == self._vnni_twins
            log.info("ONNX graphs %s and %s%s", predict.name, decode.name,
                     " (this CPU has VNNI: the int8 convolutions run as integer matrix products)" if vnni else "")
            if not vnni and self._vnni_would_help():
                log.info("this CPU has VNNI and %s has no VNNI twins of them: `kokoro-serve assets` writes them "
                         "(the same audio for about two thirds of the CPU)", self.files.root)
            self._windows[False] = (self._open(threads, predict), self._open(threads, decode))
            if solo:
                self._windows[True] = (self._open(self.solo_threads or threads, predict),
                                       self._open(self.solo_threads or threads, decode))
            names = {o.name for o in self._windows[False][0].get_outputs()}
            if names != {DURATIONS, *WINDOW_TENSORS}:
                raise BackendFault(f"{predict.name} has outputs {sorted(names)}; "
                                   "rerun `kokoro-serve assets`")
            self.reports_durations = True
            self._inputs(self._windows[False][0])
            return
        self._session = self._open(threads)
        if solo:
            self._solo_session = self._open(self.solo_threads or threads)
        self._inputs(self._session)
        outputs = [o.name for o in self._session.get_outputs()]
        self._audio_output = next((n for n in outputs if n != DURATIONS_OUTPUT), outputs[0])
        if self.reports_durations and DURATIONS_OUTPUT not in outputs:
            raise BackendFault(f"{self._onnx.name} has no {DURATIONS_OUTPUT!r} output; rerun `kokoro-serve assets`")
        if not self.reports_durations:
            log.warning("%s has no timed twin in %s: no word timings on onnx; `kokoro-serve assets` writes it",
                        self._onnx.name, self.files.root)

    def _vnni_would_help(self) -> bool:
        """Whether the VNNI twins would be opened here if the model directory had them: the offline
        int8 export on the CPU provider of a CPU with VNNI."""
        return (self.providers[0] == "CPUExecutionProvider" and source_name(self._onnx.name) == OFFLINE_ONNX
                and cpu_has_vnni())

    def _inputs(self, session: Any) -> None:
        inputs = {i.name: i for i in session.get_inputs()}
        self._tokens_input = "input_ids" if "input_ids" in inputs else "tokens"
        self._speed_dtype = np.int32 if "int" in inputs["speed"].type else np.float32

    def _open(self, threads: int, path: Path | None = None) -> Any:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Memory patterns are planned per input shape, and every text length is a new shape: with
        # them on, RSS climbed ~50 MB over the first hundred texts; off, it stays flat, at no cost
        # in speed (measured; see benchmarks/results/soak.md).
        opts.enable_mem_pattern = False
        # Its threads sleep between calls instead of spinning: a spinning pool keeps burning the cores
        # that the event loop, the G2P and the other sessions' calls need (docs/runtimes.md).
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if shared_arena(self.providers):
            # Every session's activations in one arena of the process's, not one arena each
            # (each of which would keep its own high-water mark).
            opts.add_session_config_entry("session.use_env_allocators", "1")
        return ort.InferenceSession(str(path or self._onnx), sess_options=opts, providers=self.providers)

    @property
    def device(self) -> str:
        return "cuda" if self.providers[0].startswith("CUDA") else "cpu"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(timed=self.reports_durations, interruptible=True, solo_calls=True, thread_safe=True,
                            threads_settable=True, windowed=self.window_graphs is not None, device=self.device)

    @property
    def loaded(self) -> bool:
        return self._session is not None or bool(self._windows)

    def tokens(self, phonemes: str) -> list[int]:
        return [self.vocab[c] for c in phonemes if c in self.vocab]

    def synthesize(self, segment: Segment, *, interrupt: Interrupt | None = None, solo: bool = False) -> np.ndarray:
        """float32 audio in [-1, 1] at 24 kHz (empty when no phoneme is in the vocabulary);
        ``solo``: on the every-core session when there is one."""
        return self._run(segment, solo, interrupt, timed=False)[0]

    def synthesize_timed(
        self, segment: Segment, *, interrupt: Interrupt | None = None, solo: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """(audio, int64 frame durations per token: bos, each phoneme, eos). Needs a timed model
        (``reports_durations``: ``capabilities.timed``); the same single run as :meth:`synthesize`."""
        if not self.reports_durations:
            return super().synthesize_timed(segment)
        audio, durations = self._run(segment, solo, interrupt, timed=True)
        assert durations is not None
        return audio, durations

    def _run(
        self, segment: Segment, solo: bool, interrupt: Interrupt | None, *, timed: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        if not self.loaded:
            raise BackendFault("ONNX runtime used before load()")
        tokens = self.tokens(segment.phonemes)[:MAX_PHONEMES]
        if not tokens:
            return np.zeros(0, dtype=np.float32), (np.zeros(0, dtype=np.int64) if timed else None)
        if self._windows:
            return self._window(segment, solo, interrupt)
        session = (self._solo_session if solo else None) or self._session
        style = self.voices.style(segment.voice, len(tokens)).reshape(1, -1).astype(np.float32)
        speed = np.array([segment.speed], dtype=self._speed_dtype)
        inputs = {self._tokens_input: np.array([[0, *tokens, 0]], dtype=np.int64), "style": style, "speed": speed}
        names = [self._audio_output, DURATIONS_OUTPUT] if timed else [self._audio_output]
        out = self._call(session, names, inputs, interrupt)
        durations = np.asarray(out[1], dtype=np.int64).reshape(-1) if timed else None
        return clip_audio(out[0]), durations

    def _window(self, segment: Segment, solo: bool, interrupt: Interrupt | None) -> tuple[np.ndarray, np.ndarray]:
        """A segment that is a window of its sentence: the predict graph over the whole sentence,
        the decode graph over the segment's frames (and context, cropped after); durations per
        token of the segment (bos and eos take the window's frames of the sentence's tokens on
        either side of it)."""
        predict, decode = self._windows.get(solo) or self._windows[False]
        if segment.sentence is None:  # the segment alone: a window of its whole reading
            tokens = self.tokens(segment.phonemes)[:MAX_PHONEMES]
            span = TokenRange(tokens, 0, len(tokens), len(tokens))
        else:
            span = token_range(segment, lambda p: self.tokens(p)[:MAX_PHONEMES])
        n_tokens = len(span.tokens)
        style = self.voices.style(segment.voice, n_tokens).reshape(1, -1).astype(np.float32)
        inputs = {self._tokens_input: np.array([[0, *span.tokens, 0]], dtype=np.int64), "style": style,
                  "speed": np.array([segment.speed], dtype=self._speed_dtype)}
        names = [DURATIONS, *WINDOW_TENSORS]

        def run_predict() -> dict[str, Any]:
            return dict(zip(names, self._call(predict, names, inputs, interrupt), strict=True))

        p = self.predictions.get(prediction_key(span.tokens, style, segment.speed), run_predict,
                                 last=span.end >= n_tokens)
        per_token = np.asarray(p[DURATIONS], dtype=np.int64).reshape(-1)
        energy = np.asarray(p["n"]).reshape(-1)
        start = boundary_frame(per_token, energy, span.first, n_tokens)
        stop = boundary_frame(per_token, energy, span.end, n_tokens)
        lo, hi = decode_range(start, stop, int(p["asr"].shape[-1]), self.window_context)
        window = {"asr": p["asr"][:, :, lo:hi], "f0": p["f0"][:, 2 * lo : 2 * hi], "n": p["n"][:, 2 * lo : 2 * hi],
                  "source": p["source"][:, lo * FRAME_SAMPLES : hi * FRAME_SAMPLES], "style": style}
        audio = np.asarray(self._call(decode, ["audio"], window, interrupt)[0]).reshape(-1)
        audio = audio[(start - lo) * FRAME_SAMPLES : (stop - lo) * FRAME_SAMPLES]
        return clip_audio(audio), fold_durations(per_token, start, stop, span.first, span.own)

    @staticmethod
    def _call(session: Any, names: list[str], inputs: dict[str, Any], interrupt: Interrupt | None) -> Any:
        """``session.run``, stopped at its next node once ``interrupt`` is set."""
        options = None
        if interrupt is not None:
            import onnxruntime as ort

            options = ort.RunOptions()
            interrupt.on_set(lambda: setattr(options, "terminate", True))
        try:
            return session.run(names, inputs, options)
        except Exception as e:
            if interrupt is not None and interrupt.is_set:
                raise Interrupted("the call was interrupted") from e
            raise

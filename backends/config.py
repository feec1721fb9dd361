"""The backend's configuration: every ``KOKORO_*`` variable the engine, its runtimes and its text
pipeline read, declared once (listed in docs/settings.md).

:class:`BackendConfig` is an :class:`~backends.envsettings.EnvSettings`:
``BackendConfig.from_env(environ)`` reads the ``KOKORO_*`` variables of a given environment,
``BackendConfig(**values)`` (or :meth:`BackendConfig.defaults`) the declared defaults alone, and once
built it is immutable, so one object can be shared by the event loop and the worker threads. The
server's settings extend it with the server's own fields and hand the backend its part as is;
:func:`backends.factory.create_backend` takes it straight to the engine, the text pipeline and the
runtime. Nothing in ``backends`` reads ``os.environ``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from backends.envsettings import SHOWN_DEFAULT, EnvSettings

ENV_PREFIX = "KOKORO_"


def parse_voice_aliases(text: str) -> dict[str, str]:
    """``"alloy=jm_kumo, nova=jf_nezumi"`` -> ``{"alloy": "jm_kumo", "nova": "jf_nezumi"}``. Raises
    ValueError naming the bad entry (no ``=``, an empty side, a name given twice)."""
    aliases: dict[str, str] = {}
    for entry in (text or "").split(","):
        if not entry.strip():
            continue
        name, sep, target = (part.strip() for part in entry.partition("="))
        if not sep or not name or not target:
            raise ValueError(f"voice alias {entry.strip()!r}: expected alias=voice (e.g. nova=jf_nezumi)")
        if name in aliases:
            raise ValueError(f"voice alias {name!r} is given twice")
        aliases[name] = target
    return aliases


class BackendConfig(EnvSettings):
    """What the backend needs to know: runtime, scheduling, text planning, limits, fake knobs."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX)

    # -- runtime ------------------------------------------------------------------------------
    backend: Literal["onnx", "torch", "fake"] = Field(
        "onnx",
        description="Runtime: `onnx` (CPU) or `torch` (CUDA/CPU); `fake` is a model-free stand-in for tests and "
        "load/soak runs only (`backends/runtimes/fake.py`).",
    )
    mode: Literal["sequential", "concurrent"] = Field(
        "sequential",
        description="`sequential`: one synthesis at a time; `concurrent`: micro-batches across sessions.",
    )
    model_dir: Path | None = Field(
        None,
        json_schema_extra={SHOWN_DEFAULT: "user cache dir (`~/.cache/kokoro-serve/models` on Linux)"},
        description="Model directory (ONNX/PyTorch model, voices, config). Default: the user cache dir.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Device for the `torch` runtime.")
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = Field(
        "auto",
        description="Precision of the `torch` runtime (autocast): `auto` is `float16` on CUDA and `float32` "
        "elsewhere; `float16` on a CPU runs `float32`.",
    )
    threads: int | None = Field(
        None, ge=1, description="Runtime intra-op threads. Default: the runtime's choice (all cores)."
    )

    # -- scheduling (both modes) --------------------------------------------------------------
    deadlines: bool = Field(
        True,
        description="Run the segment whose listener needs it soonest first (a first segment at once, a later one "
        "before the audio already sent runs out); `false`: the order segments became runnable (sequential) or "
        "round-robin by session (concurrent).",
    )
    deadline_margin_ms: float = Field(
        250.0,
        ge=0,
        description="How long before a listener's audio runs out its next segment is due (network and client "
        "buffering).",
    )
    interrupt_for_first_audio: bool = Field(
        True,
        description="With deadlines: a listener who hears nothing yet may interrupt a running call of a later "
        "segment (whose listener still has audio to play), which runs again after it; single calls of an "
        "interruptible runtime (ONNX, torch, the fake), not batches. `false`: a newcomer waits for the running call "
        "to end.",
    )

    due_together_ms: float = Field(
        500.0,
        ge=0,
        description="Scheduling policy (`backends/engine/policy.py`): segments due within this long of the earliest due "
        "count as due together and go shortest first, so a short first segment is not kept behind a long one.",
    )
    overload: Literal["admit", "refuse"] = Field(
        "admit",
        description="Scheduling policy, what a newcomer (a listener who hears nothing yet) meets when the server "
        "is short: `admit` serves its first segment at once, ahead of (and, while a stream is behind, interrupting) "
        "the late streams, which pay one short segment's time per newcomer; `refuse` answers it `overloaded` (503 "
        "with `Retry-After` / error event) at once so it can go elsewhere — while the runtime is overloaded (the "
        "listeners asked for more audio than it made over `KOKORO_LOAD_WINDOW_S`), and while it would wait longer "
        "than `KOKORO_OVERLOAD_FIRST_AUDIO_MS` for its first segment's call.",
    )
    overload_first_audio_ms: float = Field(
        150.0,
        ge=0,
        description="Scheduling policy, with `KOKORO_OVERLOAD=refuse`: a newcomer is refused while it would wait "
        "longer than this for the runtime to start its first segment's call (the newcomers waiting ahead of it at the "
        "pace newcomers were served at, measured from their arrival, or the longest wait now; the event loop's "
        "lateness counted in for each step of the request on it): the admitted keep their first audio early. "
        "Set it below the first-audio target by what the first call and the network take; 0: refuse only "
        "under overload.",
    )
    overload_yields: int = Field(
        2,
        ge=0,
        description="Scheduling policy, while a stream is behind: how many newcomers' first segments a late "
        "stream's queued segment gives way to before it runs (bounds the late streams' cost; nothing starves).",
    )
    interrupt_before_fraction: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Scheduling policy: a running call may be interrupted for first audio only before it has run "
        "this fraction of its expected time (later, less is gained than thrown away). While a stream is behind, with `admit`, "
        "any later segment's call may be.",
    )
    hold_factor: float = Field(
        1.5,
        ge=0,
        description="Scheduling policy, parallel calls: a free worker is held for urgent work until a queued "
        "segment must start, that is its due time less this many times its expected time beside another call.",
    )
    cost_smoothing: float = Field(
        0.2,
        gt=0,
        le=1,
        description="Scheduling policy: weight of the newest measured call in the cost model's running average "
        "(one per call kind: alone, beside others, batch of n).",
    )
    load_window_s: float = Field(
        10.0,
        gt=0,
        description="Over how many seconds the load is measured: `kokoro_audio_delivered_seconds_per_second` (the "
        "audio made) against `kokoro_audio_demanded_seconds_per_second` (the streams in progress, one audio-second "
        "per second each, averaged); the runtime is overloaded (`kokoro_overloaded`) when demand exceeds supply "
        "over it (docs/runtimes.md).",
    )

    # -- concurrent mode ----------------------------------------------------------------------
    max_batch_size: int = Field(16, ge=1, description="Concurrent mode: most segments in one batch.")
    max_wait_ms: float = Field(5.0, ge=0, description="Concurrent mode: longest wait to fill a batch when the runtime "
                               "was idle (as a batch ends, the next starts at once from what queued meanwhile).")
    workers: int | None = Field(
        None,
        ge=1,
        description="Concurrent mode: runtime calls in parallel. Default: 2 (on 2+ cores) for a thread-safe "
        "runtime without a batch path (ONNX), else 1.",
    )
    batch_length_ratio: float = Field(
        2.0,
        ge=1,
        description="Concurrent mode: longest over shortest phoneme count in one batch (bounds padding); a "
        "listener's first segment always joins a batch led by a later segment.",
    )
    max_ahead: int = Field(
        2, ge=1, description="Concurrent mode: chunks a request may have ready and unread before it waits."
    )
    solo_calls: bool = Field(
        True,
        description="Concurrent mode, ONNX: a call that runs alone (no other call running, nothing queued that "
        "must start yet) uses every core, through a second session of the model (about 200 MiB more memory); "
        "off: every call gets its share.",
    )
    batch_on_cpu: bool = Field(
        False,
        description="Concurrent mode: batch segments of several sessions into one call on a CPU device too "
        "(off: a CPU gets single calls, which cost less CPU time per audio second).",
    )

    # -- text and requests --------------------------------------------------------------------
    default_voice: str | None = Field(
        None, description="Voice when a request names none. Default: `af_heart` if present, else `jm_kumo`."
    )
    voice_aliases: str = Field(
        "",
        description="Extra voice names, `alias=voice` pairs separated by commas (`alloy=jm_kumo,nova=jf_nezumi`; "
        "a target may be a blend `a(2)+b(1)`), valid on every route and listed in `/v1/audio/voices`. An alias "
        "to a voice that is not loaded fails the start. OpenAI voice names without an alias mean the default voice.",
    )
    default_lang: str = Field(
        "en-us",
        description="Language of Latin-script text when a request names none and its voice's language does "
        "not read that text (docs/languages.md has the whole rule).",
    )
    english_g2p: Literal["misaki", "espeak"] = Field(
        "espeak",
        description="English phonemes: `espeak` (espeak-ng) or `misaki` (its lexicon and spaCy tagger, espeak-ng for "
        "words it lacks; the `languages` extra): equally intelligible, misaki costs ~3 s of start-up and ~170 MiB "
        "(docs/languages.md).",
    )
    lexicon: str | None = Field(
        None,
        description="A JSON file of `{language: {word: phonemes}}` (`\"*\"`: every language) for words the "
        "deployment reads its own way.",
    )
    fast_first_segment: bool = Field(
        True, description="Cut the first segment at a clause boundary so the first audio comes early."
    )
    first_segment_words: int = Field(3, ge=1, description="Fewest words in an early-cut first segment.")
    first_segment_max_words: int = Field(12, ge=1, description="Most words in an early-cut first segment.")
    short_first_segment: Literal["always", "busy", "never"] = Field(
        "always",
        description="Cut the first segment a listener hears after at most `KOKORO_SHORT_FIRST_SEGMENT_WORDS` words (at "
        "a word boundary outside a noun phrase when no clause mark or phrase boundary comes sooner): `always` when the "
        "listener hears nothing yet (a session's next sentence, sent while its audio plays, keeps the usual cut); "
        "`busy` only while other sessions are served as well; `never`. Needs `KOKORO_DEADLINES`.",
    )
    short_first_segment_words: int = Field(
        5, ge=1, description="Most words in a short first segment (`KOKORO_SHORT_FIRST_SEGMENT`)."
    )
    windowed_first_segment: bool = Field(
        True,
        description="On a runtime that decodes windows (torch; ONNX with its predict and decode graphs, "
        "which `kokoro-serve assets` writes), a first sentence cut early is read as one utterance: the prosody of the whole sentence is predicted in each of its segments' calls and only the "
        "segment's frames are decoded, so the early cut keeps the sentence's intonation and its segments meet "
        "as the reading runs on (no pause put in). Off: each segment is read as an utterance of its own.",
    )
    join_pauses: bool = Field(
        True,
        description="Trim each segment's model padding and put back the pause a reading of the whole text makes "
        "at that boundary (sentence end, clause mark, a cut inside a clause), with a short fade; off: each "
        "segment's audio as the model made it (up to a second of silence at every join).",
    )
    phrase_end_mark: str = Field(
        "",
        max_length=2,
        description="Phoneme mark put after a segment cut between words inside a clause, so the model reads it "
        "as going on rather than ending (`,`; empty: none). docs/speech-quality.md measures each choice.",
    )
    segment_phonemes: int = Field(
        300, ge=16, le=510, description="Target phonemes per later segment (the model's limit is 510)."
    )
    max_text_chars: int = Field(5000, ge=1, description="Longest `text` accepted (413 / `text_too_long`).")
    max_queue: int = Field(
        256,
        ge=1,
        description="Requests synthesising, waiting for the runtime or being planned at once (all sessions); beyond "
        "it new requests are refused `overloaded` (503).",
    )
    request_timeout_s: float | None = Field(
        120.0, gt=0, description="A request still synthesising after this long fails with `timeout`."
    )

    # -- the fake runtime (tests, load and soak runs) -----------------------------------------
    fake_segment_s: float = Field(0.002, ge=0, description="Fake runtime: latency of one runtime call, seconds.")
    fake_phoneme_s: float = Field(
        0.0, ge=0, description="Fake runtime: extra latency per phoneme of a call's longest segment, seconds."
    )
    fake_fail_on: str | None = Field(
        None, description="Fake runtime: a segment whose text contains this substring raises an error."
    )
    fake_hang_on: str | None = Field(
        None,
        description="Fake runtime: a segment whose text contains this substring blocks for "
        "`KOKORO_FAKE_HANG_S` (or until released in-process).",
    )
    fake_hang_s: float = Field(3600.0, ge=0, description="Fake runtime: how long a `KOKORO_FAKE_HANG_ON` call blocks.")
    fake_empty_on: str | None = Field(
        None, description="Fake runtime: a segment whose text contains this substring yields no samples."
    )
    fake_batch: bool = Field(
        False, description="Fake runtime: offer a batch path (off: the fake declares what the ONNX runtime does, "
        "so a load run takes production's scheduler path)."
    )

    @field_validator(
        "model_dir", "default_voice", "lexicon", "threads", "workers", "request_timeout_s",
        "fake_fail_on", "fake_hang_on", "fake_empty_on",
        mode="before",
    )
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and value.strip() == "" else value

    @field_validator("default_lang")
    @classmethod
    def _check_lang(cls, value: str) -> str:
        from backends.text.lang import canonical_lang

        try:
            return canonical_lang(value)
        except Exception as e:  # an InvalidRequest names the supported codes
            raise ValueError(str(e)) from None

    @field_validator("voice_aliases")
    @classmethod
    def _check_aliases(cls, value: str) -> str:
        parse_voice_aliases(value)  # the syntax; the targets are checked against the loaded voices at start
        return value

    @property
    def voice_alias_map(self) -> dict[str, str]:
        """``KOKORO_VOICE_ALIASES`` as ``{alias: voice or blend}``."""
        return parse_voice_aliases(self.voice_aliases)

    @property
    def runtime(self) -> str:
        """The runtime's name (``KOKORO_BACKEND``)."""
        return self.backend

    @classmethod
    def defaults(cls, **values: Any) -> BackendConfig:
        """The declared defaults with ``values`` over them, validated — the constructor spelled out:
        neither reads the environment (a backend built in code does not depend on the shell)."""
        return cls(**values)

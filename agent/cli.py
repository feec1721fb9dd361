"""The ``kokoro-agent`` command.

``kokoro-agent serve [--host H] [--port P] [--model bedrock|scripted] [--tokens-per-second N]
[--tts-url URL | --endpoint-name NAME --region R] [--voice V] [--speed S] [--bedrock-model-id ID]
[--bedrock-endpoint-url URL] [--first-clause-words N] [--reply TEXT]``

Runs the AgentCore app (``agent.app``): the browser page at ``/``, SSE turns at ``POST /invocations``.
Defaults come from ``KOKORO_AGENT_*`` variables where set (``HOST``, ``PORT``, ``MODEL``,
``TOKENS_PER_SECOND``, ``TTS_URL``, ``ENDPOINT_NAME``, ``REGION``, ``VOICE``). In an AgentCore
container use ``--host 0.0.0.0 --port 8080`` (the runtime's contract).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence

from .app import AgentSettings, create_app


def _parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    def default(name: str, fallback: str | None) -> str | None:
        return env.get(f"KOKORO_AGENT_{name}", fallback)

    parser = argparse.ArgumentParser(prog="kokoro-agent", description="Voice agent: Strands + Kokoro TTS")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the AgentCore app with the browser page")
    serve.add_argument("--host", default=default("HOST", "127.0.0.1"))
    serve.add_argument("--port", type=int, default=int(default("PORT", "8090") or 8090))
    serve.add_argument("--model", choices=("bedrock", "scripted"), default=default("MODEL", "bedrock"))
    serve.add_argument("--tokens-per-second", type=float,
                       default=float(default("TOKENS_PER_SECOND", "30") or 30),
                       help="scripted model: reply rate (default 30)")
    serve.add_argument("--reply", default=None, help="scripted model: the canned reply")
    target = serve.add_mutually_exclusive_group()
    target.add_argument("--tts-url", default=None,
                        help="TTS server, ws(s):// or http(s):// (default http://127.0.0.1:8080)")
    target.add_argument("--endpoint-name", default=default("ENDPOINT_NAME", None),
                        help="SageMaker endpoint (HTTP/2 bidirectional stream; Python >= 3.12)")
    serve.add_argument("--region", default=default("REGION", None) or env.get("AWS_REGION"))
    serve.add_argument("--voice", default=default("VOICE", None))
    serve.add_argument("--speed", type=float, default=None)
    serve.add_argument("--bedrock-model-id", default=None)
    serve.add_argument("--bedrock-endpoint-url", default=None)
    serve.add_argument("--first-clause-words", type=int, default=6,
                       help="the first chunk may end at a clause after this many words (0: off)")
    serve.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    return parser


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    args = _parser(env).parse_args(argv)
    if args.endpoint_name and not args.region:
        print("kokoro-agent: --region is required with --endpoint-name", file=sys.stderr)
        return 2
    tts_url = None if args.endpoint_name else (args.tts_url or env.get("KOKORO_AGENT_TTS_URL")
                                               or "http://127.0.0.1:8080")
    settings = AgentSettings(
        model=args.model,
        tokens_per_second=args.tokens_per_second,
        scripted_reply=args.reply,
        bedrock_model_id=args.bedrock_model_id,
        bedrock_endpoint_url=args.bedrock_endpoint_url,
        tts_url=tts_url,
        endpoint_name=args.endpoint_name,
        region=args.region,
        voice=args.voice,
        speed=args.speed,
        first_clause_words=args.first_clause_words or None,
    )
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings)
    app.run(host=args.host, port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A local stand-in for Bedrock Runtime's ``ConverseStream``, so the real ``BedrockModel`` (boto3,
SigV4, botocore's event-stream parser, Strands' event handling) runs in tests.

``POST /model/{modelId}/converse-stream`` answers ``application/vnd.amazon.eventstream``: binary
messages (prelude with total and header lengths and its CRC32, string headers ``:event-type``,
``:content-type``, ``:message-type``, a JSON payload, a message CRC32) carrying ``messageStart``,
``contentBlockDelta`` (one per token, paced by ``seconds_per_token``), ``contentBlockStop``,
``messageStop`` and ``metadata`` — or, when ``exception`` is set, a ``:message-type: exception``
message of that type after the first token. Each request is recorded (path, headers, JSON body).
"""

from __future__ import annotations

import json
import re
import struct
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return struct.pack("B", len(raw_name)) + raw_name + b"\x07" + struct.pack(">H", len(raw_value)) + raw_value


def event_message(event_type: str, payload: dict, *, message_type: str = "event") -> bytes:
    """One event-stream message (the vnd.amazon.eventstream framing)."""
    kind_header = ":exception-type" if message_type == "exception" else ":event-type"
    headers = (_header(kind_header, event_type) + _header(":content-type", "application/json")
               + _header(":message-type", message_type))
    body = json.dumps(payload).encode()
    total = 12 + len(headers) + len(body) + 4
    prelude = struct.pack(">II", total, len(headers))
    head = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers + body
    return head + struct.pack(">I", zlib.crc32(head))


def tokens_of(text: str) -> list[str]:
    return re.findall(r"\s*[\w']+|\s*[^\w\s]|\s+", text)


class BedrockStandIn:
    def __init__(self, reply: str, *, seconds_per_token: float = 0.0, exception: str | None = None) -> None:
        self.reply = reply
        self.seconds_per_token = seconds_per_token
        self.exception = exception
        self.requests: list[dict] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> BedrockStandIn:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                standin.requests.append({"path": self.path, "headers": dict(self.headers),
                                         "body": json.loads(body or b"{}")})
                if not re.fullmatch(r"/model/[^/]+/converse-stream", self.path):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.amazon.eventstream")
                self.send_header("x-amzn-RequestId", "standin-request")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for message in standin._messages():
                    self.wfile.write(f"{len(message):x}\r\n".encode() + message + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, name="bedrock-standin", daemon=True).start()
        return self

    def _messages(self):
        tokens = tokens_of(self.reply)
        yield event_message("messageStart", {"role": "assistant"})
        for i, token in enumerate(tokens):
            if i and self.exception:
                yield event_message(self.exception, {"message": "stand-in failure"}, message_type="exception")
                return
            if self.seconds_per_token:
                time.sleep(self.seconds_per_token)
            yield event_message("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": token}})
        yield event_message("contentBlockStop", {"contentBlockIndex": 0})
        yield event_message("messageStop", {"stopReason": "end_turn"})
        yield event_message("metadata", {"usage": {"inputTokens": 12, "outputTokens": len(tokens),
                                                   "totalTokens": 12 + len(tokens)},
                                         "metrics": {"latencyMs": 42}})

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

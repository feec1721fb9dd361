"""Payload sizes over 24 clips, like AWS's table: raw PCM from a live server's WebSocket, base64
PCM, MP3 at 48 kb/s (AWS's column) and the server's ``mp3`` and ``opus`` formats encoded from that
PCM (method: docs/benchmarks.md). Run as ``python -m benchmarks payload``.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np

from . import prom
from .clients import BYTES_PER_SECOND, ws_audio
from .live import LiveServer
from .raw import VOICE
from .results import Result, command_line, markdown_table, rnd, save_plot
from .texts import CLIPS

#: AWS's figures for their 24 clips (bytes), for the reader's comparison.
AWS_REFERENCE = {"raw_pcm": 2_396_400, "base64_pcm": 3_195_200, "mp3_48k": 308_304}
COLUMNS = ("raw_pcm", "base64_pcm", "mp3_48k", "mp3_64k", "opus_32k")


def _encode(pcm: bytes) -> dict[str, int]:
    from backends.audio.encoders import Mp3Encoder, make_encoder

    audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    chunk = BYTES_PER_SECOND // 2  # feed ~1 s pieces, the size of a short segment

    def size(enc) -> int:
        n = sum(len(enc.encode(audio[i : i + chunk])) for i in range(0, len(audio), chunk))
        return n + len(enc.flush())

    return {
        "raw_pcm": len(pcm),
        "base64_pcm": len(base64.b64encode(pcm)),
        "mp3_48k": size(Mp3Encoder(24_000, bitrate_kbps=48)),
        "mp3_64k": size(make_encoder("mp3", 24_000)),
        "opus_32k": size(make_encoder("opus", 24_000)),
    }


def run(*, quick: bool = False, model_dir=None, log=print, backend: str = "onnx") -> Result:
    clips = CLIPS[:8] if quick else CLIPS
    result = Result(
        "payload", quick, command_line("payload", quick),
        config={"clips": list(clips), "voice": VOICE, "sample_rate": 24_000, "columns": list(COLUMNS),
                "aws_reference_bytes": AWS_REFERENCE},
    )
    log(f"payload: {len(clips)} clips")
    with LiveServer(backend=backend, model_dir=model_dir, log=log) as srv:
        before = srv.scrape()
        pcms = []
        for i, clip in enumerate(clips, 1):
            pcms.append(asyncio.run(ws_audio(srv.ws_url, clip, voice=VOICE)))
            log(f"  clip {i:>2}/{len(clips)}: {len(pcms[-1]) / BYTES_PER_SECOND:5.2f} s  {clip!r}")
        result.server_view = {"default": prom.server_view(before, srv.scrape())}
    result.samples = [{"text": clip, "audio_s": rnd(len(pcm) / BYTES_PER_SECOND, 3), **_encode(pcm)}
                      for clip, pcm in zip(clips, pcms, strict=True)]
    totals = {col: sum(s[col] for s in result.samples) for col in COLUMNS}
    audio_s = sum(len(p) for p in pcms) / BYTES_PER_SECOND
    result.medians = {"total_bytes": totals}
    result.summary = {
        "clips": len(clips),
        "audio_s": rnd(audio_s, 2),
        "total_bytes": totals,
        "ratio_to_raw": {col: round(totals[col] / totals["raw_pcm"], 4) for col in COLUMNS},
        "kbit_per_s": {col: rnd(totals[col] * 8 / audio_s / 1000.0, 1) for col in COLUMNS},
    }
    if quick:
        result.notes.append("quick run: the first 8 of the 24 clips")
    return result


def body(data: dict[str, Any]) -> str:
    s = data["summary"]
    labels = {
        "raw_pcm": "raw PCM s16le 24 kHz", "base64_pcm": "base64 PCM", "mp3_48k": "MP3 48 kb/s",
        "mp3_64k": "MP3 64 kb/s (server `mp3`)", "opus_32k": "Opus 32 kb/s in Ogg (server `opus`)",
    }
    aws = data["config"]["aws_reference_bytes"]
    rows = [
        [labels[c], s["total_bytes"][c], s["ratio_to_raw"][c], s["kbit_per_s"][c], aws.get(c)]
        for c in data["config"]["columns"]
    ]
    table = markdown_table(["format", f"bytes, {s['clips']} clips", "vs raw", "kbit/s", "AWS's clips (bytes)"], rows)
    return f"{s['clips']} clips, {s['audio_s']} s of audio in all (voice {data['config']['voice']}).\n\n{table}"


def plot(data: dict[str, Any], path) -> None:
    import matplotlib.pyplot as plt

    cols = data["config"]["columns"]
    totals = data["summary"]["total_bytes"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.bar(cols, [totals[c] / 1000.0 for c in cols], color=["#888", "#c55", "#3b7dd8", "#5a9", "#a6c"])
    for i, c in enumerate(cols):
        ax.text(i, totals[c] / 1000.0, f"{totals[c] / 1000.0:,.0f} kB", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("kB over all clips")
    ax.set_title(f"Payload, {data['summary']['clips']} clips ({data['command']})", fontsize=9)
    save_plot(fig, path)

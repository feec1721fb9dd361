"""Stock Pipecat ``DeepgramTTSService``, unchanged — configured only by URL, key and voice — inside a
Pipecat pipeline fed by an LLM's token stream, against the real server on the real ONNX runtime:
the audio arrives and has the length the server sent, a barge-in mid-reply stops the server's audio
within one segment and is acknowledged, and the next turn plays."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from server.settings import Settings
from tests.support.app import LoadedRuntime, build_app
from tests.support.live import ThreadServer
from tests.support.pipecat_run import PipecatRun
from tests.support.ws_tap import FrameTap

VOICE = "jm_kumo"
FIRST = ("Sure. This answer goes on for a while, sentence after sentence, so the listener cuts it "
         "short. Nobody should hear this third sentence at all. Nor this fourth one, surely.")
SECOND = "Go on."
#: Pipecat ends a turn that gets no audio for ``stop_frame_timeout_s`` (3 s by default): a CPU
#: shared with other work can take longer than that for a first sentence. The only option set
#: besides URL, key and voice, and it is Pipecat's own patience, not part of any protocol.
PATIENCE = {"stop_frame_timeout_s": 30.0}


@pytest.fixture(scope="module")
def server(onnx_synth, pipeline, voices):
    app = build_app(LoadedRuntime(onnx_synth), settings=Settings(api_key="sekret"), pipeline=pipeline, voices=voices)
    with ThreadServer(app) as srv:
        yield srv


async def test_deepgram_tts_service_streams_is_interrupted_and_speaks_the_next_turn(server):
    from pipecat.services.deepgram.tts import DeepgramTTSService

    async with FrameTap(server.url.replace("http://", "ws://")) as tap:
        tts = DeepgramTTSService(api_key="sekret", base_url=tap.base,
                                 settings=DeepgramTTSService.Settings(voice=VOICE), **PATIENCE)
        async with PipecatRun(tts) as run:
            first = await run.start_reply(FIRST)
            await run.wait_audio(first, 0.01, within=60)  # mid-reply: the first audio is playing
            await run.interrupt()
            wire = tap.wires[0]
            await asyncio.wait_for(wire.wait_until(lambda w: any(e.get("type") == "Cleared" for e in w.events())), 60)
            second_from = len(wire.log)
            second = await run.say(SECOND, within=60)  # Flushed: the whole turn was played
            errors = run.errors

    assert not errors
    assert wire.path.startswith(f"/v1/speak?model={VOICE}&encoding=linear16&sample_rate=24000")
    assert wire.events()[0]["type"] == "Metadata"
    kinds = [m.get("type") for m in wire.sent()]
    assert "Clear" in kinds and kinds[-1] == "Close" and kinds.count("Flush") >= 1
    # The server let at most the segment it was sending through after Clear, then acknowledged.
    assert len(wire.audio_frames_between("Clear", "Cleared")) <= 1
    assert first.after_interruption == 0, "audio of the interrupted turn reached the pipeline's end"
    # The next turn: every byte the server sent for it reached the pipeline, as speech of a
    # plausible length for its words.
    pcm = bytes(second.audio)
    assert len(pcm) == wire.audio_after(second_from) > 0
    assert 0.3 < second.seconds < 3.0
    samples = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768
    assert float(np.sqrt(np.mean(samples**2))) > 0.01  # speech, not silence
    assert first.audio  # the first turn played before it

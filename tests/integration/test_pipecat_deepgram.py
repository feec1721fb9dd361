"""Stock Pipecat ``DeepgramTTSService``, unchanged — configured only by URL, key and voice — inside a
Pipecat pipeline fed by an LLM's token stream, against the real server on the real ONNX runtime:
the audio arrives and has the length the server sent, a barge-in mid-reply stops the server's audio
within one segment and is acknowledged, and the next turn plays."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from server.settings import Settings
from tests.agent_support import pipecat_harness
from tests.support.app import LoadedRuntime, build_app
from tests.support.live import ThreadServer

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

    h = pipecat_harness
    async with h.FrameTap(server.url.replace("http://", "ws://")) as tap:
        tts = DeepgramTTSService(api_key="sekret", base_url=tap.base,
                                 settings=DeepgramTTSService.Settings(voice=VOICE), **PATIENCE)

        async def script(task, rec):
            await h.reply(task, FIRST)
            await asyncio.wait_for(rec.audio_arrived.wait(), 60)  # mid-reply: the first audio is playing
            await h.interrupt(task)
            wire = tap.wires[0]
            cleared = wire.wait_until(lambda w: any(e.get("type") == "Cleared" for e in w.events()))
            await asyncio.wait_for(cleared, 60)
            rec.stopped.clear()
            second_from[0] = len(wire.log)
            await h.reply(task, SECOND)
            await asyncio.wait_for(rec.stopped.wait(), 60)  # Flushed: the whole turn was played

        second_from = [0]
        rec = await h.run_pipeline(tts, script)

    wire = tap.wires[0]
    assert wire.path.startswith(f"/v1/speak?model={VOICE}&encoding=linear16&sample_rate=24000")
    assert wire.events()[0]["type"] == "Metadata"
    kinds = [m.get("type") for m in wire.sent()]
    assert "Clear" in kinds and kinds[-1] == "Close" and kinds.count("Flush") >= 1
    # The server let at most the segment it was sending through after Clear, then acknowledged.
    assert len(wire.audio_frames_between("Clear", "Cleared")) <= 1
    # The next turn: every byte the server sent for it reached the pipeline, as speech of a
    # plausible length for its words.
    contexts = [f.context_id for f in rec.audio()]
    last = contexts[-1]
    pcm = rec.pcm_of(last)
    assert len(pcm) == wire.audio_after(second_from[0]) > 0
    seconds = len(pcm) / 2 / h.SAMPLE_RATE
    assert 0.3 < seconds < 3.0
    samples = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768
    assert float(np.sqrt(np.mean(samples**2))) > 0.01  # speech, not silence
    assert contexts.index(last) > 0 and contexts[0] != last  # the first turn played before it

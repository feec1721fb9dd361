"""The official Cartesia (``cartesia``) and ElevenLabs (``elevenlabs``) SDKs, unchanged and configured
only by URL, key and voice, against the real server on the real ONNX runtime: Cartesia's
``tts.generate`` (raw PCM and telephony μ-law) and ``tts.generate_sse`` with word timestamps,
ElevenLabs' ``convert`` with its default format (MP3 at 44.1 kHz) and ``stream_with_timestamps``;
the audio decodes to the length of the same words as 24 kHz PCM, the times are in order and inside
the audio, and a bad voice, an empty text and a wrong key raise each SDK's own error classes
(Cartesia's ``NotFoundError``/``BadRequestError``/``AuthenticationError``, ElevenLabs' ``ApiError``)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from server.settings import Settings
from tests.integration.test_provider_http_sdk import KEY, TEXT, VOICE, decode, g711, seconds
from tests.support.app import LoadedRuntime, build_app
from tests.support.live import ThreadServer

if TYPE_CHECKING:
    from cartesia import Cartesia
    from elevenlabs.client import ElevenLabs

# The SDKs are imported where they are used: every collection of the suite would pay their imports.


@pytest.fixture(scope="module")
def server(onnx_synth, pipeline, voices) -> Iterator[ThreadServer]:
    app = build_app(LoadedRuntime(onnx_synth), settings=Settings(api_key=KEY), pipeline=pipeline, voices=voices)
    with ThreadServer(app) as srv:
        yield srv


@pytest.fixture(scope="module")
def reference_s(server) -> float:
    """Seconds of the same words as 24 kHz PCM."""
    audio = cartesia(server).tts.generate(model_id="sonic-3", transcript=TEXT, voice={"id": VOICE}, output_format={
        "container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}).read()
    return len(audio) / 2 / 24000


def cartesia(server, key: str = KEY) -> Cartesia:
    from cartesia import Cartesia

    return Cartesia(api_key=key, base_url=server.url, websocket_base_url=server.url.replace("http", "ws"), max_retries=0)


def elevenlabs(server, key: str = KEY) -> ElevenLabs:
    from elevenlabs.client import ElevenLabs

    return ElevenLabs(api_key=key, base_url=server.url)


def test_cartesia_generate_telephony_and_sse_word_timestamps(server, reference_s):
    c = cartesia(server)
    mulaw = c.tts.generate(model_id="sonic-3", transcript=TEXT, voice={"mode": "id", "id": VOICE}, output_format={
        "container": "raw", "encoding": "pcm_mulaw", "sample_rate": 8000}).read()
    assert seconds(g711(mulaw, "mulaw", 8000), 8000) == pytest.approx(reference_s, abs=0.05)

    audio, words, starts, ends = b"", [], [], []
    for event in c.tts.generate_sse(model_id="sonic-3", transcript=TEXT, voice={"id": VOICE}, add_timestamps=True,
                                    output_format={"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}):
        if event.type == "chunk":
            audio += base64.b64decode(event.data)
        elif event.type == "timestamps":
            words += event.word_timestamps.words
            starts += event.word_timestamps.start
            ends += event.word_timestamps.end
    total = len(audio) / 2 / 24000
    assert total == pytest.approx(reference_s, abs=0.01)
    assert " ".join(words).split() == TEXT.split()
    assert starts == sorted(starts) and all(a <= b for a, b in zip(starts, ends, strict=True)) and ends[-1] <= total


def test_cartesia_errors_are_its_own_classes(server):
    import cartesia as sdk

    fmt = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}
    with pytest.raises(sdk.NotFoundError):
        cartesia(server).tts.generate(model_id="sonic-3", transcript=TEXT, voice={"id": "nobody"}, output_format=fmt)
    with pytest.raises(sdk.BadRequestError):
        cartesia(server).tts.generate(model_id="sonic-3", transcript=" ", voice={"id": VOICE}, output_format=fmt)
    with pytest.raises(sdk.AuthenticationError):
        cartesia(server, "wrong").tts.generate(model_id="sonic-3", transcript=TEXT, voice={"id": VOICE},
                                              output_format=fmt)


def test_elevenlabs_convert_default_mp3_and_stream_with_timestamps(server, reference_s):
    el = elevenlabs(server)
    audio = b"".join(el.text_to_speech.convert(VOICE, text=TEXT))
    samples, rate = decode(audio)
    assert rate == 44100  # the service's default, mp3_44100_128
    assert seconds(samples, rate) == pytest.approx(reference_s, abs=0.12)

    pcm, starts, ends, chars = b"", [], [], ""
    for chunk in el.text_to_speech.stream_with_timestamps(VOICE, text=TEXT, output_format="pcm_24000"):
        pcm += base64.b64decode(chunk.audio_base_64)
        if chunk.alignment is not None:
            chars += "".join(chunk.alignment.characters)
            starts += chunk.alignment.character_start_times_seconds
            ends += chunk.alignment.character_end_times_seconds
    total = len(pcm) / 2 / 24000
    assert chars.split() == TEXT.split() and starts == sorted(starts)
    assert max(ends) == pytest.approx(total, abs=0.002)  # Pipecat takes the largest end as the length


def test_elevenlabs_errors_are_its_own_classes(server):
    """The SDK's text-to-speech calls raise ``ApiError`` with the status and the JSON ``detail`` for
    every status but 422 (as against the service)."""
    from elevenlabs.core.api_error import ApiError

    cases = [(elevenlabs(server), "nobody", TEXT, 404, "voice_not_found"), (elevenlabs(server), VOICE, "", 400, None),
             (elevenlabs(server, "wrong"), VOICE, TEXT, 401, "invalid_api_key")]
    for client, voice, text, status, code in cases:
        with pytest.raises(ApiError) as refused:
            b"".join(client.text_to_speech.convert(voice, text=text))
        assert refused.value.status_code == status and refused.value.body["detail"]["message"]
        assert code is None or refused.value.body["detail"]["status"] == code

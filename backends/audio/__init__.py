"""Audio on the wire: the response formats and their streaming encoders and resampling (``encoders``),
and the encodings the voice-agent providers send (``wire``: PCM, float32, G.711, MP3 at a bit rate)."""

"""The voice-agent providers' wire protocols (Deepgram, Cartesia, ElevenLabs): wire mapping only, over the streaming text buffer and the one pipeline."""

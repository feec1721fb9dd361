"""The kokoro-serve command: serve, assets, voices, say."""

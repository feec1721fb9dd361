"""The types and interfaces the server sees: requests, segments, audio chunks, the typed errors, the Backend protocol, the Synthesizer base and their capabilities. The only door into the engine."""

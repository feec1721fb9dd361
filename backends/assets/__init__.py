"""Model assets, offline first: building the model directory, the official download and other sources, voice packs, and the graph surgery that writes derived models."""

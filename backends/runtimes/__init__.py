"""The runtimes behind the Synthesizer interface: ONNX Runtime, PyTorch (with its model and batched forward), the fake stand-in, and the window arithmetic they share."""

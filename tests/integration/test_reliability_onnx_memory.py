"""The ONNX session is built so that memory stays flat across text lengths (with ONNX
Runtime's per-shape memory patterns on, RSS grew with every new input length in the soak run)."""

from __future__ import annotations


def test_memory_patterns_are_off(onnx_synth):
    assert onnx_synth._session.get_session_options().enable_mem_pattern is False

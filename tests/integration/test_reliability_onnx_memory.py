"""The ONNX sessions are built so that memory stays flat across text lengths (with ONNX
Runtime's per-shape memory patterns on, RSS grew with every new input length in the soak run), and
so that the runtime holds the model's weights once and its activations in one arena."""

from __future__ import annotations


def test_memory_patterns_are_off(onnx_synth):
    sessions = [s for pair in onnx_synth._windows.values() for s in pair] or [onnx_synth._session]
    assert all(s.get_session_options().enable_mem_pattern is False for s in sessions)


def test_the_export_is_not_opened_beside_the_pair_and_the_sessions_share_one_arena(onnx_synth):
    assert onnx_synth.window_graphs is not None and onnx_synth._session is None
    for predict, decode in onnx_synth._windows.values():
        for session in (predict, decode):
            entries = session.get_session_options().get_session_config_entry("session.use_env_allocators")
            assert entries == "1"

"""Building backends by name."""

from __future__ import annotations


def test_ping_names_the_file_the_runtime_loads(model_dir):
    """Regression: --backend torch reported the ONNX file as its model."""
    from backends.factory import BackendOptions, create_backend

    assert create_backend(BackendOptions(model_dir=model_dir)).model_name.endswith(".onnx")
    torch_backend = create_backend(BackendOptions(runtime="torch", device="cpu", model_dir=model_dir))
    assert torch_backend.model_name.endswith(".pth")

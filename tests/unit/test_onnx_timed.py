"""The timed twin of an ONNX model: the duration tensor found by the graph's shape, exposed as an
output without changing anything else, and written by ``build_assets`` idempotently, with its
checksum, remade when it or its source changes, skipped without the ``onnx`` package."""

from __future__ import annotations

import io
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import backends.assets.build as assets
from backends.assets.build import ModelFiles, build_assets, sha256_file
from backends.assets.onnx_timed import (
    DURATIONS_OUTPUT,
    GraphSurgeryError,
    add_duration_output,
    find_duration_tensor,
    source_name,
    timed_name,
)

TWIN = timed_name(assets.OFFLINE_ONNX)


def test_twin_names():
    assert TWIN == "kokoro-v1.0.int8.timed.onnx"
    assert source_name(TWIN) == assets.OFFLINE_ONNX
    assert source_name("kokoro-v1.0.onnx") == "kokoro-v1.0.onnx"


def _aligner_graph(*, divide_by_speed: bool = True) -> onnx.ModelProto:
    """A toy of Kokoro's alignment: per-token scores / speed, rounded, at least 1, cast to int64,
    used to stretch the tokens (here: their cumulative end frames times the score)."""
    nodes = [
        helper.make_node("Div", ["scores", "speed" if divide_by_speed else "two"], ["q"]),
        helper.make_node("Round", ["q"], ["r"]),
        helper.make_node("Clip", ["r", "one"], ["c"]),
        helper.make_node("Cast", ["c"], ["frames"], to=TensorProto.INT64),
        helper.make_node("CumSum", ["frames", "axis"], ["ends"]),
        helper.make_node("Cast", ["ends"], ["ends_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["ends_f", "scores"], ["audio"]),
    ]
    graph = helper.make_graph(
        nodes, "toy",
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, "n"]),
         helper.make_tensor_value_info("speed", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, "n"])],
        initializer=[helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
                     helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
                     helper.make_tensor("axis", TensorProto.INT64, [], [1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _surgery(model: onnx.ModelProto, tmp_path) -> tuple[str, bytes]:
    src = tmp_path / "toy.onnx"
    onnx.save(model, src)
    out = io.BytesIO()
    tensor = add_duration_output(src, out)
    return tensor, out.getvalue()


def test_the_duration_tensor_is_found_by_the_graphs_shape_and_exposed_unchanged(tmp_path):
    tensor, timed = _surgery(_aligner_graph(), tmp_path)
    assert tensor == "frames"  # found by what the nodes do, not by their names
    feeds = {"scores": np.array([[0.2, 2.6, 3.9, 1.4]], np.float32), "speed": np.array([1.3], np.float32)}
    plain = ort.InferenceSession(str(tmp_path / "toy.onnx"), providers=["CPUExecutionProvider"])
    twin = ort.InferenceSession(timed, providers=["CPUExecutionProvider"])
    assert [o.name for o in twin.get_outputs()] == ["audio", DURATIONS_OUTPUT]
    audio, durations = twin.run(None, feeds)
    assert np.array_equal(audio, plain.run(None, feeds)[0])
    assert durations.dtype == np.int64 and durations.tolist() == [[1, 2, 3, 1]]  # round(x / 1.3), at least 1


def test_a_graph_without_a_duration_tensor_is_refused(tmp_path):
    with pytest.raises(GraphSurgeryError, match="found 0"):
        _surgery(_aligner_graph(divide_by_speed=False), tmp_path)  # a Round, but not of a duration
    _, timed = _surgery(_aligner_graph(), tmp_path)
    (tmp_path / "twin.onnx").write_bytes(timed)
    with pytest.raises(GraphSurgeryError, match="already has"):
        add_duration_output(tmp_path / "twin.onnx", io.BytesIO())


def test_the_shipped_export_has_its_durations_where_the_alignment_takes_them(model_dir):
    graph = onnx.load(str(model_dir / assets.OFFLINE_ONNX)).graph
    assert find_duration_tensor(graph) == "/encoder/Cast_output_0"


def test_build_writes_the_twin_with_its_checksum_and_serves_it(model_dir):
    manifest = json.loads((model_dir / assets.MANIFEST).read_text())
    assert manifest["files"][TWIN] == sha256_file(model_dir / TWIN)
    assert manifest["derived"][TWIN] == assets.OFFLINE_ONNX_SHA256  # made from this very export
    files = ModelFiles.discover(model_dir)
    assert files.onnx.name == TWIN and files.onnx_durations
    assert files.model_name == assets.OFFLINE_ONNX  # the same weights and audio, named as such


@pytest.mark.model
def test_the_twin_is_remade_when_it_or_its_source_changes_and_is_deterministic(tmp_path):
    build_assets(tmp_path, torch=False)
    good = (tmp_path / TWIN).read_bytes()
    (tmp_path / TWIN).write_bytes(good[:1000])  # damaged
    messages: list[str] = []
    build_assets(tmp_path, torch=False, progress=messages.append)
    assert any(TWIN in m for m in messages) and (tmp_path / TWIN).read_bytes() == good
    manifest = json.loads((tmp_path / assets.MANIFEST).read_text())
    manifest["derived"][TWIN] = "0" * 64  # as if made from another version of the export
    (tmp_path / assets.MANIFEST).write_text(json.dumps(manifest))
    messages.clear()
    build_assets(tmp_path, torch=False, progress=messages.append)
    assert any(TWIN in m for m in messages) and (tmp_path / TWIN).read_bytes() == good


@pytest.mark.model
def test_without_the_onnx_package_the_plain_model_is_served(tmp_path, monkeypatch):
    build_assets(tmp_path, torch=False)
    manifest = json.loads((tmp_path / assets.MANIFEST).read_text())
    manifest["derived"][TWIN] = "0" * 64  # the twin is stale: it must not outlive its source
    (tmp_path / assets.MANIFEST).write_text(json.dumps(manifest))

    def no_onnx(*_args):
        raise ModuleNotFoundError("No module named 'onnx'")

    monkeypatch.setattr(assets, "add_duration_output", no_onnx)
    messages: list[str] = []
    files = build_assets(tmp_path, torch=False, progress=messages.append)
    assert any("onnx package is not installed" in m for m in messages)
    assert not (tmp_path / TWIN).exists() and files.onnx.name == assets.OFFLINE_ONNX
    assert not files.onnx_durations
    assert TWIN not in json.loads((tmp_path / assets.MANIFEST).read_text())["files"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_a_file_that_is_no_onnx_graph_gets_no_twin_and_a_clear_reason(tmp_path):
    from backends.assets.onnx_timed import GraphSurgeryError, add_duration_output

    src = tmp_path / "kokoro-v1.0.onnx"
    src.write_bytes(b"\x0f\xff not a protobuf at all")
    with open(tmp_path / "out.onnx", "wb") as out, pytest.raises(GraphSurgeryError, match="not an ONNX model"):
        add_duration_output(src, out)

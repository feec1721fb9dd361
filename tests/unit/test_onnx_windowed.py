"""The ONNX export split in two (the prosody, and the decoder over a window): the cut found by the
graph's shape, refused where a graph has no such decoder, and written by ``build_assets`` only when
asked, deterministically, with its checksums."""

from __future__ import annotations

import io
import json

import onnx
import pytest
from onnx import TensorProto, helper

import backends.assets.build as assets
from backends.assets.build import ModelFiles, build_assets, sha256_file
from backends.assets.onnx_timed import GraphSurgeryError
from backends.assets.onnx_windowed import decode_name, find_decoder_inputs, predict_name, split_model
from server.cli.main import main

PREDICT, DECODE = predict_name(assets.OFFLINE_ONNX), decode_name(assets.OFFLINE_ONNX)


def test_graph_names():
    assert PREDICT == "kokoro-v1.0.int8.predict.onnx" and DECODE == "kokoro-v1.0.int8.decode.onnx"


def test_the_shipped_export_is_cut_where_its_decoder_reads(model_dir):
    graph = onnx.load(str(model_dir / assets.OFFLINE_ONNX)).graph
    cut = find_decoder_inputs(graph)
    assert cut == {"asr": "/encoder/MatMul_1_output_0", "f0": "/encoder/Reshape_output_0",
                   "n": "/encoder/Reshape_1_output_0",
                   "source": "/decoder/decoder/generator/m_source/l_tanh/Tanh_output_0",
                   "durations": "/encoder/Cast_output_0"}


def _durations_only() -> onnx.ModelProto:
    """A toy with Kokoro's duration tensor (scores / speed, rounded, at least 1, int64) and no decoder."""
    nodes = [helper.make_node("Div", ["scores", "speed"], ["q"]), helper.make_node("Round", ["q"], ["r"]),
             helper.make_node("Clip", ["r", "one"], ["c"]),
             helper.make_node("Cast", ["c"], ["frames"], to=TensorProto.INT64),
             helper.make_node("Cast", ["frames"], ["audio"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(
        nodes, "toy",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, [1, "n"]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, "n"]),
         helper.make_tensor_value_info("speed", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, "n"])],
        initializer=[helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_graph_without_that_decoder_is_refused(tmp_path):
    src = tmp_path / "toy.onnx"
    onnx.save(_durations_only(), src)
    with pytest.raises(GraphSurgeryError, match="inputs"):  # no style input
        split_model(src, io.BytesIO(), io.BytesIO())
    with pytest.raises(GraphSurgeryError, match="Concat"):  # durations, but no decoder reading aligned features
        find_decoder_inputs(_durations_only().graph)
    src.write_bytes(b"not a graph")
    with pytest.raises(GraphSurgeryError, match="not an ONNX model"):
        split_model(src, io.BytesIO(), io.BytesIO())


@pytest.mark.model
def test_the_pair_is_written_by_default_checksummed_and_deterministic(tmp_path):
    assert main(["assets", "--no-windowed", "--model-dir", str(tmp_path)]) == 0
    assert ModelFiles.discover(tmp_path).onnx_windowed is None and not (tmp_path / PREDICT).exists()
    assert main(["assets", "--model-dir", str(tmp_path)]) == 0
    assert ModelFiles.discover(tmp_path).onnx_windowed == (tmp_path / PREDICT, tmp_path / DECODE)
    manifest = json.loads((tmp_path / assets.MANIFEST).read_text())
    for name in (PREDICT, DECODE):
        assert manifest["files"][name] == sha256_file(tmp_path / name)
        assert manifest["derived"][name] == assets.OFFLINE_ONNX_SHA256
    good = (tmp_path / DECODE).read_bytes()
    (tmp_path / DECODE).write_bytes(good[:1000])  # damaged: both are made again, the same bytes
    messages: list[str] = []
    build_assets(tmp_path, torch=False, progress=messages.append)  # kept up to date once written
    assert any(DECODE in m for m in messages) and (tmp_path / DECODE).read_bytes() == good
    assert ModelFiles.discover(tmp_path).onnx_windowed is not None
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]

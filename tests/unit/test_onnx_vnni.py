"""The int8 convolutions as integer matrix products (the VNNI twins of the predict and decode
graphs): the same integers as ``ConvInteger`` for every form the rewrite takes, the forms it does
not take left alone, the twins written beside the pair, and on a CPU with VNNI opened in its place
and reading the same audio."""

from __future__ import annotations

import io
import json
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import backends.assets.build as assets
from backends.api import Segment
from backends.assets import onnx_windowed
from backends.assets.build import build_assets, sha256_file
from backends.assets.onnx_timed import GraphSurgeryError
from backends.assets.onnx_vnni import convs_as_matmuls, cpu_has_vnni, split_model_vnni, vnni_name
from backends.assets.onnx_windowed import decode_name, predict_name
from backends.runtimes.onnx import OnnxSynthesizer

TWINS = (vnni_name(predict_name(assets.OFFLINE_ONNX)), vnni_name(decode_name(assets.OFFLINE_ONNX)))
# (out channels, taps, dilation, pads, stride): same-padded stride-1 ones are rewritten, the strided one is not
CONVS = [(6, 1, 1, 0, 1), (5, 3, 1, 1, 1), (4, 7, 3, 9, 1), (3, 3, 2, 2, 1), (2, 3, 1, 1, 2)]


def _convs(channels: int = 8) -> onnx.ModelProto:
    """One ``DynamicQuantizeLinear`` of the input read by several ``ConvInteger``, each scaled back
    to float as the export does. Weights below 128 keep the uint8 x int8 sums exact on every x86
    kernel (the older ones saturate pairs of larger products at 16 bits)."""
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"])]
    inits, outputs = [], []
    for i, (out, taps, dilation, pad, stride) in enumerate(CONVS):
        inits += [numpy_helper.from_array(rng.integers(0, 128, (out, channels, taps)).astype(np.uint8), f"w{i}"),
                  numpy_helper.from_array(np.array(60 + i, np.uint8), f"wz{i}"),
                  numpy_helper.from_array(np.array(0.01 * (i + 1), np.float32), f"ws{i}")]
        nodes += [helper.make_node("ConvInteger", ["xq", f"w{i}", "xz", f"wz{i}"], [f"acc{i}"], kernel_shape=[taps],
                                   dilations=[dilation], pads=[pad, pad], strides=[stride]),
                  helper.make_node("Cast", [f"acc{i}"], [f"f{i}"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", ["xs", f"ws{i}"], [f"scale{i}"]),
                  helper.make_node("Mul", [f"f{i}", f"scale{i}"], [f"y{i}"])]
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, out, f"t{i}"]))
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, "t"])],
                              outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def test_the_rewritten_convolutions_compute_the_same_integers():
    model = _convs()
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert convs_as_matmuls(rewritten) == len(CONVS) - 1  # the strided one is left as it is
    onnx.checker.check_model(rewritten)
    ops = [n.op_type for n in rewritten.graph.node]
    assert ops.count("ConvInteger") == 1 and ops.count("MatMulInteger") == len(CONVS) - 1
    assert ops.count("QuantizeLinear") == 1  # the activations requantised once for all the convolutions
    rng = np.random.default_rng(3)
    for length in (1, 5, 64):  # shorter than the widest reach, and longer
        x = (rng.standard_normal((1, 8, length)) * 3 + 0.5).astype(np.float32)
        for want, got in zip(_run(model, x), _run(rewritten, x), strict=True):
            assert want.shape == got.shape and np.array_equal(want, got)


def test_a_graph_without_int8_convolutions_is_left_alone():
    model = _convs()
    for node in model.graph.node:
        if node.op_type == "ConvInteger":
            del node.attribute[:]
            node.attribute.extend([helper.make_attribute("kernel_shape", [3]), helper.make_attribute("pads", [0, 2]),
                                   helper.make_attribute("strides", [1])])  # padded on one side only
    before = model.SerializeToString()
    assert convs_as_matmuls(model) == 0 and model.SerializeToString() == before


def test_vnni_is_read_from_the_cpus_flags(tmp_path, monkeypatch):
    read = cpu_has_vnni.__wrapped__  # not the process's cached answer
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    for flags, want in (("fpu avx2 avx512f avx512_vnni", True), ("fpu avx2 avx_vnni", True),
                        ("fpu avx2 avx512f avx512bw", False)):
        info = tmp_path / re.sub(r"\W", "_", flags)
        info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
        assert read(str(info)) is want
    assert read(str(tmp_path / "missing")) is False
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    assert read(str(tmp_path / "fpu_avx2_avx_vnni")) is False  # x86-64 only


@pytest.mark.model
def test_the_twins_are_written_beside_the_pair_with_their_checksums(tmp_path):
    assert not any((tmp_path / t).exists() for t in TWINS)
    files = build_assets(tmp_path, torch=False)
    assert files.onnx_windowed_vnni == tuple(tmp_path / t for t in TWINS)
    manifest = json.loads((tmp_path / assets.MANIFEST).read_text())
    for name in TWINS:
        assert manifest["files"][name] == sha256_file(tmp_path / name)
        assert manifest["derived"][name] == assets.OFFLINE_ONNX_SHA256
    plain, twin = (onnx.load(str(p)) for p in (files.onnx_windowed[1], files.onnx_windowed_vnni[1]))
    count = [{op: [n.op_type for n in m.graph.node].count(op) for op in ("ConvInteger", "MatMulInteger")}
             for m in (plain, twin)]
    assert count[1]["ConvInteger"] == 3  # the strided three stay
    assert count[1]["MatMulInteger"] - count[0]["MatMulInteger"] == count[0]["ConvInteger"] - 3
    assert [i.name for i in twin.graph.input] == [i.name for i in plain.graph.input]
    assert [o.name for o in twin.graph.output] == [o.name for o in plain.graph.output]


@pytest.mark.model
def test_on_a_cpu_with_vnni_the_twins_read_the_pairs_audio_bit_for_bit(onnx_synth, model_files, voices, pipeline):
    if not cpu_has_vnni():
        assert onnx_synth.window_graphs == model_files.onnx_windowed
        pytest.skip("this CPU has no VNNI: the runtime reads the plain pair (checked), the twins are not used")
    assert onnx_synth.window_graphs == model_files.onnx_windowed_vnni
    plain = OnnxSynthesizer(model_files, voices, threads=1)
    plain.window_graphs = model_files.onnx_windowed
    plain.load()
    for text in ("Kokoro is a small text to speech model.", "At 9:30 on May 4th, 2026, it read 1,234 words."):
        segment = Segment(text, pipeline.plan(text, voice="jm_kumo")[0].phonemes, "jm_kumo")
        want, got = plain.synthesize_timed(segment), onnx_synth.synthesize_timed(segment)
        assert np.array_equal(want[0], got[0]) and np.array_equal(want[1], got[1])


@pytest.mark.model
def test_a_model_directory_without_the_twins_reads_the_plain_pair_and_says_how_to_get_them(
        model_files, voices, tmp_path, caplog):
    for path in model_files.root.iterdir():
        if not path.name.endswith(".vnni.onnx"):
            (tmp_path / path.name).symlink_to(path)
    files = assets.ModelFiles.discover(tmp_path)
    assert files.onnx_windowed is not None and files.onnx_windowed_vnni is None
    synth = OnnxSynthesizer(files, voices, threads=1)
    with caplog.at_level("INFO", logger="backends.runtimes.onnx"):
        synth.load()
    assert synth.window_graphs == files.onnx_windowed
    hinted = [r.getMessage() for r in caplog.records if "kokoro-serve assets" in r.getMessage()]
    assert len(hinted) == (1 if cpu_has_vnni() else 0), hinted


def test_a_model_with_nothing_to_rewrite_gets_no_twins(tmp_path, monkeypatch):
    """The official float exports have no ``ConvInteger``: the twins are refused, with the reason."""
    plain = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "float", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]), opset_imports=[helper.make_opsetid("", 20)])

    monkeypatch.setattr(onnx_windowed, "split_graphs", lambda _src: (plain, plain, {}))
    with pytest.raises(GraphSurgeryError, match="no int8 convolutions"):
        split_model_vnni(tmp_path / "kokoro-v1.0.onnx", io.BytesIO(), io.BytesIO())

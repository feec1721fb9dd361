"""Rebuilding the KModel checkpoint from the int8 ONNX export (backends/assets/torch_convert.py).

The pure mapping rules are tested on synthetic data; the rebuild itself runs once on the real
export (about 15 s) and its result is checked the way the runtime uses it: a strict load.
The PyTorch runtime's dependencies are required, not optional: without torch these tests fail.
(torch is imported by the tests that use it: every worker of a parallel run collects this module,
and all but one never run it.)
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import backends.assets.torch_convert as torch_convert
from backends.assets.torch_convert import _lstm_gates, _module_path, _weight_norm, rebuild_checkpoint
from backends.runtimes.torch_model import REBUILT_PTH, build_kmodel, load_checkpoint, read_config

pytestmark = pytest.mark.torch

ONNX = "kokoro-v1.0.int8.onnx"


@pytest.fixture(scope="module")
def rebuilt(model_dir, tmp_path_factory):
    """A fresh rebuild (not the cached one) and its report."""
    out = tmp_path_factory.mktemp("rebuilt") / REBUILT_PTH
    report = rebuild_checkpoint(model_dir / ONNX, model_dir / "config.json", out)
    return out, report


@pytest.fixture(scope="module")
def config(model_dir):
    return read_config(model_dir / "config.json")


# ---------------------------------------------------------------------------------- mapping rules
@pytest.mark.parametrize(
    ("node", "path"),
    [
        ("/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant", "text_encoder.cnn.0.0"),
        ("/decoder/decoder/decode.0/conv1/Conv_quant", "decoder.decode.0.conv1"),
        ("/decoder/decoder/asr_res/asr_res.0/Conv_quant", "decoder.asr_res.0"),
        ("/encoder/F0.1/pool/ConvTranspose", "predictor.F0.1.pool"),
        ("/encoder/N_proj/Conv_quant", "predictor.N_proj"),
        ("/encoder/shared/LSTM_quant", "predictor.shared"),
        ("/encoder/predictor/text_encoder/lstms.4/LSTM_quant", "predictor.text_encoder.lstms.4"),
        ("/encoder/bert_encoder/MatMul_quant", "bert_encoder"),
        ("/encoder/bert/embeddings/word_embeddings/Gather_quant", "bert.embeddings.word_embeddings"),
        (
            "/decoder/decoder/generator/resblocks.4/adain2.2/fc/Gemm_MatMul_quant",
            "decoder.generator.resblocks.4.adain2.2.fc",
        ),
        ("/decoder/decoder/generator/m_source/l_linear/MatMul", "decoder.generator.m_source.l_linear"),
        ("/encoder/bert/Gather_1", None),  # shape arithmetic, not a weight
        ("/decoder/decoder/generator/LeakyRelu", None),
    ],
)
def test_module_paths_come_from_node_names(node, path):
    assert _module_path(node) == path


def test_lstm_gates_are_reordered_from_iofc_to_ifgo():
    hidden = 3
    i, o, f, c = (np.full((hidden, 2), v, np.float32) for v in (1, 2, 3, 4))
    assert (
        _lstm_gates(np.concatenate([i, o, f, c]), hidden)[:, 0].tolist()
        == [1] * 3 + [3] * 3 + [4] * 3 + [2] * 3
    )


def test_weight_norm_refold_reproduces_the_weight_and_keeps_zeroed_channels_zero():
    import torch

    rng = np.random.default_rng(0)
    w = rng.normal(size=(4, 3, 5)).astype(np.float32)
    w[2] = 0.0  # a channel per-tensor quantisation zeroed
    v, g, zeros = _weight_norm(w, (4, 1, 1))
    assert zeros == 1 and g[2].item() == 0.0
    refolded = torch._weight_norm(torch.from_numpy(v), torch.from_numpy(g), 0)
    assert torch.isfinite(refolded).all()  # v = w, g = |w| would give 0 * 0/0 = NaN here
    np.testing.assert_allclose(refolded.numpy(), w, atol=1e-6)


# ------------------------------------------------------------------------------ the real rebuild
def test_rebuild_maps_686_of_688_keys_and_reports_what_it_filled_in(rebuilt):
    _, report = rebuilt
    assert (report["mapped"], report["total"]) == (686, 688)
    assert report["unmapped"] == ["bert.pooler.weight", "bert.pooler.bias"]
    assert report["instance_norm_defaults"] == 686 - report["from_onnx"] > 0
    # Per-tensor quantisation zeroed whole output channels of 18 weight-normed convs.
    assert len(report["zero_channels"]) == 18
    assert report["zero_channels"]["predictor.F0.2.conv1.weight"] == 52
    # Only the export's own conv-iSTFT constants have no KModel counterpart.
    assert all("istft" in name for name in report["unused_onnx"])


def test_rebuilt_checkpoint_loads_strictly_with_finite_weights(rebuilt, config):
    import torch

    path, _ = rebuilt
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    # The official kokoro-v1_0.pth layout: component -> state dict with DataParallel's prefix.
    assert sorted(checkpoint) == sorted(["bert", "bert_encoder", "predictor", "text_encoder", "decoder"])
    assert all(k.startswith("module.") for state in checkpoint.values() for k in state)
    model = build_kmodel(config)
    load_checkpoint(model, path)
    for name, param in model.named_parameters():
        assert torch.isfinite(param).all(), name
    assert model.predictor.F0[2].conv1.weight_g.abs().sum() > 0  # real weights, not the random init


def test_rebuilt_weights_are_the_dequantised_onnx_values(rebuilt, model_dir):
    import onnx
    import torch
    from onnx import numpy_helper

    graph = onnx.load(str(model_dir / ONNX)).graph
    init = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    checkpoint = torch.load(rebuilt[0], map_location="cpu", weights_only=True)
    q = init["encoder.text_encoder.embedding.weight_quantized"].astype(np.float32)
    # The zero point is the one the consuming DequantizeLinear node names (a shared initialiser).
    dq = next(
        n for n in graph.node if n.name == "/encoder/text_encoder/embedding/Gather_quant_DequantizeLinear"
    )
    expected = (q - init[dq.input[2]].astype(np.float32)) * init[dq.input[1]]
    np.testing.assert_allclose(
        checkpoint["text_encoder"]["module.embedding.weight"].numpy(), expected, rtol=1e-6
    )
    bias = checkpoint["decoder"]["module.generator.conv_post.bias"].numpy()
    np.testing.assert_array_equal(bias, init["decoder.decoder.generator.conv_post.bias"])


def test_strict_load_refuses_missing_unexpected_and_non_finite_weights(rebuilt, config):
    import torch

    path, _ = rebuilt
    good = torch.load(path, map_location="cpu", weights_only=True)
    model = build_kmodel(config)

    def variant(edit):
        ckpt = {c: dict(s) for c, s in good.items()}
        edit(ckpt)
        return ckpt

    with pytest.raises(RuntimeError, match="Missing key"):
        load_checkpoint(model, variant(lambda c: c["decoder"].pop("module.generator.conv_post.bias")))
    with pytest.raises(RuntimeError, match="Unexpected key"):
        load_checkpoint(model, variant(lambda c: c["bert"].__setitem__("module.extra", torch.zeros(1))))
    with pytest.raises(ValueError, match="components"):
        load_checkpoint(model, variant(lambda c: c.pop("predictor")))
    nan = good["predictor"]["module.F0_proj.bias"].clone().fill_(float("nan"))
    with pytest.raises(ValueError, match="non-finite"):
        load_checkpoint(model, variant(lambda c: c["predictor"].__setitem__("module.F0_proj.bias", nan)))


def test_a_failed_write_leaves_neither_a_file_nor_a_temporary(rebuilt, model_dir, tmp_path, monkeypatch):
    import torch

    states = torch.load(rebuilt[0], map_location="cpu", weights_only=True)
    states = {c: {k[len("module.") :]: v for k, v in s.items()} for c, s in states.items()}
    monkeypatch.setattr(torch_convert, "build_state_dicts", lambda *_: (states, {"notes": []}))

    real_save = torch.save

    def broken_save(obj, f):
        if isinstance(f, io.BytesIO):  # build_kmodel's in-memory empty checkpoint
            return real_save(obj, f)
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    out = tmp_path / REBUILT_PTH
    with pytest.raises(OSError, match="disk full"):
        rebuild_checkpoint(model_dir / ONNX, model_dir / "config.json", out)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.subprocess
def test_kmodel_loads_without_misaki_and_without_the_network(model_dir, rebuilt):
    """Importing `kokoro` proper pulls in KPipeline and misaki; we must not need either, nor a hub."""
    script = f"""
import socket, sys, json
sys.modules["misaki"] = None  # any import of misaki now fails
def no_network(*a, **k):
    raise RuntimeError("network access attempted")
socket.socket.connect = no_network
socket.create_connection = no_network
from backends.runtimes.torch_model import build_kmodel, load_checkpoint, read_config
model = build_kmodel(read_config({str(model_dir / "config.json")!r}))
load_checkpoint(model, {str(rebuilt[0])!r})
print(json.dumps({{"pipeline": "kokoro.pipeline" in sys.modules, "model": "kokoro.model" in sys.modules}}))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=root, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"pipeline": False, "model": True}

"""Rebuild a strict-loadable ``KModel`` checkpoint from the int8 ONNX export, offline.

Only the int8 ONNX export of Kokoro-82M is on the registry; the PyTorch runtime needs a ``.pth``.
The export's weights are all there, just quantised and renamed. Facts of that export (checked by
``tests/unit/test_torch_convert.py``):

* Conv weights are uint8, one scale and zero point per tensor (``ConvInteger``); MatMul/Gemm
  weights are int8 per output channel (``MatMulInteger``), stored transposed ``(in, out)``;
  embeddings are int8 per tensor (``Gather`` + ``DequantizeLinear``); LSTM weights are int8 per
  direction (``DynamicQuantizeLSTM``). We dequantise ``(q - zero_point) * scale`` with the zero
  point read from the consuming node — the exporter deduplicated zero-point initialisers, so their
  names belong to unrelated layers — and the weight scale from the node that rescales its output.
* Module paths come from node names: ``/decoder/decoder/decode.0/conv1/Conv_quant`` is
  ``decoder.decode.0.conv1``; ``/encoder/F0.1/...`` is ``predictor.F0.1...``.
* ONNX LSTM gates are stored i,o,f,c with the input/recurrent biases concatenated; torch wants
  i,f,g,o and separate ``bias_ih``/``bias_hh``.
* Weight norm was folded (``W = g * v / ||v||``): we store ``weight_v = W`` and ``weight_g = ||W||``.
  Where per-tensor quantisation zeroed a whole output channel (18 convs, e.g. 52 of 256 channels of
  ``predictor.F0.2.conv1``), ``||v||`` is 0 and ``g * v / ||v||`` is NaN; there we store ``v = 1``
  and ``g = 0`` so the channel stays exactly zero.
* ``InstanceNorm1d`` affine parameters (always 1 and 0 in the trained model) are not in the export:
  set to 1 and 0. The ALBERT pooler is unused by Kokoro and absent: zeros.

Everything else (biases, LayerNorm, Snake alphas) is float and named by module path. Sine-source
noise and the export's iSTFT scaling are graph behaviour, not weights; see ``torch_runtime``.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from backends.runtimes.torch_model import COMPONENTS, build_kmodel, load_checkpoint, read_config

_OP_TAIL = re.compile(
    r"/(Conv_quant|Gemm_MatMul_quant|MatMul_quant|LSTM_quant|Gather_quant|ConvTranspose|Conv|MatMul)$"
)
# Top-level scopes of the export's wrapper modules -> KModel attribute paths.
_PREDICTOR_CHILDREN = ("F0", "N", "F0_proj", "N_proj", "shared")


def _module_path(node_name: str) -> str | None:
    """``/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant`` -> ``text_encoder.cnn.0.0``."""
    if not _OP_TAIL.search(node_name):
        return None
    scopes = [s for s in _OP_TAIL.sub("", node_name).split("/") if s]
    parts: list[str] = []
    for scope in scopes:
        # Nested scopes repeat their parent's name: ["cnn.0", "cnn.0.0"] is one module, "cnn.0.0".
        if parts and scope.startswith(parts[-1] + "."):
            parts[-1] = scope
        else:
            parts.append(scope)
    path = ".".join(parts)
    if path.startswith("decoder.decoder."):
        return "decoder." + path[len("decoder.decoder.") :]
    if path.startswith("encoder."):
        path = path[len("encoder.") :]
        if path.split(".")[0] in _PREDICTOR_CHILDREN:
            path = "predictor." + path
        return path
    return None


def _initializer_path(name: str) -> str | None:
    """Float initialisers named after their parameter: ``encoder.predictor.F0.0.conv1.bias``."""
    if name.startswith("decoder.decoder."):
        return "decoder." + name[len("decoder.decoder.") :]
    if name.startswith("encoder."):
        return name[len("encoder.") :]
    return None


class _Graph:
    def __init__(self, onnx_path: Path):
        import onnx
        from onnx import numpy_helper

        model = onnx.load(str(onnx_path))
        self.nodes = list(model.graph.node)
        self.init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        self.by_name = {n.name: n for n in self.nodes}
        self.producer = {o: n for n in self.nodes for o in n.output}
        self.consumers: dict[str, list[Any]] = {}
        for n in self.nodes:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)

    def weight_scale(self, node: Any) -> np.ndarray:
        """The weight's scale: the constant factor of the Mul that rescales ``node``'s output
        (``x_scale * w_scale``)."""
        rescale = self.by_name.get(node.name + "_output_scale_mul")
        if rescale is None:
            raise ValueError(f"{node.name}: no output rescale node")
        for name in rescale.input:
            producer = self.producer.get(name)
            if name in self.init:
                continue
            if producer is not None and producer.op_type == "Mul":
                consts = [i for i in producer.input if i in self.init]
                if len(consts) == 1:
                    return self.init[consts[0]].astype(np.float32)
        raise ValueError(f"{node.name}: cannot find the weight scale")


def _dequantise(q: np.ndarray, zero_point: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return (q.astype(np.float32) - zero_point.astype(np.float32)) * scale.astype(np.float32)


def _lstm_gates(w: np.ndarray, hidden: int) -> np.ndarray:
    """ONNX gate blocks i,o,f,c along axis 0 -> torch i,f,g,o."""
    i, o, f, c = (w[k * hidden : (k + 1) * hidden] for k in range(4))
    return np.concatenate([i, f, c, o], axis=0)


def _lstm_weights(graph: _Graph, node: Any, path: str) -> list[tuple[str, np.ndarray]]:
    """A bidirectional DynamicQuantizeLSTM's weights and biases, both directions, in torch's layout."""
    hidden = next(a.i for a in node.attribute if a.name == "hidden_size")
    w_q, r_q, bias = (graph.init[node.input[k]] for k in (1, 2, 3))
    w_s, w_zp, r_s, r_zp = (graph.init[node.input[k]] for k in (8, 9, 10, 11))
    out: list[tuple[str, np.ndarray]] = []
    for d, suffix in enumerate(("", "_reverse")):
        w = _dequantise(w_q[d], w_zp[d], w_s[d]).T  # stored (in, 4H)
        r = _dequantise(r_q[d], r_zp[d], r_s[d]).T
        out += [
            (f"{path}.weight_ih_l0{suffix}", _lstm_gates(w, hidden)),
            (f"{path}.weight_hh_l0{suffix}", _lstm_gates(r, hidden)),
            (f"{path}.bias_ih_l0{suffix}", _lstm_gates(bias[d, : 4 * hidden], hidden)),
            (f"{path}.bias_hh_l0{suffix}", _lstm_gates(bias[d, 4 * hidden :], hidden)),
        ]
    return out


def _node_weights(graph: _Graph, node: Any, path: str) -> list[tuple[str, np.ndarray]]:
    """The KModel parameters one node of the export carries (none for most nodes)."""
    op = node.op_type
    if op == "MatMulInteger":
        q, zp = graph.init[node.input[1]], graph.init[node.input[3]]
        w = _dequantise(q, zp.reshape(1, -1), graph.weight_scale(node).reshape(1, -1))
        return [(f"{path}.weight", w.T)]
    if op == "ConvInteger":
        q, zp = graph.init[node.input[1]], graph.init[node.input[3]]
        return [(f"{path}.weight", _dequantise(q, zp, graph.weight_scale(node)))]
    if op == "MatMul" and node.input[1] in graph.init:  # a float MatMul: (in, out)
        return [(f"{path}.weight", graph.init[node.input[1]].T)]
    if op in ("Conv", "ConvTranspose") and "istft" not in node.name:  # the conv iSTFT basis is no parameter
        return [(f"{path}.weight", graph.init[node.input[1]])]
    if op == "Gather":
        dq = next(c for c in graph.consumers[node.output[0]] if c.op_type == "DequantizeLinear")
        q = graph.init[node.input[0]]
        return [(f"{path}.weight", _dequantise(q, graph.init[dq.input[2]], graph.init[dq.input[1]]))]
    if op == "DynamicQuantizeLSTM":
        return _lstm_weights(graph, node, path)
    return []


def _extract(graph: _Graph) -> tuple[dict[str, np.ndarray], list[str]]:
    """Every weight the export carries, by KModel path (``component.module.param``)."""
    out: dict[str, np.ndarray] = {}
    notes: list[str] = []

    def put(key: str, value: np.ndarray, source: str) -> None:
        if key in out:
            if not np.array_equal(out[key], value):  # ALBERT's 12 layers share weights: same values
                raise ValueError(f"{key}: conflicting values from {source}")
            return
        out[key] = np.ascontiguousarray(value, dtype=np.float32)

    for node in graph.nodes:
        path = _module_path(node.name)
        if path is None:
            continue
        path = re.sub(r"_\d+$", "", path)  # ALBERT's repeated layers: query_1 is query
        for key, value in _node_weights(graph, node, path):
            put(key, value, node.name)
    for name, value in graph.init.items():
        path = _initializer_path(name)
        if path is None or value.dtype != np.float32 or re.search(r"_(scale|quantized\w*)$", name):
            continue
        put(path, value, name)
    notes.append(f"{len(out)} tensors read from {len(graph.nodes)} nodes")
    return out, notes


def _weight_norm(w: np.ndarray, g_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, int]:
    """Refold a folded weight-norm weight: (v, g, number of all-zero slices along dim 0)."""
    norm = np.sqrt((w.astype(np.float64) ** 2).reshape(w.shape[0], -1).sum(axis=1))
    zero = norm == 0
    v = w.copy()
    v[zero] = 1.0  # any non-zero direction: g = 0 keeps the slice exactly zero, without 0/0
    return v, norm.astype(np.float32).reshape(g_shape), int(zero.sum())


def build_state_dicts(
    onnx_path: Path, config: dict[str, Any]
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Map the ONNX weights onto a KModel of ``config``: (component -> state dict, report)."""
    import torch

    model = build_kmodel(config)
    template = {c: {k: tuple(v.shape) for k, v in getattr(model, c).state_dict().items()} for c in COMPONENTS}
    instance_norms = {
        f"{c}.{name}"
        for c in COMPONENTS
        for name, module in getattr(model, c).named_modules()
        if isinstance(module, torch.nn.InstanceNorm1d)
    }
    del model
    weights, notes = _extract(_Graph(onnx_path))
    states: dict[str, dict[str, torch.Tensor]] = {c: {} for c in COMPONENTS}
    from_onnx, instance_norm, unmapped, zero_channels = [], [], [], {}
    used: set[str] = set()
    for component, shapes in template.items():
        for key, shape in shapes.items():
            full = f"{component}.{key}"
            module = full.rsplit(".", 1)[0]
            if key.endswith((".weight_v", ".weight_g")):
                base = module + ".weight"
                if base not in weights:
                    raise KeyError(f"{full}: no ONNX weight {base}")
                v_key, g_key = key[:-2] + "_v", key[:-2] + "_g"
                v, g, zeros = _weight_norm(weights[base], shapes[g_key])
                value = v if key == v_key else g
                zero_channels.update({base: zeros} if zeros else {})
                used.add(base)
                from_onnx.append(full)
            elif full in weights:
                value = weights[full]
                used.add(full)
                from_onnx.append(full)
            elif module in instance_norms:
                value = np.full(shape, 1.0 if key.endswith("weight") else 0.0, np.float32)
                instance_norm.append(full)
            elif component == "bert" and key.startswith("pooler."):
                value = np.zeros(shape, np.float32)
                unmapped.append(full)
            else:
                raise KeyError(f"{full}: not found in the ONNX export")
            if tuple(value.shape) != shape:
                raise ValueError(f"{full}: ONNX shape {value.shape} != KModel shape {shape}")
            states[component][key] = torch.from_numpy(np.array(value, dtype=np.float32, order="C"))
    unused = sorted(set(weights) - used)
    notes += [
        f"{len(instance_norm)} InstanceNorm affine tensors set to 1/0 (absent from the export)",
        f"{', '.join(unmapped)} set to zeros (the ALBERT pooler: unused by Kokoro, absent from the export)",
        f"{len(zero_channels)} weight-norm convs had all-zero output channels (g = 0 there)",
    ]
    if unused:
        notes.append(f"ONNX tensors with no KModel key: {unused}")
    report = {
        "mapped": len(from_onnx) + len(instance_norm),
        "total": sum(len(s) for s in template.values()),
        "from_onnx": len(from_onnx),
        "instance_norm_defaults": len(instance_norm),
        "unmapped": unmapped,
        "zero_channels": zero_channels,
        "unused_onnx": unused,
        "notes": notes,
    }
    return states, report


def rebuild_checkpoint(onnx_path: Path, config_path: Path, out_path: Path) -> dict[str, Any]:
    """Write a KModel checkpoint rebuilt from ``onnx_path`` to ``out_path`` (atomically: a temporary
    file beside it, renamed into place once it has been verified by a strict load).

    Returns the report: ``mapped``/``total`` keys, ``from_onnx``, ``defaulted`` keys, all-zero
    channel counts, ``notes`` and ``seconds``. Raises on any key it cannot map. Pure CPU, offline;
    takes a few seconds and about 1 GB of memory.
    """
    import torch

    started = time.perf_counter()
    onnx_path, out_path = Path(onnx_path), Path(out_path)
    config = read_config(Path(config_path))
    states, report = build_state_dicts(onnx_path, config)
    load_checkpoint(build_kmodel(config), states)  # the same strict check every load does
    # The official checkpoint's layout: component -> state dict with DataParallel's prefix.
    checkpoint = {c: {f"module.{k}": v for k, v in s.items()} for c, s in states.items()}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out_path.parent, prefix=f".{out_path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out_path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    report["path"] = str(out_path)
    report["seconds"] = round(time.perf_counter() - started, 2)
    return report


def main(argv: list[str] | None = None) -> int:
    """``python -m backends.assets.torch_convert MODEL_DIR``: rebuild ``MODEL_DIR/kokoro-v1_0.rebuilt.pth``."""
    import argparse
    import json

    from backends.runtimes.torch_model import REBUILT_PTH

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--onnx", default="kokoro-v1.0.int8.onnx")
    args = parser.parse_args(argv)
    report = rebuild_checkpoint(
        args.model_dir / args.onnx, args.model_dir / "config.json", args.model_dir / REBUILT_PTH
    )
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

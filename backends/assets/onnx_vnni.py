"""The int8 export's convolutions as integer matrix products, for CPUs with VNNI.

Kokoro's int8 export quantises its convolutions dynamically: each ``ConvInteger`` multiplies uint8
weights by the uint8 activations a ``DynamicQuantizeLinear`` made, and ONNX Runtime's CPU kernel for
it runs the uint8 x uint8 matrix product, which has no VNNI instruction (measured on a Zen 4 core:
about 150 billion multiply-adds a second, against 330-410 for uint8 x int8 at the same shapes).
The decoder's convolutions are most of a reading's time.

:func:`convs_as_matmuls` rewrites every stride-1, same-padded 1-D ``ConvInteger`` (all but the
three strided ones of the export) into the same integer sums on the fast kernel:

* the activations quantised again to int8 (``QuantizeLinear``) with the ``DynamicQuantizeLinear``'s
  own scale and a zero point 128 lower, which gives each value exactly its uint8 code minus 128;
* the columns of the convolution (``Pad`` by the zero point, one ``Slice`` per tap, ``Concat``);
* ``MatMulInteger`` of the weights (uint8, laid out tap by tap) by those columns (int8), with the
  weights' zero point and the activations' new one.

Every product and sum is an integer one, as in ``ConvInteger``, so the graph computes the export's
audio bit for bit where the kernel keeps 32-bit sums. VNNI's ``vpdpbusd`` does; the older AVX2 and
AVX-512 path (``vpmaddubsw``) saturates pairs of products at 16 bits, so :func:`cpu_has_vnni` decides
where these graphs are used: x86-64 with AVX-512 VNNI or AVX-VNNI. :func:`split_model_vnni` writes the
predict and decode graphs (:mod:`backends.assets.onnx_windowed`) rewritten so, as
``<name>.predict.vnni.onnx`` and ``<name>.decode.vnni.onnx``.
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path
from typing import Any

import numpy as np

from backends.assets import onnx_windowed
from backends.assets.onnx_timed import GraphSurgeryError

VNNI_SUFFIX = ".vnni.onnx"
#: /proc/cpuinfo flags of the x86-64 instructions that keep uint8 x int8 products in 32 bits.
VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni"})


def vnni_name(name: str) -> str:
    """``kokoro-v1.0.int8.decode.onnx`` -> ``kokoro-v1.0.int8.decode.vnni.onnx``."""
    return (name[: -len(".onnx")] if name.endswith(".onnx") else name) + VNNI_SUFFIX


@functools.cache
def cpu_has_vnni(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this is an x86-64 CPU with AVX-512 VNNI or AVX-VNNI (Linux's ``flags``)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return bool(VNNI_FLAGS & set(flags))


def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _same_padded(node: Any, quantize: Any, init: dict[str, Any]) -> tuple[int, int, int] | None:
    """(taps, dilation, pad) of a ``ConvInteger`` the rewrite takes: 1-D, stride 1, one group, as
    much padding on each side as its reach, uint8 weights and zero point among the initializers, its
    input and zero point a ``DynamicQuantizeLinear``'s; None for any other."""
    from onnx import TensorProto

    attrs = _attrs(node)
    kernel, pads = list(attrs.get("kernel_shape", [])), list(attrs.get("pads", [0, 0]))
    dilations = list(attrs.get("dilations", [1]))
    if (quantize.op_type != "DynamicQuantizeLinear" or len(node.input) != 4 or node.input[2] != quantize.output[2]
            or node.input[1] not in init or node.input[3] not in init
            or init[node.input[1]].data_type != TensorProto.UINT8
            or len(kernel) != 1 or len(dilations) != 1 or len(pads) != 2 or pads[0] != pads[1]
            or list(attrs.get("strides", [1])) != [1] or attrs.get("group", 1) != 1
            or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET")):
        return None
    taps, dilation, pad = kernel[0], dilations[0], pads[0]
    return (taps, dilation, pad) if 2 * pad == dilation * (taps - 1) else None


def convs_as_matmuls(model: Any) -> int:
    """Rewrite ``model`` (an ``onnx.ModelProto``, in place) as the module docstring says; returns
    how many convolutions it rewrote. A convolution of any other form is left as it is."""
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    init = {t.name: t for t in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    added: set[str] = set()

    def const(name: str, value: np.ndarray) -> str:
        if name not in added:
            graph.initializer.append(numpy_helper.from_array(value, name))
            added.add(name)
        return name

    nodes: list[Any] = []
    as_int8: dict[str, tuple[str, str]] = {}  # a DynamicQuantizeLinear's output -> (int8 codes, zero point)
    rewritten = 0
    for node in graph.node:
        quantize = producer.get(node.input[0]) if node.op_type == "ConvInteger" and node.input else None
        shape = _same_padded(node, quantize, init) if quantize is not None else None
        if quantize is None or shape is None:
            nodes.append(node)
            continue
        taps, dilation, pad = shape
        codes = quantize.output[0]
        if codes not in as_int8:
            zp32, zp8, x8 = codes + "/zero_point_int32", codes + "/zero_point_int8", codes + "/int8"
            nodes += [
                helper.make_node("Cast", [quantize.output[2]], [zp32], to=TensorProto.INT32),
                helper.make_node("Sub", [zp32, const("vnni/int32_128", np.array(128, np.int32))], [zp32 + "/less_128"]),
                helper.make_node("Cast", [zp32 + "/less_128"], [zp8], to=TensorProto.INT8),
                helper.make_node("QuantizeLinear", [quantize.input[0], quantize.output[1], zp8], [x8]),
            ]
            as_int8[codes] = (x8, zp8)
        x8, zp8 = as_int8[codes]
        out = node.output[0]
        weights = numpy_helper.to_array(init[node.input[1]])  # (out channels, in channels, taps)
        matrix = np.ascontiguousarray(weights.transpose(0, 2, 1).reshape(weights.shape[0], -1))
        columns = x8
        if taps > 1:
            padded = out + "/padded"
            nodes.append(helper.make_node(
                "Pad", [x8, const(f"vnni/pads_{pad}", np.array([0, 0, pad, 0, 0, pad], np.int64)), zp8], [padded]))
            sliced = []
            for tap in range(taps):
                start, end = tap * dilation, tap * dilation - 2 * pad
                stop = np.iinfo(np.int64).max if end == 0 else end
                sliced.append(f"{out}/tap_{tap}")
                nodes.append(helper.make_node("Slice", [
                    padded, const(f"vnni/start_{start}", np.array([start], np.int64)),
                    const(f"vnni/stop_{stop}", np.array([stop], np.int64)),
                    const("vnni/axis_2", np.array([2], np.int64))], [sliced[-1]]))
            columns = out + "/columns"
            nodes.append(helper.make_node("Concat", sliced, [columns], axis=1))
        nodes.append(helper.make_node(
            "MatMulInteger", [const(node.input[1] + "/by_tap", matrix), columns, node.input[3], zp8], [out],
            name=(node.name or out) + "/as_matmul"))
        rewritten += 1
    del graph.node[:]
    graph.node.extend(nodes)
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return rewritten


def split_model_vnni(src: Path, predict_out: Any, decode_out: Any) -> int:
    """Write the predict and decode graphs of ``src`` (:func:`~backends.assets.onnx_windowed.split_graphs`)
    with their convolutions as integer matrix products to two binary file objects; returns how many
    were rewritten. Raises :class:`GraphSurgeryError`, also where the model has none to rewrite."""
    *models, _cut = onnx_windowed.split_graphs(src)
    counts = [convs_as_matmuls(m) for m in models]
    if not sum(counts):
        raise GraphSurgeryError(f"{Path(src).name} has no int8 convolutions to run as matrix products")
    for model, out in zip(models, (predict_out, decode_out), strict=True):
        out.write(model.SerializeToString())
    return sum(counts)

"""The ONNX export with a duration output, made by graph surgery (no torch, no new weights).

Kokoro's ONNX exports output only audio, yet the graph computes every token's predicted duration
in frames: the alignment matrix that stretches the text encoding to the frame rate is built from
it (``round(sum(sigmoid(duration_proj(x))) / speed)``, clipped to at least one frame, cast to
int64). :func:`find_duration_tensor` finds that int64 tensor by the shape of the graph around it —
a ``Round`` whose input divides by the ``speed`` input, then ``Clip``/``Cast`` up to the cast to
int64 — rather than by a node name, so the same search can serve other exports of the model
(verified on the int8 export only: it is a dynamic quantisation of the official float32 export,
which is expected to hold the same nodes; where a graph does not, it is refused, never guessed). :func:`add_duration_output` adds one ``Identity`` node that copies it to a new graph
output ``durations`` (shape ``(1, tokens)``: ``<bos>``, each phoneme, ``<eos>``) and changes
nothing else, so the audio is bit-for-bit the same; the result is deterministic (same input, same
bytes), written beside the original as ``<name>.timed.onnx``.

Needs the ``onnx`` package (protobuf only; onnxruntime never imports it). Blocking: a second or
two for the 92 MB int8 export.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DURATIONS_OUTPUT = "durations"
TIMED_SUFFIX = ".timed.onnx"


class GraphSurgeryError(RuntimeError):
    """The graph has no tensor that can be the predicted durations (or more than one)."""


def timed_name(name: str) -> str:
    """``kokoro-v1.0.int8.onnx`` -> ``kokoro-v1.0.int8.timed.onnx``."""
    return name[: -len(".onnx")] + TIMED_SUFFIX if name.endswith(".onnx") else name + TIMED_SUFFIX


def source_name(name: str) -> str:
    """The model a timed twin was made from (``name`` itself when it is no timed twin)."""
    return name[: -len(TIMED_SUFFIX)] + ".onnx" if name.endswith(TIMED_SUFFIX) else name


def find_duration_tensor(graph: Any) -> str:
    """The name of the int64 per-token duration tensor in ``graph`` (an ``onnx.GraphProto``)."""
    import onnx

    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    inputs = {i.name for i in graph.input}
    speed = "speed" if "speed" in inputs else None

    def divides_by_speed(name: str, depth: int = 3) -> bool:
        node = producer.get(name)
        if node is None or depth == 0:
            return False
        if node.op_type == "Div" and speed is not None and _reaches(node.input[1], speed, producer):
            return True
        return node.op_type in ("Cast", "Div", "Mul") and divides_by_speed(node.input[0], depth - 1)

    found: list[str] = []
    for node in graph.node:
        if node.op_type != "Round" or not divides_by_speed(node.input[0]):
            continue
        tensor, hops = node.output[0], 0
        while hops < 4:
            nexts = [n for n in consumers.get(tensor, []) if n.op_type in ("Clip", "Cast", "Max")]
            if len(nexts) != 1:
                break
            nxt = nexts[0]
            tensor, hops = nxt.output[0], hops + 1
            if nxt.op_type == "Cast" and _attr(nxt, "to") == onnx.TensorProto.INT64:
                found.append(tensor)
                break
    if len(found) != 1:
        raise GraphSurgeryError(
            f"expected one int64 duration tensor (Round of a division by speed, then Clip/Cast to int64); "
            f"found {len(found)}"
        )
    return found[0]


def _reaches(name: str, target: str, producer: dict[str, Any], depth: int = 3) -> bool:
    """Whether tensor ``name`` is ``target`` or is computed from it by a short chain of casts."""
    if name == target:
        return True
    node = producer.get(name)
    return depth > 0 and node is not None and node.op_type in ("Cast", "Unsqueeze", "Reshape") and _reaches(
        node.input[0], target, producer, depth - 1
    )


def _attr(node: Any, name: str) -> Any:
    import onnx

    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return None


def add_duration_output(src: Path, out: Any) -> str:
    """Write ``src`` with the extra ``durations`` output to the binary file object ``out``; returns
    the name of the tensor that was exposed. Raises :class:`GraphSurgeryError`."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load(str(src))
    except DecodeError as exc:
        raise GraphSurgeryError(f"{Path(src).name} is not an ONNX model this onnx package can read: {exc}") from exc
    graph = model.graph
    if any(o.name == DURATIONS_OUTPUT for o in graph.output):
        raise GraphSurgeryError(f"{Path(src).name} already has a {DURATIONS_OUTPUT!r} output")
    tensor = find_duration_tensor(graph)
    tokens = graph.input[0].type.tensor_type.shape.dim
    shape = [d.dim_value or d.dim_param or None for d in tokens] if len(tokens) == 2 else None
    graph.node.append(onnx.helper.make_node("Identity", [tensor], [DURATIONS_OUTPUT], name="durations_output"))
    graph.output.append(onnx.helper.make_tensor_value_info(DURATIONS_OUTPUT, onnx.TensorProto.INT64, shape))
    out.write(model.SerializeToString())
    return tensor

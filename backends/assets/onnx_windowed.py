"""The ONNX export split in two by graph surgery, so the decoder can run over a window of a sentence.

Kokoro's ONNX export is one graph from tokens to audio. Inside it, the text encoder and prosody
predictor make four tensors that the decoder reads, and nothing else crosses from one to the other
besides the ``style`` input:

* the aligned text features ``asr`` (1, 512, frames): a ``MatMul`` of the text encoding by the
  alignment built from the predicted durations, fed straight into the decoder's first ``Concat``;
* the curves ``f0`` and ``n`` (1, 2 * frames): the ``Squeeze``/``Reshape`` of the predictor's F0
  and energy projections, which the decoder's two 1-channel convolutions (the other two inputs of
  that ``Concat``) read;
* the harmonic ``source`` (1, samples, 1): the one ``Tanh`` of the graph (the source module's),
  computed from ``f0`` alone with no random op (this export has none), which the generator's one
  ``STFT`` reads after reflect-padding it.

:func:`find_decoder_inputs` finds them by that shape of the graph (the ``Concat`` that reads a
``MatMul`` by the alignment, and the ``Tanh`` that reaches the ``STFT``), never by a node name,
and refuses (:class:`~backends.assets.onnx_timed.GraphSurgeryError`) where the graph does not have it.
:func:`split_model` then writes two graphs, each made of the original's own nodes and weights,
unchanged:

* ``<name>.predict.onnx``: ``tokens``, ``style``, ``speed`` -> ``durations`` (int64, per token:
  ``<bos>``, each phoneme, ``<eos>``), ``asr``, ``f0``, ``n``, ``source``;
* ``<name>.decode.onnx``: ``asr``, ``f0``, ``n``, ``source``, ``style`` -> ``audio`` (600 samples
  a frame).

Fed the whole sentence's tensors, the decode graph makes the single graph's audio bit for bit.
Fed a window of them (frames ``lo:hi`` of ``asr``, ``2*lo:2*hi`` of the curves, samples
``600*lo:600*hi`` of the source), it decodes that window: the decoder's instance norms (and its
dynamic int8 quantisation of activations) then take their statistics over the window, and the
source is the whole sentence's slice, so consecutive windows meet in phase. Deterministic: the
same input gives the same bytes. Needs the ``onnx`` package (protobuf only); a second or so for
the 92 MB int8 export.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backends.assets.onnx_timed import GraphSurgeryError, find_duration_tensor

PREDICT_SUFFIX = ".predict.onnx"
DECODE_SUFFIX = ".decode.onnx"
#: The tensors between the two graphs (beside ``style``), in the order the decode graph takes them.
WINDOW_TENSORS = ("asr", "f0", "n", "source")
DURATIONS = "durations"
#: Samples per frame of ``asr`` (two F0 steps of 300 samples each).
FRAME_SAMPLES = 600


def predict_name(name: str) -> str:
    """``kokoro-v1.0.int8.onnx`` -> ``kokoro-v1.0.int8.predict.onnx``."""
    return (name[: -len(".onnx")] if name.endswith(".onnx") else name) + PREDICT_SUFFIX


def decode_name(name: str) -> str:
    """``kokoro-v1.0.int8.onnx`` -> ``kokoro-v1.0.int8.decode.onnx``."""
    return (name[: -len(".onnx")] if name.endswith(".onnx") else name) + DECODE_SUFFIX


def find_decoder_inputs(graph: Any) -> dict[str, str]:
    """The names of the tensors the decoder reads (:data:`WINDOW_TENSORS`) in ``graph`` (an
    ``onnx.GraphProto``), and of the per-token durations. Raises :class:`GraphSurgeryError`."""
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    durations = find_duration_tensor(graph)
    aligned = _descendants(durations, consumers)

    # asr: a MatMul reading the alignment, whose output a 3-input Concat takes first (the decoder's
    # encode input: asr, F0_conv(f0), N_conv(n)); the predictor's own MatMul feeds an LSTM instead.
    concats = [
        node for node in graph.node
        if node.op_type == "Concat" and len(node.input) == 3
        and (mm := producer.get(node.input[0])) is not None and mm.op_type == "MatMul"
        and any(i in aligned for i in mm.input)
    ]
    if len(concats) != 1:
        raise GraphSurgeryError(f"expected one Concat of the aligned features and two curves; found {len(concats)}")
    concat = concats[0]
    curves = [_curve(t, producer) for t in concat.input[1:]]
    if any(c is None for c in curves) or len(set(curves)) != 2:
        raise GraphSurgeryError("the decoder's F0 and energy inputs do not come from two curves of the predictor")
    f0, n = curves
    assert f0 is not None and n is not None

    stfts = [node for node in graph.node if node.op_type == "STFT"]
    tanhs = [node for node in graph.node if node.op_type == "Tanh"]
    if len(stfts) != 1 or len(tanhs) != 1:
        raise GraphSurgeryError(
            f"expected one STFT and one Tanh (the harmonic source); found {len(stfts)}, {len(tanhs)}")
    source = tanhs[0].output[0]
    if stfts[0].input[0] not in _descendants(source, consumers, limit=8):
        raise GraphSurgeryError("the STFT does not read the harmonic source")
    if source not in _descendants(f0, consumers):
        raise GraphSurgeryError("the harmonic source is not made from the F0 curve")
    if any(node.op_type.startswith("Random") for node in graph.node):
        raise GraphSurgeryError("the graph has random ops: a window's source would not be the sentence's")
    return {"asr": concat.input[0], "f0": f0, "n": n, "source": source, DURATIONS: durations}


def _descendants(name: str, consumers: dict[str, list[Any]], limit: int | None = None) -> set[str]:
    """Tensors computed from ``name`` (within ``limit`` nodes of it, when given)."""
    seen, frontier, depth = {name}, [name], 0
    while frontier and (limit is None or depth < limit):
        frontier = [o for t in frontier for node in consumers.get(t, []) for o in node.output if o and o not in seen]
        seen.update(frontier)
        depth += 1
    return seen


def _curve(name: str, producer: dict[str, Any]) -> str | None:
    """Walking back from a decoder convolution's output along its data input (the first input
    that is computed, not a weight), the first ``Squeeze``/``Reshape`` output: the predictor's curve."""
    for _ in range(12):
        node = producer.get(name)
        if node is None:
            return None
        if node.op_type in ("Squeeze", "Reshape"):
            return name
        data = [i for i in node.input if i and i in producer and producer[i].op_type != "Constant"]
        if not data:
            return None
        name = data[0]
    return None


def _subgraph(model: Any, inputs: dict[str, tuple[str, int]], outputs: dict[str, tuple[str, int]], name: str) -> Any:
    """A model of ``model``'s nodes that compute ``outputs`` from ``inputs`` (each: tensor ->
    (new name, element type)), renamed at the borders; its nodes in the original's order."""
    import onnx

    graph = model.graph
    index = {out: i for i, node in enumerate(graph.node) for out in node.output}
    reach: set[int] = set()
    stack = list(outputs)
    while stack:
        t = stack.pop()
        if t in inputs or t not in index or index[t] in reach:
            continue
        reach.add(index[t])
        stack.extend(i for i in graph.node[index[t]].input if i)
    renamed = {old: new for old, (new, _) in inputs.items()}
    nodes = []
    for i in sorted(reach):
        node = onnx.NodeProto()
        node.CopyFrom(graph.node[i])
        for k, t in enumerate(node.input):
            if t in renamed:
                node.input[k] = renamed[t]
        nodes.append(node)
    for old, (new, _) in outputs.items():
        if old != new:
            nodes.append(onnx.helper.make_node("Identity", [renamed.get(old, old)], [new], name=f"{new}_output"))
    used = {t for node in nodes for t in node.input}
    weights = [t for t in graph.initializer if t.name in used]
    made = {t for node in nodes for t in node.output} | {t.name for t in weights} | {n for n, _ in inputs.values()}
    missing = sorted(t for t in used if t and t not in made)
    if missing:
        raise GraphSurgeryError(f"the {name} graph needs tensors from outside it: {', '.join(missing[:5])}")
    new_graph = onnx.helper.make_graph(
        nodes, name,
        [onnx.helper.make_tensor_value_info(n, e, None) for n, e in inputs.values()],
        [onnx.helper.make_tensor_value_info(n, e, None) for n, e in outputs.values()],
        weights,
    )
    out = onnx.helper.make_model(new_graph, opset_imports=list(model.opset_import), ir_version=model.ir_version,
                                 producer_name=model.producer_name)
    return out


def split_model(src: Path, predict_out: Any, decode_out: Any) -> dict[str, str]:
    """Write the predict and decode graphs of ``src`` to two binary file objects; returns the
    tensors cut at (:func:`find_decoder_inputs`). Raises :class:`GraphSurgeryError`."""
    predict, decode, cut = split_graphs(src)
    predict_out.write(predict.SerializeToString())
    decode_out.write(decode.SerializeToString())
    return cut


def split_graphs(src: Path) -> tuple[Any, Any, dict[str, str]]:
    """The predict and decode graphs of ``src`` (``onnx.ModelProto``) and the tensors cut at.
    Raises :class:`GraphSurgeryError`."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load(str(src))
    except DecodeError as exc:
        raise GraphSurgeryError(f"{Path(src).name} is not an ONNX model this onnx package can read: {exc}") from exc
    graph = model.graph
    names = {i.name for i in graph.input}
    if not {"style", "speed"} <= names or len(graph.input) != 3 or len(graph.output) != 1:
        raise GraphSurgeryError(f"{Path(src).name}: expected inputs (tokens, style, speed) and one output (audio)")
    cut = find_decoder_inputs(graph)
    f32, i64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
    typed = {i.name: (i.name, i.type.tensor_type.elem_type) for i in graph.input}
    predict = _subgraph(model, typed, {cut[DURATIONS]: (DURATIONS, i64), **{cut[k]: (k, f32) for k in WINDOW_TENSORS}},
                        "kokoro_predict")
    audio = graph.output[0].name
    decode = _subgraph(model, {**{cut[k]: (k, f32) for k in WINDOW_TENSORS}, "style": typed["style"]},
                       {audio: ("audio", f32)}, "kokoro_decode")
    if any(i.name in ("speed", graph.input[0].name) for i in decode.graph.input):
        raise GraphSurgeryError("the decoder reads the tokens or the speed: it cannot run over a window")
    return predict, decode, cut

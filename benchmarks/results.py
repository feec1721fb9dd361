"""Result files: ``benchmarks/results/<name>.json`` (machine, versions, configuration, load,
every raw sample, medians, the server's own view, targets), ``<name>.md`` (a table and the
command that made it) and, where a picture helps, ``<name>.png``.

Every benchmark builds a :class:`Result`; :func:`validate` is the schema the files follow (the
unit tests hold the writer to it).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.metadata as md
import importlib.util
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SCHEMA_VERSION = 1
RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "kokoro-serve", "kokoro-onnx", "onnxruntime", "numpy", "torch", "starlette", "uvicorn",
    "websockets", "httpx", "prometheus-client", "lameenc", "av", "psutil", "matplotlib",
)
#: How a target's ``met`` reads.
MET = {True: "met", False: "NOT met", None: "not measured"}
#: What a run on the fake runtime says of its verdicts (and each goal meant for the model reads instead).
HARNESS_ONLY = ("--backend fake: these verdicts judge the harness only (the protocol, ordering, counters); "
                "the goals meant for the model are not judged: run --backend onnx (or torch) for them")
NOT_JUDGED = "not judged (fake runtime: a goal for the model)"
REQUIRED_KEYS = {
    "benchmark": str, "schema_version": int, "command": str, "quick": bool, "started": str,
    "finished": str, "machine": dict, "versions": dict, "config": dict, "samples": list,
    "medians": dict, "summary": dict, "server_view": dict, "targets": list, "notes": list,
}


def median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def mean(values: Iterable[float | None]) -> float | None:
    """The mean of the values that exist (AWS's write-ups report means; the suite reports both)."""
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def percentile(values: Iterable[float | None], q: float) -> float | None:
    """The ``q``-th percentile (0-100) of the values that exist, numpy's (linear between the closest
    ranks); None for no values. The one percentile of every suite."""
    vals = [v for v in values if v is not None]
    return float(np.percentile(vals, q)) if vals else None


def rnd(x: float | None, digits: int = 1) -> float | None:
    return None if x is None else round(x, digits)


def ratio(a: float | None, b: float | None, digits: int = 3) -> float | None:
    """``a / b`` rounded, None unless both exist (and are not zero)."""
    return round(a / b, digits) if a and b else None


def at_most(value: float | None, limit: float) -> bool | None:
    """Whether a goal of at most ``limit`` is met; None when nothing was measured."""
    return None if value is None else value <= limit


def at_least(value: float | None, limit: float) -> bool | None:
    """Whether a goal of at least ``limit`` is met; None when nothing was measured."""
    return None if value is None else value >= limit


def ms(seconds: float | None, digits: int = 1) -> float | None:
    """Seconds as milliseconds, rounded (None stays None)."""
    return None if seconds is None else round(seconds * 1000.0, digits)


def medians_by(samples: list[dict[str, Any]], key: str, fields: dict[str, int] | int) -> dict[str, dict[str, Any]]:
    """Per value of ``key`` (in the order first seen): each field's median, rounded to its digits,
    and ``runs``. ``fields`` as one number of digits: every field of the group but ``key``,
    ``run`` and ``load_1m``."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        groups.setdefault(s[key], []).append(s)
    out = {}
    for name, xs in groups.items():
        digits = fields if isinstance(fields, dict) else {k: fields for k in xs[0] if k not in (key, "run", "load_1m")}
        out[name] = {f: rnd(median(x.get(f) for x in xs), d) for f, d in digits.items()} | {"runs": len(xs)}
    return out


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def _memory_gib() -> float | None:
    with contextlib.suppress(ImportError):
        import psutil

        return round(psutil.virtual_memory().total / (1 << 30), 1)
    return None


def machine_info() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "python": sys.version.split()[0],
        "load_average_at_start": load_average(),
        "shared_cpu_note": (
            "other processes may share these cores; load_average_* (1/5/15 min) is recorded at the "
            "start and end of the run, and per phase where a benchmark records it"
        ),
    }


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    try:
        out["git_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        out["git_commit"] = None
    return out


def command_line(name: str, quick: bool, extra: list[str] | None = None) -> str:
    return shown_command(["python", "-m", "benchmarks", name, *(["--quick"] if quick else []), *(extra or [])])


def shown_command(argv: list[str]) -> str:
    """``argv`` as a shell line that reads the same on any machine: this interpreter as ``python``,
    a console script beside it by its name, a path inside the repository relative to it."""
    interpreter = Path(sys.executable)

    def shown(arg: str) -> str:
        path = Path(arg)
        if not path.is_absolute():
            return arg
        if path == interpreter:
            return "python"
        if path.parent == interpreter.parent:
            return path.name
        return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else arg

    return " ".join(shlex.quote(shown(a)) for a in argv)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@dataclass
class Result:
    """What one benchmark run produced; ``to_dict()`` follows :data:`REQUIRED_KEYS`."""

    benchmark: str
    quick: bool
    command: str
    config: dict[str, Any] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)
    medians: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    server_view: dict[str, Any] = field(default_factory=dict)
    targets: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    started: str = field(default_factory=now_iso)
    finished: str = ""
    machine: dict[str, Any] = field(default_factory=machine_info)
    status: str = "ok"

    def target(self, name: str, goal: str, value: Any, met: bool | None, *, any_runtime: bool = False) -> None:
        """A goal and whether ``value`` meets it. ``any_runtime``: the goal holds on every runtime (nothing
        lost, nothing left over), so a run on the fake runtime judges it too; the others are goals for
        the model, left unjudged there (:func:`judge_harness_only`)."""
        self.targets.append({"name": name, "goal": goal, "value": value, "met": met, "any_runtime": any_runtime})

    def judge_harness_only(self) -> None:
        """A run on the fake runtime: the model's goals lose their verdict (``met`` None, ``not_judged``),
        those of every runtime keep theirs, and a note says so."""
        self.config["harness_only"] = True
        for t in self.targets:
            if not t.get("any_runtime"):
                t["met"], t["not_judged"] = None, NOT_JUDGED
        self.notes.insert(0, HARNESS_ONLY)

    def to_dict(self) -> dict[str, Any]:
        return {
            "benchmark": self.benchmark, "schema_version": SCHEMA_VERSION, "status": self.status,
            "command": self.command, "quick": self.quick, "started": self.started, "finished": self.finished or now_iso(),
            "machine": {**self.machine, "load_average_at_end": load_average()}, "versions": versions(),
            **{key: getattr(self, key) for key in ("config", "samples", "medians", "summary", "server_view", "targets", "notes")},
        }


def verdict(target: dict[str, Any]) -> str:
    """How a target's verdict reads: met, NOT met, not measured, or not judged (fake runtime)."""
    return target.get("not_judged") or MET[target["met"]]


def validate(data: dict[str, Any]) -> list[str]:
    """Problems with a result dict (empty when it follows the schema)."""
    problems = [f"missing {key!r}" if key not in data else f"{key!r} is {type(data[key]).__name__}, expected {kind.__name__}"
                for key, kind in REQUIRED_KEYS.items() if not isinstance(data.get(key), kind)]
    if data.get("schema_version") not in (None, SCHEMA_VERSION):
        problems.append(f"schema_version {data.get('schema_version')} != {SCHEMA_VERSION}")
    for i, t in enumerate(data.get("targets") or []):
        if not isinstance(t, dict) or not {"name", "goal", "value", "met"} <= set(t):
            problems.append(f"targets[{i}] lacks name/goal/value/met")
    machine = data.get("machine")
    if isinstance(machine, dict) and not {"cpu_count", "load_average_at_start"} <= set(machine):
        problems.append("machine lacks cpu_count/load_average_at_start")
    bad = [i for i, sample in enumerate(data.get("samples") or []) if not isinstance(sample, dict)]
    if bad:
        problems.append(f"samples[{bad[0]}] is not an object")
    return problems


def save_plot(fig: Any, path: Path) -> None:
    """Lay out, write (``path``, 110 dpi) and close a suite's matplotlib figure."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown_table(headers: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        if v is None:
            return "—"
        if isinstance(v, float):
            return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"
        if isinstance(v, int) and not isinstance(v, bool):
            return f"{v:,}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def markdown_doc(result: dict[str, Any], title: str, body: str) -> str:
    m = result["machine"]
    v = result["versions"]
    lines = [
        f"# {title}",
        "",
        body.strip(),
        "",
        f"Command: `{result['command']}` ({'quick' if result['quick'] else 'full'} run, "
        f"finished {result['finished']}, commit {v.get('git_commit') or '?'})",
        "",
        f"Machine: {m.get('cpu')} × {m.get('cpu_count')} cores, {m.get('memory_gib')} GiB; load average "
        f"{m.get('load_average_at_start')} at start, {m.get('load_average_at_end')} at end (1/5/15 min) — "
        "the cores are shared with other work, so absolute times carry that noise.",
        f"Versions{' of ' + result['config']['versions_of'] if result['config'].get('versions_of') else ''}: "
        f"kokoro-onnx {v.get('kokoro-onnx')}, onnxruntime {v.get('onnxruntime')}, torch {v.get('torch')}.",
    ]
    lines += bullets("Targets", [f"{t['name']}: goal {t['goal']}; measured {t['value']} — **{verdict(t)}**"
                                 for t in result["targets"]])
    return "\n".join(lines + bullets("Notes", result["notes"])) + "\n"


def bullets(heading: str, items: list[str]) -> list[str]:
    """A Markdown list of ``items`` under ``heading:``, after a blank line; nothing without items."""
    return ["", f"{heading}:", "", *(f"- {item}" for item in items)] if items else []


def write(result: Result, *, title: str, body: Callable[[dict[str, Any]], str],
          plot: Callable[[dict[str, Any], Path], None] | None = None, out_dir: Path = RESULTS_DIR, log=print,
          stem: str | None = None) -> dict[str, Any]:
    """Write ``<name>.json``, ``<name>.md`` and (with ``plot``) ``<name>.png`` (``stem`` instead of the
    benchmark's name where given); returns the dict."""
    data = result.to_dict()
    problems = validate(data)
    if problems:
        raise ValueError(f"result does not follow the schema: {problems}")
    if plot is not None and importlib.util.find_spec("matplotlib") is None:
        data["notes"].append("matplotlib is not installed: no PNG")
        plot = None
    out_dir.mkdir(parents=True, exist_ok=True)
    name = stem or result.benchmark
    (out_dir / f"{name}.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    written = [f"{name}.json", *render(data, out_dir, name, title=title, body=body, plot=plot)]
    log(f"wrote {', '.join(str(out_dir / w) for w in written)}")
    return data


def render(data: dict[str, Any], out_dir: Path, name: str, *, title: str, body: Callable[[dict[str, Any]], str],
           plot: Callable[[dict[str, Any], Path], None] | None = None) -> list[str]:
    """Write ``<name>.md`` and (with ``plot``) ``<name>.png`` from a result dict; the files written."""
    (out_dir / f"{name}.md").write_text(markdown_doc(data, title, body(data)))
    written = [f"{name}.md"]
    if plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        png = out_dir / f"{name}.png"
        png.unlink(missing_ok=True)
        plot(data, png)
        if png.exists():
            written.append(png.name)
    return written

"""``compare``'s figures: per-target summaries of the samples, the Markdown with the targets side by
side (each figure's ratio to the first target) and the PNG, one colour per target.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..results import bullets, markdown_table, mean, median, percentile, rnd, save_plot
from .rows import ROWS
from .targets import BAD_CASES

REQUEST_ROWS = {"one_sentence": "1. one sentence", "paragraph": "2. paragraph whole",
                "sentences": "3. paragraph by sentence"}
#: A row's audio below this share of the median of the other targets' for the same texts fails it.
SHORT_AUDIO_RATIO = 0.5


def _stats(values: list[float]) -> dict[str, float | None]:
    return {"median": rnd(median(values)), "mean": rnd(mean(values))}


def _row(xs: list[dict[str, Any]], summarise: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> dict[str, Any]:
    """``summarise(xs)``, or ``{"unsupported": why}`` / ``{"error": why}`` (the first sample's) when no
    sample of the row has figures."""
    if not xs:
        return {"error": "not run"}
    if any(_why(s) is None for s in xs):
        return summarise(xs)
    key = "unsupported" if "unsupported" in xs[0] else "error"
    return {key: xs[0][key]}


def _request_row(xs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [s for s in xs if "first_audio_ms" in s]
    return {"first_audio_ms": _stats([s["first_audio_ms"] for s in ok]), "total_ms": _stats([s["total_ms"] for s in ok]),
            "audio_s": rnd(median(s["audio_s"] for s in ok), 3), "pipelined": ok[0]["pipelined"],
            "runs": len(ok), "failed_runs": len(xs) - len(ok)}


def _sweep_level(xs: list[dict[str, Any]]) -> dict[str, Any]:
    """One concurrency level over every round: first audio pooled, audio-seconds per second the
    median of the rounds', errors summed, memory the largest seen."""
    ok = [s for s in xs if _why(s) is None]
    fa = [v for s in ok for v in s["first_audio_ms"]]
    rss = [s["rss_mib"] for s in ok if s.get("rss_mib")]
    loads = [s["load1"] for s in ok if s.get("load1") is not None]
    return {"first_audio_ms_p50": rnd(percentile(fa, 50)), "first_audio_ms_p95": rnd(percentile(fa, 95)),
            "first_audio_ms_max": rnd(percentile(fa, 100)), "first_audio_ms_mean": rnd(mean(fa)),
            "audio_s_per_s": rnd(median(s["audio_s"] / s["wall_s"] for s in ok if s["wall_s"]), 2),
            "requests": sum(s["requests"] for s in ok), "errors": sum(s["errors"] for s in ok) + len(xs) - len(ok),
            "rounds": len(ok), "rss_mib": max(rss) if rss else None,
            "load1": [min(loads), max(loads)] if loads else None}


def _health(xs: list[dict[str, Any]]) -> dict[str, Any]:
    polls = [p for s in xs for p in s.get("polls", [])]
    ms = [p["ms"] for p in polls if "ms" in p]  # a timed-out poll has its timeout here
    return {"route": next((p["route"] for p in polls if "route" in p), None), "polls": len(polls),
            "median_ms": rnd(median(ms)), "mean_ms": rnd(mean(ms)), "p95_ms": rnd(percentile(ms, 95)),
            "max_ms": rnd(percentile(ms, 100)),
            "timeouts": sum(1 for p in polls if p.get("timed_out")),
            "not_200": sum(1 for p in polls if p.get("status") != 200)}


def _fail_short_audio(out: dict[str, dict[str, Any]]) -> None:
    """Fail each request row whose audio is far shorter than the other targets' median for it."""
    for row in REQUEST_ROWS:
        audio = {n: s[row]["audio_s"] for n, s in out.items() if "first_audio_ms" in s[row]}
        for name, secs in audio.items():
            typical = median(v for n, v in audio.items() if n != name)
            if typical is not None and secs < SHORT_AUDIO_RATIO * typical:
                out[name][row] = {"error": f"audio far shorter than the other targets' ({secs:.2f} s against a "
                                           f"median of {typical:.2f} s)", "audio_s": secs}


def summarize(samples: list[dict[str, Any]], names: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        mine = [s for s in samples if s["target"] == name]
        by_row = {row: [s for s in mine if s["row"] == row] for row in ROWS}
        summary: dict[str, Any] = {row: _row(by_row[row], _request_row) for row in REQUEST_ROWS}
        levels = list(dict.fromkeys(s["concurrency"] for s in by_row["sweep"]))
        summary["sweep"] = {str(lv): _row([s for s in by_row["sweep"] if s["concurrency"] == lv], _sweep_level)
                            for lv in levels}
        summary["health"] = _row(by_row["health"], _health)
        summary["bad_input"] = {s["case"]: {k: s[k] for k in ("answer", "next_ok", "next_error", "unsupported", "error",
                                                            "next_on_new_session", "same_session_error") if k in s}
                                for s in by_row["bad_input"]}
        rss = [lv.get("rss_mib") for lv in summary["sweep"].values() if lv.get("rss_mib")]
        summary["rss_mib_max"] = max(rss) if rss else None
        out[name] = summary
    _fail_short_audio(out)
    return out


def figures(summary: dict[str, Any]) -> dict[str, Any]:
    """One target's numbers as ``label -> value`` (a string where a row was not measured)."""
    flat: dict[str, Any] = {}
    for row, label in REQUEST_ROWS.items():
        r = summary[row]
        for key, what in (("first_audio_ms", "first audio ms"), ("total_ms", "total ms")):
            for stat in ("median", "mean"):
                flat[f"{label}: {what} ({stat})"] = _why(r) or r[key][stat]
        flat[f"{label}: audio s"] = r.get("audio_s", _why(r))
    for level, lv in summary["sweep"].items():
        for key, what in (("first_audio_ms_p50", "first audio p50 ms"), ("first_audio_ms_p95", "p95 ms"),
                          ("first_audio_ms_max", "max ms"), ("first_audio_ms_mean", "mean ms"),
                          ("audio_s_per_s", "audio-s per s"), ("errors", "errors")):
            flat[f"4. {level} clients: {what}"] = _why(lv) or lv[key]
    h = summary["health"]
    flat["5. health route"] = _why(h) or h["route"]
    for key, what in (("polls", "polls (n)"), ("median_ms", "median ms"), ("mean_ms", "mean ms"), ("p95_ms", "p95 ms"),
                      ("max_ms", "max ms"), ("timeouts", "timed out (counted at the timeout)"),
                      ("not_200", "answers other than 200")):
        flat[f"5. health during the sweep: {what}"] = _why(h) or h[key]
    flat["server memory MiB (peak where local, VmHWM)"] = summary["rss_mib_max"]
    return flat


def _why(r: dict[str, Any]) -> str | None:
    """What the table shows for a row (or a sample) without figures: ``unsupported`` or ``failed``."""
    return "unsupported" if "unsupported" in r else "failed" if "error" in r else None


def ratio(value: Any, base: Any) -> float | None:
    """``value / base`` for two numbers (``None`` otherwise, or when ``base`` is 0)."""
    number = (int, float)
    if isinstance(value, number) and isinstance(base, number) and not isinstance(value, bool) and base:
        return round(value / base, 2)
    return None


def side_by_side(summaries: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``label -> {target: {"value", "ratio"}}``, ratios against the first target."""
    names = list(summaries)
    flats = {n: figures(summaries[n]) for n in names}
    labels = list(dict.fromkeys(label for n in names for label in flats[n]))
    return {label: {n: {"value": flats[n].get(label), "ratio": ratio(flats[n].get(label), flats[names[0]].get(label))}
                    for n in names} for label in labels}


def body(data: dict[str, Any]) -> str:
    names = [t["name"] for t in data["config"]["targets"]]
    table = data["medians"]["side_by_side"]

    def cell(entry: dict[str, Any], first: bool) -> Any:
        v = entry["value"]
        if v is None or isinstance(v, str) or first or entry["ratio"] is None:
            return v
        return f"{v:,.1f} ({entry['ratio']}x)" if isinstance(v, float) else f"{v} ({entry['ratio']}x)"

    rows = [[label] + [cell(cells[n], i == 0) for i, n in enumerate(names)] for label, cells in table.items()]
    targets = "\n".join(f"- **{t['name']}**: `{t['url']}` ({t['kind']}, voice {t['voice'] or 'default'})"
                        for t in data["config"]["targets"])
    bad_rows = [[case] + [_bad_cell(data["summary"][n]["bad_input"].get(case, {})) for n in names] for case in BAD_CASES]
    reasons = sorted({f"{n}: {row} — {r['unsupported']}" for n in names for row, r in data["summary"][n].items()
                      if isinstance(r, dict) and "unsupported" in r})
    unreachable = [f"{n}: {why}" for n, why in data["summary"].get("_unreachable", {}).items()]
    parts = [
        f"The same work on every target, in interleaved rounds ({data['config']['runs']} rounds of rows 1-3; "
        f"sweep levels {list(data['config']['levels'])}, {data['config']['per_client']} requests per client). "
        f"Times in ms from the request leaving this client; in brackets each figure's ratio to **{names[0]}** "
        f"(this target / {names[0]}: below 1x is less — for times, faster; for audio-s per s, less throughput). "
        "A row whose audio is far shorter than the others' is failed, not fast.",
        "", targets, "", markdown_table(["figure", *names], rows), "",
        "6. Bad input — what each target answers, and whether its next normal request still works:", "",
        markdown_table(["input", *names], bad_rows),
    ]
    return "\n".join(parts + bullets("Unsupported", reasons) + bullets("Unreachable", unreachable))


def _bad_cell(r: dict[str, Any]) -> str:
    if "unsupported" in r:
        return f"unsupported: {r['unsupported']}"
    if "error" in r:
        return f"failed: {r['error'][:120]}"
    if not r:
        return "—"
    where = "on a new session" if r.get("next_on_new_session") else "on the same session"
    nxt = f"next request OK {where}" if r["next_ok"] else \
        f"next request FAILED {where} — the target's failure ({r.get('next_error')})"
    if r.get("same_session_error"):
        nxt = f"the target broke the session ({r['same_session_error'][:80]}); {nxt}"
    return f"{r['answer'][:120]}; {nxt}".replace("|", "/").replace("\n", " ")


def target_colours(n: int) -> list[Any]:
    """``n`` distinct colours (tab10, then tab20, then evenly spaced hues): no two targets share one."""
    from matplotlib import colormaps

    if n > 20:
        return [colormaps["hsv"](i / n) for i in range(n)]
    return [colormaps["tab10" if n <= 10 else "tab20"](i) for i in range(n)]


def plot(data: dict[str, Any], path: Any) -> None:
    import matplotlib.pyplot as plt

    names = [t["name"] for t in data["config"]["targets"]]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    width = 0.8 / max(len(names), 1)
    colours = target_colours(len(names))
    for i, n in enumerate(names):
        vals = [(data["summary"][n][row].get("first_audio_ms") or {}).get("median") or 0 for row in REQUEST_ROWS]
        ax1.bar(np.arange(len(REQUEST_ROWS)) + i * width, vals, width, label=n, color=colours[i])
        sweep = data["summary"][n]["sweep"]
        levels = [int(k) for k, v in sweep.items() if v.get("first_audio_ms_p50") is not None]
        for stat, marker, style in (("p50", "o", "-"), ("p95", "x", "--")):
            ax2.plot(levels, [sweep[str(k)][f"first_audio_ms_{stat}"] for k in levels], marker=marker,
                     linestyle=style, label=f"{n} {stat}", color=colours[i])
    ax1.set_xticks(np.arange(len(REQUEST_ROWS)) + width * (len(names) - 1) / 2, list(REQUEST_ROWS.values()), fontsize=8)
    ax1.set_ylabel("first audio, ms (median)")
    ax1.legend(fontsize=8)
    ax2.set_xlabel("concurrent clients")
    ax2.set_ylabel("first audio, ms")
    ax2.set_xscale("log", base=2)
    ax2.legend(fontsize=7)
    fig.suptitle(data["command"], fontsize=8)
    save_plot(fig, path)

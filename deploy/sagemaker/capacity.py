"""The autoscaling target from a measured capacity: ``python -m benchmarks capacity`` writes
``benchmarks/results/capacity.json``, whose ``summary.recommendation`` holds the concurrent sessions
per instance the GPU plan kept within the first-audio target, times a headroom. ``deploy up``,
``deploy`` and ``scale`` take it with ``--capacity-from FILE`` (stdlib only: nothing heavy here)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from deploy.sagemaker.endpoint import DeployError

#: What ``--target-sessions`` defaults to without a measured capacity: a guess, said to be one.
GUESSED_TARGET_SESSIONS = 8.0


@dataclass(frozen=True)
class MeasuredTarget:
    target_sessions: float
    source: str  # what the figure was measured on, for the log

    def describe(self) -> str:
        return f"{self.target_sessions:g} concurrent sessions per instance, measured: {self.source}"


def target_from(path: str | Path, instance_type: str | None = None) -> MeasuredTarget:
    """The recommended target in a capacity result. Raises :class:`DeployError` when the file is
    not one, holds no recommendation (no level kept the target), or was measured for another
    instance type than ``instance_type``."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise DeployError(f"--capacity-from {path}: cannot read a capacity result ({exc})") from exc
    if not isinstance(data, dict) or data.get("benchmark") != "capacity":
        raise DeployError(f"--capacity-from {path}: not a result of `python -m benchmarks capacity`")
    rec = (data.get("summary") or {}).get("recommendation")
    if not isinstance(rec, dict) or not isinstance(rec.get("target_sessions"), int | float) or rec["target_sessions"] < 1:
        raise DeployError(f"--capacity-from {path}: no recommended target in it (no GPU plan kept p95 first audio "
                          "within the target); rerun the benchmark or pass --target-sessions")
    measured_for = rec.get("instance_type")
    if instance_type and measured_for and measured_for != instance_type:
        raise DeployError(f"--capacity-from {path}: measured for {measured_for}, not {instance_type}; rerun "
                          "`python -m benchmarks capacity` there (docs/deploy.md) or pass --target-sessions")
    quick = " (a --quick run)" if data.get("quick") else ""
    source = (f"{rec.get('from')} on {rec.get('measured_on')}{quick}: {rec.get('sessions_within_target')} sessions "
              f"held p95 first audio <= {data['summary'].get('target_ms')} ms, x {rec.get('headroom')} headroom "
              f"({path})")
    return MeasuredTarget(float(rec["target_sessions"]), source)


if __name__ == "__main__":  # the target alone, for the CDK app's context: -c target_sessions=$(...)
    import sys

    try:
        print(f"{target_from(sys.argv[1]).target_sessions:g}")
    except (DeployError, IndexError) as exc:
        raise SystemExit(f"usage: python -m deploy.sagemaker.capacity CAPACITY_JSON ({exc})") from exc

"""Static checks of the deploy Dockerfiles (there is no Docker engine where the checks run).

A small Dockerfile parser (continuation lines, comments, ``ARG`` defaults, exec/shell forms) and
the rules every image here must keep:

* torch, where installed, is pinned (``torch==X``) to >= 2.10 and never the vulnerable 2.6.0
  (PYSEC-2026-2286); images that must not carry torch install none;
* nothing reaches a model hub when the container runs (``HF_HUB_OFFLINE=1`` and
  ``TRANSFORMERS_OFFLINE=1`` set; no hub download anywhere; no download in the start command);
* the SageMaker images carry ``com.amazonaws.sagemaker.capabilities.bidirectional-streaming=true``,
  expose 8080 and start with ``serve`` (``docker run IMAGE serve``);
* every ``COPY`` source exists in the repository; base images are pinned to a tag;
* the images that serve the model build its assets at build time through ``deploy/image_assets.sh``
  with ``ARG MODEL_SOURCE=official`` by default (``offline`` keeps the registry set only).

``python -m deploy.dockerfiles`` checks all of them and exits non-zero on a problem.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIDI_LABEL = "com.amazonaws.sagemaker.capabilities.bidirectional-streaming"
MIN_TORCH = (2, 10)
BANNED_TORCH = {"2.6.0"}
HUB_PATTERNS = re.compile(r"huggingface\.co|hf\.co/|hf_hub_download|snapshot_download|from_pretrained|"
                          r"huggingface-cli\s+download|hf\s+download", re.I)


@dataclass
class Instruction:
    keyword: str
    value: str
    line: int

    def words(self) -> list[str]:
        """Exec form (JSON array) or shell words."""
        if self.value.startswith("["):
            try:
                return list(json.loads(self.value))
            except ValueError:
                pass
        return shlex.split(self.value, posix=True)


@dataclass
class Dockerfile:
    path: Path
    instructions: list[Instruction] = field(default_factory=list)

    @classmethod
    def parse(cls, path: Path) -> Dockerfile:
        df, buf, start = cls(Path(path)), "", 0
        for n, raw in enumerate(Path(path).read_text().splitlines(), 1):
            line = raw.strip()
            if not buf and (not line or line.startswith("#")):
                continue
            if buf and line.startswith("#"):
                continue  # comment lines inside a continuation are dropped by Docker too
            start = start or n
            if line.endswith("\\"):
                buf += line[:-1] + " "
                continue
            buf += line
            keyword, _, value = buf.partition(" ")
            df.instructions.append(Instruction(keyword.upper(), value.strip(), start))
            buf, start = "", 0
        return df

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def _pairs(self, keyword: str) -> dict[str, str]:
        """KEY=VALUE pairs of ENV/LABEL/ARG (ARG without a default maps to '')."""
        out: dict[str, str] = {}
        for ins in self.all(keyword):
            words = ins.words()
            if keyword == "ENV" and len(words) == 2 and "=" not in words[0]:
                out[words[0]] = words[1]  # legacy `ENV KEY value`
                continue
            for word in words:
                key, _, value = word.partition("=")
                out[key] = value
        return out

    @property
    def args(self) -> dict[str, str]:
        return self._pairs("ARG")

    @property
    def env(self) -> dict[str, str]:
        return self._pairs("ENV")

    @property
    def labels(self) -> dict[str, str]:
        return self._pairs("LABEL")

    def expand(self, text: str) -> str:
        """Substitute ``${ARG}``/``$ARG`` with the ARG defaults (``${X:+...}`` drops when X is empty)."""
        args = self.args

        def alt(m: re.Match) -> str:
            return m.group(2) if args.get(m.group(1)) else ""

        text = re.sub(r"\$\{(\w+):\+([^}]*)\}", alt, text)
        return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), text)

    def pip_installs(self) -> list[str]:
        """The expanded text of every `pip install` command in RUN lines."""
        out = []
        for ins in self.all("RUN"):
            for part in re.split(r"&&|;|\|\|", self.expand(ins.value)):
                if re.search(r"\bpip3?\s+install\b", part):
                    out.append(part.strip())
        return out

    def torch_pins(self) -> list[str]:
        """Versions given as ``torch==X`` in pip installs; ``*`` for an unpinned torch requirement."""
        pins = []
        for cmd in self.pip_installs():
            for word in shlex.split(cmd):
                m = re.fullmatch(r"torch(?:\[[^\]]*\])?\s*(==|>=|~=|<=|>|<)?\s*([\w.+]*)", word)
                if m:
                    pins.append(m.group(2) if m.group(1) == "==" else "*")
        return pins


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0])[:3])


def _torch_problems(df: Dockerfile, name: str, torch: bool) -> list[str]:
    problems = []
    pins = df.torch_pins()
    if torch:
        if not pins:
            problems.append(f"{name}: torch is not installed with an exact pin (torch==X)")
        for pin in pins:
            if pin == "*":
                problems.append(f"{name}: an unpinned torch requirement")
            elif pin in BANNED_TORCH or _version_tuple(pin) < MIN_TORCH:
                problems.append(f"{name}: torch {pin} is vulnerable (PYSEC-2026-2286); need >= 2.10")
    elif pins or any(re.search(r"\btorch\b", c) for c in df.pip_installs()):
        problems.append(f"{name}: installs torch, which this image must not carry")
    return problems


def _download_problems(df: Dockerfile, name: str) -> list[str]:
    problems = []
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if df.env.get(var) != "1":
            problems.append(f"{name}: {var}=1 is not set (a model-hub download could happen at run time)")
    for ins in df.instructions:
        if HUB_PATTERNS.search(ins.value):
            problems.append(f"{name}:{ins.line}: model-hub download: {ins.value[:80]}")
    for ins in df.all("CMD") + df.all("ENTRYPOINT"):
        if re.search(r"\b(curl|wget|pip|kokoro-serve\s+assets)\b", ins.value):
            problems.append(f"{name}:{ins.line}: the start command downloads or installs: {ins.value}")
    return problems


def _source_problems(df: Dockerfile, name: str, platform: str | None) -> list[str]:
    problems = []
    for ins in df.all("FROM"):
        image = df.expand(ins.words()[-1] if "--platform" not in ins.value else ins.value.split()[-1])
        if ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest"):
            problems.append(f"{name}:{ins.line}: base image {image} is not pinned to a tag")
        if platform and f"--platform={platform}" not in ins.value:
            problems.append(f"{name}:{ins.line}: base image is not built for {platform}")
    for ins in df.all("COPY") + df.all("ADD"):
        words = [w for w in ins.words() if not w.startswith("--")]
        if "--from" in ins.value:
            continue
        for src in words[:-1]:
            if not (REPO / src).exists():
                problems.append(f"{name}:{ins.line}: COPY source {src} does not exist in the repository")
    return problems


def _sagemaker_problems(df: Dockerfile, name: str) -> list[str]:
    problems = []
    if df.labels.get(BIDI_LABEL) != "true":
        problems.append(f"{name}: missing LABEL {BIDI_LABEL}=true (SageMaker will refuse bidirectional streams)")
    if not any("8080" in ins.value.split() for ins in df.all("EXPOSE")):
        problems.append(f"{name}: does not EXPOSE 8080")
    cmd = df.all("CMD")[-1].words() if df.all("CMD") else []
    if df.all("ENTRYPOINT") or cmd != ["serve"]:
        problems.append(f"{name}: `docker run IMAGE serve` must run the serve entry (CMD [\"serve\"], no ENTRYPOINT)")
    if not any(ins.words()[-1].startswith("/opt/program") and "serve" in ins.value for ins in df.all("COPY")):
        problems.append(f"{name}: the serve entry is not copied onto PATH (/opt/program/serve)")
    if "/opt/program" not in df.env.get("PATH", ""):
        problems.append(f"{name}: /opt/program is not on PATH")
    return problems


ASSETS_SCRIPT = "deploy/image_assets.sh"


def _model_problems(df: Dockerfile, name: str, torch: bool) -> list[str]:
    problems = []
    if df.args.get("MODEL_SOURCE") != "official":
        problems.append(f"{name}: ARG MODEL_SOURCE must default to official (the upstream model and its voices)")
    runs = [ins for ins in df.all("RUN") if ASSETS_SCRIPT in ins.value]
    if not runs:
        problems.append(f"{name}: the model assets are not built at build time ({ASSETS_SCRIPT})")
    for ins in runs:
        if '"$MODEL_SOURCE"' not in ins.value:
            problems.append(f"{name}:{ins.line}: {ASSETS_SCRIPT} is not given \"$MODEL_SOURCE\"")
        if torch and "--torch" not in ins.value:
            problems.append(f"{name}:{ins.line}: a torch image must build the PyTorch checkpoint (--torch)")
    return problems


def check(path: Path, *, torch: bool, sagemaker: bool, platform: str | None = None, model: bool = False) -> list[str]:
    """Problems with the Dockerfile at ``path`` (empty list: none)."""
    df = Dockerfile.parse(path)
    name = Path(path).name
    problems = _torch_problems(df, name, torch) + _download_problems(df, name) + _source_problems(df, name, platform)
    if sagemaker:
        problems += _sagemaker_problems(df, name)
    if model:
        problems += _model_problems(df, name, torch)
    return problems


IMAGES = {
    "deploy/sagemaker/Dockerfile": {"torch": True, "sagemaker": True, "model": True},
    "deploy/sagemaker/Dockerfile.cpu": {"torch": False, "sagemaker": True, "model": True},
    "deploy/sagemaker/Dockerfile.agent": {"torch": False, "sagemaker": False, "platform": "linux/arm64"},
    "deploy/runpod/Dockerfile": {"torch": True, "sagemaker": False, "model": True},
}


def main() -> int:
    problems = []
    for rel, rules in IMAGES.items():
        problems += check(REPO / rel, **rules)
    for p in problems:
        print(p, file=sys.stderr)
    print(f"dockerfiles: {len(IMAGES)} checked, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())

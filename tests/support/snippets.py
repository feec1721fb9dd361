"""The shell and Python snippets of the documentation, as the docs snippet test runs them.

:func:`extract` reads one Markdown text and returns every fenced block whose language is a shell
(``bash``, ``sh``, ``shell``) or Python (``python``, ``py``) as a :class:`Snippet`: where it starts
(the fence's line, 1-based), its language, its code, and — when the last non-blank line before the
fence is ``<!-- not run: REASON -->`` — the reason it is only parsed. ```` ```text ```` and
```` ```console ```` blocks, and any other language, are not snippets.

:func:`documentation` lists the files the test reads: README.md and every ``docs/*.md``, so a page
added under docs/ is picked up without naming it. :func:`for_server` rewrites the default address
(``127.0.0.1:8080`` / ``localhost:8080``) to a live server's. :func:`parse` checks that a snippet
parses (``bash -n``, :func:`ast.parse`) and says why not.
"""

from __future__ import annotations

import ast
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

SHELL = ("bash", "sh", "shell")
PYTHON = ("python", "py")
#: ```` ```lang ```` (or ``~~~``), indented at most three spaces, with an optional info string after.
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(?P<reason>.*?)\s*-->\s*$")
_DEFAULT_ADDRESS = re.compile(r"\b(?:127\.0\.0\.1|localhost):8080\b")


@dataclass(frozen=True)
class Snippet:
    path: str  #: relative to the repository, e.g. ``docs/openai-api.md``
    line: int  #: the opening fence's line, 1-based
    lang: str  #: ``bash`` or ``python``
    code: str
    not_run: str | None = None  #: the reason given in ``<!-- not run: REASON -->``, if any

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def extract(text: str, path: str) -> list[Snippet]:
    """Every shell or Python fenced block of ``text`` (a Markdown file at ``path``), in order.

    Raises ValueError for a fence that is never closed, or a ``not run`` marker without a reason."""
    lines = text.splitlines()
    out: list[Snippet] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        info = opening["info"].strip()
        lang = info.split(maxsplit=1)[0].lower() if info else ""
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not _closes(lines[j], fence):
            line = lines[j]
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))):])  # the fence's indent, no more
            j += 1
        if j == len(lines):
            raise ValueError(f"{path}:{i + 1}: the fenced block is never closed")
        kind = "bash" if lang in SHELL else "python" if lang in PYTHON else None
        if kind is not None:
            out.append(Snippet(path, i + 1, kind, "\n".join(body) + "\n", _marker(lines, i, path)))
        i = j + 1
    return out


def _closes(line: str, fence: str) -> bool:
    """CommonMark's closing fence: the same character, at least as many, indented at most three."""
    stripped = line.strip()
    return (len(line) - len(line.lstrip(" ")) <= 3 and len(stripped) >= len(fence)
            and set(stripped) == {fence[0]})


def _marker(lines: list[str], fence_index: int, path: str) -> str | None:
    k = fence_index - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    if k < 0:
        return None
    found = _NOT_RUN.match(lines[k])
    if found is None:
        if "not run" in lines[k] and "<!--" in lines[k]:
            raise ValueError(f"{path}:{k + 1}: write the marker as <!-- not run: REASON -->")
        return None
    if not found["reason"]:
        raise ValueError(f"{path}:{k + 1}: a `not run` marker must say why the block cannot run here")
    return found["reason"]


def documentation(repo: Path) -> list[Path]:
    """README.md and every docs/*.md, in a stable order."""
    return [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]


def collect(repo: Path) -> list[Snippet]:
    """Every snippet of :func:`documentation`."""
    return [s for f in documentation(repo) for s in extract(f.read_text(), f.relative_to(repo).as_posix())]


def for_server(code: str, address: str) -> str:
    """``code`` with the default address (``127.0.0.1:8080``, ``localhost:8080``) replaced by ``address``."""
    return _DEFAULT_ADDRESS.sub(address, code)


def parse(snippet: Snippet) -> str | None:
    """None when ``snippet`` parses; otherwise the parser's complaint."""
    if snippet.lang == "python":
        try:
            ast.parse(snippet.code, filename=snippet.id)
        except SyntaxError as e:
            return f"line {e.lineno}: {e.msg}"
        return None
    done = subprocess.run(["bash", "-n"], input=snippet.code, capture_output=True, text=True, timeout=30)
    return None if done.returncode == 0 else done.stderr.strip() or f"bash -n exited {done.returncode}"

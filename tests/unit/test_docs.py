"""The documentation's shape: how snippets are found (the docs snippet test runs them), the README as
a front door, and links between the pages that lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.snippets import collect, documentation, extract, for_server, parse

REPO = Path(__file__).resolve().parents[2]

PAGE = """# A page

```bash
curl -s localhost:8080/ping
```

<!-- not run: needs AWS credentials -->

```python
import boto3
```

```text
$ not a snippet
```

````markdown
```bash
echo nested, inside another block: not a snippet
```
````

  ```sh
  echo indented fence
    echo more
  ```

```console
$ kokoro-serve voices
```

~~~py
print("tilde fence")
~~~
"""


def test_extract_finds_shell_and_python_blocks_with_their_lines_and_markers():
    found = extract(PAGE, "docs/page.md")
    assert [(s.id, s.lang, s.not_run) for s in found] == [
        ("docs/page.md:3", "bash", None),
        ("docs/page.md:9", "python", "needs AWS credentials"),
        ("docs/page.md:23", "bash", None),
        ("docs/page.md:32", "python", None),
    ]
    assert found[0].code == "curl -s localhost:8080/ping\n"
    assert found[2].code == "echo indented fence\n  echo more\n"


def test_a_marker_applies_only_to_the_next_block():
    text = "<!-- not run: a GPU -->\n```bash\ntrue\n```\nprose\n```bash\ntrue\n```\n"
    assert [s.not_run for s in extract(text, "x.md")] == ["a GPU", None]


@pytest.mark.parametrize(("text", "complaint"), [
    ("```bash\necho never closed\n", "never closed"),
    ("<!-- not run: -->\n```bash\ntrue\n```\n", "must say why"),
    ("<!-- not run because AWS -->\n```bash\ntrue\n```\n", "<!-- not run: REASON -->"),
])
def test_extract_refuses_what_the_test_could_not_honour(text, complaint):
    with pytest.raises(ValueError, match=re.escape(complaint)):
        extract(text, "x.md")


def test_for_server_rewrites_the_default_address_only():
    code = "curl localhost:8080/ping http://127.0.0.1:8080/v1 ws://localhost:8080 localhost:80801 10.0.0.1:8080"
    assert for_server(code, "127.0.0.1:5555") == (
        "curl 127.0.0.1:5555/ping http://127.0.0.1:5555/v1 ws://127.0.0.1:5555 localhost:80801 10.0.0.1:8080"
    )


@pytest.mark.subprocess
def test_parse_reports_syntax_errors():
    shell, python = extract("```bash\nif true; then\n```\n```python\ndef f(:\n```\n", "x.md")
    assert "syntax error" in parse(shell) or "unexpected end" in parse(shell)
    assert parse(python).startswith("line 1")


def test_every_docs_page_is_collected():
    files = [p.relative_to(REPO).as_posix() for p in documentation(REPO)]
    assert files[0] == "README.md"
    assert set(files[1:]) == {p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md")}
    assert collect(REPO)  # and parses without complaint


def test_the_readme_is_a_front_door():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    for command in ("make serve", "make test"):
        assert command in text


_LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)  # code is not a link: `[word](/phonemes/)` is the inline syntax


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out, fenced = set(), False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif line.startswith("#") and not fenced:
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title)))
    return out


@pytest.mark.parametrize("page", documentation(REPO), ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_lead_to_a_file_and_heading(page: Path):
    text = _CODE.sub("", page.read_text())
    broken = []
    for link in _LINK.finditer(text):
        target = link["target"]
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text()):
            broken.append(target)
    assert not broken, f"{page.name}: {broken}"


def _sources() -> list[Path]:
    """The project's own text files: code, scripts, Dockerfiles, docs."""
    roots = [REPO / d for d in ("backends", "server", "agent", "deploy", "benchmarks", "tests", "docs")]
    own = {Path(__file__), REPO / "tests" / "e2e" / "test_docs_snippets.py"}  # their examples name made-up pages
    files = [REPO / "README.md", REPO / "Makefile", REPO / "pyproject.toml"]
    for root in roots:
        files += [p for p in root.rglob("*") if p.is_file() and "node_modules" not in p.parts
                  and "__pycache__" not in p.parts
                  and (p.suffix in {".py", ".sh", ".md", ".toml"} or p.name.startswith("Dockerfile"))]
    return [p for p in files if p not in own]


def test_references_to_docs_pages_lead_to_a_page():
    """Code and docs point readers at docs/NAME.md pages (never at a design file the repository
    does not hold): each page named exists."""
    named = re.compile(r"\bdocs/([\w.-]+\.md)\b")
    missing, design = [], []
    for path in _sources():
        text = path.read_text(errors="replace")
        rel = path.relative_to(REPO).as_posix()
        missing += [f"{rel}: docs/{m}" for m in named.findall(text) if not (REPO / "docs" / m).exists()]
        if "DESIGN" + ".md" in text:
            design.append(rel)
    assert not missing
    assert not design, f"DESIGN.md is not in the repository; point to a docs/ page instead: {design}"


def test_the_readme_figures_name_the_run_they_come_from():
    """Each measured figure in the README names its result file, and the row's date, commit and
    command are that file's (a rerun that changes the file makes this row say so)."""
    import json

    rows = [line for line in (REPO / "README.md").read_text().splitlines()
            if line.startswith("|") and "benchmarks/results/" in line]
    assert len(rows) >= 3
    for row in rows:
        name = re.search(r"benchmarks/results/([\w-]+)\.md", row)[1]
        run = json.loads((REPO / "benchmarks" / "results" / f"{name}.json").read_text())
        assert run["started"][:10] in row, (name, run["started"])
        assert f"`{run['versions']['git_commit']}`" in row, (name, run["versions"]["git_commit"])
        assert f"`{run['command']}`" in row, (name, run["command"])

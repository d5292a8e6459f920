"""The README and docs/*.md: every relative link resolves (the file exists; an ``#anchor`` names a heading
of the target as GitHub renders it), and the README keeps the commands that .ci/run and the developers run.

Links inside fenced code blocks and inline code are not links; ``http(s):``/``mailto:`` links are not
checked (no network in the tests).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans."""
    return _INLINE_CODE.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation but ``-`` and ``_`` removed,
    each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    found: set[str] = set(_HTML_ANCHOR.findall(text))
    seen: dict[str, int] = {}
    for heading in _HEADING.findall(text):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[str]:
    text = prose(page.read_text(encoding="utf-8"))
    return _LINK.findall(text) + _REFERENCE.findall(text)


def broken(page: Path) -> list[str]:
    bad = []
    for target in links(page):
        if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            bad.append(f"{target}: no such file {resolved}")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            bad.append(f"{target}: no heading with the anchor #{anchor} in {resolved}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert not broken(page), f"{page.relative_to(ROOT)}: broken links:\n  " + "\n  ".join(broken(page))


def test_the_checker_finds_a_broken_file_and_a_broken_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Title\n\n## The `sim` backend: a GPU\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#the-sim-backend-a-gpu) [ok](other.md#twice-1) [ok](#here)\n\n## Here\n\n"
                    "[gone](missing.md) [bad](other.md#nowhere) `[code](nope.md)` [web](https://example.com/x)\n"
                    "```\n[fenced](nope.md)\n```\n")
    assert [b.split(":")[0] for b in broken(page)] == ["missing.md", "other.md#nowhere"]


def test_the_readme_names_the_two_commands_and_the_developer_loop():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "bash scripts/demo.sh" in readme and "bash scripts/test.sh" in readme
    assert "tox -e fast" in readme and "bash scripts/test.sh -e fast" in readme
    # .ci/run is the README's test command
    assert "exec bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for script in ("demo.sh", "test.sh"):
        assert (ROOT / "scripts" / script).is_file()
    assert "<!-- torch-range -->" in readme
    assert (ROOT / "docs" / "troubleshooting.md").name in readme


def test_the_readme_example_runs_translated_as_its_cpu_port_does(tmp_path):
    """The README's example, run as the README shows (``torchdevice run``, cpu backend), prints what the same
    program written for the CPU computes: the same loss, and ``torch.cuda.is_available()`` True."""
    import sys

    from helpers import run_command

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## An example"):]
    code = re.search(r"```python\n(.*?)\n```", section, re.DOTALL).group(1)
    assert 'device="cuda"' in code and ".cuda()" in code
    (tmp_path / "train.py").write_text(code + "\n")
    port = (code.replace('.cuda()', '.to("cpu")').replace('"cuda"', '"cpu"')
            .replace("torch.cuda.is_available(), torch.cuda.get_device_name()", "True, 'port'"))
    (tmp_path / "port.py").write_text(port + "\n")
    translated = run_command([sys.executable, "-m", "torchdevice", "run", "--backend", "cpu", tmp_path / "train.py"])
    native = run_command([sys.executable, tmp_path / "port.py"])
    assert translated.returncode == 0 and native.returncode == 0, (translated, native)
    ours, theirs = translated.stdout.split(), native.stdout.split()
    assert ours[0] == "True" and ours[-1] == "cpu"
    assert ours[-2] == theirs[-2]  # the loss
    shown = re.search(r"\$ torchdevice run train\.py.*\n(.*)\n", section).group(1).split()
    assert shown[0] == ours[0] and shown[-1] == ours[-1]  # the README's output line has the run's shape

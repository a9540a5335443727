"""Every relative link in README.md and docs/**/*.md points at a file that exists, and a `#anchor` on a markdown
file names one of its headings (GitHub's rule for heading ids). Links inside code blocks and code spans are text,
not links; absolute URLs are not checked (no network)."""

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose(text: str, spans: bool = True) -> str:
    """The text with fenced code blocks (and, with `spans`, inline code spans) blanked out, line numbers kept."""
    out, fenced = [], False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
        elif fenced:
            out.append("")
        else:
            out.append(re.sub(r"(`+)(?:(?!\1).)+?\1", "", line) if spans else line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's heading id: lower case, markup and punctuation dropped (hyphens and underscores kept), spaces to
    hyphens."""
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link in a heading keeps its text
    s = s.lower().replace("`", "")
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path.read_text(), spans=False).split("\n"):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    found = []
    for no, line in enumerate(prose(path.read_text()).split("\n"), 1):
        found += [(no, m.group(1)) for m in LINK.finditer(line)]
    return found


def broken(path: Path, root: Path = ROOT) -> list[str]:
    bad = []
    for no, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{no}: {target}"
        if not dest.exists():
            bad.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{where}: no heading #{anchor} in {dest.relative_to(root)}")
    return bad


def test_docs_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in DOCS}
    assert {"README.md", "docs/architecture.md", "docs/deviations.md", "docs/fidelity.md"} <= names
    assert any(n.startswith("docs/results/") for n in names)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path):
    assert not broken(path), "\n".join(broken(path))


def test_the_checker_sees_broken_links_and_skips_code(tmp_path):
    (tmp_path / "b.md").write_text("# A title, with `code`\n\n## A title, with code\n")
    doc = tmp_path / "a.md"
    doc.write_text("[ok](b.md) [ok](b.md#a-title-with-code) [ok](b.md#a-title-with-code-1) [web](https://x.y/z)\n"
                   "[gone](c.md) [no anchor](b.md#nope) ![img](d.png)\n"
                   "`[in a span](e.md)`\n```\n[in a block](f.md)\n```\n[self](#top)\n# Top\n")
    assert [b.split(": ", 2)[1] for b in broken(doc, tmp_path)] == ["c.md", "b.md#nope", "d.png"]
    assert slug("Where `make run`'s time goes, and two speed-ups measured") == \
        "where-make-runs-time-goes-and-two-speed-ups-measured"

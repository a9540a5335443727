"""The house rules the architecture relies on: small files, and environment knowledge only in envs/."""

import ast
import io
import re
import tokenize
from pathlib import Path

from tests.conftest import ROOT

PKG = ROOT / "dreamgym_pl"
ENV_WORDS = re.compile(r"webshop|search\[|click\[|buy now", re.IGNORECASE)


def code_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the lines that hold code: comments and docstrings are left out."""
    src = path.read_text()
    doc_lines: set[int] = set()
    for node in ast.walk(ast.parse(src)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            doc_lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    keep: dict[int, list[str]] = {}
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            continue
        for ln in range(tok.start[0], tok.end[0] + 1):
            if ln not in doc_lines:
                keep.setdefault(ln, []).append(tok.string)
    return [(ln, " ".join(parts)) for ln, parts in sorted(keep.items())]


def test_no_file_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def test_environment_knowledge_stays_in_envs():
    hits = [f"{p.relative_to(ROOT)}:{ln}: {text}" for p in PKG.rglob("*.py") if "envs" not in p.relative_to(PKG).parts
            for ln, text in code_lines(p) if ENV_WORDS.search(text)]
    assert not hits, "\n".join(hits)


def test_the_rule_sees_code_not_comments(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('"""Docs may say click[x]."""\nx = 1  # and comments: buy now\ny = "search[q]"\n')
    assert [ln for ln, text in code_lines(f) if ENV_WORDS.search(text)] == [3]

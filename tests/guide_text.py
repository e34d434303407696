"""The guide read as data: the pages (README.md and docs/*.md), their relative
links and headings, and the shell commands their code blocks show.

A code block is an indented block (four spaces, after a blank line) or a fenced
one (```sh, ```bash, ```shell or a bare ```). Its *commands* are the lines that
start with `devplan `, `curl `, `python scripts/` or a variable assignment the next commands use
(`KEY=...`, `DEVPLAN_...=... devplan ...`), with their `\\` continuation lines. A
block is a runnable example when every command line is one of those; a
synopsis (`devplan plan INPUT [options]`), an output listing or a setup script
is not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pages() -> list[Path]:
    """README.md, every page of docs/ and the READMEs of examples/ and docker/."""
    found = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found += [p for p in (ROOT / "examples" / "README.md", ROOT / "docker" / "README.md") if p.is_file()]
    return found


_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})")


def _prose_lines(text: str) -> list[str]:
    """The page's lines outside code blocks (fenced or indented), for links."""
    out: list[str] = []
    fence: str | None = None
    previous_blank = True
    in_indented = False
    for line in text.splitlines():
        m = _FENCE.match(line)
        if fence is not None:
            if m and m.group(2)[0] == fence[0] and len(m.group(2)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(2)
            continue
        if line.startswith("    ") and (previous_blank or in_indented) and not line.lstrip().startswith(("-", "*", "|")):
            in_indented = True
            previous_blank = False
            continue
        if line.strip():
            in_indented = False
        previous_blank = not line.strip()
        out.append(line)
    return out


def links(page: Path) -> list[str]:
    """Every link target of a page's prose (code blocks left out)."""
    targets: list[str] = []
    for line in _prose_lines(page.read_text()):
        for a, b in _LINK.findall(re.sub(r"`[^`]*`", "", line)):
            targets.append(a or b)
    return targets


def slug(heading: str) -> str:
    """A heading's anchor as GitHub writes it: lower case, punctuation dropped
    (hyphens and underscores kept), spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings."""
    found: set[str] = set()
    for line in _prose_lines(page.read_text()):
        m = re.match(r"^#{1,6} (.+)$", line)
        if m:
            found.add(slug(m.group(1)))
    return found


@dataclass(frozen=True)
class Example:
    """A runnable example: the commands of one code block, each joined with its
    continuation lines, and where the block starts."""

    page: Path
    line: int
    commands: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


_STARTS = ("devplan ", "curl ", "python scripts/")
_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=\S")
_PLACEHOLDER = re.compile(r"\b(INPUT|MODULE|BEFORE|AFTER|FILE|SPEC)\b|\s\[-|\[options\]|\.\.\.")


def _blocks(text: str) -> list[tuple[int, list[str]]]:
    """(first line number, lines) of every code block that is shell or unmarked."""
    blocks: list[tuple[int, list[str]]] = []
    lines = text.splitlines()
    i = 0
    previous_blank = True
    while i < len(lines):
        line = lines[i]
        m = _FENCE.match(line)
        if m:
            language = line[m.end() :].strip()
            fence = m.group(2)
            start = i + 1
            i += 1
            body: list[str] = []
            while i < len(lines) and not (lines[i].strip().startswith(fence)):
                body.append(lines[i])
                i += 1
            if language in ("", "sh", "bash", "shell", "console"):
                blocks.append((start + 1, body))
            i += 1
            previous_blank = True
            continue
        if line.startswith("    ") and previous_blank and line.strip():
            start = i
            body = []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                body.append(lines[i][4:])
                i += 1
            while body and not body[-1].strip():
                body.pop()
            blocks.append((start + 1, body))
            previous_blank = True
            continue
        previous_blank = not line.strip()
        i += 1
    return blocks


def _commands(body: list[str]) -> list[str] | None:
    """The block's commands, or None when the block is not a runnable example."""
    commands: list[str] = []
    current = ""
    for raw in body:
        line = raw.rstrip()
        if not line.strip() and not current:
            continue
        if current:
            current += "\n" + line
        else:
            stripped = line.strip()
            if not (stripped.startswith(_STARTS) or _ASSIGNMENT.match(stripped)):
                return None
            current = stripped
        if not current.endswith("\\") and current.count("'") % 2 == 0:  # not continued, no open quote
            commands.append(current)
            current = ""
    if current:
        commands.append(current)
    if not any(c.startswith(_STARTS) or re.search(r"(^|\s)devplan ", c) for c in commands):
        return None
    if any(_PLACEHOLDER.search(c.split("#", 1)[0]) for c in commands):
        return None
    return commands


def examples(page: Path) -> list[Example]:
    """The runnable examples of a page, in order."""
    out = []
    for line, body in _blocks(page.read_text()):
        commands = _commands(body)
        if commands:
            out.append(Example(page, line, tuple(commands)))
    return out

"""Code blocks of the README and docs/*.md, for the tests that run them as written."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
_HEADING = re.compile(r"^#+ (.+)$", re.M)


@dataclass(frozen=True)
class Block:
    path: Path
    lang: str
    text: str
    section: str  # the heading above it
    line: int

    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: str | Path, lang: str | None = None) -> list[Block]:
    """The fenced code blocks of a Markdown file (of one language), in order."""
    path = REPO / path
    text = path.read_text()
    found = []
    for match in _FENCE.finditer(text):
        if lang is not None and match.group(1) != lang:
            continue
        headings = _HEADING.findall(text[: match.start()])
        line = text.count("\n", 0, match.start()) + 1
        found.append(
            Block(path, match.group(1), match.group(2), headings[-1] if headings else "", line)
        )
    return found


def section_block(path: str | Path, section: str, lang: str, index: int = 0) -> Block:
    """The `index`-th block of `lang` under the heading `section`."""
    found = [b for b in blocks(path, lang) if b.section == section]
    assert len(found) > index, f"no {lang} block #{index} under {section!r} in {path}"
    return found[index]


def commands(block: Block, program: str = "xlacache") -> list[list[str]]:
    """The command lines of a shell block that run `program` (continuations joined,
    comments dropped), as argument lists."""
    text = block.text.replace("\\\n", " ")
    lines = []
    for raw in text.splitlines():
        words = shlex.split(raw, comments=True)
        if words and words[0] == program:
            lines.append(words)
    return lines

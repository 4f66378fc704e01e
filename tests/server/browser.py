"""Headless Chromium for the status page tests: the rendered DOM, parsed, and screenshots.

`chromium()` finds the browser. Without one a test skips, except under CI (the CI
environment variable, which `.ci/run` sets after installing Debian's `chromium`),
where a missing browser fails the test rather than quietly testing nothing.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

NAMES = ("chromium", "chromium-browser", "google-chrome")
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}  # fmt: skip
BROWSER_SECONDS = 120


def chromium() -> str:
    for name in NAMES:
        if path := shutil.which(name):
            return path
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed; CI needs it (.ci/run installs it with apt-get)")
    pytest.skip("chromium is not installed (apt-get install -y chromium); CI fails instead")


def _run(*args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--user-data-dir={profile}", *args]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BROWSER_SECONDS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def dump_dom(url: str) -> Node:
    """The document as Chromium has it after loading `url`, parsed."""
    return parse(_run("--dump-dom", url).stdout)


def screenshot(url: str, path, width: int = 1400, height: int = 1900) -> tuple[int, int]:
    """Render `url` to a PNG; its (width, height)."""
    _run(f"--window-size={width},{height}", f"--screenshot={path}", url)
    data = Path(path).read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text: str = ""

    def iter(self):
        yield self
        for child in self.children:
            yield from child.iter()

    def find_all(self, tag: str | None = None, **attrs: str) -> list[Node]:
        """Descendants with this tag and these attributes (`class_` for class)."""
        wanted = {k.rstrip("_").replace("_", "-"): v for k, v in attrs.items()}
        return [
            n for n in self.iter()
            if (tag is None or n.tag == tag) and all(
                (v in n.attrs.get(k, "").split()) if k == "class" else n.attrs.get(k) == v
                for k, v in wanted.items()
            )
        ]  # fmt: skip

    def by_id(self, element_id: str) -> Node:
        (found,) = self.find_all(id=element_id)
        return found

    def all_text(self) -> str:
        return self.text + "".join(c.all_text() for c in self.children)


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data):
        self.stack[-1].children.append(Node("#text", {}, text=data))


def parse(html: str) -> Node:
    builder = _Builder()
    builder.feed(html)
    builder.close()
    return builder.root

"""Fixtures of the lazy device's tests."""

from __future__ import annotations

import jax
import pytest


@pytest.fixture
def lowered(monkeypatch):
    """The text of every module the runtime compiles from now on."""
    texts: list[str] = []
    compile_ = jax.stages.Lowered.compile

    def capture(self, *args, **kwargs):
        texts.append(self.as_text())
        return compile_(self, *args, **kwargs)

    monkeypatch.setattr(jax.stages.Lowered, "compile", capture)
    return texts

"""A loaded single-device executable (`jax_programs.Program`) is called as jit is: the same
values, placement and committed flag at every call, the first (which builds the native
result handlers) and the later ones (which use them)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xlacache.jax_programs import Program


def _program(fn, *example):
    """The program, and the jit function it is compared with (called, not compiled ahead:
    a jit call's results are committed when an input is)."""
    jitted = jax.jit(fn)
    compiled = jitted.lower(*example).compile()
    return Program(compiled.runtime_executable(), jax.devices()[0]), jitted


def _fn(x, y):
    return x * 2 + y, (x - y).sum(), jnp.zeros((2, 3), jnp.int32)


@pytest.mark.parametrize("commit", [False, True], ids=["uncommitted", "committed"])
def test_every_call_gives_what_jit_gives(commit):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.ones((2, 3), np.float32)
    program, jitted = _program(_fn, x, y)
    dev = jax.devices()[0]
    for step in range(3):  # the first call builds the handlers, the next ones use them
        xa = jax.device_put(x + step, dev) if commit else jnp.asarray(x + step)
        want = jitted(xa, y)
        got = program(xa, y)
        assert isinstance(got, list) and len(got) == len(want) == 3
        for g, w in zip(got, want, strict=True):
            assert isinstance(g, jax.Array)
            assert g.committed is commit and w.committed is commit
            assert g.dtype == w.dtype and g.shape == w.shape and g.sharding == w.sharding
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_committed_and_uncommitted_calls_each_keep_their_own_flag():
    x = np.arange(4, dtype=np.float32)
    program, _ = _program(lambda a: a + 1, x)
    dev = jax.devices()[0]
    for _ in range(2):  # alternate, so that each flag's handlers are built and then reused
        (free,) = program(jnp.asarray(x))
        (held,) = program(jax.device_put(x, dev))
        assert free.committed is False and held.committed is True
        np.testing.assert_array_equal(np.asarray(free), x + 1)
        np.testing.assert_array_equal(np.asarray(held), x + 1)

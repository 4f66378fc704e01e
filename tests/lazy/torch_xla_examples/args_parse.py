"""The command-line options torch_xla's test scripts share (its ``test/args_parse.py``).

Written for xlacache (not copied): ``parse_common_options`` defines the same flags and
defaults, returns the parsed namespace, and leaves the unparsed arguments in ``sys.argv``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def parse_common_options(
    datadir: str | None = None,
    logdir: str | None = None,
    num_cores: int | None = None,
    batch_size: int = 128,
    num_epochs: int = 10,
    num_workers: int = 4,
    log_steps: int = 20,
    lr: float | None = None,
    momentum: float | None = None,
    target_accuracy: float | None = None,
    opts: Any = None,
    **more_defaults: Any,
) -> argparse.Namespace:
    parser = argparse.ArgumentParser(add_help=False)
    for name, kind, default in (
        ("datadir", str, datadir),
        ("logdir", str, logdir),
        ("num_cores", int, num_cores),
        ("batch_size", int, batch_size),
        ("num_epochs", int, num_epochs),
        ("num_workers", int, num_workers),
        ("log_steps", int, log_steps),
        ("lr", float, lr),
        ("momentum", float, momentum),
        ("target_accuracy", float, target_accuracy),
    ):
        parser.add_argument(f"--{name}", type=kind, default=default)
    for name in ("drop_last", "fake_data", "tidy", "metrics_debug", "async_closures", "debug"):
        parser.add_argument(f"--{name}", action="store_true")
    for name, default in more_defaults.items():
        parser.add_argument(f"--{name}", type=type(default), default=default)
    for name, kwargs in opts or ():
        parser.add_argument(name, **kwargs)
    args, rest = parser.parse_known_args()
    sys.argv = [sys.argv[0], *rest]
    return args

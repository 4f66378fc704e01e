"""Runs torch_xla's ``test_train_mp_mnist.py`` (imports changed only) at test size.

Written for xlacache. The script's fake data is a whole MNIST epoch (60,000 training and 10,000
test samples, whatever the batch size); this runner caps ``xu.SampleGenerator`` at
``argv[1]`` batches, then runs the script as ``__main__`` with the remaining arguments.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import xlacache.lazy.compat.utils.utils as xu


class CappedSampleGenerator(xu.SampleGenerator):
    def __init__(self, data: object, sample_count: int) -> None:
        super().__init__(data, min(sample_count, CAP))


if __name__ == "__main__":
    CAP = int(sys.argv.pop(1))
    xu.SampleGenerator = CappedSampleGenerator
    script = Path(__file__).with_name("train_mp_mnist.py")
    sys.argv[0] = str(script)
    runpy.run_path(str(script), run_name="__main__")

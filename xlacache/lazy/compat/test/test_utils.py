"""``torch_xla.test.test_utils``: training-progress printing and TensorBoard summaries."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from xlacache.lazy import global_ordinal, metrics

__all__ = [
    "close_summary_writer",
    "get_summary_writer",
    "now",
    "print_test_update",
    "print_training_update",
    "write_to_summary",
]


def now(format: str = "%H:%M:%S") -> str:  # noqa: A002 - torch_xla's argument name
    return datetime.now().strftime(format)


def _device_spec(device: Any) -> str:
    return f"{device}/{global_ordinal()}"


def get_summary_writer(logdir: str | None) -> Any:
    """A TensorBoard ``SummaryWriter`` for ``logdir`` (None: no writer)."""
    if not logdir:
        return None
    from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

    writer = SummaryWriter(log_dir=logdir)
    write_to_summary(writer, 0, {"TensorboardStartTimestamp": time.time()})
    return writer


def write_to_summary(
    summary_writer: Any,
    global_step: int | None = None,
    dict_to_write: dict | None = None,
    write_xla_metrics: bool = False,
) -> None:
    """Write scalars (and, if asked, every counter) to ``summary_writer`` (None: nothing)."""
    if summary_writer is None:
        return
    for name, value in (dict_to_write or {}).items():
        summary_writer.add_scalar(name, value, global_step)
    if write_xla_metrics:
        for name in metrics.counter_names():
            summary_writer.add_scalar(name, metrics.counter_value(name), global_step)


def close_summary_writer(summary_writer: Any) -> None:
    if summary_writer is not None:
        summary_writer.flush()
        summary_writer.close()


def print_training_update(
    device: Any,
    step: int,
    loss: float,
    rate: float,
    global_rate: float,
    epoch: int | None = None,
    summary_writer: Any = None,
) -> None:
    """One line of training progress: device, epoch, step, loss, rates, time."""
    parts = [
        "Training",
        f"Device={_device_spec(device)}",
        f"Epoch={epoch}" if epoch is not None else None,
        f"Step={step}",
        f"Loss={loss:.5f}",
        f"Rate={rate:.2f}",
        f"GlobalRate={global_rate:.2f}",
        f"Time={now()}",
    ]
    print("|", " ".join(p for p in parts if p), flush=True)
    write_to_summary(
        summary_writer, dict_to_write={"examples/sec": rate, "average_examples/sec": global_rate}
    )


def print_test_update(
    device: Any, accuracy: float | None, epoch: int | None = None, step: int | None = None
) -> None:
    parts = [
        "Test",
        f"Device={_device_spec(device)}",
        f"Step={step}" if step is not None else None,
        f"Epoch={epoch}" if epoch is not None else None,
        f"Accuracy={accuracy:.2f}" if accuracy is not None else None,
        f"Time={now()}",
    ]
    print("|", " ".join(p for p in parts if p), flush=True)

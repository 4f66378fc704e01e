"""Every private torch API the lazy runtime uses (``INTERNALS``), and one adapter per
difference between the torch releases it supports (torch 2.9 to 2.14, docs/compat.md).

A row names the object by its dotted path under ``torch`` and says who uses it for what;
``tests/lazy/test_torch_internals.py`` keeps one tripwire per row, so a torch upgrade that
moves one says which before any model runs (``make compat-torch`` checks every release).
Where releases differ, the adapter is a function named by the release that changed it.
Aten ops that a release may lack are looked up with ``aten_op`` (None: not registered).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Internal:
    """A private torch API: ``path`` (dotted, from ``torch``), who uses it and what for, and
    the first release that has it where that is inside the supported range."""

    path: str
    used_by: str
    since: tuple[int, int] | None = None

    def resolve(self) -> Any:
        """The object, or ImportError/AttributeError naming what is missing."""
        parts = self.path.split(".")
        target: Any = torch
        for i, part in enumerate(parts[1:], start=1):
            if not hasattr(target, part):
                try:  # a submodule torch does not import by itself
                    target = importlib.import_module(".".join(parts[: i + 1]))
                    continue
                except ImportError:
                    pass
            target = getattr(target, part)
        return target

    def expected(self) -> bool:
        """Does this torch release have to provide it?"""
        return self.since is None or torch_version() >= self.since

    def missing(self) -> str | None:
        """Why this torch lacks it (None: present)."""
        try:
            self.resolve()
        except (ImportError, AttributeError) as exc:
            return str(exc)
        return None

    def problem(self) -> str | None:
        """What is wrong with it in this torch (None: present, or not expected yet)."""
        why = self.missing()
        return f"{self.path} is gone ({why})" if why is not None and self.expected() else None


INTERNALS = (
    Internal("torch._C._acc.DeviceGuard", "_device: the xla device guard", since=(2, 10)),
    Internal(
        "torch._C._acc.register_python_privateuseone_device_guard",
        "_device: the xla device guard",
        since=(2, 10),
    ),
    Internal("torch._C._autograd.DeviceType.XLA", "_device: the guard registry's xla slot"),
    Internal("torch._C._autograd.DeviceType.PrivateUse1", "_device: the guard registry"),
    Internal("torch._C._GLIBCXX_USE_CXX11_ABI", "_device: the guard's build (torch 2.9)"),
    Internal("torch._C._get_privateuse1_backend_name", "rng: torch's seeding hook"),
    Internal("torch._register_device_module", "rng: torch's seeding hook"),
    Internal("torch.random._seed_custom_device", "rng: torch.manual_seed calls the hook"),
    Internal("torch._C.Generator", "rng: XlaGenerator's base class"),
    Internal(
        "torch._prims.rng_prims.run_and_save_rng_state", "rng: RNG-state HOPs on lazy tensors"
    ),
    Internal("torch._prims.rng_prims.run_with_rng_state", "rng: RNG-state HOPs on lazy tensors"),
    Internal("torch._ops.HigherOrderOperator.py_impl", "rng: the HOPs' subclass rules"),
    Internal("torch._C.DispatchKey.CompositeExplicitAutograd", "control_flow: eager's kernels"),
    Internal("torch._C.DispatchKey.Autograd", "control_flow: torch's autograd kernels"),
    Internal("torch.utils._python_dispatch._get_current_dispatch_mode", "dynamo.program"),
    Internal("torch.utils._python_dispatch._pop_mode_temporarily", "dynamo.program"),
    Internal("torch._C.DispatchKeySet", "_device: as_strided_ on the XLA key (CPU's kernel)"),
    Internal("torch._C.DispatchKey.CPU", "_device: as_strided_ on the XLA key (CPU's kernel)"),
    Internal("torch._C.DispatchKey.XLA", "_device: as_strided_ on the XLA key"),
    Internal(
        "torch._C.DispatchKey.AutogradXLA", "_device: one_hot's xla kernel (unless one is there)"
    ),
    Internal("torch._ops.OpOverload.redispatch", "_device: as_strided_ on the XLA key"),
    Internal("torch._C._dispatch_tls_local_exclude_set", "autocast: the AutocastXLA key"),
    Internal("torch._C._ExcludeDispatchKeyGuard", "autocast: an op below AutocastXLA"),
    Internal(
        "torch._C._dispatch_tls_is_dispatch_key_excluded", "dispatch: eager kernels' conj views"
    ),
    Internal(
        "torch._C._dispatch_tls_set_dispatch_key_excluded", "dispatch: eager kernels' conj views"
    ),
    Internal("torch._C.DispatchKey.Conjugate", "dispatch: eager kernels' conj views"),
    Internal("torch._C.DispatchKey.Negative", "dispatch: eager kernels' negative views"),
    Internal("torch._C._dynamo.eval_frame.set_eval_frame", "tensor: Dynamo off in dispatch"),
    Internal("torch._C.DispatchKeySet", "tensor: meta kernels"),
    Internal("torch._C.DispatchKey.Meta", "tensor: meta kernels"),
    Internal("torch._C._construct_storage_from_data_pointer", "tensor: data-less storages"),
    Internal("torch.serialization._package_registry", "storage_restore: its deserializer"),
    Internal("torch._utils._rebuild_device_tensor_from_cpu_tensor", "tensor: pickling"),
    Internal("torch._utils._rebuild_parameter", "tensor: pickling a Parameter"),
    Internal("torch._C.TensorBase.data", "tensor: the .data setter"),
    Internal("torch._guards.detect_fake_mode", "tensor: a lazy tensor's fake"),
    Internal("torch._guards.TracingContext.try_get", "tensor, dynamo: tracing or not"),
    Internal("torch._subclasses.fake_tensor.FakeTensor", "tensor: fakes Dynamo can use"),
    Internal("torch._subclasses.fake_tensor.unset_fake_temporarily", "dynamo.program"),
    Internal("torch._decomp.decomposition_table", "dispatch, dynamo: decompositions"),
    Internal("torch._decomp.core_aten_decompositions", "dispatch, dynamo: decompositions"),
    Internal("torch._dynamo.backends.common.aot_autograd", "dynamo.backend: AOTAutograd"),
    Internal("torch._dynamo.trace_rules.add", "dynamo.backend: the runtime is not traced"),
    Internal("torch._dynamo.utils.counters", "dynamo.backend: graph breaks"),
    Internal("torch._dynamo.utils.guard_failures", "dynamo.backend: recompiles"),
    Internal(
        "torch._dynamo.config.caching_precompile", "dynamo.backend: torch's precompile refused"
    ),
    Internal("torch._dynamo.exc.TorchDynamoException", "dynamo.backend: Dynamo's own errors"),
    Internal(
        "torch._dynamo.exc.exceptions_allowed_to_be_fallback",
        "dynamo.backend: the errors Dynamo turns into graph breaks",
    ),
    Internal(
        "torch._functorch.config.guess_tangent_strides_as_outputs",
        "dynamo.backend: contiguous tangents",
    ),
    Internal("torch._functorch.config.patch", "dynamo.backend: contiguous tangents"),
    Internal("torch._C._get_fp32_precision_getter", "lowering.precision: the settings"),
    Internal("torch._C._dispatch_has_kernel_for_dispatch_key", "lowering.nn: meta kernels"),
    Internal("torch._C._disabled_torch_function_impl", "tensor: no __torch_function__ layer"),
    Internal("torch._C._increment_version", "dynamo.program: inputs updated in place"),
    Internal(
        "torch.utils._foreach_utils._get_foreach_kernels_supported_devices",
        "optim_defaults: foreach on the device",
    ),
    Internal("torch.utils._foreach_utils._foreach_supported_types", "optim_defaults"),
    Internal("torch.optim.optimizer._get_foreach_kernels_supported_devices", "optim_defaults"),
    Internal("torch.optim.optimizer._foreach_supported_types", "optim_defaults"),
    Internal("torch.optim.optimizer._get_capturable_supported_devices", "optim_defaults"),
    Internal("torch.optim.adam._get_capturable_supported_devices", "optim_defaults"),
    Internal("torch.optim.adamax._get_capturable_supported_devices", "optim_defaults"),
    Internal("torch.optim.asgd._get_capturable_supported_devices", "optim_defaults"),
    Internal("torch.optim.nadam._get_capturable_supported_devices", "optim_defaults"),
    Internal("torch.optim.radam._get_capturable_supported_devices", "optim_defaults"),
    Internal("torch.optim.adadelta._get_capturable_supported_devices", "optim_defaults"),
    Internal("torch._foreach_copy_", "dynamo.program: step counters written back"),
    Internal("torch._foreach_add_", "dynamo.program: step counters advanced in place"),
    Internal("torch._ops.OpOverload", "dispatch, record, graph, dynamo.lower: aten ops"),
    Internal("torch._guards.TracingContext.get", "dynamo.backend: the graph's fake mode"),
    Internal("torch._subclasses.fake_tensor.FakeTensorMode", "dynamo.aot_cache: a loaded graph"),
    Internal("torch._inductor.inductor_prims", "dynamo.lower: prims.fma (Dynamo's addcmul_)"),
    Internal(
        "torch._C._nn.multilabel_margin_loss",
        "dynamo.backend: a graph calling it runs lazily (AOTAutograd's kernel is wrong)",
    ),
    Internal(
        "torch._higher_order_ops.effects.with_effects",
        "dynamo.strided: ordered ops (_linalg_check_errors) in graphs run lazily",
    ),
    Internal(
        "torch._functorch.aot_autograd.SerializableAOTDispatchCompiler",
        "dynamo.backend: graphs AOTAutograd's cache can keep",
    ),
    Internal(
        "torch._functorch._aot_autograd.autograd_cache.AOTAutogradCache.get_remote_cache",
        "dynamo.aot_cache: AOTAutograd's cache in xlacache entries",
    ),
    Internal(
        "torch._functorch._aot_autograd.autograd_cache.AOTAutogradCache._write_to_local_cache",
        "dynamo.aot_cache: its local directory unused",
    ),
    Internal("torch._functorch.config.bundled_autograd_cache", "dynamo.aot_cache"),
    Internal("torch._functorch.config.enable_remote_autograd_cache", "dynamo.aot_cache"),
    Internal("torch._functorch.config.enable_autograd_cache", "dynamo.aot_cache"),
    Internal(
        "torch._functorch.config.force_non_lazy_backward_lowering",
        "dynamo.aot_cache (without it, torch 2.9: AOTAutograd's cache unused)",
        since=(2, 10),
    ),
    Internal("torch._inductor.output_code.OutputCode", "dynamo.aot_cache: XlaOutputCode"),
    Internal("torch.fx._graph_pickler.GraphPickler", "dynamo.aot_cache: graphs pickled"),
)


def torch_version() -> tuple[int, int]:
    """This torch's (major, minor)."""
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int(minor)


def problems() -> list[str]:
    """Every row this torch lacks (empty: all there)."""
    return [p for p in (i.problem() for i in INTERNALS) if p is not None]


def has(path: str) -> bool:
    """Does this torch have the row ``path`` (for an API used only where it exists)?"""
    (row,) = (i for i in INTERNALS if i.path == path)
    return row.missing() is None


def aten_op(name: str) -> Any:
    """``torch.ops.aten.<name>`` (``"op"`` or ``"op.overload"``), or None where this torch
    has no such op or overload (it is then simply not registered)."""
    packet_name, _, overload = name.partition(".")
    try:
        packet = getattr(torch.ops.aten, packet_name)
    except AttributeError:
        return None
    overload = overload or "default"
    if overload not in packet.overloads():
        return None
    return getattr(packet, overload)


def aten_ops(*names: str) -> list[Any]:
    """The ops of ``names`` this torch has (``aten_op``)."""
    return [op for op in map(aten_op, names) if op is not None]


def lazy_inner_tensors() -> list[str]:
    """The inner tensors a ``LazyTensor`` names to torch's subclass protocol
    (``__tensor_flatten__``): none from torch 2.12 (``lazy_inner_tensors_since_2_12``); before,
    its meta tensor (``lazy_inner_tensors_before_2_12``)."""
    if torch_version() >= (2, 12):
        return lazy_inner_tensors_since_2_12()
    return lazy_inner_tensors_before_2_12()


def lazy_inner_tensors_since_2_12() -> list[str]:
    """None: Dynamo fakes a lazy tensor as a plain fake ``xla`` tensor."""
    return []


def lazy_inner_tensors_before_2_12() -> list[str]:
    """Its meta tensor (``_meta``, real): torch 2.9-2.11's ``is_fake`` raises "got mixed fake and
    real tensors" for a subclass with no inner tensor (``all([]) != any([])``), which Dynamo asks
    of every tensor it wraps. Dynamo fakes the meta tensor and ``__tensor_unflatten__`` still
    gives a plain fake ``xla`` tensor."""
    return ["_meta"]


def backend_refakes(fakes: list) -> bool:
    """Must the backend fake its device inputs again (``backend_fakes``), with static sizes?"""
    if torch_version() >= (2, 11):
        return False
    tc = torch._guards.TracingContext.try_get()
    mode = getattr(tc, "fake_mode", None)
    return mode is not None and not all(getattr(f, "fake_mode", mode) is mode for f in fakes)


def backend_fakes(fakes: list, example_inputs: list) -> list:
    """The fake inputs a Dynamo backend hands AOTAutograd: the graph's placeholders' fakes,
    except on torch 2.9-2.10 (``backend_fakes_before_2_11``)."""
    if not backend_refakes(fakes):
        return fakes
    return backend_fakes_before_2_11(
        torch._guards.TracingContext.get().fake_mode, fakes, example_inputs
    )


def backend_fakes_before_2_11(mode: Any, fakes: list, example_inputs: list) -> list:
    """torch 2.9-2.10 put a fresh fake mode in the tracing context before calling the backend
    (the placeholders' fakes belong to the old one, which AOTAutograd refuses to mix): the
    real device tensors faked again in it, with static sizes (sizes and other values as the
    placeholders give them). Host tensors are left to AOTAutograd, which fakes them with
    what Dynamo noted (a float made a 0-d tensor keeps its ``item``): a static fake of one
    made here, while alive, would take that place in the mode's memo."""
    return [
        mode.from_tensor(x, static_shapes=True)
        if isinstance(x, torch.Tensor) and x.device.type != "cpu"
        else f
        for f, x in zip(fakes, example_inputs, strict=True)
    ]


# -- the device guard --------------------------------------------------------------------------


def _guard_registry() -> Any:
    """c10's device-guard registry (``c10::impl::device_guard_impl_registry``): one pointer
    per device type."""
    libdir = os.path.join(os.path.dirname(torch.__file__), "lib")
    c10 = ctypes.CDLL(os.path.join(libdir, "libc10.so"))
    sym = ctypes.c_void_p.in_dll(c10, "_ZN3c104impl26device_guard_impl_registryE")
    return (ctypes.c_void_p * 64).from_address(ctypes.addressof(sym))


def install_xla_guard() -> Any:
    """Give ``DeviceType::XLA`` a device guard (autograd asks for one whenever it records a
    tensor on a device); returns what must stay alive, None if one was there already."""
    registry = _guard_registry()
    xla = int(torch._C._autograd.DeviceType.XLA)
    if registry[xla]:  # torch_xla (or an earlier install) provides one
        return None
    if hasattr(torch._C, "_acc"):
        return _guard_since_2_10(registry, xla)
    return _guard_before_2_10(registry, xla)


def _guard_since_2_10(registry: Any, xla: int) -> Any:
    """torch 2.10+: a Python guard, registered in the PrivateUse1 slot (the one slot torch
    lets Python fill), moved to the XLA slot; the PrivateUse1 slot is restored."""

    class XlaGuard(torch._C._acc.DeviceGuard):
        def type_(self) -> Any:
            return torch._C._autograd.DeviceType.XLA

    pu1 = int(torch._C._autograd.DeviceType.PrivateUse1)
    saved = registry[pu1]
    guard = XlaGuard()
    torch._C._acc.register_python_privateuseone_device_guard(guard)
    registry[xla] = registry[pu1]
    registry[pu1] = saved
    return guard


_GUARD_SOURCE = r"""
#include <c10/core/impl/DeviceGuardImplInterface.h>
namespace {
using c10::Device;
using c10::DeviceType;
using c10::Stream;
// The lazy xla device: one device, no current-device state; every call is a no-op.
struct XlaGuard final : public c10::impl::DeviceGuardImplInterface {
  DeviceType type() const override { return DeviceType::XLA; }
  Device exchangeDevice(Device) const override { return Device(DeviceType::XLA, 0); }
  Device getDevice() const override { return Device(DeviceType::XLA, 0); }
  void setDevice(Device) const override {}
  void uncheckedSetDevice(Device) const noexcept override {}
  Stream getStream(Device d) const noexcept override { return Stream(Stream::DEFAULT, d); }
  Stream exchangeStream(Stream s) const noexcept override {
    return Stream(Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
};
C10_REGISTER_GUARD_IMPL(XLA, XlaGuard);
}  // namespace
"""


def _guard_before_2_10(registry: Any, xla: int) -> Any:
    """torch 2.9 (no ``torch._C._acc``: Python cannot make a guard): a C++ no-op guard for
    ``DeviceType::XLA``, compiled once per torch release against torch's own headers (about
    2 s with the system's C++ compiler; ``$CXX`` or ``c++``) into ``~/.cache/xlacache`` and
    loaded, which registers it. The autograd engine gives a device with a guard its own
    queue; the meta device's guard would send it to the CPU's, which has none for it."""
    import hashlib
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

    root = Path(torch.__file__).parent
    tag = hashlib.sha256(f"{torch.__version__}\0{_GUARD_SOURCE}".encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xlacache"
    lib = cache / f"xla_guard-{tag}.so"
    if not lib.exists():
        cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
        if cxx is None:
            raise RuntimeError(
                f"xlacache.lazy on torch {torch.__version__} needs a C++ compiler once, to build "
                "the xla device guard (torch 2.10+ needs none): install g++ or set CXX"
            )
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            src = Path(tmp) / "xla_guard.cpp"
            src.write_text(_GUARD_SOURCE)
            abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
            out = Path(tmp) / lib.name
            subprocess.run(
                [cxx, "-O1", "-shared", "-fPIC", "-std=c++17", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
                 f"-I{root / 'include'}", str(src), f"-L{root / 'lib'}", "-lc10", "-o", str(out)],
                check=True, capture_output=True, timeout=300,
            )  # fmt: skip
            os.replace(out, lib)  # atomic: another process may build it at the same time
    handle = ctypes.CDLL(str(lib))  # its static registrar fills the XLA slot
    if not registry[xla]:
        raise RuntimeError(f"xlacache.lazy: {lib} did not register the xla device guard")
    return handle


# -- the seeding hook --------------------------------------------------------------------------


def register_seed_module(module: Any) -> Callable[[], None] | None:
    """Make ``module`` the privateuse1 backend's module, which ``torch.manual_seed`` and
    ``torch.seed`` seed through ``module.manual_seed_all`` (``torch.random._seed_custom_device``).
    Only while that slot is free (no backend renamed it or registered a module); returns the
    undo, or None."""
    name = torch._C._get_privateuse1_backend_name()
    if name != "privateuseone" or hasattr(torch, name):
        return None
    torch._register_device_module(name, module)

    def undo() -> None:
        import sys

        if getattr(torch, name, None) is module:
            delattr(torch, name)
            sys.modules.pop(f"torch.{name}", None)

    return undo


def package_registry() -> list[tuple[int, Callable[..., Any], Callable[..., Any]]]:
    """``torch.serialization``'s deserializers: ``(priority, tagger, deserializer)``."""
    return torch.serialization._package_registry


def unregister_package(deserializer: Callable[..., Any]) -> None:
    """Take out what ``torch.serialization.register_package`` added (torch has no public way
    to)."""
    registry = package_registry()
    registry[:] = [entry for entry in registry if entry[2] is not deserializer]


# -- Dynamo ------------------------------------------------------------------------------------


def without_aot_alias_analysis() -> contextlib.AbstractContextManager:
    """Off while a graph runs lazily: the dispatch mode AOTAutograd puts around a graph's
    first call to check custom ops' aliasing (``_AnalyzeCustomOpInputOutputMode``). For a
    tensor subclass it returns ``NotImplemented`` from a higher-order operator (an RNG-state
    one in a checkpointed region) instead of passing it on; for aten ops it checks nothing."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode, _pop_mode_temporarily

    mode = _get_current_dispatch_mode()
    if type(mode).__name__ != "_AnalyzeCustomOpInputOutputMode":
        return contextlib.nullcontext()
    return _pop_mode_temporarily()


@contextlib.contextmanager
def view_bits_resolved() -> Any:
    """Eager's kernels run as outside ``__torch_dispatch__``, where the dispatcher excludes
    the Conjugate and Negative keys: a CPU kernel's own ``conj()`` view would otherwise be
    read unconjugated (complex ``linalg.lstsq`` residuals came out negative)."""
    keys = (torch._C.DispatchKey.Conjugate, torch._C.DispatchKey.Negative)
    excluded = [torch._C._dispatch_tls_is_dispatch_key_excluded(k) for k in keys]
    for k in keys:
        torch._C._dispatch_tls_set_dispatch_key_excluded(k, False)
    try:
        yield
    finally:
        for k, was in zip(keys, excluded, strict=True):
            torch._C._dispatch_tls_set_dispatch_key_excluded(k, was)


def dynamo_handles() -> tuple[type[BaseException], ...]:
    """The exceptions a backend lets through because Dynamo acts on them: its own (a restart,
    a skipped frame), those it turns into a graph break, and ``IndexError`` (shown to the user
    as the op's own)."""
    from torch._dynamo import exc

    return (exc.TorchDynamoException, IndexError, *exc.exceptions_allowed_to_be_fallback)


def dynamo_skips_runtime() -> None:
    """Dynamo never traces the lazy runtime's own code (``trace_rules.add`` for each module of
    ``xlacache.lazy``; its own public functions stay inlinable). After a graph break Python runs
    the rest eagerly and its ops enter the runtime through ``__torch_dispatch__``: Dynamo would
    otherwise try to compile those frames as user code. Once; Dynamo must be loaded."""
    from pathlib import Path

    from torch._dynamo import trace_rules

    root = Path(__file__).resolve().parent
    if _DYNAMO_RULES:
        return
    for path in sorted(root.iterdir()):
        if path.name == "__init__.py" or path.name.startswith((".", "__")):
            continue
        if path.stem == "optim_defaults":  # torch's optimizers call it while Dynamo traces
            continue
        if path.suffix == ".py" or (path / "__init__.py").exists():
            trace_rules.add(f"xlacache.lazy.{path.stem}")
            _DYNAMO_RULES.append(path.stem)


_DYNAMO_RULES: list[str] = []

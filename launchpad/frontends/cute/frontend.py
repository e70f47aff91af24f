"""CuTe DSL front end: ``@cute.kernel`` functions as launchpad Kernels, launched without CuTe's JIT call.

:func:`from_cute` compiles a kernel through CuTe DSL (``cute.compile``; no GPU needed) for example
arguments, either through the ``@cute.jit`` function that launches it or, for a bare
``@cute.kernel``, through a one-line launch function launchpad writes. While CuTe traces the host
function, launchpad records the kernel's launch (:mod:`.trace`): each kernel argument's CuTe type
(a tensor's ``!cute.memref`` layout, a scalar's class) and the launch configuration (block,
cluster, dynamic shared memory). The Kernel takes **the kernel's own arguments** (torch tensors for its tensors,
numbers for its scalars) and a grid: ``k[grid](x, y, n)``. Each tensor is one by-value struct
(:mod:`.layout`) packed per launch with every assumption checked (:mod:`.args`).

What the host function computes and the kernel takes besides tensors and scalars (a TMA copy
atom and its descriptor, a tiled tensor whose layout the host function made) has no torch value
to pack from: such a kernel is refused naming the parameter. CuTe DSL is imported only here and
only when compiling; a saved CuTe kernel loads without it.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import shutil
import tempfile
from dataclasses import replace
from typing import Any

from ...core import toolchain
from ...core.binary import cubin_arch
from ...core.params import type_size
from ...core.spec import Arg, KernelSpec, LaunchPlan, spec_from_image
from ...errors import ArgumentError, ArgumentTypeError, BinaryError, CompileError, LaunchpadError
from ...kernel import Kernel
from . import args as _cute_args  # noqa: F401  (registers the converter the kernels use)
from .layout import parse_memref
from .trace import recording
from .versions import check_cute

__all__ = ["cute_spec", "from_cute"]


def from_cute(
    fn: Any,
    args: tuple | list,
    *,
    arch: str | int | tuple[int, int] | None = None,
    kernel: str | None = None,
    block: tuple[int, ...] | int | None = None,
    cluster: tuple[int, ...] | None = None,
    shared_mem: int | None = None,
) -> Kernel:
    """Compile a CuTe DSL kernel for example arguments into a launchpad :class:`~launchpad.Kernel`.

    Parameters
    ----------
    fn : cute.jit or cute.kernel function
        The ``@cute.jit`` host function that launches the kernel (its block, cluster and shared
        memory are the ones it launches with), an object whose ``__call__`` is one (CuTe's
        class-based kernels), or a ``@cute.kernel`` itself (then ``block`` is needed: CuTe compiles
        it into the kernel as ``.reqntid``).
    args : tuple
        Example arguments for ``fn``, as ``cute.compile`` takes them: CuTe tensors (fake ones from
        ``make_fake_compact_tensor``, or ``from_dlpack`` views, whose static and dynamic modes,
        divisibility and alignment the kernel is compiled for), CuTe scalars (``cutlass.Int32(0)``)
        and constants.
    arch : optional
        ``"sm_90a"``, ``90``, ``"h100"``...; default: the current GPU's. CuTe compiles for the
        architecture-specific target (``sm_90`` becomes ``sm_90a``).
    kernel : str, optional
        Which kernel, where the host function launches several (its Python name).
    block, cluster, shared_mem : optional
        For a bare ``@cute.kernel``: the block (required), cluster and dynamic shared memory of its
        launches.

    Returns
    -------
    Kernel
        Launch with ``k[grid](*kernel_args)``: the kernel's own parameters in order, torch tensors
        for its tensors, numbers for its scalars; constants may be left out and must otherwise
        equal the compiled value. Block, cluster and shared memory are fixed by the compile.

    Raises
    ------
    UnsupportedVersion
        CuTe DSL (PyPI ``nvidia-cutlass-dsl``) is missing or a release launchpad does not know.
    CompileError
        CuTe DSL refused the kernel (its message is the log).
    LaunchpadError
        A parameter launchpad cannot pass (a TMA atom, a tiled layout, shared memory), or a launch
        configuration that is not a compile-time constant; the message names the kernel and it.
    """
    check_cute()
    kind = getattr(fn, "_decorator_kind", None)
    call = inspect.getattr_static(type(fn), "__call__", None)
    if kind is None and getattr(call, "_decorator_kind", None) == "jit":
        kind = "jit"  # an object whose __call__ is @cute.jit (CuTe's class-based kernels), as cute.compile takes it
    if kind not in ("jit", "kernel"):
        raise ArgumentTypeError(
            f"from_cute takes a @cute.jit or @cute.kernel function and example arguments, got {type(fn).__name__}; "
            "a compiled function (cute.compile's result) keeps no CuTe types of its kernel's parameters: pass the "
            "function it was compiled from"
        )
    name = getattr(getattr(fn, "__wrapped__", fn), "__name__", type(fn).__name__)
    if not isinstance(args, (tuple, list)):
        raise ArgumentTypeError(f"kernel {name!r}: expected example arguments (a tuple), got {type(args).__name__}")
    target = _cute_arch(toolchain.resolve_arch(arch, kernel=name))
    if kind == "kernel":
        if block is None:
            raise ArgumentError(f"kernel {name!r} is a @cute.kernel: pass block= (CuTe compiles the block into the "
                                "kernel), or the @cute.jit function that launches it")  # fmt: skip
        host = _launch_function(fn, name, tuple(args), block, cluster, shared_mem)
        kernel = name
    elif (block, cluster, shared_mem) != (None, None, None):
        raise ArgumentError(f"{name!r} is a @cute.jit function, which launches with its own block, cluster and "
                            "shared memory: leave block=, cluster= and shared_mem= out")  # fmt: skip
    else:
        host = fn
    try:
        launches, compiled, image = _compile(host, name, tuple(args), target)
    finally:
        if kind == "kernel":  # the folder of the launch function's file, read by CuTe while compiling
            shutil.rmtree(host._launchpad_folder, ignore_errors=True)
    record = _pick(launches, name, kernel)
    symbol = _symbol(compiled, record["name"], launches)
    if record["smem"] is None:  # CuTe sized it (its SmemAllocator's use): the amount its host code passes
        record = dict(record, smem=_inferred_smem(str(compiled.ir_module), record["name"]))
    if not image:
        raise CompileError(f"CuTe DSL kept no cubin of kernel {record['name']!r} (--keep-cubin)")
    import cutlass

    return Kernel(cute_spec(image, symbol, record, getattr(cutlass, "__version__", "")))


def _cute_arch(arch: str) -> str:
    """CuTe compiles for architecture-specific targets from Hopper on: ``sm_90`` is ``sm_90a``."""
    major = int("".join(c for c in arch.removeprefix("sm_") if c.isdigit())[:-1] or 0)
    return arch if major < 9 or arch.endswith(("a", "f")) else arch + "a"


def _compile(host: Any, name: str, args: tuple, arch: str) -> tuple[list[dict], Any, bytes]:
    """The launches CuTe traced, its compiled function and the cubin (kept in a temporary folder:
    ``--keep-cubin`` alone writes it to the working directory)."""
    import cutlass.cute as cute

    with recording() as launches, tempfile.TemporaryDirectory(prefix="launchpad-cute-") as folder:
        try:
            compiled = cute.compile(host, *args, options=f"--keep-cubin --gpu-arch {arch} --dump-dir {folder}")
            image = bytes(compiled.artifacts.CUBIN or b"")
        except Exception as exc:  # CuTe's DSL errors: the user's code or the compiler
            raise CompileError(f"CuTe DSL could not compile {name!r} for {arch}: {type(exc).__name__}",
                               str(exc).strip()) from exc  # fmt: skip
    return launches, compiled, image


_CONFIG = r"!llvm\.struct<\(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32\)>"


def _inferred_smem(ir_text: str, name: str) -> int:
    """The dynamic shared memory CuTe's host code launches with where the launch left it to CuTe
    (``smem=None``): the constant stored into the ``dynamicSmemBytes`` field of each
    ``cudaLaunchConfig_t`` the host functions build. One amount for every launch, or a refusal."""
    import re

    found = set()
    for body in ir_text.split("llvm.func @")[1:]:
        consts = dict(re.findall(r"(%\w+) = llvm\.mlir\.constant\((\d+) : i64\) : i64", body))
        for cfg in re.findall(r"(%\w+) = llvm\.alloca %\w+ x " + _CONFIG, body):
            for field in re.findall(r"(%\w+) = llvm\.getelementptr " + re.escape(cfg) + r"\[0, 2\]", body):
                for value in re.findall(r"llvm\.store (%\w+), " + re.escape(field) + r" : i64", body):
                    found.add(int(consts[value]) if value in consts else -1)
    if len(found) != 1 or -1 in found:
        raise LaunchpadError(f"kernel {name!r} is launched with the dynamic shared memory CuTe DSL infers (no smem=), "
                             "which launchpad cannot read from this compile; pass smem= to its launch")  # fmt: skip
    return found.pop()


def _pick(launches: list[dict], name: str, kernel: str | None) -> dict:
    if not launches:
        raise LaunchpadError(f"{name!r} launched no kernel while CuTe DSL traced it")
    names = [r["name"] for r in launches]
    if kernel is not None:
        found = [r for r in launches if r["name"] == kernel]
        if not found:
            raise ArgumentError(f"{name!r} launches no kernel {kernel!r} (it launches {', '.join(names)})")
        return found[0]
    if len(set(names)) > 1:
        raise ArgumentError(f"{name!r} launches {len(names)} kernels ({', '.join(names)}): pass kernel= to pick one")
    return launches[0]


def _symbol(compiled: Any, name: str, launches: list[dict]) -> str:
    symbols = list(getattr(compiled, "kernel_info", {}) or {})
    found = [s for s in symbols if f"_{name}_" in s]
    if len(found) == 1:
        return found[0]
    if len(symbols) == len(launches):
        return symbols[[r["name"] for r in launches].index(name)]
    raise BinaryError(f"cannot tell which of CuTe's kernels {symbols} is {name!r}")


def cute_spec(image: bytes, symbol: str, record: dict, version: str = "") -> KernelSpec:
    """The finished spec of kernel ``symbol`` of a CuTe DSL cubin, from its recorded launch."""
    name = record["name"]
    spec = spec_from_image(image, "cubin", symbol, display_name=name)
    for what in ("block", "cluster"):
        if record[what] == "dynamic":
            raise LaunchpadError(f"kernel {name!r} is launched with a {what} computed at run time; launchpad needs "
                                 f"one fixed when compiling (a Python int in the launch's {what}=)")  # fmt: skip
    if record["smem"] == "dynamic":
        raise LaunchpadError(f"kernel {name!r} is launched with dynamic shared memory computed at run time (smem=); "
                             "launchpad needs an amount fixed when compiling")  # fmt: skip
    passed = [(pname, d) for pname, d in record["params"] if d[0] not in ("const", "static")]
    for pname, (kind, what) in passed:
        if kind == "other":  # TODO(launchpad): build a TMA atom's descriptor per launch, as Triton's are
            raise LaunchpadError(f"kernel {name!r}, parameter {pname!r} is {what}, which the @cute.jit host function "
                                 "builds (a TMA atom's descriptor, a tiled layout...); launchpad cannot build it: "
                                 "launch this kernel through CuTe DSL")  # fmt: skip
    layouts = {pname: parse_memref(what, f"kernel {name!r}, parameter {pname!r}")
               for pname, (kind, what) in passed if kind == "tensor"}  # fmt: skip
    sizes = [layouts[p].size if k == "tensor" else type_size(w) for p, (k, w) in passed]
    if [p.size for p in spec.params] != sizes:
        raise BinaryError(f"kernel {name!r}: the cubin's parameters ({[p.size for p in spec.params]} bytes) are not "
                          f"what CuTe DSL's calling convention gives for {[p for p, _ in passed]} ({sizes} bytes); "
                          "this CuTe DSL release lays them out otherwise")  # fmt: skip
    params, args, fields = [], [], {}
    index = 0
    for position, (pname, (kind, what)) in enumerate(record["params"]):
        if kind == "const":
            args.append(Arg(pname, "const", (position,), value=what))
            continue
        if kind == "static":  # compiled in, its value not kept: to be left out (given, it is refused)
            args.append(Arg(pname, "const", (position,), options={"unknown": True, "what": what}))
            continue
        p = spec.params[index]
        if kind == "tensor":
            layout = layouts[pname]
            params.append(replace(p, type=f"bytes{layout.size}", name=pname, align=8))
            args.append(Arg(pname, "expand", (position,), params=(index,), converter="cute_tensor",
                            options=layout.options(p.offset)))  # fmt: skip
            fields[pname] = layout.field_names(pname)
        else:
            params.append(replace(p, type=what, name=pname, align=max(p.align, type_size(what))))
            args.append(Arg(pname, "param", (position,), index))
        index += 1
    block = record["block"]
    plan = LaunchPlan(block=tuple(block), shared_mem=int(record["smem"] or 0),
                      cluster=tuple(record["cluster"]) if record["cluster"] else None)  # fmt: skip
    return spec.replace(
        params=tuple(params), args=tuple(args), plan=plan,
        metadata={"frontend": "cute", "cute_version": version, "arch": cubin_arch(image) or "", "fields": fields},
    )  # fmt: skip


# --- a bare @cute.kernel: the launch function launchpad writes --------------------------------------

_LAUNCH_SOURCE = '''"""Written by launchpad.from_cute: launches one @cute.kernel."""
import cutlass
import cutlass.cute as cute

_kernel = None


@cute.jit
def launch({signature}):
    _kernel({names}).launch(grid=(1, 1, 1), block={block}, cluster={cluster}, smem={smem})
'''


def _launch_function(fn: Any, name: str, args: tuple, block: Any, cluster: Any, smem: Any) -> Any:
    """A ``@cute.jit`` function launching ``fn`` with ``args`` (CuTe compiles only functions whose
    source it can read: it is written to a file and imported)."""
    import cutlass

    names = list(inspect.signature(getattr(fn, "__wrapped__", fn)).parameters)
    if len(names) != len(args):
        raise ArgumentError(f"kernel {name!r} takes {len(names)} arguments ({', '.join(names)}), "
                            f"{len(args)} examples given")  # fmt: skip
    annotations = []
    for pname, value in zip(names, args):
        if isinstance(value, cutlass.Numeric):
            annotations.append(f"{pname}: cutlass.{type(value).__name__}")
        elif value is None or isinstance(value, (bool, int, float, str)):
            annotations.append(f"{pname}: cutlass.Constexpr")
        else:
            annotations.append(f"{pname}: cute.Tensor")
    block3 = tuple(block) if isinstance(block, (tuple, list)) else (int(block),)
    source = _LAUNCH_SOURCE.format(signature=", ".join(annotations), names=", ".join(names),
                                   block=tuple(block3) + (1,) * (3 - len(block3)),
                                   cluster=tuple(cluster) + (1,) * (3 - len(cluster)) if cluster else None,
                                   smem=None if smem is None else int(smem))  # fmt: skip
    folder = tempfile.mkdtemp(prefix="launchpad-cute-")
    path = os.path.join(folder, f"launch_{name}.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(f"_launchpad_cute_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    setattr(module, "_kernel", fn)  # noqa: B010  (the kernel it launches, a global of the written file)
    launch = module.launch
    launch._launchpad_folder = folder  # launchpad's own temporary folder, removed after the compile
    return launch

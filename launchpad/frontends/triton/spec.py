"""The common description of a Triton kernel: its Python signature's leaves and its metadata made
into one :class:`~launchpad.KernelSpec`, whichever way the kernel came in (:mod:`launchpad.frontends.triton.frontend`
in process, :mod:`launchpad.frontends.triton.cache_folder` from a cache folder).

The parameter list always comes from the cubin (``.nv.info``) and takes its types from Triton's
signature through :func:`~launchpad.core.params.apply_signature`, which checks count and sizes.
Python arguments map onto parameters with :class:`~launchpad.core.spec.Arg`: ``param`` (with
``align``/``multiple_of`` for the divisibility-16 specializations, so that a violating value
raises instead of faulting), ``const`` for constexprs and values specialized away (an int equal
to 1, None), ``expand`` for host tensor descriptors (``launchpad.frontends.triton.tensordesc``), and ``scratch``
for the hidden trailing ``global_scratch``/``profile_scratch`` pointers. What differs between
Triton releases is decided in :mod:`launchpad.frontends.triton.versions`.
"""

from __future__ import annotations

import json
import numbers
import re
from dataclasses import dataclass, replace
from typing import Any

from ...core.binary import kernels_in_image
from ...core.params import POINTER_DTYPES, Param, apply_signature
from ...core.ptx_writes import written_args
from ...core.spec import Arg, KernelSpec, LaunchPlan
from ...errors import ArgumentError, BinaryError
from .versions import Convention, convention
from .writes import written_arguments

__all__ = [
    "TENSORDESC",
    "Leaf",
    "build_spec",
    "jsonable",
    "launch_plan",
    "not_a_triton_type",
    "spec_metadata",
    "type_word",
    "with_writes",
]


@dataclass(frozen=True)
class Leaf:
    """One leaf of the Python signature (tuples flattened): a runtime value or a constant."""

    name: str  # the Python argument's name
    path: tuple[int, ...]  # (argument position, *indices into tuples)
    type: str  # Triton type word: "*fp32", "i32", "tensordesc<fp16[64, 64]>" or "constexpr"
    value: Any = None  # the constant, for "constexpr"
    divisible: bool = False  # specialized divisible by 16 (pointer alignment / int multiple)
    options: tuple[tuple[str, Any], ...] = ()  # a constant's Arg options ("unknown", "one_or_none")

    @property
    def label(self) -> str:
        return self.name + "".join(f"[{i}]" for i in self.path[1:])


# "tensordesc<fp16[64, 64]>"; a "?" block dimension is one the TTIR of a pointer-form descriptor does not record
TENSORDESC = re.compile(r"tensordesc<(\w+)\[([\d?,\s]*)\]")
_BOOL_WIDE = {"u1": "u32", "i1": "i32"}  # Triton 3.4 passed bools as 32-bit ints


def type_word(ty: str) -> str:
    """A Triton signature type as a launchpad type word."""
    if ty.startswith("*k"):  # a pointer to const data ("const" annotation): same bits
        return "*" + ty[2:]
    if ty == "nvTmaDesc":  # Triton 3.4's pre-encoded CUtensorMap, passed by value
        return "bytes128"
    return ty


# C, CUDA, NumPy and torch names of scalar types that are not Triton's, and the Triton type of each
_TRITON_NAMES = {
    **dict.fromkeys(("int", "int32", "int32_t", "signed", "signed int"), "i32"),
    **dict.fromkeys(("long", "long long", "int64", "int64_t", "long int", "ssize_t", "ptrdiff_t"), "i64"),
    **dict.fromkeys(("short", "int16", "int16_t"), "i16"),
    **dict.fromkeys(("char", "int8", "int8_t", "signed char"), "i8"),
    **dict.fromkeys(("unsigned", "unsigned int", "uint", "uint32", "uint32_t"), "u32"),
    **dict.fromkeys(("unsigned long", "unsigned long long", "uint64", "uint64_t", "size_t"), "u64"),
    **dict.fromkeys(("unsigned short", "uint16", "uint16_t"), "u16"),
    **dict.fromkeys(("unsigned char", "uint8", "uint8_t", "byte"), "u8"),
    **dict.fromkeys(("bool", "boolean"), "i1"),
    **dict.fromkeys(("float", "float32", "f32", "single"), "fp32"),
    **dict.fromkeys(("double", "float64", "f64"), "fp64"),
    **dict.fromkeys(("half", "float16", "f16", "__half"), "fp16"),
    **dict.fromkeys(("bfloat16", "bfloat", "__nv_bfloat16", "nv_bfloat16"), "bf16"),
}


def not_a_triton_type(ty: Any) -> str | None:
    """Why a signature type is a common non-Triton name (``"int"``, ``"float*"``, ``torch.float32``),
    with the Triton type to write instead; None for anything else, which Triton judges."""
    if isinstance(ty, type) and ty.__name__ in _TRITON_NAMES:  # the builtin int, float, bool
        return f"{ty.__name__} is not a Triton type: write {_TRITON_NAMES[ty.__name__]!r}"
    if type(ty).__name__ == "dtype" and str(ty).startswith("torch."):  # a torch.dtype, without importing torch
        word = _TRITON_NAMES.get(str(ty)[6:])
        if word is None:
            return f"{ty} is not a Triton type: write a Triton type as a string ('*fp32' for a pointer)"
        return f"{ty} is not a Triton type: write '*{word}' for a pointer (a tensor), {word!r} for a scalar"
    if not isinstance(ty, str):
        return None
    text = " ".join(ty.replace("*", " * ").split())  # "const float *" and "float*" alike
    pointer = text.endswith(" *") or text.startswith("* ")
    base = text.strip("* ").removeprefix("const ").removesuffix(" const").strip()
    torch_name = base.startswith("torch.")
    base = base.removeprefix("torch.").removeprefix("np.").removeprefix("numpy.").removeprefix("tl.")
    word = _TRITON_NAMES.get(base) or (base if base in _TRITON_NAMES.values() and ty.strip().endswith("*") else None)
    if word is None:
        return None
    if torch_name and not pointer:  # a tensor's dtype, most likely: its pointer first
        return f"{ty!r} is not a Triton type: write '*{word}' for a pointer (a tensor), {word!r} for a scalar"
    return f"{ty!r} is not a Triton type: write {('*' + word) if pointer else word!r}"


def divisible16(attrs: Any) -> bool:
    """Whether Triton attributes (``[["tt.divisibility", 16]]``) promise divisibility by 16."""
    for item in attrs or ():
        if isinstance(item, (list, tuple)) and len(item) == 2 and item[0] == "tt.divisibility":
            return int(item[1]) % 16 == 0
    return False


def jsonable(value: Any) -> Any:
    """A constant as JSON: tuples as lists; Triton dtypes, functions and the like as their str()."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if type(value).__name__ == "constexpr" and hasattr(value, "value"):  # tl.constexpr wrapper
        return jsonable(value.value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return str(value)


def launch_plan(md: dict, conv: Convention | None = None) -> LaunchPlan:
    """What every launch of a Triton kernel fixes, from its metadata."""
    conv = conv or convention(md)
    warp_size = (md.get("target") or {}).get("warp_size") or md.get("warp_size") or 32
    num_ctas = md.get("num_ctas", 1) or 1
    cluster: tuple[int, int, int] | None = None
    if num_ctas != 1:
        dims = md.get("cluster_dims")
        if dims:  # Triton 3.4/3.5: grid and cluster come from cluster_dims
            x, y, z = (int(d) for d in dims)
            cluster = (x, y, z)
            if cluster[1:] != (1, 1):
                raise ArgumentError(f"cluster_dims {cluster} (a cluster along y or z) is not supported")
        else:
            cluster = (num_ctas, 1, 1)
    # Triton's grid counts programs, each a cluster of num_ctas blocks along x
    return LaunchPlan(
        block=(warp_size * md["num_warps"], 1, 1),
        shared_mem=int(md.get("shared", 0) or 0),
        cluster=cluster,
        grid_in_clusters=cluster is not None,
        cluster_spread=cluster is not None,
        cooperative=bool(md.get("launch_cooperative_grid", False)),
        pdl=bool(md.get("launch_pdl", False)),
        oversized_shared=conv.oversized_shared,
    )


def build_spec(image: bytes, md: dict, leaves: list[Leaf] | None, display_name: str) -> KernelSpec:
    """The Kernel of a Triton cubin: params from the binary, typed by ``leaves``."""
    name = md["name"]
    try:
        binary = kernels_in_image(image, "cubin").get(name)
    except BinaryError as exc:
        raise BinaryError(f"kernel {display_name!r}: {exc}") from None
    if binary is None:
        symbol = f" (symbol {name})" if name != display_name else ""
        raise BinaryError(f"kernel {display_name!r}{symbol} is not in the cubin")
    cubin = list(binary.params)
    conv = convention(md)
    if leaves is None:
        return _build_untyped(image, md, binary, cubin, conv, display_name)

    descriptors = md.get("tensordesc_meta") or []
    words: list[str] = []
    labels: list[str] = []
    args: list[Arg] = []
    n_desc = 0
    for leaf in leaves:
        if leaf.type == "constexpr":
            args.append(Arg(leaf.name, "const", leaf.path, value=jsonable(leaf.value), options=dict(leaf.options)))
            continue
        m = TENSORDESC.match(leaf.type)
        if m:
            elem = m.group(1)
            dims_text = [d.strip() for d in m.group(2).split(",") if d.strip()]
            rank = len(dims_text)
            block = None if "?" in dims_text else [int(d) for d in dims_text]
            meta = descriptors[n_desc] if descriptors else None
            n_desc += 1
            start = len(words)
            dims = [f"{leaf.label}.shape[{d}]" for d in range(rank)]
            strides = [f"{leaf.label}.strides[{d}]" for d in range(rank)]
            if meta:
                words += ["bytes128"] + ["i32"] * rank + ["i64"] * rank
                labels += [leaf.label, *dims, *strides]
            else:
                flags = conv.descriptor_flags
                words += ["*" + elem] + ["i64"] * (2 * rank) + ["u1"] * len(flags) + ["i32"] * rank + ["i64"] * rank
                labels += [leaf.label, *dims, *strides] + [f"{leaf.label}.{f}" for f in flags] + [*dims, *strides]
            args.append(Arg(
                leaf.name, "expand", leaf.path, params=tuple(range(start, len(words))), converter="tensordesc",
                options=_descriptor_options(rank, elem if POINTER_DTYPES.get(elem) else "", block, meta, conv),
            ))  # fmt: skip
            continue
        word = type_word(leaf.type)
        pointer = word.startswith("*")
        args.append(Arg(
            leaf.name, "param", leaf.path, param=len(words),
            align=16 if leaf.divisible and pointer else 0,
            multiple_of=16 if leaf.divisible and not pointer and word[0] in "iu" else 0,
        ))  # fmt: skip
        words.append(word)
        labels.append(leaf.label)
    for which in conv.scratch:
        args.append(_scratch_arg(md, which, len(words), conv))
        words.append("*i8")
        labels.append(f"{which}_scratch")
    # Triton 3.4 passed bools as 32-bit ints; the binary says which width this one has.
    words = [
        _BOOL_WIDE[w] if w in _BOOL_WIDE and i < len(cubin) and cubin[i].size == 4 else w for i, w in enumerate(words)
    ]
    params = apply_signature(cubin, words, display_name)
    params = [replace(p, name=label) for p, label in zip(params, labels)]
    return KernelSpec(
        image, "cubin", name, tuple(params), tuple(args), launch_plan(md, conv), display_name, spec_metadata(md)
    )


def _descriptor_options(rank: int, dtype: str, block: list[int] | None, meta: Any, conv: Convention) -> dict:
    """The ``tensordesc`` converter's options for one descriptor argument (see :mod:`launchpad.frontends.triton.tensordesc`)."""
    return {
        "rank": rank, "dtype": dtype, "block": block, "meta": jsonable(meta) if meta else None,
        "flags": list(conv.descriptor_flags), "fp4_shape_doubled": conv.fp4_shape_doubled,
        "tf32_maps": conv.tf32_maps,
    }  # fmt: skip


def _scratch_arg(md: dict, which: str, param: int, conv: Convention) -> Arg:
    """The hidden ``global_scratch`` or ``profile_scratch`` pointer: per-launch memory, NULL when unused."""
    options = {"size": int(md.get(f"{which}_scratch_size") or 0), "align": int(md.get(f"{which}_scratch_align") or 1)}
    if which == "profile" and conv.zeroed_profile_scratch:
        options["zero"] = True
    return Arg(f"{which}_scratch", "scratch", (), param=param, options=options)


def _build_untyped(image, md, binary, cubin: list[Param], conv: Convention, display_name: str) -> KernelSpec:
    """A cubin and its metadata only (no TTIR): sizes from the binary, one argument per param.

    Tensor descriptors in TMA form are still recognized (a 128-byte parameter with a
    ``tensordesc_meta`` entry) and take a descriptor; everything else takes its raw value.
    """
    scratch = conv.scratch
    n = len(cubin) - len(scratch)
    if n < 0:
        raise BinaryError(f"kernel {md['name']!r}: the cubin has fewer parameters than Triton's hidden ones")
    descriptors = [m for m in md.get("tensordesc_meta") or [] if m]
    params: list[Param] = []
    args: list[Arg] = []
    i = n_desc = 0
    typed = lambda p, w, label: replace(apply_signature([p], [w], display_name)[0], name=label)
    while i < n:
        p = cubin[i]
        position = len({a.path[0] for a in args})
        if p.size == 128 and n_desc < len(descriptors):
            meta = descriptors[n_desc]
            rank = len(meta["block_size"])
            label = f"arg{position}"
            words = ["bytes128"] + ["i32"] * rank + ["i64"] * rank
            for j, w in enumerate(words):
                params.append(
                    typed(cubin[i + j], w, label if j == 0 else f"{label}.{'shape' if j <= rank else 'strides'}")
                )
            args.append(
                Arg(
                    label,
                    "expand",
                    (position,),
                    params=tuple(range(i, i + len(words))),
                    converter="tensordesc",
                    options=_descriptor_options(rank, "", None, meta, conv),
                )
            )
            i += len(words)
            n_desc += 1
            continue
        params.append(replace(p, name=f"arg{position}"))
        args.append(Arg(f"arg{position}", "param", (position,), param=i))
        i += 1
    for which, p in zip(scratch, cubin[n:]):
        params.append(typed(p, "*i8", f"{which}_scratch"))
        args.append(_scratch_arg(md, which, p.index, conv))
    return KernelSpec(
        image, "cubin", md["name"], tuple(params), tuple(args), launch_plan(md, conv), display_name, spec_metadata(md)
    )


def spec_metadata(md: dict) -> dict:
    """Triton's metadata as JSON (the same keys as the cache's ``NAME.json``)."""
    return json.loads(json.dumps(jsonable(dict(md))))


def with_writes(spec: KernelSpec, ttir: str | None, ptx: str | None = None) -> KernelSpec:
    """``spec`` with ``metadata["written"]``: the indices (into ``spec.args``) of the arguments its
    kernel may write through, as its TTIR says (:mod:`launchpad.frontends.triton.writes`), else
    its PTX (:mod:`launchpad.core.ptx_writes`: a Gluon kernel's, whose IR is not TTIR, or a TTIR
    with inline assembly); the spec as it is where neither can say (or the TTIR's arguments do not
    pair one to one with the spec's runtime arguments: a tensor descriptor passed as its parts)."""
    # TODO(launchpad): a Gluon kernel that takes host TMA descriptors gets None from both (its PTX
    # included), so torch.compile declares every tensor argument written.
    found = written_arguments(ttir, spec.name) if ttir else None
    runtime = [k for k, a in enumerate(spec.args) if a.kind in ("param", "expand")]
    if found is not None and len(found) == len(runtime):
        return spec.replace(metadata={**spec.metadata, "written": [k for k, w in zip(runtime, found) if w]})
    written = written_args(spec.args, len(spec.params), ptx, spec.name) if ptx else None
    return spec if written is None else spec.replace(metadata={**spec.metadata, "written": written})

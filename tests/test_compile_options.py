"""The compile options of ``compile_cuda`` and ``compile_cuda_module`` given wrong on first touch:
each is refused before NVRTC (or, where only NVRTC can tell, with what it takes), naming the kernel
and saying what to write instead. No GPU needed."""

from __future__ import annotations

import pytest

import launchpad as lp

SOURCE = 'extern "C" __global__ void fill(float* y, float v, int n) { }'


@pytest.mark.parametrize("arch", [90.0, 9.0])
def test_a_float_architecture_is_refused_with_what_to_write(arch):
    """9.0 and 90.0 both mean sm_90: refused by type, not read as compute capability 90 or 900."""
    with pytest.raises(lp.ArgumentTypeError) as e:
        lp.compile_cuda(SOURCE, "fill", arch=arch)
    assert str(e.value).startswith(
        f"kernel 'fill': arch {arch!r} is not an architecture launchpad can compile for (a float, which cannot tell "
        "9.0 from 90: write 90, '9.0' or 'sm_90'). Give 'sm_XY'"
    )
    assert "no GPU has compute capability" not in str(e.value)
    assert lp.compile_cuda(SOURCE, "fill", arch="9.0").name == "fill"


def test_an_architecture_nvrtc_does_not_compile_for_lists_those_it_does():
    """NVRTC's own words are "invalid value for --gpu-architecture": the message lists what it takes."""
    from launchpad.core.arch import nvrtc_archs

    version, taken = nvrtc_archs()
    assert 90 in taken and 35 not in taken
    with pytest.raises(lp.CompileError) as e:
        lp.compile_cuda(SOURCE, "fill", arch="sm_35")
    message = str(e.value)
    assert message.startswith("NVRTC could not compile kernel 'fill' for sm_35: ")
    assert f"sm_35 is not an architecture the installed NVRTC {version} compiles for: write one of " in message
    assert "sm_80, " in message and "sm_90, " in message and "sm_35," not in message
    assert "invalid value for --gpu-architecture" in e.value.log


def test_the_architecture_list_says_which_the_installed_nvrtc_takes():
    """resolve_arch's list is every CUDA release's (35 to 121); it says which of them NVRTC compiles for."""
    from launchpad.core.arch import nvrtc_archs

    version, taken = nvrtc_archs()
    with pytest.raises(lp.ArgumentError) as e:
        lp.compile_cuda(SOURCE, "fill", arch="sm_95")
    assert "The architectures (XY): 35, 37, " in str(e.value)
    assert f"(those of CUDA 11 to 13; the installed NVRTC {version} compiles for {', '.join(map(str, taken))})" in str(
        e.value
    )


@pytest.mark.parametrize(("options", "argument", "write"), [
    (["-arch=sm_80"], "arch", "arch='sm_80'"),
    (["--gpu-architecture=compute_80"], "arch", "arch='compute_80'"),
    (["-lineinfo", "-arch", "sm_80"], "arch", "arch='sm_80'"),
    (["--std=c++14"], "std", "std='c++14'"),
    (["-std=c++14"], "std", "std='c++14'"),
])  # fmt: skip
def test_options_that_set_arch_or_std_are_refused(options, argument, write):
    """The raw flag would silently win over arch= or std=."""
    with pytest.raises(lp.ArgumentError) as e:
        lp.compile_cuda(SOURCE, "fill", arch="sm_90", options=options)
    message = str(e.value)
    assert message.startswith("kernel 'fill': options has ")
    assert f"which would silently replace {argument}=" in message
    assert f"give it once, in {argument}= ({write}), not in options" in message


def test_a_signature_in_cpp_words_gets_the_type_words_to_write():
    with pytest.raises(lp.ArgumentError) as e:
        lp.compile_cuda(SOURCE, "fill", arch="sm_90", signature="float*, float, int")
    message = str(e.value)
    assert message.startswith("kernel 'fill': unknown type word 'float*' in the signature: write '*fp32' ")
    assert "(the whole signature: '*fp32, fp32, i32')" in message
    assert "'i32' for int, 'fp32' for float" in message
    with pytest.raises(lp.ArgumentError, match=r"^kernel 'fill': unknown type word 'double' in the signature: "
                                               r"write 'fp64'"):  # fmt: skip
        lp.compile_cuda_module(SOURCE, ["fill"], arch="sm_90", signatures={"fill": ["*fp32", "double", "i32"]})
    assert lp.compile_cuda(SOURCE, "fill", arch="sm_90", signature="*fp32, fp32, i32").name == "fill"


@pytest.mark.parametrize(("signature", "got"), [(3, "int 3"), (["*fp32", 3, "i32"], "int 3 among them")])
def test_a_signature_of_the_wrong_type(signature, got):
    with pytest.raises(lp.ArgumentTypeError) as e:
        lp.compile_cuda(SOURCE, "fill", arch="sm_90", signature=signature)
    assert str(e.value) == (
        f"kernel 'fill': signature takes a str or a list of type words, got {got}: write '*fp32, fp32, i32' or "
        "['*fp32', 'fp32', 'i32']"
    )


def test_defines_with_a_name_that_is_no_str():
    with pytest.raises(lp.ArgumentTypeError) as e:
        lp.compile_cuda(SOURCE, "fill", arch="sm_90", defines={4: 4})
    assert str(e.value).startswith("kernel 'fill': defines takes macro names as str ({'N': 4}), got int 4")


def test_defines_of_a_bool_is_1_or_0():
    """-DN=True would define N as an identifier the preprocessor reads as 0."""
    source = SOURCE + "\n#if !(ON == 1 && OFF == 0)\n#error ON and OFF\n#endif\n"
    assert lp.compile_cuda(source, "fill", arch="sm_90", defines={"ON": True, "OFF": False}).name == "fill"


@pytest.mark.parametrize("value", [[1, 2], {"a": 1}, b"4"])
def test_defines_of_a_value_nvrtc_cannot_spell(value):
    with pytest.raises(lp.ArgumentTypeError) as e:
        lp.compile_cuda(SOURCE, "fill", arch="sm_90", defines={"N": value})
    message = str(e.value)
    assert message.startswith("kernel 'fill': defines['N'] takes an int, a float, a str (the macro's text) or None")
    assert f"got {type(value).__name__} {value!r}: write the text it stands for as a str" in message


def test_defines_still_taken():
    source = SOURCE + "\n#if !(N == 4 && defined(BARE))\n#error N\n#endif\nconstexpr float X = SCALE;\n"
    k = lp.compile_cuda(source, "fill", arch="sm_90", defines={"N": 4, "BARE": None, "SCALE": 0.5})
    assert k.name == "fill"


def test_a_module_of_no_kernels_is_refused():
    with pytest.raises(lp.ArgumentError) as e:
        lp.compile_cuda_module(SOURCE, [], arch="sm_90")
    assert str(e.value) == "compile_cuda_module takes at least one kernel name, got none; the source defines fill: " \
                           "write ['fill']"  # fmt: skip
    with pytest.raises(lp.ArgumentError, match=r"^compile_cuda_module takes at least one kernel name, got none$"):
        lp.compile_cuda_module("__device__ int x;", (), arch="sm_90")

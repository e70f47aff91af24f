"""The messages a newcomer meets in their first hours, each saying what to do next (issue 30):
loading a file that is not a kernel artifact (or no file), a numpy array where a tensor goes, a
GPU's name as ``arch``, and compiling without ``arch`` on a machine without a GPU."""

from __future__ import annotations

import errno
import json
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch

import launchpad as lp
from launchpad.core import driver as _driver
from launchpad.core.arch import GPU_ARCHS, resolve_arch
from launchpad.core.binary import kernels_in_image
from launchpad.launch.checks import describe

SOURCE = 'extern "C" __global__ void scale(float* y, const float* x, float a, int n) {}'
#: The end of every refusal of a file that is not an artifact: what one is and how to make one.
WHAT_ONE_IS = (
    'A launchpad kernel artifact is the JSON file Kernel.save(path) writes, whose "format" is "launchpad.kernel": '
    "make one with the save(path) of any launchpad Kernel (from lp.compile_cuda, lp.from_triton, lp.from_numba...), "
    "then lp.load(path) loads it"
)


@pytest.fixture(scope="module")
def kernel():
    return lp.compile_cuda(SOURCE, "scale", arch="sm_90")


# --- lp.load of something that is not an artifact ------------------------------------------------


def refusal(path: Path) -> str:
    with pytest.raises(lp.BinaryError) as e:
        lp.load(path)
    return str(e.value)


def test_a_python_file_is_not_an_artifact_and_the_message_says_what_one_is(tmp_path):
    path = tmp_path / "kernels.py"
    path.write_text("import torch\n\n\ndef f(x):\n    return x\n")
    assert refusal(path) == (
        f"{str(path)!r} is not a launchpad kernel artifact: it is not JSON but Python source: import it and make "
        f"Kernels of its kernels (lp.compile_cuda, lp.from_triton, lp.from_numba...). {WHAT_ONE_IS}"
    )


@pytest.mark.parametrize(
    "content, why",
    [
        ({"format": "x"}, "its \"format\" is 'x'"),
        ({"kernels": []}, 'its JSON has no "format"'),
        ([1, 2], 'it holds a JSON list, not an object with "format": "launchpad.kernel"'),
        ({"name": "add_kernel", "num_warps": 4, "hash": "ab"},
         "it is the metadata Triton writes beside a cubin in its cache, which lp.load_triton(path) loads"),
    ],
    ids=["other-format", "no-format", "a-list", "triton-metadata"],
)  # fmt: skip
def test_other_json_is_not_an_artifact_and_the_message_says_why(tmp_path, content, why):
    path = tmp_path / "other.json"
    path.write_text(json.dumps(content))
    assert refusal(path) == f"{str(path)!r} is not a launchpad kernel artifact: {why}. {WHAT_ONE_IS}"


def test_a_cubin_or_bytes_are_not_an_artifact(kernel, tmp_path):
    cubin = tmp_path / "scale.cubin"
    cubin.write_bytes(kernel.image)
    assert refusal(cubin) == (
        f"{str(cubin)!r} is not a launchpad kernel artifact: it is a cubin, which lp.load_cubin(path, kernel_name) "
        f"loads. {WHAT_ONE_IS}"
    )
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\xff\xfe junk")
    assert refusal(junk) == (
        f"{str(junk)!r} is not a launchpad kernel artifact: it is not text (it starts b'\\x00\\xff\\xfe junk'). "
        + WHAT_ONE_IS
    )


def test_a_truncated_artifact_is_still_damaged_not_something_else(kernel, tmp_path):
    path = kernel.save(tmp_path / "scale.json")
    path.write_text(path.read_text()[:400])
    message = refusal(path)
    assert message.startswith(f"launchpad artifact {str(path)!r} (kernel 'scale') is damaged or truncated: it is not ")
    assert message.endswith("; save the kernel again") and "not a launchpad kernel artifact" not in message


def test_a_missing_file_is_a_file_not_found_error(tmp_path):
    path = tmp_path / "absent.json"
    with pytest.raises(FileNotFoundError) as e:
        lp.load(path)
    assert isinstance(e.value, lp.MissingFileError) and isinstance(e.value, lp.LaunchpadError)
    assert e.value.errno == errno.ENOENT and e.value.path == str(path)
    assert str(e.value) == f"no file {str(path)!r} to load: {WHAT_ONE_IS[0].lower()}{WHAT_ONE_IS[1:]}"
    cubin = tmp_path / "absent.cubin"
    with pytest.raises(lp.MissingFileError) as e:
        lp.load_cubin(cubin, "scale")
    assert str(e.value) == f"kernel 'scale': no file {str(cubin)!r} (a cubin, fatbin or PTX image was expected)"


def test_the_missing_file_error_is_public_and_documented():
    assert "MissingFileError" in lp.__all__ and issubclass(lp.MissingFileError, FileNotFoundError)
    docs = Path(__file__).resolve().parents[1] / "docs"
    if not docs.is_dir():
        pytest.skip("no docs/ beside the tests")
    assert "| `MissingFileError` (also a `FileNotFoundError`) |" in (docs / "errors.md").read_text()
    assert "::: launchpad.MissingFileError" in (docs / "api.md").read_text()


# --- a numpy array where a tensor goes -------------------------------------------------------------


def test_describe_gives_an_arrays_shape_and_dtype_never_its_values():
    a = np.linspace(-1, 1, 4096, dtype=np.float32)
    assert describe(a) == "a numpy.ndarray of shape (4096,) and dtype float32"
    assert describe(np.zeros((3, 5), dtype=np.int64)) == "a numpy.ndarray of shape (3, 5) and dtype int64"
    # anything long is elided in its middle, on one line: never cut off mid-message
    assert describe(list(range(1000))) == "list [0, 1, 2, 3, 4, 5, ...]"
    long = describe("x" * 500)
    assert long.startswith("str 'xxx") and long.endswith("xxx'") and "..." in long and len(long) < 100
    assert describe(5) == "int 5" and describe("1.0") == "str '1.0'"


def test_a_numpy_array_for_a_pointer_says_how_to_pass_it(kernel, fake_gpu):
    k = fake_gpu.install(kernel)
    a = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    where = "kernel 'scale', argument 1 ('x'), param 1 (*fp32)"
    with pytest.raises(lp.ArgumentTypeError) as e:
        k.launch(16, 256, torch.empty(4096), a, 2.0, 4096)
    assert str(e.value) == (
        f"{where}: expected a tensor or device pointer, got a numpy.ndarray of shape (4096,) and dtype float32, which "
        "is in host memory: pass a CUDA tensor of it, torch.from_numpy(a).cuda()"
    )
    with pytest.raises(lp.ArgumentTypeError) as e:  # another dtype than the kernel's: the conversion says it
        k[16, 256](torch.empty(4096), a.astype(np.float64), 2.0, 4096)
    assert str(e.value).endswith(
        "got a numpy.ndarray of shape (4096,) and dtype float64, which is in host memory: pass a CUDA tensor of it, "
        "torch.from_numpy(a).to('cuda', torch.float32)"
    )
    assert not fake_gpu.launches


def test_a_numpy_array_for_an_untyped_pointer_says_how_to_pass_it(kernel, fake_gpu):
    k = fake_gpu.install(lp.load_cubin(kernel.image, "scale"))  # sizes only: no dtype to convert to
    with pytest.raises(lp.ArgumentTypeError) as e:
        k.launch(1, 32, torch.empty(4), np.ones((2, 2), dtype=np.float16), 2.0, 4)
    assert str(e.value).endswith(
        "got a numpy.ndarray of shape (2, 2) and dtype float16, which is in host memory: pass a CUDA tensor of it, "
        "torch.from_numpy(a).cuda()"
    )
    assert "array(" not in str(e.value)


# --- arch: a GPU's name ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given, arch",
    [("H100", "sm_90"), ("h200", "sm_90"), ("H800", "sm_90"), ("GH200", "sm_90"), ("a100", "sm_80"),
     ("A800", "sm_80"), ("a30", "sm_80"), ("A10", "sm_86"), ("a10g", "sm_86"), ("L4", "sm_89"), ("l40", "sm_89"),
     ("L40S", "sm_89"), ("RTX4090", "sm_89"), ("RTX 4090", "sm_89"), ("b200", "sm_100"), ("GB200", "sm_100"),
     ("rtx5090", "sm_120"), ("V100", "sm_70"), ("T4", "sm_75"), ("NVIDIA H100 80GB HBM3", "sm_90"),
     ("A100-SXM4-80GB", "sm_80"), ("sm_90", "sm_90"), ("SM_90a", "sm_90a"), ("compute_90", "compute_90"),
     ("sm_100f", "sm_100f"), ("90", "sm_90"), ("9.0", "sm_90"), (90, "sm_90"), ((8, 9), "sm_89")],
)  # fmt: skip
def test_arch_takes_a_gpus_name(given, arch):
    assert resolve_arch(given) == arch


def test_compile_for_a_gpus_name():
    k = lp.compile_cuda(SOURCE, "scale", arch="H100")
    assert k.metadata["arch"] == "sm_90"
    assert kernels_in_image(k.image, "cubin")["scale"].arch == "sm_90"  # what NVRTC built, read from the cubin


@pytest.mark.parametrize("given", ["h1000", "sm_h100", "hopper", 9, 90.0])
def test_an_unknown_arch_is_refused_before_nvrtc_listing_the_forms_and_names(given):
    with pytest.raises(lp.ArgumentError) as e:
        lp.compile_cuda(SOURCE, "scale", arch=given)
    message = str(e.value)
    assert message.startswith(f"kernel 'scale': arch {given!r} is not an architecture launchpad can compile for")
    assert (
        "Give 'sm_XY' (a real architecture, e.g. 'sm_90' for an H100), 'sm_XYa' (with its architecture-specific "
        "features, 'sm_90a'), 'compute_XY' (PTX for XY and newer), a compute capability (90, '9.0', (9, 0)) or a "
        "GPU's name, any case: v100 (sm_70), t4 (sm_75)"
    ) in message
    assert all(f"{name} ({arch})" in message for name, arch in GPU_ARCHS.items())


def test_a_near_miss_names_the_closest_gpu():
    with pytest.raises(lp.ArgumentError, match=r"^kernel 'scale': arch 'h1000' is not an architecture launchpad can "
                       r"compile for \(did you mean 'h100', sm_90\?\)\. Give 'sm_XY'"):  # fmt: skip
        lp.compile_cuda(SOURCE, "scale", arch="h1000")


# --- compiling without arch and without a GPU ------------------------------------------------------

NO_DRIVER = (
    'no CUDA driver found ("cuda" is an NVIDIA driver library and can only be found via system search.); launching '
    "needs one, compiling does not: give the target architecture (arch='sm_90' for an H100) to compile without a GPU"
)
NO_ARCH = (
    'cannot compile kernel {name!r} for this machine\'s GPU: no CUDA driver found ("cuda" is an NVIDIA driver '
    "library and can only be found via system search.). Pass the target architecture to compile without a GPU: "
    'arch="sm_90" for an H100, or the GPU\'s name (arch="h100", "a100", "l4", "b200"...)'
)


@pytest.fixture
def no_gpu(monkeypatch):
    """No driver to ask for the current GPU's architecture, as on a machine without one."""

    def compute_capability(device):
        raise lp.NoDeviceError(NO_DRIVER)

    monkeypatch.setattr(_driver, "device_count", lambda: 0)
    monkeypatch.setattr(_driver, "compute_capability", compute_capability)


def scale(out, x, alpha):  # a Numba kernel (its body needs nothing of numba.cuda)
    out[0] = alpha * x[0]


def launchpad_frames(tb) -> list[str]:
    return [f.name for f in traceback.extract_tb(tb) if "/launchpad/" in f.filename.replace("\\", "/")]


def test_from_numba_without_arch_and_gpu_names_the_kernel_and_says_to_pass_arch(no_gpu):
    pytest.importorskip("numba.cuda")
    with pytest.raises(lp.NoDeviceError) as e:
        lp.from_numba(scale, "void(float32[::1], float32[::1], float32)")
    assert str(e.value) == NO_ARCH.format(name="scale")
    assert e.value.__cause__ is None and e.value.__suppress_context__  # one error, not a chain
    assert launchpad_frames(e.tb) == ["from_numba", "numba_spec", "resolve_arch"]


def test_compile_cuda_without_arch_and_gpu_names_the_kernel(no_gpu):
    with pytest.raises(lp.NoDeviceError) as e:
        lp.compile_cuda(SOURCE, "scale")
    assert str(e.value) == NO_ARCH.format(name="scale")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the real message of a machine without a GPU")
def test_from_numba_on_this_machine_without_a_gpu():
    pytest.importorskip("numba.cuda")
    with pytest.raises(lp.NoDeviceError) as e:
        lp.from_numba(scale, "void(float32[::1], float32[::1], float32)")
    assert str(e.value).startswith("cannot compile kernel 'scale' for this machine's GPU: ")
    assert 'Pass the target architecture to compile without a GPU: arch="sm_90" for an H100' in str(e.value)


def test_from_numba_takes_a_gpus_name():
    pytest.importorskip("numba.cuda")
    k = lp.from_numba(scale, "void(float32[::1], float32[::1], float32)", arch="H100")
    assert k.metadata["arch"] == "sm_90" and kernels_in_image(k.image, "cubin")[k.name].arch == "sm_90"

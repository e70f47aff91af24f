"""First-touch mistakes with saving and loading artifacts, ``from_triton`` and ``launchpad.record``:
each is refused with launchpad's error class and a message that names what was given and says
what to write instead, before anything is written, compiled or captured."""

from __future__ import annotations

import json
import re

import pytest
import torch

import launchpad as lp

SOURCE = 'extern "C" __global__ void fill(float* y, float v, int n) { int i = threadIdx.x; if (i < n) y[i] = v; }'


@pytest.fixture(scope="module")
def fill():
    return lp.compile_cuda(SOURCE, "fill", arch="sm_90")


# --- Kernel.save and launchpad.load ------------------------------------------------------------------


def test_save_into_a_missing_folder_is_refused_before_writing(fill, tmp_path):
    path = tmp_path / "no" / "k.json"
    with pytest.raises(lp.ArgumentError, match=r"^kernel 'fill': save: cannot write '.*/no/k\.json', its folder "
                       r"'.*/no' does not exist; create the folder first \(pathlib\.Path\('.*/no'\)\.mkdir\(parents="
                       r"True\)\) or save to a folder that exists$"):  # fmt: skip
        fill.save(path)
    assert list(tmp_path.iterdir()) == []


def test_save_to_a_folder_is_refused_before_writing_beside_it(fill, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(lp.ArgumentError) as info:
        fill.save(str(folder))
    assert str(info.value) == (f"kernel 'fill': save takes the path of a file, and {str(folder)!r} is a folder: write "
                               f"a file name in it, k.save({str(folder / 'fill.json')!r})")  # fmt: skip
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and list(folder.iterdir()) == []  # no temporary file


def test_save_takes_a_path(fill):
    with pytest.raises(lp.ArgumentTypeError, match=r"^kernel 'fill': save takes the path of the file to write \(a str "
                       r"or pathlib\.Path\), got int 3: write k\.save\('fill\.json'\)$"):  # fmt: skip
        fill.save(3)


@pytest.mark.parametrize(("value", "got"), [(None, "None"), (3, "int 3"), ({"format": 1}, "dict {'format': 1}"),
                                            (b"{}", "bytes b'{}'")])  # fmt: skip
def test_load_takes_a_path(value, got):
    content = ", not its content" if isinstance(value, (bytes, dict)) else ""
    with pytest.raises(lp.ArgumentTypeError) as info:
        lp.load(value)
    assert str(info.value) == (f"load takes the path of a saved artifact, got {got}: pass the path of the file "
                               f"Kernel.save(path) wrote{content}, as a str or pathlib.Path: lp.load('kernel.json')")  # fmt: skip


def test_load_of_the_artifacts_json_text_says_to_pass_its_path(fill, tmp_path):
    text = fill.save(tmp_path / "fill.json").read_text()
    assert len(text) > 1000  # a name too long for a file: the OS refuses it
    with pytest.raises(lp.ArgumentError) as info:
        lp.load(text)
    message = str(info.value)
    assert message.startswith("load takes the path of a saved artifact and was given a launchpad artifact's JSON text "
                              "('{\"format\": \"launchpad.kernel\"")  # fmt: skip
    assert message.endswith("...) instead: pass the path of the file it is in, or write it to one first "
                            "(pathlib.Path('kernel.json').write_text(text)) and lp.load('kernel.json')")  # fmt: skip
    assert len(message) < 300 and "File name too long" not in message
    with pytest.raises(lp.ArgumentError, match=r"^load takes the path of a saved artifact and was given JSON text "):
        lp.load(json.dumps({"a": 1}))  # short JSON: no file of that name
    assert lp.load(str(tmp_path / "fill.json")).name == "fill"  # a path still loads


# --- from_triton -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def add_kernel():
    pytest.importorskip("triton")
    import triton_kernels as K

    return K.add_kernel


def sm90():
    from triton.backends.compiler import GPUTarget

    return GPUTarget("cuda", 90, 32)


SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}


def test_from_triton_names_a_misspelled_constexpr(add_kernel):
    with pytest.raises(lp.ArgumentError) as info:
        lp.from_triton(add_kernel, signature=SIG, constexprs={"BLK": 128}, target=sm90())
    assert str(info.value) == ("from_triton: constexprs names unknown arguments ['BLK']: no argument of kernel "
                               "'add_kernel' is named 'BLK'; did you mean 'BLOCK'? (its arguments: x_ptr, y_ptr, "
                               "out_ptr, n, BLOCK)")  # fmt: skip
    with pytest.raises(lp.ArgumentError, match=r"signature names unknown arguments \['nn'\]: no argument of kernel "
                       r"'add_kernel' is named 'nn'; did you mean 'n'\?"):  # fmt: skip
        lp.from_triton(add_kernel, signature={**SIG, "nn": "i32"}, constexprs={"BLOCK": 128}, target=sm90())
    with pytest.raises(lp.ArgumentError, match=r"attrs names unknown arguments \['x'\]: no argument of kernel "
                       r"'add_kernel' is named 'x'"):  # fmt: skip
        lp.from_triton(add_kernel, signature=SIG, constexprs={"BLOCK": 128}, attrs={"x": "D"}, target=sm90())


@pytest.mark.parametrize(("name", "ty", "fix"), [("n", "int", "'i32'"), ("x_ptr", "float*", "'*fp32'"),
                                                 ("x_ptr", "const half *", "'*fp16'"), ("n", "int64_t", "'i64'")])  # fmt: skip
def test_from_triton_names_the_triton_type_of_a_c_type(add_kernel, name, ty, fix):
    with pytest.raises(lp.ArgumentError) as info:
        lp.from_triton(add_kernel, signature={**SIG, name: ty}, constexprs={"BLOCK": 128}, target=sm90())
    assert not isinstance(info.value, lp.CompileError)
    assert (
        str(info.value)
        == f"kernel 'add_kernel', argument {name!r}: signature type {ty!r} is not a Triton type: write {fix}"
    )


def test_from_triton_names_the_triton_type_of_a_torch_dtype(add_kernel):
    with pytest.raises(lp.ArgumentTypeError) as info:
        lp.from_triton(add_kernel, signature={**SIG, "x_ptr": torch.float32}, constexprs={"BLOCK": 128}, target=sm90())
    assert str(info.value) == ("kernel 'add_kernel', argument 'x_ptr': signature type torch.float32 is not a Triton "
                               "type: write '*fp32' for a pointer (a tensor), 'fp32' for a scalar")  # fmt: skip
    with pytest.raises(lp.ArgumentError, match=r"argument 'n': signature type 'int' is not a Triton type: write 'i32'"):
        lp.from_triton(add_kernel, signature="*fp32, *fp32, *fp32, int", constexprs={"BLOCK": 128}, target=sm90())


def test_from_triton_refuses_a_signature_of_another_type(add_kernel):
    with pytest.raises(lp.ArgumentTypeError, match=r"^kernel 'add_kernel': signature takes a dict of argument name -> "
                       r"Triton type .*; got int 5$"):  # fmt: skip
        lp.from_triton(add_kernel, signature=5, constexprs={"BLOCK": 128}, target=sm90())


def test_from_triton_refuses_a_count_that_is_no_int(add_kernel):
    with pytest.raises(lp.ArgumentTypeError) as info:
        lp.from_triton(add_kernel, signature=SIG, constexprs={"BLOCK": 128}, num_warps="4", target=sm90())
    assert (
        str(info.value) == "from_triton (kernel 'add_kernel'): num_warps takes an int, got str '4': write num_warps=4"
    )
    with pytest.raises(lp.ArgumentTypeError, match=r"num_stages takes an int, got float 2\.5$"):
        lp.from_triton(add_kernel, signature=SIG, constexprs={"BLOCK": 128}, num_stages=2.5, target=sm90())


def test_from_triton_refuses_an_option_triton_would_ignore(add_kernel):
    with pytest.raises(lp.ArgumentError) as info:
        lp.from_triton(add_kernel, signature=SIG, constexprs={"BLOCK": 128}, num_wraps=4, target=sm90())
    assert str(info.value) == ("from_triton (kernel 'add_kernel'): 'num_wraps' is not a Triton compile option (Triton "
                               "would ignore it); did you mean 'num_warps'?")  # fmt: skip
    with pytest.raises(lp.ArgumentError, match=r"'zzz' is not a Triton compile option \(Triton would ignore it\); "
                       r"its options are .*num_warps"):  # fmt: skip
        lp.from_triton(add_kernel, signature=SIG, constexprs={"BLOCK": 128}, zzz=1, target=sm90())
    k = lp.from_triton(add_kernel, signature=SIG, constexprs={"BLOCK": 128}, num_warps=2, maxnreg=128, target=sm90())
    assert k.plan.block == (64, 1, 1)  # Triton's own options still pass


# --- launchpad.record ------------------------------------------------------------------------------


def _step(graphs, fill):
    k = graphs.fake.install(fill)
    return k, (lambda y, v: k[1, 32](y, v, 4)), (torch.zeros(4), 1.0)


@pytest.mark.parametrize(("warmup", "got"), [("yes", "str 'yes'"), ("3", "str '3': write warmup=3"),
                                             (2.5, "float 2.5"), (None, "NoneType None")])  # fmt: skip
def test_record_warmup_takes_a_bool_or_a_count(graphs, fill, warmup, got):
    _, step, args = _step(graphs, fill)
    with pytest.raises(lp.ArgumentTypeError) as info:
        graphs.record(step, *args, warmup=warmup)
    assert (
        str(info.value) == f"launchpad.record: warmup takes a bool or an int >= 0 (a count of warm-up runs), got {got}"
    )
    assert not graphs.captures


def test_record_generators_takes_a_list(graphs, fill):
    _, step, args = _step(graphs, fill)
    gen = torch.Generator()
    with pytest.raises(lp.ArgumentTypeError, match=r"^launchpad\.record: generators takes a list of torch\.Generator, "
                       r"got Generator <torch\._C\.Generator object at .*>: write \[gen\]$"):  # fmt: skip
        graphs.record(step, *args, generators=gen)
    with pytest.raises(
        lp.ArgumentTypeError,
        match=r"generators takes a list of torch\.Generator, got one holding int 1: pass the torch\.Generator objects fn draws from$",
    ):
        graphs.record(step, *args, generators=[1])


def test_record_compiled_takes_a_bool_or_none(fill, graphs):
    _, step, args = _step(graphs, fill)
    with pytest.raises(lp.ArgumentTypeError) as info:
        lp.record(step, *args, compiled="no")
    assert str(info.value) == ("launchpad.record: compiled takes a bool or None, got str 'no': write compiled=True or "
                               "compiled=False")  # fmt: skip
    with pytest.raises(lp.ArgumentTypeError, match=r"^launchpad\.record: host_updates takes a bool, got int 1: "):
        graphs.record(step, *args, host_updates=1)
    assert not graphs.captures


def test_record_takes_a_function_not_a_kernel(fill, graphs):
    k, _, _ = _step(graphs, fill)
    with pytest.raises(lp.ArgumentTypeError) as info:
        graphs.record(k, torch.zeros(4), 1.0, 4)
    assert str(info.value) == ("launchpad.record takes a function that launches, got kernel 'fill': write "
                               "lp.record(lambda y, v, n: k[grid, block](y, v, n), y, v, n)")  # fmt: skip
    # a configured launch takes *args (the compiled one has no signature at all): the recipe, either way
    with pytest.raises(lp.ArgumentTypeError, match=r"^launchpad\.record: .*lp\.record\(lambda x, n: k\[grid, block\]"):
        graphs.record(k[1, 32], torch.zeros(4), 1.0, 4)
    assert not graphs.captures


def test_record_inside_another_capture_is_refused_before_capturing(fill, graphs):
    _, step, args = _step(graphs, fill)
    graphs.stream_capturing = True
    with pytest.raises(lp.RecordError, match=re.escape("launchpad.record cannot record inside another capture "
                       "(torch's current stream is capturing a CUDA graph: torch.cuda.graph, or a capture of its own): "
                       "call launchpad.record outside the capture, and replay the sequence outside it too")):  # fmt: skip
        graphs.record(step, *args)
    assert not graphs.captures and not graphs.fake.launches  # not even the warm-up ran
    graphs.stream_capturing = False
    assert graphs.record(step, *args, warmup=2).nodes == 1  # the options' checks take what they should

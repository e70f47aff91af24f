"""The disk cache and saved artifacts without a GPU: a private directory, atomic writes under
concurrent writers (threads and processes, real NVRTC), digest-checked reads that warn about and
rebuild a corrupt entry, an unusable directory that warns once and leaves compiling uncached,
and artifacts that concurrent savers never corrupt and that are refused once modified."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import textwrap
import threading
import time
import uuid
import warnings
from pathlib import Path

import pytest
from conftest import USER_CACHE

import launchpad as lp
from launchpad.core import cache as _cache

REPO = Path(__file__).resolve().parents[1]
SOURCE = 'extern "C" __global__ void k(int* p) { p[0] = 42; }'


@pytest.fixture
def cache(monkeypatch, tmp_path) -> Path:
    """A fresh cache directory (not yet created) for one test."""
    path = tmp_path / "cache"
    monkeypatch.setenv("LAUNCHPAD_CACHE_DIR", str(path))
    return path


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def fresh_source() -> str:
    """A kernel no cache has seen (its key differs), so the test decides what is cached."""
    return SOURCE.replace("42", str(uuid.uuid4().int % 100_000))


def run_python(code: str, *args: str, env: dict | None = None) -> subprocess.Popen:
    """Start ``python -c code args...`` with this checkout importable."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def finish(procs: list[subprocess.Popen], timeout: float = 240) -> list[str]:
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, err
        outs.append(out)
    return outs


# --- hits, misses, atomic writes ---------------------------------------------------------------------


def test_cache_hit_and_miss(cache, monkeypatch):
    src = fresh_source()
    first = lp.compile_cuda(src, "k", arch=90)
    [entry] = _cache.entries()
    assert entry.parent == cache
    import cuda.core

    def no_compile(*a, **k):
        raise AssertionError("compiled again instead of using the cache")

    with monkeypatch.context() as m:
        m.setattr(cuda.core, "Program", no_compile)
        assert lp.compile_cuda(src, "k", arch=90).image == first.image  # hit
    lp.compile_cuda(src, "k", arch=90, options=["-lineinfo"])  # other options: a miss, a new entry
    assert len(_cache.entries()) == 2
    assert _cache.clear() == 2 and _cache.entries() == []


def test_cache_writes_are_atomic_and_leave_nothing_behind(cache):
    assert _cache.put("k1", {"a": 1}, b"binary")
    assert _cache.get("k1") == ({"a": 1}, b"binary")
    assert [p.name for p in cache.iterdir()] == ["k1.lpc"]  # no temporary file left behind
    assert mode(cache / "k1.lpc") == 0o600


def test_a_failed_write_removes_its_temporary_file_and_warns_once(cache, monkeypatch):
    def disk_full(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_cache.os, "replace", disk_full)
    with pytest.warns(lp.CacheWarning) as record:
        assert not _cache.put("k1", {}, b"x" * 1000, "kernel 'k' for sm_90")
        assert not _cache.put("k2", {}, b"y", "kernel 'k2' for sm_90")  # the same directory: no second warning
    assert len(record) == 1
    assert str(record[0].message) == (
        f"launchpad cache directory {str(cache)!r} is not used (caching kernel 'k' for sm_90): writing an entry "
        "failed (No space left on device). Kernels are compiled without the disk cache; set LAUNCHPAD_CACHE_DIR "
        "to a directory that you own and only you can write to cache them"
    )
    assert list(cache.iterdir()) == []


# --- a private directory ------------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_the_directory_and_its_missing_parents_are_created_private(monkeypatch, tmp_path, umask):
    outer = tmp_path / "a"
    path = outer / "b" / "cache"
    monkeypatch.setenv("LAUNCHPAD_CACHE_DIR", str(path))
    before = mode(tmp_path)
    old = os.umask(umask)
    try:
        assert _cache.put("k1", {}, b"binary")
    finally:
        os.umask(old)
    assert [mode(p) for p in (outer, outer / "b", path)] == [0o700] * 3
    assert mode(tmp_path) == before  # an existing parent is left alone
    assert _cache.get("k1") == ({}, b"binary")


@pytest.mark.parametrize("bits,who", [(0o770, "group"), (0o707, "others"), (0o777, "group and others")])
def test_a_directory_others_can_write_is_not_used(cache, bits, who):
    cache.mkdir()
    os.chmod(cache, bits)
    src = fresh_source()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        k = lp.compile_cuda(src, "k", arch=90)
        again = lp.compile_cuda(src, "k", arch=90)  # once per directory
    assert [str(w.message) for w in record] == [
        f"launchpad cache directory {str(cache)!r} is not used (caching kernel 'k' for sm_90): it is writable by "
        f"{who} (mode {bits:#o}), who could replace cached binaries. Kernels are compiled without the disk cache; "
        "set LAUNCHPAD_CACHE_DIR to a directory that you own and only you can write to cache them"
    ]
    assert all(w.category is lp.CacheWarning for w in record)
    assert list(cache.iterdir()) == [] and k.image == again.image and k.params[0].size == 8
    assert mode(cache) == bits  # reported, not silently changed


def test_a_directory_owned_by_someone_else_is_not_used(cache, monkeypatch):
    cache.mkdir(mode=0o700)
    if os.getuid() == 0:
        os.chown(cache, 4321, -1)  # root can make it really foreign
        owner, me = 4321, 0
    else:  # otherwise pretend to be someone else
        owner, me = cache.stat().st_uid, cache.stat().st_uid + 1
        monkeypatch.setattr(_cache.os, "getuid", lambda: me)
    with pytest.warns(
        lp.CacheWarning,
        match=rf"is not used \(caching kernel 'k' for sm_90\): it is owned by uid {owner}, not by you \(uid {me}\)",
    ):
        lp.compile_cuda(fresh_source(), "k", arch=90)
    assert list(cache.iterdir()) == []
    assert _cache.get("anything") is None


def test_a_directory_below_a_regular_file_warns_once_and_compiles_uncached(monkeypatch, tmp_path):
    """Unwritable even for root (chmod does not stop root): the path cannot be a directory."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    path = blocker / "cache"
    monkeypatch.setenv("LAUNCHPAD_CACHE_DIR", str(path))
    src = fresh_source()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        k = lp.compile_cuda(src, "k", arch=90, signature="*i32")
        k2 = lp.compile_cuda(src, "k", arch=90, signature="*i32")
    assert [w.category for w in record] == [lp.CacheWarning]
    message = str(record[0].message)
    assert message.startswith(f"launchpad cache directory {str(path)!r} is not used (caching kernel 'k' for sm_90): ")
    assert "Not a directory" in message and "set LAUNCHPAD_CACHE_DIR" in message
    assert record[0].filename == __file__  # the warning points at the caller, not at launchpad
    assert k.image == k2.image and k.params[0].type == "*i32" and blocker.read_text() == "not a directory"


# --- corrupt entries ------------------------------------------------------------------------------------


def _truncate(raw: bytes) -> bytes:
    return raw[: len(raw) // 2]


def _flip_binary_byte(raw: bytes) -> bytes:
    out = bytearray(raw)
    out[-100] ^= 0x40  # inside the cubin
    return bytes(out)


def _flip_digest_byte(raw: bytes) -> bytes:
    out = bytearray(raw)
    out[len(_cache._MAGIC) + 3] ^= 0x01
    return bytes(out)


@pytest.mark.parametrize("damage,reason", [
    (_truncate, r"its SHA-256 does not match its content \(truncated or modified\)"),
    (lambda raw: raw[:30], r"30 bytes, not a whole launchpad cache entry \(truncated or overwritten\)"),
    (lambda raw: b"", r"0 bytes, not a whole launchpad cache entry"),
    (_flip_binary_byte, r"its SHA-256 does not match its content"),
    (_flip_digest_byte, r"its SHA-256 does not match its content"),
])  # fmt: skip
def test_a_corrupt_entry_warns_is_deleted_and_rebuilt(cache, damage, reason):
    src = fresh_source()
    good = lp.compile_cuda(src, "k", arch=90)
    [entry] = _cache.entries()
    original = entry.read_bytes()
    entry.write_bytes(damage(original))
    with pytest.warns(lp.CacheWarning) as record:
        rebuilt = lp.compile_cuda(src, "k", arch=90)
    assert len(record) == 1
    message = str(record[0].message)
    assert message.startswith(f"launchpad cache entry {str(entry)!r} (kernel 'k' for sm_90) is corrupt: ")
    assert message.endswith("; it was deleted and will be rebuilt")
    assert re.search(reason, message)
    assert rebuilt.image == good.image  # the damaged bytes never became a kernel
    assert entry.read_bytes() == original  # rebuilt whole
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # now a clean hit
        assert _cache.get(entry.stem)[1] == good.image


def test_a_corrupt_entry_replaced_meanwhile_is_not_deleted(cache, monkeypatch):
    """A reader that found a corrupt entry deletes only the file it read, not a good one that
    another process renamed into place since."""
    assert _cache.put("k1", {}, b"good")
    entry = cache / "k1.lpc"
    good = entry.read_bytes()
    entry.write_bytes(good[:20])
    real_discard = _cache._discard

    def replaced_meanwhile(path, opened, what, reason):
        assert _cache.put("k1", {}, b"good")  # another writer's rename lands first
        real_discard(path, opened, what, reason)

    monkeypatch.setattr(_cache, "_discard", replaced_meanwhile)
    with pytest.warns(lp.CacheWarning, match="k1.lpc' is corrupt"):
        assert _cache.get("k1") is None
    assert entry.read_bytes() == good


# --- concurrency ------------------------------------------------------------------------------------------

COMPILE_WORKER = """
    import hashlib, pathlib, sys, time, warnings
    import launchpad as lp
    import cuda.core  # imported before the start signal, so the compiles overlap
    warnings.simplefilter("error", lp.CacheWarning)  # a corrupt entry seen by anyone fails the test
    ready, go, source = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
    ready.touch()
    while not go.exists():
        time.sleep(0.001)
    k = lp.compile_cuda(source, "k", arch="sm_90")
    print(hashlib.sha256(k.image).hexdigest())
"""


def _start_together(
    tmp_path: Path, code: str, worker_args: list[list[str]], env: dict | None = None
) -> list[subprocess.Popen]:
    """One process per ``worker_args`` entry, running ``code ready go *args``; returns once all are
    ready (imports done) and told to go at the same moment."""
    go = tmp_path / "go"
    readies = [tmp_path / f"ready{i}" for i in range(len(worker_args))]
    procs = [run_python(code, str(r), str(go), *args, env=env) for r, args in zip(readies, worker_args)]
    deadline = time.monotonic() + 180
    while not all(r.exists() for r in readies):
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
        assert time.monotonic() < deadline, "workers did not start"
        time.sleep(0.01)
    go.touch()
    return procs


def test_processes_compiling_the_same_kernel_at_once_share_one_valid_entry(cache, tmp_path, monkeypatch):
    source = fresh_source()
    procs = _start_together(tmp_path, COMPILE_WORKER, [[source]] * 6, env={"LAUNCHPAD_CACHE_DIR": str(cache)})
    digests = {out.strip() for out in finish(procs)}
    assert len(digests) == 1  # every process got the same cubin
    [entry] = _cache.entries()
    assert mode(cache) == 0o700
    assert [p.name for p in cache.iterdir()] == [entry.name]  # no temporary files left
    header, binary = _cache.get(entry.stem)
    assert hashlib.sha256(binary).hexdigest() in digests and header["arch"] == "sm_90"
    import cuda.core

    monkeypatch.setattr(cuda.core, "Program", None)  # this process must hit the entry, not compile
    assert hashlib.sha256(lp.compile_cuda(source, "k", arch="sm_90").image).hexdigest() in digests


PUT_WORKER = """
    import pathlib, sys, time
    from launchpad.core import cache as _cache
    ready, go, writer, size, rounds = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), *map(int, sys.argv[3:])
    ready.touch()
    while not go.exists():
        time.sleep(0.001)
    payload = bytes([writer]) * size
    for i in range(rounds):
        assert _cache.put("shared-key", {"writer": writer, "round": i}, payload)
"""


def test_concurrent_writers_and_readers_never_see_a_partial_entry(cache, tmp_path):
    size, rounds, writers = 3 << 20, 25, 4
    cache.mkdir(mode=0o700)
    worker_args = [[str(i), str(size), str(rounds)] for i in range(writers)]
    procs = _start_together(tmp_path, PUT_WORKER, worker_args, env={"LAUNCHPAD_CACHE_DIR": str(cache)})
    seen: list[tuple[int, int]] = []
    problems: list[str] = []

    def read() -> None:
        while any(p.poll() is None for p in procs) and len(problems) < 5:
            with warnings.catch_warnings(record=True) as record:
                warnings.simplefilter("always")
                entry = _cache.get("shared-key")
            problems.extend(str(w.message) for w in record)
            if entry is not None:
                header, binary = entry
                if binary != bytes([header["writer"]]) * size:
                    problems.append(f"a mixed or partial binary under header {header}")
                seen.append((header["writer"], header["round"]))

    readers = [threading.Thread(target=read) for _ in range(3)]
    for t in readers:
        t.start()
    try:
        finish(procs)
    finally:
        for t in readers:
            t.join()
    assert problems == []
    assert len(seen) > 10  # the readers really overlapped the writers
    header, binary = _cache.get("shared-key")
    assert header["round"] == rounds - 1 and binary == bytes([header["writer"]]) * size
    assert [p.name for p in cache.iterdir()] == ["shared-key.lpc"]


# --- the tests' own cache -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compiled_by_a_module_fixture() -> tuple[Path, set[str]]:
    """A kernel no cache has seen, compiled by a module-scoped fixture (set up before any
    function-scoped fixture): where it was cached, and its new entries."""
    name = f"k_{uuid.uuid4().hex}"
    before = {p.name for p in _cache.entries()}
    lp.compile_cuda(f'extern "C" __global__ void {name}(int* p) {{ p[0] = 1; }}', name, arch=90)
    return _cache.cache_dir(), {p.name for p in _cache.entries()} - before


def test_module_fixtures_compile_into_the_sessions_cache_not_the_users(compiled_by_a_module_fixture,
                                                                        tmp_path_factory):  # fmt: skip
    where, new = compiled_by_a_module_fixture
    assert where == tmp_path_factory.getbasetemp() / "cache" != USER_CACHE
    assert new and all((where / name).is_file() for name in new)
    assert not [name for name in new if (USER_CACHE / name).exists()]  # a kernel only this run compiled


# --- artifacts ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cubin(tmp_path_factory) -> Path:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAUNCHPAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
        k = lp.compile_cuda(SOURCE, "k", arch=90, signature="*i32")
    path = tmp_path_factory.mktemp("artifact") / "k.cubin"
    path.write_bytes(k.image)
    return path


SAVE_WORKER = """
    import pathlib, sys, time
    import launchpad as lp
    ready, go, cubin, target, writer, rounds = (*map(pathlib.Path, sys.argv[1:5]), *map(int, sys.argv[5:]))
    base = lp.load_cubin(cubin, "k", signature="*i32")
    # each writer's artifact differs (its metadata holds a large payload), so a mix would show
    k = lp.Kernel(base.spec.replace(metadata={"writer": writer, "pad": "x" * (writer + 1) * 200_000}))
    ready.touch()
    while not go.exists():
        time.sleep(0.001)
    for _ in range(rounds):
        k.save(target)
"""


def test_processes_saving_one_artifact_path_never_leave_it_corrupt(cubin, tmp_path):
    target = tmp_path / "out" / "k.json"
    target.parent.mkdir()
    writers, rounds = 4, 25
    procs = _start_together(
        tmp_path, SAVE_WORKER, [[str(cubin), str(target), str(i), str(rounds)] for i in range(writers)]
    )
    loads, problems = 0, []
    while any(p.poll() is None for p in procs):
        if target.exists():
            try:
                k = lp.load(target)
            except lp.LaunchpadError as exc:
                problems.append(str(exc))
                continue
            writer = k.metadata["writer"]
            if k.metadata["pad"] != "x" * (writer + 1) * 200_000:
                problems.append(f"mixed artifact of writer {writer}")
            loads += 1
    finish(procs)
    assert problems == []
    assert loads > 0
    final = lp.load(target)
    assert final.image == cubin.read_bytes() and final.metadata["writer"] in range(writers)
    assert [p.name for p in target.parent.iterdir()] == ["k.json"]  # every writer's temporary file is gone


def _saved(cubin: Path, tmp_path: Path) -> tuple[Path, dict]:
    path = lp.load_cubin(cubin, "k", signature="*i32").save(tmp_path / "k.json")
    return path, json.loads(path.read_text())


def test_artifact_records_its_digest_and_round_trips(cubin, tmp_path):
    path, d = _saved(cubin, tmp_path)
    assert d["version"] == 3 and len(d["sha256"]) == 64
    body = {k: v for k, v in d.items() if k != "sha256"}
    assert d["sha256"] == hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    k = lp.load(path)
    assert k.image == cubin.read_bytes() and k.params[0].type == "*i32"


def _tamper_image(d: dict) -> None:
    image = bytearray(base64.b64decode(d["image"]))
    image[200] ^= 1
    d["image"] = base64.b64encode(bytes(image)).decode()


def _tamper_param(d: dict) -> None:
    d["params"][0]["offset"] = 8


@pytest.mark.parametrize("tamper", [_tamper_image, _tamper_param, lambda d: d.pop("sha256")])
def test_a_modified_artifact_is_refused(cubin, tmp_path, tamper):
    path, d = _saved(cubin, tmp_path)
    tamper(d)
    path.write_text(json.dumps(d))
    with pytest.raises(lp.BinaryError) as e:
        lp.load(path)
    assert str(e.value) == (
        f"launchpad artifact {str(path)!r} (kernel 'k') was modified or damaged after it was saved: its SHA-256 does "
        "not match its content"
    )


def test_a_truncated_artifact_is_refused(cubin, tmp_path):
    path, _ = _saved(cubin, tmp_path)
    path.write_text(path.read_text()[:-300])
    with pytest.raises(
        lp.BinaryError,
        match=rf"^launchpad artifact {str(path)!r} \(kernel 'k'\) is damaged or truncated: it is not valid JSON",
    ):
        lp.load(path)


def test_an_artifact_of_launchpad_0_1_still_loads(cubin, tmp_path):
    """Version 2 (launchpad 0.1) differs in its launch plan's fields: grid_multiplier and a stored
    non_portable_cluster, now a grid counted in clusters and a derived property."""
    path, d = _saved(cubin, tmp_path)
    body = {k: v for k, v in d.items() if k != "sha256"}
    plan = body["plan"]
    for key in ("grid_in_clusters", "oversized_shared"):
        plan.pop(key)
    body["plan"] = {**plan, "cluster": [2, 1, 1], "grid_multiplier": 2, "non_portable_cluster": False}
    body["version"] = 2
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    path.write_text(json.dumps({**body, "sha256": digest}))
    k = lp.load(path)
    assert k.plan.cluster == (2, 1, 1) and k.plan.grid_in_clusters and k.plan.grid_scale == (2, 1, 1)
    assert k.image == cubin.read_bytes()


def test_a_grid_limit_is_written_only_where_a_plan_has_one(cubin, tmp_path):
    """Artifacts written before plans held a grid limit (cuTile's) read as the device's limits alone;
    a plan without one writes no field for it, so earlier launchpads still read those artifacts."""
    path, d = _saved(cubin, tmp_path)
    assert "max_grid" not in d["plan"] and "max_grid_words" not in d["plan"]
    assert lp.load(path).plan.max_grid == 0
    limited = lp.LaunchPlan(block=(1, 1, 1), max_grid=7, max_grid_words="a limit of 7")
    assert lp.LaunchPlan.from_json(json.loads(json.dumps(limited.to_json()))) == limited


def test_an_artifact_of_the_previous_format_is_refused(cubin, tmp_path):
    path, d = _saved(cubin, tmp_path)
    d.pop("sha256")
    d["version"] = 1
    path.write_text(json.dumps(d))
    with pytest.raises(lp.BinaryError) as e:
        lp.load(path)
    assert str(e.value) == (
        f"launchpad artifact {str(path)!r} (kernel 'k') has format version 1, this launchpad reads versions 2, 3; "
        "save the kernel again with this version"
    )

"""Saved kernels: a :class:`~launchpad.core.spec.KernelSpec` as a self-contained JSON file.

Format version 3: ``{"format": "launchpad.kernel", "version": 3, **spec.to_json(), "sha256"}``,
the digest over the canonical JSON of everything else. Version 2 (launchpad 0.1) differs only in
its launch plan's field names and is read too; a plan without ``max_grid`` (every artifact before
cuTile kernels kept their grid limit there) reads as the device's limits alone; version 1 (no
digest) is refused. Writes go
through a unique temporary file and an atomic rename. :func:`read` is the one parser:
:func:`launchpad.load` and ``python -m launchpad inspect`` both use it, so both check the digest.
Artifacts hold specs, not Kernels: :func:`launchpad.load` makes the Kernel of what :func:`read`
returns.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

from ..errors import ArgumentError, ArgumentTypeError, BinaryError, MissingFileError
from .spec import KernelSpec

__all__ = ["ARTIFACT_FORMAT", "ARTIFACT_VERSION", "body", "read", "save"]

ARTIFACT_FORMAT = "launchpad.kernel"
ARTIFACT_VERSION = 3
_READABLE = (2, 3)


def body(spec: KernelSpec) -> dict[str, Any]:
    """An artifact's content, without its ``sha256`` field."""
    return {"format": ARTIFACT_FORMAT, "version": ARTIFACT_VERSION, **spec.to_json()}


def digest(content: dict) -> str:
    """SHA-256 of an artifact's content in canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def save(spec: KernelSpec, path: str | Path) -> Path:
    """Write ``spec`` to ``path`` (see the module documentation).

    Raises
    ------
    ArgumentError
        The spec runs module callbacks when it loads: an artifact holds no Python code. Or
        ``path`` is a folder, or its folder does not exist (refused before anything is written).
    ArgumentTypeError
        ``path`` is not a str or ``os.PathLike``.
    """
    callbacks = spec.callbacks
    if callbacks is not None and (callbacks.setup or callbacks.teardown):
        names = ", ".join(getattr(f, "__qualname__", repr(f)) for f in (*callbacks.setup, *callbacks.teardown))
        raise ArgumentError(
            f"kernel {spec.display_name!r} cannot be saved: it runs module callbacks ({names}) of the files it "
            "links when it loads, and an artifact holds no Python code"
        )
    path = _save_path(spec, path)
    content = json.loads(json.dumps(body(spec)))  # as read() will see it
    text = json.dumps({**content, "sha256": digest(content)})
    # a name no other writer uses; created like any file (0o666 less the umask), unlike mkstemp's 0o600
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def _save_path(spec: KernelSpec, path: Any) -> Path:
    """``path`` as a Path, refused where no file can be written there: the temporary file goes in
    its folder, so a missing folder would fail naming that file, and a folder given as the path
    would put it in the folder's parent before the rename fails."""
    where = f"kernel {spec.display_name!r}: save"
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentTypeError(
            f"{where} takes the path of the file to write (a str or pathlib.Path), got {type(path).__name__} "
            f"{path!r:.80}: write k.save('{spec.display_name}.json')"
        )
    path = Path(path)
    if path.is_dir():
        raise ArgumentError(
            f"{where} takes the path of a file, and {str(path)!r} is a folder: write a file name in it, "
            f"k.save({str(path / (spec.display_name + '.json'))!r})"
        )
    folder = path.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise ArgumentError(
            f"{where}: cannot write {str(path)!r}, its folder {str(folder)!r} {what}; create the folder first "
            f"(pathlib.Path({str(folder)!r}).mkdir(parents=True)) or save to a folder that exists"
        )
    return path


def _load_path(path: Any, missing: bool = False) -> None:
    """Refuse what :func:`read` was given that is no path: another type, or (``missing``: no file
    has that name) the artifact's JSON text itself, which would otherwise be read as a file name."""
    if not isinstance(path, (str, os.PathLike)):
        got = "None" if path is None else f"{type(path).__name__} {path!r:.60}"
        content = isinstance(path, (bytes, bytearray, dict))  # what a file holds, not where it is
        raise ArgumentTypeError(
            f"load takes the path of a saved artifact, got {got}: pass the path of the file Kernel.save(path) "
            f"wrote{', not its content' if content else ''}, as a str or pathlib.Path: lp.load('kernel.json')"
        )
    if missing and isinstance(path, str) and path.lstrip()[:1] in ("{", "["):
        start = path.lstrip()[:40]
        what = "a launchpad artifact's JSON text" if _START.match(path) else "JSON text"
        raise ArgumentError(
            f"load takes the path of a saved artifact and was given {what} ({start!r}...) instead: pass the path "
            "of the file it is in, or write it to one first (pathlib.Path('kernel.json').write_text(text)) and "
            "lp.load('kernel.json')"
        )


def _name_in(text: str) -> str:
    """`` (kernel 'name')`` from the start of an artifact that does not parse, or ``""``.

    :func:`save` writes the kernel's names first, so a truncated artifact usually has them.
    """
    m = re.search(r'"display_name": ("(?:[^"\\]|\\.)*")', text[:4096])
    try:
        return f" (kernel {json.loads(m.group(1))!r})" if m else ""
    except ValueError:
        return ""


#: What an artifact is and how to make one: the end of every message for a file that is not one.
WHAT_ONE_IS = (
    f'a launchpad kernel artifact is the JSON file Kernel.save(path) writes, whose "format" is "{ARTIFACT_FORMAT}": '
    "make one with the save(path) of any launchpad Kernel (from lp.compile_cuda, lp.from_triton, lp.from_numba...), "
    "then lp.load(path) loads it"
)
#: How every artifact starts (save() writes its format first): a file that starts so but does not
#: parse is a damaged artifact; anything else that does not parse is not one.
_START = re.compile(r'\s*\{\s*"format"\s*:\s*"' + re.escape(ARTIFACT_FORMAT) + '"')


def _not_an_artifact(path: str | Path, why: str) -> BinaryError:
    """The refusal of a file that is not an artifact: why, then what an artifact is."""
    return BinaryError(
        f"{str(path)!r} is not a launchpad kernel artifact: {why}. {WHAT_ONE_IS[0].upper()}{WHAT_ONE_IS[1:]}"
    )


def _unparsed(path: str | Path, raw: bytes) -> str:
    """Why a file that is not JSON is no artifact, and what loads it where launchpad can tell."""
    if raw[:4] in (b"\x7fELF", b"\x50\xed\x55\xba"):
        kind = "cubin" if raw[:1] == b"\x7f" else "fatbin"
        return f"it is a {kind}, which lp.load_cubin(path, kernel_name) loads"
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return f"it is not text (it starts {raw[:8]!r})"
    suffix = Path(path).suffix.lower()
    if b".entry" in raw and b".version" in raw:
        return "it is PTX, which lp.load_cubin(path, kernel_name) loads"
    if suffix in (".cu", ".cuh"):
        return "it is CUDA C++ source, which lp.compile_cuda(source, kernel_name) compiles into a Kernel"
    if suffix == ".py" or re.search(r"^(import \w|from [\w.]+ import |def \w+\(|class \w+[(:]|@\w)", text, re.M):
        return (
            "it is not JSON but Python source: import it and make Kernels of its kernels (lp.compile_cuda, "
            "lp.from_triton, lp.from_numba...)"
        )
    return "it is not JSON"


def _parsed(d: Any) -> str:
    """Why a JSON value is no artifact."""
    if not isinstance(d, dict):
        return f'it holds a JSON {type(d).__name__}, not an object with "format": "{ARTIFACT_FORMAT}"'
    if "num_warps" in d and "name" in d:  # Triton's metadata of a cache entry (NAME.json)
        return "it is the metadata Triton writes beside a cubin in its cache, which lp.load_triton(path) loads"
    if "format" not in d:
        return 'its JSON has no "format"'
    return f'its "format" is {d["format"]!r}'


def read(path: str | Path) -> KernelSpec:
    """The spec saved at ``path``, after checking its format, version and digest.

    Raises
    ------
    ArgumentTypeError
        ``path`` is not a str or ``os.PathLike`` (None, bytes, a dict...).
    ArgumentError
        ``path`` is JSON text (an artifact's content) naming no file.
    MissingFileError
        There is no file at ``path`` (also a ``FileNotFoundError``).
    BinaryError
        The file is not a launchpad artifact (a cubin, Python source, other JSON, random bytes:
        the message says what an artifact is, and what loads the file where it can tell), is of
        another format version, or is damaged: truncated, or modified after it was written (its
        SHA-256 does not match). Nothing of it is used then.
    BinaryError
        The file cannot be read.
    """
    _load_path(path)
    where = f"launchpad artifact {str(path)!r}"
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        _load_path(path, missing=True)
        raise MissingFileError(f"no file {str(path)!r} to load: {WHAT_ONE_IS}", str(path)) from None
    except OSError as exc:  # a name too long for a file (JSON text given as the path), a folder...
        _load_path(path, missing=True)
        raise BinaryError(f"cannot read {where}: {exc.strerror or exc}") from None
    try:
        d = json.loads(raw.decode())
    except ValueError as exc:  # not UTF-8 or not JSON: a damaged artifact, or no artifact at all
        text = raw.decode(errors="replace")
        if _START.match(text):
            raise BinaryError(
                f"{where}{_name_in(text)} is damaged or truncated: it is not valid JSON ({exc}); save the kernel again"
            ) from None
        raise _not_an_artifact(path, _unparsed(path, raw)) from None
    if not isinstance(d, dict) or d.get("format") != ARTIFACT_FORMAT:
        raise _not_an_artifact(path, _parsed(d))
    kernel = d.get("display_name") or d.get("name")
    what = f"{where} (kernel {kernel!r})" if isinstance(kernel, str) else where
    if d.get("version") not in _READABLE:
        raise BinaryError(
            f"{what} has format version {d.get('version')!r}, this launchpad reads versions "
            f"{', '.join(map(str, _READABLE))}; save the kernel again with this version"
        )
    recorded = d.pop("sha256", None)
    if recorded != digest(d):
        raise BinaryError(f"{what} was modified or damaged after it was saved: its SHA-256 does not match its content")
    try:
        return KernelSpec.from_json(d)
    except (KeyError, TypeError, ValueError) as exc:  # consistent but not what save() writes
        raise BinaryError(f"{what} is not a valid artifact: {type(exc).__name__}: {exc}") from None

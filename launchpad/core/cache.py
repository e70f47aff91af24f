"""On-disk cache of compiled binaries.

One file per entry, named by the SHA-256 of everything that determines the output (source,
options, architecture, compiler version). A file holds a magic, the SHA-256 of its body, and the
body: a JSON header and the binary.

Safety rules:

- The directory is private: launchpad creates it (and any missing parent) with mode ``0o700``,
  and does not use an existing one that another user owns or that group or others may write
  (anyone who can write it could swap a cached binary). Such a directory, or one that cannot
  be created or written, gets one :class:`~launchpad.CacheWarning` naming it and the fix
  (``LAUNCHPAD_CACHE_DIR``); compiling goes on without the cache.
- Writes go to a unique temporary file in the directory that is renamed over the entry, so
  concurrent writers (threads or processes compiling the same kernel) each replace the entry
  whole and a reader sees a complete old or new entry, never a partial one. A failed write
  removes its temporary file.
- Every read checks the entry's SHA-256 before using it. A corrupt entry (truncated, modified,
  torn by a crash) gives a :class:`~launchpad.CacheWarning` naming the file and what it holds,
  is deleted and reported as a miss, so the caller rebuilds it.

The digest detects corruption; the directory's privacy is what keeps other users from
planting entries.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import struct
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from ..errors import CacheWarning

_MAGIC = b"LPCACHE1"
_SUFFIX = ".lpc"
_DIGEST = hashlib.sha256().digest_size

_warned: set[str] = set()  # directories already reported unusable in this process
_warned_lock = threading.Lock()


def cache_dir() -> Path:
    """``$LAUNCHPAD_CACHE_DIR``, else ``$XDG_CACHE_HOME/launchpad``, else ``~/.cache/launchpad``."""
    env = os.environ.get("LAUNCHPAD_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "launchpad"


def cache_key(*parts: object) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else json.dumps(part, sort_keys=True, default=str).encode()
        h.update(struct.pack("<Q", len(data)))
        h.update(data)
    return h.hexdigest()


# --- warnings --------------------------------------------------------------------------------------


def _stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first caller outside launchpad."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # launchpad/, above core/
    frame: Any = sys._getframe(2)
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _unusable(directory: Path, reason: str, what: str) -> None:
    """Warn, once per directory and process, that the cache directory is not used."""
    key = str(directory)
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    during = f" (caching {what})" if what else ""
    warnings.warn(
        f"launchpad cache directory {key!r} is not used{during}: {reason}. Kernels are compiled without the disk cache; "
        "set LAUNCHPAD_CACHE_DIR to a directory that you own and only you can write to cache them",
        CacheWarning,
        stacklevel=_stacklevel(),
    )


# --- the directory -------------------------------------------------------------------------------


def _not_private(st: os.stat_result) -> str | None:
    """Why an existing path must not be used as the cache directory, or None when it may."""
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    getuid = getattr(os, "getuid", None)
    if getuid is not None and st.st_uid != getuid():
        return f"it is owned by uid {st.st_uid}, not by you (uid {getuid()}), who could replace cached binaries"
    if st.st_mode & 0o022:
        who = " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if st.st_mode & bit)
        return f"it is writable by {who} (mode {stat.S_IMODE(st.st_mode):#o}), who could replace cached binaries"
    return None


def _make_private(directory: Path) -> None:
    """Create ``directory`` and its missing parents, each with mode 0o700 whatever the umask."""
    missing = []
    path = directory
    while not os.path.lexists(path) and path.parent != path:
        missing.append(path)
        path = path.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue  # made by another process meanwhile; the caller checks the result like any directory
        os.chmod(path, 0o700)  # mkdir's mode is masked by the umask


def _directory(create: bool, what: str) -> Path | None:
    """The cache directory when it can be used, else None (after a warning when it exists or
    should have been created but cannot be used). Missing, it is created when ``create``."""
    directory = cache_dir()
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        if not create:
            return None  # nothing cached yet
        try:
            _make_private(directory)
            st = os.stat(directory)
        except OSError as exc:
            _unusable(directory, f"it cannot be created ({exc.strerror or exc})", what)
            return None
    except OSError as exc:  # below a regular file (ENOTDIR), no permission to search a parent...
        if create:
            _unusable(directory, f"it cannot be created or read ({exc.strerror or exc})", what)
        return None
    reason = _not_private(st)
    if reason is not None:
        _unusable(directory, reason, what)
        return None
    return directory


# --- entries ---------------------------------------------------------------------------------------


def _parse(raw: bytes) -> tuple[dict, bytes] | str:
    """The ``(header, binary)`` of an entry's bytes, or why they are not a valid entry."""
    start = len(_MAGIC) + _DIGEST
    if len(raw) < start + 4 or raw[: len(_MAGIC)] != _MAGIC:
        return f"{len(raw)} bytes, not a whole launchpad cache entry (truncated or overwritten)"
    body = raw[start:]
    if hashlib.sha256(body).digest() != raw[len(_MAGIC) : start]:
        return "its SHA-256 does not match its content (truncated or modified)"
    try:
        (header_len,) = struct.unpack_from("<I", body)
        header = json.loads(body[4 : 4 + header_len])
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
    except (struct.error, ValueError) as exc:
        return f"its header does not parse ({exc})"
    return header, body[4 + header_len :]


def _discard(path: Path, opened: os.stat_result, what: str, reason: str) -> None:
    """Report a corrupt entry and delete it, unless another writer has replaced it meanwhile."""
    label = f" ({what})" if what else ""
    warnings.warn(
        f"launchpad cache entry {str(path)!r}{label} is corrupt: {reason}; it was deleted and will be rebuilt",
        CacheWarning,
        stacklevel=_stacklevel(),
    )
    with contextlib.suppress(OSError):
        now = os.stat(path)
        if (now.st_ino, now.st_dev) == (opened.st_ino, opened.st_dev):
            os.unlink(path)


def get(key: str, what: str = "") -> tuple[dict, bytes] | None:
    """The entry stored under ``key`` as ``(header, binary)``, or None (a miss).

    ``what`` describes the entry (``"kernel 'axpy' for sm_90"``) for the warning a corrupt
    entry gives; a corrupt entry is deleted and reported as a miss.
    """
    directory = _directory(False, what)
    if directory is None:
        return None
    path = directory / (key + _SUFFIX)
    try:
        with open(path, "rb") as f:
            opened = os.fstat(f.fileno())
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        _unusable(directory, f"its entry {path.name} cannot be read ({exc.strerror or exc})", what)
        return None
    entry = _parse(raw)
    if isinstance(entry, str):
        _discard(path, opened, what, entry)
        return None
    return entry


def put(key: str, header: dict, binary: bytes, what: str = "") -> bool:
    """Store an entry atomically; return whether it was stored.

    A cache that cannot be written is not an error: it gives one :class:`CacheWarning` per
    directory (naming ``what`` was being cached) and the caller goes on uncached.
    """
    directory = _directory(True, what)
    if directory is None:
        return False
    head = json.dumps(header).encode()
    body = struct.pack("<I", len(head)) + head + binary
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{key[:16]}-", suffix=".tmp")  # mode 0o600
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + hashlib.sha256(body).digest() + body)
        os.replace(tmp, directory / (key + _SUFFIX))
        tmp = None
        return True
    except OSError as exc:
        _unusable(directory, f"writing an entry failed ({exc.strerror or exc})", what)
        return False
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def entries() -> list[Path]:
    directory = cache_dir()
    return sorted(directory.glob("*" + _SUFFIX)) if directory.is_dir() else []


def clear() -> int:
    """Delete every entry, and temporary files over an hour old (left by writers that were
    killed); return how many entries there were."""
    found = entries()
    for path in found:
        path.unlink(missing_ok=True)
    directory = cache_dir()
    if directory.is_dir():
        for path in directory.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                if time.time() - path.stat().st_mtime > 3600:
                    path.unlink()
    return len(found)

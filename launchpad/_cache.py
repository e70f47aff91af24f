"""On-disk cache of compiled binaries.

One file per entry, named by the SHA-256 of everything that determines the output (source,
options, architecture, compiler version). A file holds a magic, the SHA-256 of its body, and the
body: a JSON header and the binary. Writes go to a temporary file that is renamed into place,
so readers see a whole entry or none; an entry whose digest does not match (corrupt or
truncated) is deleted and reported as a miss, never loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from pathlib import Path

_MAGIC = b"LPCACHE1"
_SUFFIX = ".lpc"


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


def get(key: str) -> tuple[dict, bytes] | None:
    """The entry stored under ``key`` as ``(header, binary)``, or None."""
    path = cache_dir() / (key + _SUFFIX)
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    body = raw[len(_MAGIC) + 32 :]
    if raw[: len(_MAGIC)] != _MAGIC or hashlib.sha256(body).digest() != raw[len(_MAGIC) : len(_MAGIC) + 32]:
        path.unlink(missing_ok=True)  # corrupt or truncated: rebuild rather than load it
        return None
    (header_len,) = struct.unpack_from("<I", body)
    header = json.loads(body[4 : 4 + header_len])
    return header, body[4 + header_len :]


def put(key: str, header: dict, binary: bytes) -> None:
    """Store an entry atomically; a failure to write is not an error (the cache is optional)."""
    directory = cache_dir()
    head = json.dumps(header).encode()
    body = struct.pack("<I", len(head)) + head + binary
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + hashlib.sha256(body).digest() + body)
        os.replace(tmp, directory / (key + _SUFFIX))
    except OSError:
        pass


def entries() -> list[Path]:
    directory = cache_dir()
    return sorted(directory.glob("*" + _SUFFIX)) if directory.is_dir() else []


def clear() -> int:
    """Delete every entry; return how many there were."""
    found = entries()
    for path in found:
        path.unlink(missing_ok=True)
    return len(found)

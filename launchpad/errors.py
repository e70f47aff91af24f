"""Exceptions raised by launchpad.

Every error launchpad raises derives from :class:`LaunchpadError`, so one ``except`` catches them
all, and each also derives from the builtin that fits it (``TypeError``, ``ValueError``,
``RuntimeError``), so existing handlers keep working.
"""

from __future__ import annotations

__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "CompileError",
    "CudaError",
    "LaunchpadError",
    "NoDeviceError",
    "OutOfResources",
]


class LaunchpadError(Exception):
    """Base class of every launchpad error."""


class CudaError(LaunchpadError, RuntimeError):
    """A CUDA driver call failed.

    Attributes
    ----------
    code : int
        The ``CUresult`` value.
    name : str
        Its name, e.g. ``"CUDA_ERROR_INVALID_VALUE"``.
    call : str
        The driver call that failed, e.g. ``"cuModuleLoadData"``.
    """

    def __init__(self, code: int, name: str, message: str, call: str):
        self.code = int(code)
        self.name = name
        self.call = call
        super().__init__(f"{call} failed: {name} ({int(code)}): {message}")


class NoDeviceError(LaunchpadError, RuntimeError):
    """No CUDA driver or GPU is available; compiling still works, launching does not."""


class ArgumentError(LaunchpadError, ValueError):
    """A launch argument or launch configuration is invalid; raised before any driver call."""


class ArgumentTypeError(ArgumentError, TypeError):
    """A launch argument has the wrong type (also a ``TypeError``)."""


class OutOfResources(LaunchpadError, ValueError):
    """A kernel asks for more of a device resource (shared memory, threads) than it allows."""


class CompileError(LaunchpadError, RuntimeError):
    """Compiling or linking failed; the message holds the compiler's full log."""

    def __init__(self, message: str, log: str = ""):
        self.log = log
        super().__init__(f"{message}\n{log}" if log else message)

"""Exceptions and warnings raised by launchpad.

Every error launchpad raises derives from :class:`LaunchpadError`, so one ``except`` catches them
all, and each also derives from the builtin that fits it (``TypeError``, ``ValueError``,
``RuntimeError``), so existing handlers keep working. Every warning derives from
:class:`LaunchpadWarning` (a ``UserWarning``), so ``warnings.filterwarnings`` can select them.

=======================  ===================================================================
class                    raised when
=======================  ===================================================================
``ArgumentError``        a launch argument or configuration is invalid (before any driver call), or
                         a compile option (``arch``)
``ArgumentTypeError``    ... and the problem is its type (also a ``TypeError``)
``RecordError``          a function cannot be recorded as a sequence with the inputs named (an
                         input decides what it launches, a launch takes a value derived from one)
``OutOfResources``       a kernel asks for more shared memory or threads than the device allows
``BinaryError``          a binary cannot be used: not a valid image, no such kernel in it, built
                         for another architecture, a file that is not a launchpad artifact, a
                         damaged or modified saved artifact
``MissingFileError``     a file launchpad was given does not exist (also a ``FileNotFoundError``)
``CompileError``         NVRTC, nvJitLink, Triton or Numba refused the code
``CudaError``            a CUDA driver call failed
``NoDeviceError``        there is no CUDA driver, GPU or CUDA build of torch to launch on
``UnsupportedVersion``   a front end's framework (or the one that compiled a kernel) is a version
                         launchpad does not know the calling convention of
``CacheWarning``         the disk cache is unusable (compiles go on uncached) or an entry was
                         corrupt (it is deleted and rebuilt)
=======================  ===================================================================
"""

from __future__ import annotations

import errno

#: The name pip installs launchpad by (the import package is ``launchpad``): what messages that say
#: what to install name, e.g. ``pip install "launchpad-kernels[cu13]"``.
DISTRIBUTION = "launchpad-kernels"

__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "BinaryError",
    "CacheWarning",
    "CompileError",
    "CudaError",
    "LaunchpadError",
    "LaunchpadWarning",
    "MissingFileError",
    "NoDeviceError",
    "OutOfResources",
    "RecordError",
    "UnsupportedVersion",
]


class LaunchpadError(Exception):
    """Base class of every launchpad error."""


class CudaError(LaunchpadError, RuntimeError):
    """A CUDA driver call failed.

    The message is ``"[context: ]call failed: NAME (code): driver message"``; the context, when
    launchpad knows it, names the kernel and the device.

    Attributes
    ----------
    code : int
        The ``CUresult`` value.
    name : str
        Its name, e.g. ``"CUDA_ERROR_INVALID_VALUE"``.
    message : str
        The driver's description of it.
    call : str
        The driver call that failed, e.g. ``"cuModuleLoadData"``.
    context : str
        What launchpad was doing (``"kernel 'scale' on cuda:0"``), or ``""``.
    """

    def __init__(self, code: int, name: str, message: str, call: str, context: str = ""):
        self.code = int(code)
        self.name = name
        self.message = message
        self.call = call
        self.context = context
        text = f"{call} failed: {name} ({int(code)}): {message}"
        super().__init__(f"{context}: {text}" if context else text)

    def within(self, context: str) -> CudaError:
        """The same driver error, its message prefixed with what launchpad was doing."""
        return CudaError(self.code, self.name, self.message, self.call, context=context)


class NoDeviceError(LaunchpadError, RuntimeError):
    """No CUDA driver or GPU is available; compiling still works, launching does not.

    A launch raises it only once its grid, block and arguments passed every check that needs no
    device (a bad one raises the :class:`ArgumentError` a GPU would); the message says so."""


class UnsupportedVersion(LaunchpadError, RuntimeError):
    """A framework version whose calling convention launchpad does not know.

    Raised when a front end is used with an installed Triton or numba-cuda outside the supported
    range, or when a kernel compiled by such a version is loaded: launchpad refuses rather than
    launch with a convention it has not checked.
    """


class ArgumentError(LaunchpadError, ValueError):
    """A launch argument or launch configuration is invalid; raised before any driver call.

    Also raised for a compile option no compiler takes: an ``arch`` that is neither an
    architecture (``"sm_90"``, ``90``) nor a GPU's name (``"h100"``); the message lists both."""


class ArgumentTypeError(ArgumentError, TypeError):
    """A launch argument has the wrong type (also a ``TypeError``)."""


class RecordError(ArgumentError):
    """:func:`launchpad.record` cannot make a sequence whose replays follow its inputs: an input
    decides which kernels, grids or nodes run, a launch takes a value computed from an input, or
    an input reaches no launch. The message names the input and the node."""


class OutOfResources(LaunchpadError, ValueError):
    """A kernel asks for more of a device resource (shared memory, threads) than it allows."""


class BinaryError(LaunchpadError, ValueError):
    """A kernel binary cannot be used.

    Raised, naming the kernel, for bytes that are not a valid cubin, fatbin or PTX image (checked
    when the :class:`~launchpad.Kernel` is made), a kernel name the binary (or, for
    :func:`~launchpad.compile_cuda`, the source: the kernels it defines are listed) does not define, a
    binary built for an architecture the device cannot run (checked before the driver loads
    it), an image the driver refuses to load (the ``CUresult`` name is in the message and the
    :class:`CudaError` is the ``__cause__``), a file given to :func:`~launchpad.load` that is not
    a launchpad artifact (the message says what one is and how to make one), and a saved
    artifact that is damaged, truncated, modified after it was written or of another format
    version (naming its path).
    """


class MissingFileError(LaunchpadError, FileNotFoundError):
    """A file launchpad was asked to read does not exist (:func:`launchpad.load`,
    :func:`launchpad.load_cubin` given a path). Also a ``FileNotFoundError`` (``errno`` is
    ``ENOENT``), so ``except FileNotFoundError`` catches it too.

    Attributes
    ----------
    path : str
        The path that was given.
    """

    def __init__(self, message: str, path: str = ""):
        super().__init__(message)
        # errno alone, not OSError's filename and strerror: with those, str() would be OSError's
        # "[Errno 2] ..." rather than the message
        self.errno = errno.ENOENT
        self.path = path


class CompileError(LaunchpadError, RuntimeError):
    """Compiling or linking failed; the message names the kernel and holds the compiler's full log."""

    def __init__(self, message: str, log: str = ""):
        self.log = log
        super().__init__(f"{message}\n{log}" if log else message)


class LaunchpadWarning(UserWarning):
    """Base class of every warning launchpad issues."""


class CacheWarning(LaunchpadWarning):
    """The disk cache could not be used as asked; compiling still works.

    Issued once per directory when the cache directory cannot be created or written, or is not
    private to the user (owned by someone else, or writable by group or others): binaries are
    then compiled without being cached. Issued for each corrupt entry (truncated, or its
    SHA-256 does not match): the entry is deleted and the binary rebuilt.
    """

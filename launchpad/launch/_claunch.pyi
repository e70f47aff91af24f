"""Types of the compiled launch executor (``launchpad/launch/_claunch/*.c``) for type checkers."""

from collections.abc import Callable
from typing import Any

from launchpad.core.loader import Entry
from launchpad.launch.layouts import LauncherTable, ReplayTables, TorchFields

DLPACK_MAJOR: int
#: Per layout (launchpad/launch/layouts.py, the loader's Entry, the spec's LaunchPlan): the fields C reads by name.
LAYOUTS: dict[str, tuple[str, ...]]

def set_torch_fields(fields: TorchFields | None, /) -> None: ...
def torch_tensor(fields: TorchFields | None, tensor: Any, dims: bool, /) -> tuple[Any, ...] | None: ...
def dlpack_tensor(tensor: Any, dims: bool, /) -> tuple[Any, ...]: ...
def dlpack_loop(tensor: Any, count: int, /) -> bool: ...
def launch_first(pair: tuple[Any, ...], /, *args: Any, **kwargs: Any) -> Any: ...
def dynamo_compiling() -> bool: ...
def launch_loop(
    launch: int,
    function: int,
    count: int,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    shared_mem: int,
    stream: int,
    params: int,
) -> int: ...
def _profile() -> tuple[int, list[int]]: ...

class Launcher:
    fallbacks: int  # calls handed to the Python executor
    python: Callable[..., None]
    def __init__(self, table: LauncherTable, /) -> None: ...
    def __call__(self, grid: Any, block: Any, *args: Any, **kwargs: Any) -> None: ...
    def configure(self, grid: Any, block: Any, stream: Any, shared_mem: Any) -> Callable[..., None]: ...
    def forget(self) -> None: ...

class Configured:
    def __call__(self, *args: Any, **kwargs: Any) -> None: ...

class Bound:
    entry: Entry
    def __init__(
        self,
        entry: Entry,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        stream: int,
        packed: bytes,
        offsets: tuple[int, ...],
        relaunch: Callable[[], None],
        /,
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> None: ...

class Dispatcher:
    variants: int
    def __init__(self, *args: Any) -> None: ...
    def __call__(self, grid: Any, *args: Any, **kwargs: Any) -> None: ...

class Replay:
    fallbacks: int  # calls the Python replay made instead
    def __init__(self, tables: ReplayTables, /) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> None: ...

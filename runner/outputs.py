"""The files a command writes: checked before any work starts, written whole or not at all.

Every output of the command line (a run's trace and Perfetto export, ``trace export``, ``plot``)
goes through this module, so that no failure (a bad path, a full disk, Ctrl-C, a crash) can leave
a half-written or emptied file under the name the user gave, nor destroy an input:

* :func:`check_paths` runs before the command does anything: an output equal to one of the
  command's inputs or to another of its outputs (same path, or the same file by another name)
  is refused, as is an output that is a directory or whose folder cannot be made.
* :func:`atomic` hands the writer a temporary file beside the final one
  (``NAME.partial-PID.EXT``, same folder so the rename never crosses file systems, same extension
  so writers that pick a format from it still do) and renames it into place only when the
  writer finished. On failure the temporary file is removed and the final name keeps whatever
  it held before. An output that exists and is not a regular file (``/dev/null``, a FIFO) is
  written directly: renaming over it would replace the device.
* :func:`write_error` turns an ``OSError`` met while writing into a :class:`OutputError` that
  names the file and the cause (``No space left on device``), never a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Mapping

from simcore.errors import WafersimError


class OutputError(WafersimError):
    """An output path cannot be used or written."""


def _same(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _special(path: str) -> bool:
    """True if ``path`` exists and is not a regular file or directory (a device, a FIFO)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def check_paths(inputs: Mapping[str, str | None], outputs: Mapping[str, str | None]) -> None:
    """Refuse unusable outputs before a command starts (see the module docstring).

    ``inputs`` and ``outputs`` map what each file is (``"--trace"``, ``"the trace"``) to its path
    (None: not given). Devices such as ``/dev/null`` may appear more than once.
    """
    outs = [(what, path) for what, path in outputs.items() if path]
    ins = [(what, path) for what, path in inputs.items() if path]
    for i, (what, path) in enumerate(outs):
        if _special(path):
            continue
        for in_what, in_path in ins:
            if _same(path, in_path):
                raise OutputError(
                    f"{what} '{path}' is {in_what} '{in_path}': writing it would destroy the "
                    f"input; give {what} another path"
                )
        for other_what, other in outs[:i]:
            if _same(path, other):
                raise OutputError(
                    f"{what} '{path}' is also {other_what}: one would overwrite the other; "
                    f"give {what} another path"
                )
        if os.path.isdir(path):
            raise OutputError(f"{what} '{path}' is a directory; give a file path")
        parent = os.path.dirname(os.path.abspath(path))
        _check_folder(what, path, parent)


def check_folder(what: str, path: str, others: Mapping[str, str | None]) -> None:
    """A folder the command writes files into (``sweep --traces DIR``): not an existing file
    or device, not one of ``others`` (the command's other inputs and outputs), and it exists
    or can be made in a folder that can be written."""
    for other_what, other in others.items():
        if other and _same(path, other):
            raise OutputError(
                f"{what} '{path}' is also {other_what}: give {what} a folder of its own"
            )
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputError(
            f"{what} '{path}' exists and is not a directory; give a folder (made if missing)"
        )
    _check_folder(what, path, os.path.abspath(path))
    if os.path.isdir(path) and not os.access(path, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {what} '{path}': no permission to write in it")


def _check_folder(what: str, path: str, parent: str) -> None:
    """The folder of ``path`` exists (or can be made) and can be written."""
    probe = parent
    while not os.path.exists(probe):
        up = os.path.dirname(probe)
        if up == probe:
            break
        probe = up
    if not os.path.isdir(probe):
        raise OutputError(f"cannot write {what} '{path}': '{probe}' is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise OutputError(
            f"cannot write {what} '{path}': no permission to write in '{probe}'; give a path in "
            "a folder you can write"
        )


def partial_path(path: str) -> str:
    """The temporary name :func:`atomic` writes ``path`` under."""
    folder, name = os.path.split(path)
    stem, ext = os.path.splitext(name)
    return os.path.join(folder, f"{stem}.partial-{os.getpid()}{ext}")


def temp_for(path: str) -> str:
    """Where to write ``path`` before :func:`commit`: its :func:`partial_path`, or ``path``
    itself for a device such as ``/dev/null``."""
    return path if _special(path) else partial_path(path)


def write_error(what: str, path: str, exc: OSError) -> OutputError:
    """A clear error for an ``OSError`` met writing ``path``."""
    cause = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc))
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    hint = "; free some space or write elsewhere" if full else ""
    return OutputError(f"cannot write {what} '{path}': {cause}{hint}")


@contextlib.contextmanager
def atomic(path: str, what: str = "output") -> Iterator[str]:
    """Yield the temporary path to write ``path`` through; rename it into place on success.

    On any exception the temporary file is removed, ``path`` is left as it was, and an
    ``OSError`` becomes an :class:`OutputError` naming ``what`` and ``path``.
    """
    if _special(path):
        try:
            yield path
        except OSError as exc:
            raise write_error(what, path, exc) from None
        return
    parent = os.path.dirname(path)
    try:
        if parent:
            os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise write_error(what, path, exc) from None
    tmp = partial_path(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        _remove(tmp)
        raise write_error(what, path, exc) from None
    except BaseException:
        _remove(tmp)
        raise


def commit(tmp: str, path: str, what: str = "output") -> None:
    """Rename a finished temporary file into place (for writers that outlive a ``with``)."""
    if tmp == path:
        return
    try:
        os.replace(tmp, path)
    except OSError as exc:
        _remove(tmp)
        raise write_error(what, path, exc) from None


def discard(tmp: str, path: str) -> None:
    """Remove an unfinished temporary file (never ``path`` itself)."""
    if tmp != path:
        _remove(tmp)


def _remove(tmp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)

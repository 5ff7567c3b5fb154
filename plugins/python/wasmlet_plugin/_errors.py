"""How an exception a handler or source raises reads on the host: ``describe`` gives it in
one line, with the place in the author's code it came from, for a probe's ``error`` outcome
or a source's error; ``report`` also prints the whole traceback to stderr, which the host
logs under the plugin's name."""

import errno
import sys
import traceback

# componentize-py puts each folder of the build at a numbered root: /0/app.py.
_SDK = "wasmlet_plugin"


def _authors(filename: str) -> str:
    parts = filename.split("/", 2)
    if len(parts) == 3 and parts[0] == "" and parts[1].isdigit():
        return parts[2]
    return filename


def describe(e: BaseException) -> str:
    """``Type: message (at app.py:12 in probe)``: the innermost frame of the author's own
    files (not the SDK's, not the standard library's), else the innermost outside the SDK."""
    text = f"{type(e).__name__}: {_message(e)}" if str(e) else type(e).__name__
    frames = traceback.extract_tb(e.__traceback__)
    outside = [f for f in frames if _SDK not in f.filename]
    own = [f for f in outside if _authors(f.filename) != f.filename] or outside or frames
    if own:
        where = own[-1]
        text += f" (at {_authors(where.filename)}:{where.lineno} in {where.name})"
    return text


def _message(e: BaseException) -> str:
    """``e``'s message; an OS error's number by its name (``[ECONNREFUSED] Connection
    refused``): the numbers are WASI's, not those an author knows from Linux."""
    if type(e).__name__ == "gaierror":
        return (
            f"{e.strerror or e}: looking up a host name failed (a probe handler looks names "
            "up only when its configuration grants it network)"
        )
    if isinstance(e, OSError) and e.errno in errno.errorcode and e.strerror:
        text = f"[{errno.errorcode[e.errno]}] {e.strerror}"
        return f"{text}: {e.filename!r}" if e.filename is not None else text
    return str(e)


def report(e: BaseException) -> str:
    """Prints ``e``'s traceback to stderr and returns :func:`describe` of it."""
    traceback.print_exception(e, file=sys.stderr)
    return describe(e)

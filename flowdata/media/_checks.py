"""Checks shared by the decoders: the file exists, is a regular file and is not empty."""

from __future__ import annotations

import os
import stat

from flowdata.io import NotAFile, kind_of, open_regular
from flowdata.errors import MediaError


def existing(path: str | os.PathLike[str], name: str | None = None) -> str:
    """The path as a string; raises MediaError when it is missing, a folder, not a regular
    file (a FIFO, a socket, a device: refused before it is opened, which could wait
    forever), or empty.

    Args:
        path: The local file.
        name: What the errors call it (the ``file://`` URL it came from); the path when None.
    """
    text = os.fspath(path)
    name = text if name is None else name
    try:
        st = os.stat(text)
    except FileNotFoundError:
        raise MediaError(name, "file does not exist",
                         "check the manifest's paths (relative to the manifest's folder)") from None
    except PermissionError as exc:  # a folder on the way cannot be entered: not "does not exist"
        raise MediaError(name, "cannot be opened (permission denied: a folder on its path cannot be entered)",
                         "check the permissions of the folders that hold it") from exc
    except OSError as exc:
        reason = (exc.strerror or type(exc).__name__).lower()
        raise MediaError(name, f"cannot be opened ({reason})", "check the path and the disk") from exc
    if stat.S_ISDIR(st.st_mode):
        raise MediaError(name, "is a folder, not a file")
    kind = kind_of(st.st_mode)
    if kind is not None:
        raise MediaError(name, _not_a_file(kind), _FIX)
    if st.st_size == 0:
        raise MediaError(name, "file is empty (0 bytes)", "re-export or remove the file")
    try:
        with open_regular(text):
            pass
    except NotAFile as exc:  # replaced since the look above
        raise MediaError(name, _not_a_file(exc.kind), _FIX) from None
    except OSError as exc:  # the system refuses: say so, never "corrupt"
        reason = (exc.strerror or type(exc).__name__).lower()
        raise MediaError(name, f"cannot be opened ({reason})", "check the file's permissions and the disk") from exc
    return text


_FIX = "give the path of a media file; to decode what a pipe or a device delivers, read it in a node and pass the bytes"


def _not_a_file(kind: str) -> str:
    return f"is {kind}, not a regular file"

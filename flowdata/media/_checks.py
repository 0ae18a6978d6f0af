"""Checks shared by the decoders: the file exists and is not empty."""

from __future__ import annotations

import os
import stat

from flowdata.errors import MediaError


def existing(path: str | os.PathLike[str], name: str | None = None) -> str:
    """The path as a string; raises MediaError when it is missing, a folder, or empty.

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
    if st.st_size == 0:
        raise MediaError(name, "file is empty (0 bytes)", "re-export or remove the file")
    try:
        with open(text, "rb"):
            pass
    except OSError as exc:  # the system refuses: say so, never "corrupt"
        reason = (exc.strerror or type(exc).__name__).lower()
        raise MediaError(name, f"cannot be opened ({reason})", "check the file's permissions and the disk") from exc
    return text

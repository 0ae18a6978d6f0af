"""Checks shared by the decoders: the file exists and is not empty."""

from __future__ import annotations

import os

from flowdata.errors import MediaError


def existing(path: str | os.PathLike[str]) -> str:
    """The path as a string; raises MediaError when it is missing, a folder, or empty."""
    text = os.fspath(path)
    if not os.path.exists(text):
        raise MediaError(text, "file does not exist", "check the manifest's paths (relative to the manifest's folder)")
    if os.path.isdir(text):
        raise MediaError(text, "is a folder, not a file")
    if os.path.getsize(text) == 0:
        raise MediaError(text, "file is empty (0 bytes)", "re-export or remove the file")
    try:
        with open(text, "rb"):
            pass
    except OSError as exc:  # the system refuses: say so, never "corrupt"
        reason = (exc.strerror or type(exc).__name__).lower()
        raise MediaError(text, f"cannot be opened ({reason})", "check the file's permissions and the disk") from exc
    return text

"""Text files an operator hands a command (a configuration, a dataset, thresholds), read as UTF-8 with one line
naming the file, the byte offset and the line where they are not: never a ``UnicodeDecodeError`` traceback."""

from __future__ import annotations

from pathlib import Path

__all__ = ["NotUtf8", "read_utf8"]


class NotUtf8(ValueError):
    """The file's bytes are not UTF-8 text at ``offset`` (on ``line``)."""

    def __init__(self, path: Path, data: bytes, error: UnicodeDecodeError) -> None:
        self.path = path
        self.offset = error.start
        self.line = data.count(b"\n", 0, error.start) + 1
        super().__init__(
            f"{path} is not UTF-8 text: byte 0x{data[error.start]:02x} at byte offset {error.start} (line {self.line}, "
            f"{error.reason}); save it as UTF-8"
        )


def read_utf8(path: Path, *, bom: bool = False) -> str:
    """The file's text (``bom``: a UTF-8 byte order mark at its start is dropped, as spreadsheets write CSV).
    Raises ``OSError`` when it cannot be read, :class:`NotUtf8` when it is not UTF-8."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig" if bom else "utf-8")
    except UnicodeDecodeError as exc:
        raise NotUtf8(path, data, exc) from None

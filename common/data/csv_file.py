"""A CSV input file's first look, the same for 01's inputs (common.data.train_csv,
common.data.preprocess) and 04's --test-csv (common.data.api_file): a file that is missing,
a folder, unreadable, compressed, or whose header is not UTF-8 or not comma-separated is
refused with its cause named."""

from __future__ import annotations

from pathlib import Path

from common.data.schema import InputError

COMPRESSED = {  # a file's first bytes -> its format
    b"\x1f\x8b": "gzip",
    b"PK\x03\x04": "zip",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"(\xb5/\xfd": "zstd",
}
BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark: accepted, as pandas accepts it
DELIMITERS = {";": "semicolons", "\t": "tabs", "|": "vertical bars"}


def header_line(path: Path, columns) -> tuple[str, bytes]:
    """(the header line, the line after it, raw) of a CSV file, refused with its cause
    named when it is a folder, unreadable, compressed, not UTF-8 or not comma-separated; a
    UTF-8 byte-order mark is dropped."""
    if not path.exists():
        raise InputError(str(path), "the file to exist")
    if path.is_dir():
        raise InputError(str(path), "a CSV file; this is a folder")
    try:
        with open(path, "rb") as handle:
            first, second = handle.readline(), handle.readline()
    except OSError as error:
        raise InputError(str(path), f"a file this process can read ({error.strerror})") from None
    for magic, name in COMPRESSED.items():
        if first.startswith(magic):
            raise InputError(
                str(path), f"a plain CSV file; this one is {name}-compressed: decompress it first"
            )
    try:
        text = first.removeprefix(BOM).decode("utf-8").strip()
    except UnicodeDecodeError as error:
        raise InputError(
            str(path),
            f"a UTF-8 header line; byte {error.start} is {first[error.start]:#04x}, not UTF-8 "
            "(Latin-1 or Windows-1252?): save the file as UTF-8",
            row=0,
        ) from None
    for mark, name in DELIMITERS.items():
        if mark in text and text.count(mark) >= len(columns) - 1 > text.count(","):
            raise InputError(
                str(path), f"columns separated by commas; this header separates them by {name}",
                row=0,
            )  # fmt: skip
    return text, second

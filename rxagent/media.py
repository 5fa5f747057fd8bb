"""What media bytes are: their type from their first bytes, an image's size from its header, a PDF's pages.

Plain functions on ``bytes`` with no dependency (no imaging library is needed to send a picture):
:func:`sniff` names the type a file's magic bytes say (PNG, JPEG, GIF, WebP, PDF), :func:`image_size`
reads an image's width and height from its header, and :func:`pdf_pages` counts a PDF's pages. The
content blocks of :mod:`rxagent.messages` check their bytes with them, and the token budget
(:mod:`rxagent.memory.tokens`) sizes images and documents with them.

Example:
    >>> head = b"\\x89PNG\\r\\n\\x1a\\n" + b"\\x00\\x00\\x00\\rIHDR"
    >>> png = head + (640).to_bytes(4, "big") + (480).to_bytes(4, "big")
    >>> sniff(png), image_size(png)
    ('image/png', (640, 480))
"""

from __future__ import annotations

import re
from typing import Final, Literal, TypeAlias, get_args

__all__ = [
    "DOCUMENT_MEDIA_TYPES",
    "IMAGE_MEDIA_TYPES",
    "DocumentMediaType",
    "ImageMediaType",
    "MediaType",
    "image_size",
    "pdf_pages",
    "sniff",
]

ImageMediaType: TypeAlias = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
"""The image types every provider rxagent speaks to takes: PNG, JPEG, GIF and WebP."""

DocumentMediaType: TypeAlias = Literal["application/pdf", "text/plain"]
"""The document types: PDF, and plain UTF-8 text."""

MediaType: TypeAlias = ImageMediaType | DocumentMediaType
"""Any media type a content block may hold."""

IMAGE_MEDIA_TYPES: Final[tuple[ImageMediaType, ...]] = get_args(ImageMediaType)
"""The image types, in a tuple (for messages and checks)."""

DOCUMENT_MEDIA_TYPES: Final[tuple[DocumentMediaType, ...]] = get_args(DocumentMediaType)
"""The document types, in a tuple."""

_MAGIC: Final[tuple[tuple[bytes, int, MediaType], ...]] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
    (b"%PDF-", 0, "application/pdf"),
)
"""Magic bytes and where they stand. WebP (``RIFF`` then ``WEBP`` at 8) is checked apart."""


def sniff(data: bytes) -> MediaType | None:
    """The media type ``data``'s magic bytes say, or ``None`` when they name none of ours.

    Plain text has no magic bytes: it is never sniffed, only declared. A PDF must begin with ``%PDF-``
    (readers tolerate a little junk before it; a file made to be sent need not).

    Example:
        >>> sniff(b"%PDF-1.7\\n"), sniff(b"GIF89a..."), sniff(b"hello")
        ('application/pdf', 'image/gif', None)
    """
    for magic, offset, media_type in _MAGIC:
        if data.startswith(magic, offset):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` in pixels from an image's header, or ``None`` when the header cannot say
    (a type we do not read, or bytes cut short). PNG, GIF, WebP (lossy, lossless and extended) and JPEG
    (the first frame header after the markers before it) are read.

    Example:
        >>> image_size(b"GIF89a" + (3).to_bytes(2, "little") + (2).to_bytes(2, "little"))
        (3, 2)
    """
    kind = sniff(data)
    try:
        if kind == "image/png":
            if data[12:16] != b"IHDR":
                return None
            return _positive(int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big"))
        if kind == "image/gif":
            return _positive(int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little"))
        if kind == "image/webp":
            return _webp_size(data)
        if kind == "image/jpeg":
            return _jpeg_size(data)
    except IndexError:
        return None
    return None


def _positive(width: int, height: int) -> tuple[int, int] | None:
    return (width, height) if width > 0 and height > 0 else None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":  # a lossy key frame's start code
        width = int.from_bytes(data[26:28], "little") & 0x3FFF
        height = int.from_bytes(data[28:30], "little") & 0x3FFF
        return _positive(width, height)
    if chunk == b"VP8L" and data[20:21] == b"\x2f":  # lossless: 14 bits each, minus one
        bits = int.from_bytes(data[21:25], "little")
        return _positive((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8X" and len(data) >= 30:  # extended: the canvas, 24 bits each, minus one
        return _positive(int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1)
    return None


_SOF: Final = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
"""JPEG start-of-frame markers (``DHT``, ``JPG`` and ``DAC`` share the range but are not frames)."""
_STANDALONE: Final = frozenset(range(0xD0, 0xDA)) | {0x01}
"""JPEG markers without a length (restarts, start and end of image, ``TEM``)."""


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    # Walk the marker segments from the start of the image to the first frame header, which holds the
    # size; an EXIF thumbnail lives inside an APP1 segment, skipped whole by its length.
    position, end = 2, len(data)
    while position + 4 <= end:
        if data[position] != 0xFF:
            return None
        marker = data[position + 1]
        if marker == 0xFF:  # fill bytes before a marker
            position += 1
            continue
        if marker in _STANDALONE:
            position += 2
            continue
        length = int.from_bytes(data[position + 2 : position + 4], "big")
        if marker in _SOF:
            if position + 9 > end:
                return None
            height = int.from_bytes(data[position + 5 : position + 7], "big")
            width = int.from_bytes(data[position + 7 : position + 9], "big")
            return _positive(width, height)
        if length < 2:
            return None
        position += 2 + length
    return None


_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
_COUNT = re.compile(rb"/Type\s*/Pages\b[^>]*?/Count\s+(\d+)|/Count\s+(\d+)[^>]*?/Type\s*/Pages\b")


def pdf_pages(data: bytes) -> int | None:
    """How many pages a PDF has, or ``None`` when its uncompressed structure does not say.

    Counts the page objects (``/Type /Page``); a PDF that keeps them in compressed object streams shows
    none, and then the page tree's ``/Count`` is read where it is visible. No PDF library is needed: this
    is an estimate's input (see :mod:`rxagent.memory.tokens`), not a parser.

    Example:
        >>> pdf_pages(b"%PDF-1.4 1 0 obj <</Type /Pages /Kids [2 0 R 3 0 R] /Count 2>> "
        ...           b"2 0 obj <</Type /Page>> 3 0 obj <</Type/Page>>")
        2
    """
    pages = len(_PAGE.findall(data))
    if pages:
        return pages
    counts = [int(a or b) for a, b in _COUNT.findall(data)]
    return max(counts) if counts and max(counts) > 0 else None

"""What media bytes are: magic bytes, image sizes from headers, a PDF's pages (``rxagent.media``).

The images here are built byte by byte to the formats' specifications (PNG's IHDR, GIF's logical screen,
WebP's three chunk kinds, JPEG's marker segments) and, for PNG, checked against a real file of the
repository (``docs/dashboard.png``). Bad inputs tried: bytes of no known type, headers cut short, a JPEG
whose segments break off, a PDF whose page tree is hidden, zero-sized images.
"""

from __future__ import annotations

import doctest
import struct
import zlib
from pathlib import Path

import pytest

import rxagent.media
from rxagent.media import image_size, pdf_pages, sniff

ROOT = Path(__file__).resolve().parent.parent


def png(width: int, height: int) -> bytes:
    """A valid PNG of ``width`` × ``height`` grey pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00\x00\x00" + b";"


def jpeg(width: int, height: int, *, exif: bool = True) -> bytes:
    """A JPEG's head: start of image, an APP1 (EXIF) segment to skip, fill bytes, then the frame header."""
    app1 = b"Exif\x00\x00" + b"\xff\xc0" * 20  # a thumbnail's bytes that look like a frame marker
    segments = b"\xff\xd8"
    if exif:
        segments += b"\xff\xe1" + struct.pack(">H", len(app1) + 2) + app1
    segments += b"\xff\xff"  # fill
    segments += b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return segments + b"\xff\xd9"


def webp_lossy(width: int, height: int) -> bytes:
    frame = b"\x00\x00\x00" + b"\x9d\x01\x2a" + struct.pack("<HH", width, height)
    return (
        b"RIFF"
        + struct.pack("<I", 4 + 8 + len(frame))
        + b"WEBP"
        + b"VP8 "
        + struct.pack("<I", len(frame))
        + frame
    )


def webp_lossless(width: int, height: int) -> bytes:
    bits = (width - 1) | ((height - 1) << 14)
    data = b"\x2f" + struct.pack("<I", bits)
    return (
        b"RIFF"
        + struct.pack("<I", 4 + 8 + len(data))
        + b"WEBP"
        + b"VP8L"
        + struct.pack("<I", len(data))
        + data
    )


def webp_extended(width: int, height: int) -> bytes:
    data = b"\x00\x00\x00\x00" + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return (
        b"RIFF"
        + struct.pack("<I", 4 + 8 + len(data))
        + b"WEBP"
        + b"VP8X"
        + struct.pack("<I", len(data))
        + data
    )


def pdf(pages: int) -> bytes:
    """A small PDF with ``pages`` page objects and its page tree."""
    kids = " ".join(f"{3 + n} 0 R" for n in range(pages))
    body = [
        "1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj",
        f"2 0 obj << /Type /Pages /Kids [{kids}] /Count {pages} >> endobj",
        *(
            f"{3 + n} 0 obj << /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >> endobj"
            for n in range(pages)
        ),
    ]
    return ("%PDF-1.7\n" + "\n".join(body) + "\ntrailer << /Root 1 0 R >>\n%%EOF\n").encode()


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (png(3, 2), "image/png"),
        (jpeg(3, 2), "image/jpeg"),
        (gif(3, 2), "image/gif"),
        (b"GIF87a" + b"\x00" * 10, "image/gif"),
        (webp_lossy(3, 2), "image/webp"),
        (pdf(1), "application/pdf"),
        (b"plain words", None),
        (b"", None),
        (b"RIFF\x00\x00\x00\x00WAVE", None),  # RIFF, but a sound
    ],
)
def test_sniff_names_the_type_the_magic_bytes_say(data: bytes, kind: str | None) -> None:
    assert sniff(data) == kind


@pytest.mark.parametrize(
    ("data", "size"),
    [
        (png(640, 480), (640, 480)),
        (gif(320, 200), (320, 200)),
        (jpeg(1920, 1080), (1920, 1080)),
        (jpeg(7, 9, exif=False), (7, 9)),
        (webp_lossy(1024, 768), (1024, 768)),
        (webp_lossless(300, 5000), (300, 5000)),
        (webp_extended(16383, 2), (16383, 2)),
    ],
)
def test_image_size_reads_each_format_s_header(data: bytes, size: tuple[int, int]) -> None:
    assert image_size(data) == size


def test_image_size_of_a_real_png() -> None:
    assert image_size((ROOT / "docs" / "dashboard.png").read_bytes()) == (1280, 900)


@pytest.mark.parametrize(
    "data",
    [
        png(640, 480)[:20],  # cut inside IHDR
        jpeg(100, 100)[:30],  # cut inside the EXIF segment
        b"\xff\xd8\xff\xe1\x00",  # a segment with no length
        b"\xff\xd8\xff\xe1\x00\x01" + b"\x00" * 10,  # a length below 2
        b"\xff\xd8\x00\x00\x00\x00",  # no marker where one must be
        webp_lossy(3, 2)[:20],
        gif(0, 10),  # zero-sized
        b"%PDF-1.7",  # not an image
        b"no type",
    ],
)
def test_image_size_is_none_when_the_header_cannot_say(data: bytes) -> None:
    assert image_size(data) is None


def test_pdf_pages_counts_page_objects_not_the_page_tree() -> None:
    assert pdf_pages(pdf(1)) == 1
    assert pdf_pages(pdf(12)) == 12
    assert pdf_pages(b"%PDF-1.4 <</Type/Page>> <</Type /Pages>> <</Type\n/Page>>") == 2


def test_pdf_pages_reads_the_count_when_the_page_objects_are_compressed() -> None:
    hidden = b"%PDF-1.7\n2 0 obj << /Type /Pages /Count 7 /Kids [] >> endobj\n3 0 obj << /Type /ObjStm >>"
    assert pdf_pages(hidden) == 7
    assert pdf_pages(b"%PDF-1.7 << /Count 3 /Type /Pages >>") == 3


def test_pdf_pages_is_none_when_nothing_shows() -> None:
    assert pdf_pages(b"%PDF-1.7\n<< /Type /ObjStm /N 40 >> stream ... endstream") is None
    assert pdf_pages(b"%PDF-1.7 << /Type /Pages /Count 0 >>") is None


def test_module_examples() -> None:
    assert doctest.testmod(rxagent.media).failed == 0

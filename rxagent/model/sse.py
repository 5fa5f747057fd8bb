"""An incremental Server-Sent Events decoder: bytes in, events out.

It follows the WHATWG "event stream interpretation" rules: lines end in CRLF, LF or a lone CR (a CR that
ends one network read and the LF that starts the next are *one* line break); a blank line dispatches the
event; ``data`` lines (``data: x`` or ``data:x``) are joined with ``"\\n"``; lines starting with ``:`` are
comments (keep-alives); ``event``, ``id`` and ``retry`` are honoured and every other field is ignored; a
leading UTF-8 byte order mark is dropped.

The decoder works on bytes and decodes an event's data only when the event is complete, so a read that
ends in the middle of a multi-byte UTF-8 character is harmless (CR and LF never occur inside one). It
runs once per streamed token, so the common cases — LF-terminated lines, one ``data: `` line per event
(OpenAI), or an ``event: `` line and one ``data: `` line (Anthropic) — are a ``split`` of the read at its
blank lines and a prefix test or two per event, with no regular expressions; a read of whole OpenAI events
is decoded as one text and split at its ``data: `` separators, with no per-event work but the event.

Example:
    >>> decoder = SSEDecoder()
    >>> decoder.feed(b'data: {"a": 1}\\n\\nda')
    [SSEEvent(data='{"a": 1}', event='message', id=None, line=1)]
    >>> decoder.feed(b"ta: [DONE]\\r")
    []
    >>> decoder.feed(b"\\n\\r\\n")
    [SSEEvent(data='[DONE]', event='message', id=None, line=3)]
"""

from __future__ import annotations

import msgspec

from rxagent.model.errors import MalformedStreamError

__all__ = ["SSEDecoder", "SSEEvent"]

_BOM = b"\xef\xbb\xbf"
_LF = 10  # b"\n"[0]


class SSEEvent(msgspec.Struct, gc=False):
    """One dispatched server-sent event.

    A msgspec struct rather than a dataclass: one is built per streamed token, and a struct is built in
    C at about a third of the cost. Its fields hold no containers, so the collector need not track it.
    """

    data: str
    """The event's data lines joined with ``"\\n"`` (decoded as UTF-8, bad bytes replaced)."""
    event: str = "message"
    """The event type (``event:`` field), ``"message"`` when none was given."""
    id: str | None = None
    """The last event id seen so far in the stream (it persists across events, as the spec says)."""
    line: int = 0
    """The stream line (1-based) of the event's first ``data`` line, for error messages."""


class SSEDecoder:
    """Turns the bytes of an event stream, fed in arbitrary pieces, into :class:`SSEEvent` objects.

    Call :meth:`feed` with every network read; it returns the events completed by that read (usually
    none or one). When the body ends, :meth:`end` returns the event that was still being assembled, if
    any: a conforming browser discards it, a client may prefer to report it as a truncated stream.

    Args:
        max_line_bytes: longest line accepted; a server that sends more without a line break gets
            :class:`~rxagent.model.errors.MalformedStreamError` instead of unbounded memory use.
    """

    __slots__ = (
        "_at_start",
        "_data",
        "_data_line",
        "_event",
        "_last_id",
        "_line",
        "_max_line",
        "_partial",
        "_retry",
        "_skip_lf",
    )

    def __init__(self, *, max_line_bytes: int = 16 * 1024 * 1024) -> None:
        self._partial = bytearray()  # an unterminated line carried over to the next read
        self._skip_lf = False  # the last read ended in CR: an LF starting the next read belongs to it
        self._at_start = True  # the byte order mark is only recognised at the very start
        self._data: list[bytes] = []
        self._data_line = 0
        self._event: str | None = None
        self._last_id: str | None = None
        self._retry: int | None = None
        self._line = 0
        self._max_line = max_line_bytes

    @property
    def line(self) -> int:
        """Number of complete lines decoded so far."""
        return self._line

    @property
    def last_event_id(self) -> str | None:
        """The last ``id`` field seen (what a reconnecting client sends as ``Last-Event-ID``)."""
        return self._last_id

    @property
    def retry(self) -> int | None:
        """The last ``retry`` field seen: the server's reconnection time in milliseconds."""
        return self._retry

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode one network read and return the events it completed, in order."""
        if (
            chunk.startswith(b"data: ")
            and chunk.find(b"\n") == len(chunk) - 2
            and chunk.endswith(b"\n\n")
            and not (self._partial or self._data or self._skip_lf or self._at_start)
            and b"\r" not in chunk
        ):
            # The common case, one token's event per read (`data: …` and its blank line), decoded at once.
            self._line += 2
            self._data_line = self._line - 1
            self._data.append(chunk[6:-2])
            return [self._dispatch()]
        if (
            chunk.startswith(b"event: ")
            and chunk.endswith(b"\n\n")
            and not (self._partial or self._data or self._skip_lf or self._at_start)
            and b"\r" not in chunk
        ):
            # The same for an event named on its own line first (`event: …`, `data: …`, blank line).
            event = self._named(chunk[:-2])
            if event is not None:
                return [event]
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk[0] == _LF:
                chunk = chunk[1:]
        if self._at_start:
            chunk = self._strip_bom(chunk)
        if b"\r" in chunk:
            # Rare in practice; normalise to LF so the common path below stays one split.
            self._skip_lf = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n" not in chunk:
            self._hold(chunk)
            return []
        if self._partial:
            chunk = b"".join((self._partial, chunk))
            self._partial.clear()
        events: list[SSEEvent] = []
        if not self._data:
            end = chunk.rfind(b"\n\n")
            if end > 0 and self._event is None and chunk.startswith(b"data: "):
                # Whole events of one `data: ` line each (OpenAI's shape, many per read when the server
                # streams faster than it is read): decoded as one text and cut at the separators, at a
                # third of the cost of going event by event. Any other line adds a line break the count
                # does not expect; such a read goes the general way below.
                text = chunk[6:end].decode("utf-8", "replace")
                datas = text.split("\n\ndata: ")
                if text.count("\n") == 2 * len(datas) - 2:
                    first, last_id = self._line + 1, self._last_id
                    self._line += 2 * len(datas)
                    lines = range(first, self._line, 2)
                    events = [
                        SSEEvent(data, "message", last_id, line)
                        for data, line in zip(datas, lines, strict=True)
                    ]
                    chunk = chunk[end + 2 :]
            # Several whole events in one read (a server streaming faster than it is read): cut at the
            # blank lines, an event of one `data: ` line is dispatched as it is, without going line by line.
            pieces = chunk.split(b"\n\n")
            chunk = pieces.pop()  # what follows the last blank line: the start of the next event, if any
            for piece in pieces:
                if piece[:6] == b"data: " and b"\n" not in piece:
                    self._line += 2
                    data = piece[6:].decode("utf-8", "replace")
                    events.append(SSEEvent(data, self._event or "message", self._last_id, self._line - 1))
                    self._event = None
                    continue
                if piece[:7] == b"event: " and not self._event:
                    event = self._named(piece)
                    if event is not None:
                        events.append(event)
                        continue
                lines = piece.split(b"\n")
                lines.append(b"")  # the blank line that ended it
                self._take(lines, events)
            if b"\n" not in chunk:
                if chunk:
                    self._hold(chunk)
                return events
        lines = chunk.split(b"\n")
        tail = lines.pop()
        self._take(lines, events)
        if tail:
            self._hold(tail)
        return events

    def _take(self, lines: list[bytes], events: list[SSEEvent]) -> None:
        """Interpret whole ``lines``, appending the events they complete to ``events``."""
        for line in lines:
            self._line += 1
            if line.startswith(b"data:"):
                if not self._data:
                    self._data_line = self._line
                self._data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif not line:
                if self._data:
                    events.append(self._dispatch())
                else:
                    self._event = None
            elif line[0] != 58:  # not a ":" comment
                self._field(line)

    def end(self) -> SSEEvent | None:
        """The body ended: return the event left without its closing blank line, if there is one.

        An unterminated last line counts as a line. Feed nothing more afterwards.
        """
        if self._partial:
            self.feed(b"\n")
        return self._dispatch() if self._data else None

    # ---- internals --------------------------------------------------------------------------------

    def _named(self, piece: bytes) -> SSEEvent | None:
        """The event of ``piece`` (an event's lines, without the blank line that ends it) when it is exactly
        an ``event: `` line and one ``data: `` line; ``None`` (nothing consumed) for any other shape."""
        end = piece.find(b"\n")
        if end < 0 or not piece.startswith(b"data: ", end + 1) or piece.find(b"\n", end + 1) >= 0:
            return None
        self._line += 3
        name = piece[7:end].decode("utf-8", "replace") or "message"
        return SSEEvent(piece[end + 7 :].decode("utf-8", "replace"), name, self._last_id, self._line - 1)

    def _dispatch(self) -> SSEEvent:
        data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        event = SSEEvent(
            data.decode("utf-8", "replace"), self._event or "message", self._last_id, self._data_line
        )
        self._data = []
        self._event = None
        return event

    def _field(self, line: bytes) -> None:
        colon = line.find(b":")
        if colon < 0:
            name, value = line, b""
        else:
            name, value = line[:colon], line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":  # "data" with no colon: an empty data line
            if not self._data:
                self._data_line = self._line
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\0" not in value:
                self._last_id = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit():
            self._retry = int(value)

    def _hold(self, piece: bytes) -> None:
        self._partial += piece
        if len(self._partial) > self._max_line:
            size = len(self._partial)
            self._partial.clear()
            raise MalformedStreamError(
                f"event stream line longer than {self._max_line} bytes ({size} bytes without a line break)",
                line=self._line + 1,
            )

    def _strip_bom(self, chunk: bytes) -> bytes:
        head = b"".join((self._partial, chunk)) if self._partial else chunk
        self._partial.clear()
        if len(head) < len(_BOM) and _BOM.startswith(head):
            # Fewer bytes than the mark so far, and they could be its start: wait for more.
            self._partial += head
            return b""
        self._at_start = False
        return head[len(_BOM) :] if head.startswith(_BOM) else head

"""The SSE decoder against the WHATWG rules, fed whole, split at every byte, and split at random."""

from __future__ import annotations

import doctest

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rxagent.model.sse
from rxagent.model.errors import MalformedStreamError
from rxagent.model.sse import SSEDecoder, SSEEvent


def decode(*reads: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for read in reads:
        events.extend(decoder.feed(read))
    return events


def decode_split_everywhere(stream: bytes) -> list[list[SSEEvent]]:
    """The events for every way of cutting ``stream`` into two reads, plus one byte per read."""
    results = [decode(stream[:cut], stream[cut:]) for cut in range(len(stream) + 1)]
    results.append(decode(*(stream[i : i + 1] for i in range(len(stream)))))
    return results


def reference(stream: bytes) -> list[tuple[str, str, str | None]]:
    """A literal, slow transcription of the spec's algorithm (str-based) to compare against."""
    text = stream.decode("utf-8", "replace")
    text = text.removeprefix("\ufeff")
    lines: list[str] = []
    current = ""
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\r":
            lines.append(current)
            current = ""
            if i + 1 < len(text) and text[i + 1] == "\n":
                i += 1
        elif ch == "\n":
            lines.append(current)
            current = ""
        else:
            current += ch
        i += 1
    events: list[tuple[str, str, str | None]] = []
    data, event_type, last_id = "", "", None
    for line in lines:
        if line == "":
            if data:
                events.append((data.removesuffix("\n"), event_type or "message", last_id))
            data, event_type = "", ""
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data += value + "\n"
        elif name == "event":
            event_type = value
        elif name == "id" and "\0" not in value:
            last_id = value
    return events


def triples(events: list[SSEEvent]) -> list[tuple[str, str, str | None]]:
    return [(e.data, e.event, e.id) for e in events]


# ---- line endings ---------------------------------------------------------------------------------


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_every_line_ending_gives_the_same_events(eol: bytes) -> None:
    stream = eol.join([b"data: one", b"", b"data: two", b"data: lines", b"", b""])
    for events in decode_split_everywhere(stream):
        assert triples(events) == [("one", "message", None), ("two\nlines", "message", None)]


def test_cr_ending_one_read_and_lf_starting_the_next_are_one_line_break() -> None:
    # Counted as two breaks, the empty "line" between them would dispatch "a" and "b" separately.
    events = decode(b"data: a\r", b"\ndata: b\r\n\r\n")
    assert triples(events) == [("a\nb", "message", None)]


def test_lone_cr_at_the_end_of_a_read_then_a_new_line_is_not_swallowed() -> None:
    events = decode(b"data: a\r", b"data: b\r", b"\r")
    assert triples(events) == [("a\nb", "message", None)]


def test_mixed_endings_in_one_stream() -> None:
    assert triples(decode(b"data: a\r\ndata: b\rdata: c\n\r\n")) == [("a\nb\nc", "message", None)]


# ---- fields ---------------------------------------------------------------------------------------


def test_data_with_and_without_the_space_and_only_one_space_removed() -> None:
    events = decode(b"data:x\n\ndata: y\n\ndata:  z\n\n")
    assert [e.data for e in events] == ["x", "y", " z"]


def test_multi_line_data_is_joined_with_newlines() -> None:
    events = decode(b'data: {"a":\ndata: 1}\n\n')
    assert events[0].data == '{"a":\n1}'


def test_empty_data_lines_count() -> None:
    events = decode(b"data\n\ndata:\ndata:\n\n")
    assert [e.data for e in events] == ["", "\n"]


def test_comments_are_keep_alives_and_ignored() -> None:
    events = decode(b": ping\n\n:\ndata: x\n: between\n\n: ping\n\n")
    assert triples(events) == [("x", "message", None)]


def test_event_type_applies_to_one_event_and_resets() -> None:
    events = decode(b"event: error\ndata: x\n\ndata: y\n\nevent: ignored\n\ndata: z\n\n")
    assert [(e.event, e.data) for e in events] == [("error", "x"), ("message", "y"), ("message", "z")]


def test_id_persists_and_an_id_with_nul_is_ignored() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b"id: 7\ndata: a\n\ndata: b\n\nid: x\0y\ndata: c\n\nid\ndata: d\n\n")
    assert [e.id for e in events] == ["7", "7", "7", ""]
    assert decoder.last_event_id == ""


def test_retry_takes_digits_only() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"retry: 1500\n\nretry: soon\n\nretry: 12a\n\n")
    assert decoder.retry == 1500


def test_unknown_fields_and_blank_lines_without_data_dispatch_nothing() -> None:
    assert decode(b"foo: bar\n\n\n\nevent: x\n\nid: 1\n\n") == []


def test_byte_order_mark_is_dropped_at_the_start_only() -> None:
    bom = b"\xef\xbb\xbf"
    for events in decode_split_everywhere(bom + b"data: a\n\ndata: " + bom + b"b\n\n"):
        assert [e.data for e in events] == ["a", "\ufeffb"]


# ---- bytes, reads, lines ---------------------------------------------------------------------------


def test_reads_split_in_the_middle_of_utf8_characters() -> None:
    stream = "data: héllo €🙂\r\n\r\ndata: ü\n\n".encode()
    for events in decode_split_everywhere(stream):
        assert [e.data for e in events] == ["héllo €🙂", "ü"]


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    assert decode(b"data: \xff\xfe ok\n\n")[0].data == "\ufffd\ufffd ok"


def test_events_record_the_line_of_their_first_data_line() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b": hello\r\ndata: a\r\n\r\nevent: x\ndata: b\ndata: c\n\n")
    assert [e.line for e in events] == [2, 5]
    assert decoder.line == 7


def test_end_returns_the_event_left_without_its_blank_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: [DONE]\ndata: {"cut') == []
    tail = decoder.end()
    assert tail is not None
    assert (tail.data, tail.line) == ('[DONE]\n{"cut', 1)


def test_end_with_nothing_pending_is_none() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: a\n\n: trailing comment")
    assert decoder.end() is None


def test_a_line_without_end_beyond_the_limit_is_an_error() -> None:
    decoder = SSEDecoder(max_line_bytes=64)
    decoder.feed(b"data: ok\n\n" + b"x" * 60)
    with pytest.raises(MalformedStreamError, match=r"longer than 64 bytes.*line 3"):
        decoder.feed(b"y" * 10)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.sampled_from(["data", "data ", "event", "id", "retry", ":", "x"]), st.text(max_size=8)
            ),
            st.just(("", "")),
        ),
        max_size=20,
    ),
    st.sampled_from(["\n", "\r\n", "\r"]),
    st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_matches_the_reference_for_any_fields_endings_and_splits(
    fields: list[tuple[str, str]], eol: str, cuts: list[int]
) -> None:
    lines: list[str] = []
    for name, value in fields:
        clean = value.replace("\r", "").replace("\n", "")
        if not name:
            lines.append("")
        elif name == ":":
            lines.append(":" + clean)
        elif name == "data ":
            lines.append("data: " + clean)
        else:
            lines.append(f"{name}:{clean}")
    stream = (eol.join(lines) + eol + eol).encode()
    bounds = sorted({min(c, len(stream)) for c in cuts})
    reads = [stream[a:b] for a, b in zip([0, *bounds], [*bounds, len(stream)], strict=True)]
    assert triples(decode(*reads)) == reference(stream)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["", "event: delta\n", "id: 7\n", ": keep-alive\n", "data: first\n"]),
            st.text(max_size=12).map(lambda t: t.replace("\r", "").replace("\n", "")),
        ),
        min_size=1,
        max_size=10,
    )
)
def test_one_whole_event_per_read_matches_the_reference(events: list[tuple[str, str]]) -> None:
    # How servers stream tokens: every read is one whole `data: …` event (the decoder's fast path),
    # sometimes after reads holding other fields of the same event.
    reads: list[bytes] = []
    for prefix, text in events:
        if prefix:
            reads.append(prefix.encode())
        reads.append(f"data: {text}\n\n".encode())
    stream = b"".join(reads)
    decoded = decode(*reads)
    assert triples(decoded) == reference(stream)
    assert [e.line for e in decoded] == [e.line for e in decode(stream)]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["", "event: delta\n", "id: 7\n", ": keep-alive\n", "data: first\n", "\n"]),
            st.text(max_size=12).map(lambda t: t.replace("\r", "").replace("\n", "")),
            st.sampled_from(["data: ", "data:"]),
        ),
        min_size=1,
        max_size=12,
    ),
    st.text(max_size=6).map(lambda t: t.replace("\r", "")),
    st.lists(st.integers(min_value=0, max_value=300), max_size=4),
)
def test_many_events_in_one_read_match_the_reference_and_the_line_by_line_path(
    events: list[tuple[str, str, str]], tail: str, cuts: list[int]
) -> None:
    # How a server streaming faster than it is read arrives: many whole events (most a single
    # `data: ` line) in a read, the start of the next at its end. Cut out of the reads at the blank
    # lines, they must give what the line-by-line path gives (one byte per read never takes the cut).
    stream = "".join(f"{prefix}{field}{text}\n\n" for prefix, text, field in events).encode()
    stream += tail.encode()
    bounds = sorted({min(c, len(stream)) for c in cuts})
    reads = [stream[a:b] for a, b in zip([0, *bounds], [*bounds, len(stream)], strict=True)]
    cut = decode(*reads)
    by_byte = decode(*(stream[i : i + 1] for i in range(len(stream))))
    assert triples(cut) == triples(by_byte) == reference(stream)
    assert [e.line for e in cut] == [e.line for e in by_byte]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["", "id: 7\n", ": keep-alive\n", "event: first\n", "data: first\n"]),
            st.text(max_size=8).map(lambda t: t.replace("\r", "").replace("\n", "")),
            st.text(max_size=12).map(lambda t: t.replace("\r", "").replace("\n", "")),
        ),
        min_size=1,
        max_size=10,
    )
)
def test_one_named_event_per_read_matches_the_reference(events: list[tuple[str, str, str]]) -> None:
    # How Anthropic streams tokens: every read is one whole `event: …` + `data: …` event (the named fast
    # path), sometimes after reads holding other fields of the same event.
    reads: list[bytes] = []
    for prefix, name, text in events:
        if prefix:
            reads.append(prefix.encode())
        reads.append(f"event: {name}\ndata: {text}\n\n".encode())
    stream = b"".join(reads)
    decoded = decode(*reads)
    assert triples(decoded) == reference(stream)
    assert [e.line for e in decoded] == [e.line for e in decode(stream)]
    assert [e.line for e in decoded] == [
        e.line for e in decode(*(stream[i : i + 1] for i in range(len(stream))))
    ]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["", "event: delta\n", "event:\n", "event:  two\n", "id: 7\n", "data: first\n"]),
            st.sampled_from(["event: content_block_delta\n", "event: \n", "event: x\ndata: a\n", ""]),
            st.text(max_size=12).map(lambda t: t.replace("\r", "").replace("\n", "")),
        ),
        min_size=1,
        max_size=12,
    ),
    st.lists(st.integers(min_value=0, max_value=400), max_size=4),
)
def test_many_named_events_in_one_read_match_the_reference(
    events: list[tuple[str, str, str]], cuts: list[int]
) -> None:
    stream = "".join(f"{prefix}{named}data: {text}\n\n" for prefix, named, text in events).encode()
    bounds = sorted({min(c, len(stream)) for c in cuts})
    reads = [stream[a:b] for a, b in zip([0, *bounds], [*bounds, len(stream)], strict=True)]
    cut = decode(*reads)
    by_byte = decode(*(stream[i : i + 1] for i in range(len(stream))))
    assert triples(cut) == triples(by_byte) == reference(stream)
    assert [e.line for e in cut] == [e.line for e in by_byte]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.sampled_from(["", "id: 7\n\n", "event: named\n", ": keep-alive\n", "data: first\n"]),
    st.lists(
        st.binary(max_size=10).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from([b"", b"da", b"data: {", b"data: x\n", b"\n", b"\xe2\x82", b"data:x\n\n", b"\n\n"]),
    st.lists(st.integers(min_value=0, max_value=200), max_size=4),
)
def test_reads_of_data_only_events_match_the_reference_and_the_line_by_line_path(
    prefix: str, datas: list[bytes], tail: bytes, cuts: list[int]
) -> None:
    # OpenAI's shape, read faster than it is streamed: runs of one-line `data: ` events, which the decoder
    # cuts as one text. Bad UTF-8, characters cut between reads, what an earlier read left pending (an
    # id, an event name, a data line) and whatever follows the last whole event must change nothing.
    stream = prefix.encode() + b"".join(b"data: " + data + b"\n\n" for data in datas) + tail
    bounds = sorted({min(c, len(stream)) for c in cuts})
    reads = [stream[a:b] for a, b in zip([0, *bounds], [*bounds, len(stream)], strict=True)]
    cut = decode(*reads)
    by_byte = decode(*(stream[i : i + 1] for i in range(len(stream))))
    assert triples(cut) == triples(by_byte) == reference(stream)
    assert [e.line for e in cut] == [e.line for e in by_byte]


def test_module_examples() -> None:
    results = doctest.testmod(rxagent.model.sse)
    assert results.attempted > 0
    assert results.failed == 0

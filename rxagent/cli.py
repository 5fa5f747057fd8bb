"""The ``rxagent`` command line: run an agent on the embedded model (or any OpenAI-compatible server).

``rxagent run "PROMPT"`` streams the answer, with tool calls and their results shown as they happen;
``rxagent chat`` is the same in an interactive loop (one session, so it remembers); ``--json`` prints
the event stream as JSON lines for other programs. ``python -m rxagent`` is the same command.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rxagent.agent.react import AgentOptions, ReActAgent
from rxagent.context import RuntimeContext
from rxagent.events import (
    AgentEvent,
    AgentResult,
    ErrorEvent,
    RetryScheduled,
    TextDelta,
    ToolCallCompleted,
    ToolResult,
    event_to_json,
)
from rxagent.model.types import ChatModel
from rxagent.operators import to_async_iterator
from rxagent.tools.demo import demo_tools
from rxagent.tools.toolkit import Toolkit

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["main"]

_SYSTEM = "You are a helpful assistant. Use a tool when it helps; answer briefly."


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rxagent", description="Run an rxagent agent from the terminal.")
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--model", default="local", help="'local' (the embedded GGUF) or a model name on --base-url"
    )
    common.add_argument("--base-url", help="an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    common.add_argument(
        "--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key"
    )
    common.add_argument("--gguf", help="a GGUF file for --model local (default: $RXAGENT_GGUF, else SmolLM2)")
    common.add_argument(
        "--tools", default="calculator,clock", help="demo tools: calculator,clock,files (or 'none')"
    )
    common.add_argument("--files-root", default=".", help="the only directory the 'files' tool may read")
    common.add_argument("--system", default=_SYSTEM, help="the system prompt")
    common.add_argument(
        "--max-iters", type=int, default=4, help="reasoning steps before the summarising turn"
    )
    common.add_argument("--max-tokens", type=int, default=256, help="answer length limit per model call")
    common.add_argument("--require-tool", action="store_true", help="make the first step call a tool")
    common.add_argument("--json", action="store_true", help="print every event as a JSON line")
    run = commands.add_parser("run", parents=[common], help="answer one prompt")
    run.add_argument("prompt")
    commands.add_parser("chat", parents=[common], help="chat in a loop (empty line or Ctrl-D to quit)")
    return parser


def _model(args: argparse.Namespace) -> ChatModel:
    if args.base_url:
        from rxagent.model.openai import OpenAIChatModel

        name = "default" if args.model == "local" else args.model
        return OpenAIChatModel(name, base_url=args.base_url, api_key_env=args.api_key_env)
    if args.model != "local":
        raise SystemExit("rxagent: --model NAME needs --base-url (or use --model local)")
    from rxagent.model.llama_cpp import LlamaCppModel

    return LlamaCppModel(args.gguf, max_tokens=args.max_tokens)


def _agent(args: argparse.Namespace, model: ChatModel) -> ReActAgent:
    names = [] if args.tools in ("", "none") else [n.strip() for n in args.tools.split(",") if n.strip()]
    options = AgentOptions(
        max_iters=args.max_iters,
        max_tokens=args.max_tokens,
        first_tool_choice="required" if args.require_tool and names else None,
    )
    toolkit = Toolkit(demo_tools(names, files_root=args.files_root))
    return ReActAgent(model, toolkit, system_prompt=args.system, name="rxagent-cli", options=options)


def escape(text: str) -> str:
    """``text`` with rich markup neutralised (tool output must never style the terminal)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


class _Display:
    """Shows a run as it happens: streamed text, each tool call and its result, retries and the outcome."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.at_line_start = True

    def _newline(self) -> None:
        if not self.at_line_start:
            self.console.print()
            self.at_line_start = True

    def show(self, event: AgentEvent) -> None:
        if isinstance(event, TextDelta):
            self.console.print(event.text, end="", markup=False, highlight=False)
            self.at_line_start = event.text.endswith("\n")
        elif isinstance(event, ToolCallCompleted):
            self._newline()
            call = event.call
            arguments = call.raw_arguments if call.input is None else json.dumps(call.input)
            self.console.print(f"[bold cyan]⚙ {call.name}[/]({escape(arguments)})", highlight=False)
        elif isinstance(event, ToolResult):
            style = "green" if event.result.status == "ok" else "red"
            self.console.print(
                f"[{style}]  → {event.result.status}:[/]", event.result.text, markup=True, highlight=False
            )
        elif isinstance(event, RetryScheduled):
            self._newline()
            self.console.print(f"[yellow]retrying in {event.delay_s:.1f}s: {event.error}[/]", highlight=False)
        elif isinstance(event, ErrorEvent):
            self._newline()
            self.console.print(f"[red]{event.error_type}: {event.message}[/]", highlight=False)
        elif isinstance(event, AgentResult):
            self._newline()
            usage = event.usage
            self.console.print(
                f"[dim]{event.reason} · {event.iterations} step(s) · {usage.input_tokens} in / "
                f"{usage.output_tokens} out tokens[/]",
                highlight=False,
            )


async def _run_once(
    agent: ReActAgent, prompt: str, ctx: RuntimeContext, display: _Display | None
) -> AgentResult:
    result: AgentResult | None = None
    async for event in to_async_iterator(agent.stream_events(prompt, ctx)):
        if display is None:
            sys.stdout.write(event_to_json(event) + "\n")
            sys.stdout.flush()
        else:
            display.show(event)
        if isinstance(event, AgentResult):
            result = event
    assert result is not None, "every run ends with an AgentResult"
    return result


async def _main(args: argparse.Namespace) -> int:
    from rich.console import Console

    model = _model(args)
    agent = _agent(args, model)
    display = None if args.json else _Display(Console(highlight=False))
    ctx = RuntimeContext(session_id="cli")
    try:
        if args.command == "run":
            await _run_once(agent, args.prompt, ctx, display)
            return 0
        while True:
            try:
                prompt = await asyncio.to_thread(input, "you> ")
            except EOFError:
                return 0
            if not prompt.strip():
                return 0
            await _run_once(agent, prompt, ctx, display)
    finally:
        close: Any = getattr(model, "aclose", None)
        if close is not None:
            await close()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rxagent`` command; returns the process exit code."""
    args = _parser().parse_args(argv)
    if args.base_url and not os.environ.get(args.api_key_env):
        print(f"(no ${args.api_key_env} set: sending no API key)", file=sys.stderr)
    try:
        return asyncio.run(_main(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`rxagent run … --json | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as error:  # one clear line for the terminal instead of a traceback
        print(f"rxagent: {type(error).__name__}: {error}", file=sys.stderr)
        return 1

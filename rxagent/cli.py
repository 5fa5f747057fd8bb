"""The ``rxagent`` command line.

``rxagent stream PROMPT`` streams one model completion to the terminal, deltas as they arrive, then the
folded message's finish reason and usage. Without ``--base-url`` it streams from the scripted test model
(no network, no agent); with ``--base-url`` from any OpenAI-compatible server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from reactivex import operators as ops

from rxagent.messages import Msg
from rxagent.model.types import ChatChunk, ChatModel, ChatRequest
from rxagent.operators import fold_message

__all__ = ["main"]

_DEMO_ANSWER = (
    "rxagent turns an agent into reactivex observables: the model's chunks stream in, fold into a "
    "message, and every resource is released on complete, error and cancel alike. You asked: {prompt}"
)


def _scripted_model() -> ChatModel:
    from rxagent.model.scripted import FunctionModel, ScriptedResponse

    def answer(request: ChatRequest) -> ScriptedResponse:
        prompt = request.messages[-1].text
        return ScriptedResponse(text=_DEMO_ANSWER.format(prompt=prompt), chunk_size=3, delay=0.01)

    return FunctionModel(answer, model_name="scripted-demo")


async def _stream(prompt: str, model: ChatModel) -> int:
    request = ChatRequest(messages=(Msg.system("You are a helpful assistant."), Msg.user(prompt)))

    def show(chunk: ChatChunk) -> None:
        if chunk.thinking:
            sys.stdout.write(f"\x1b[2m{chunk.thinking}\x1b[0m")
        if chunk.text:
            sys.stdout.write(chunk.text)
        sys.stdout.flush()

    msg = await model.stream(request).pipe(ops.do_action(show), fold_message())
    print(
        f"\n\n[{model.model_name}] finish_reason={msg.metadata.get('finish_reason')} "
        f"usage={msg.metadata.get('usage')}"
    )
    return 0


async def _run(args: argparse.Namespace) -> int:
    if args.base_url is None:
        print(
            "(streaming from the scripted demo model: no network, no agent; "
            "the embedded local model arrives in a later release)\n"
        )
        return await _stream(args.prompt, _scripted_model())
    from rxagent.model.openai import OpenAIChatModel

    async with OpenAIChatModel(
        base_url=args.base_url, model=args.model, api_key=os.environ.get(args.api_key_env)
    ) as model:
        return await _stream(args.prompt, model)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rxagent`` command; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="rxagent", description=__doc__.splitlines()[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)
    stream = commands.add_parser("stream", help="stream one completion to the terminal")
    stream.add_argument("prompt")
    stream.add_argument("--base-url", help="an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    stream.add_argument("--model", default="default", help="model name sent to the server")
    stream.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable with the key")
    args = parser.parse_args(argv)
    try:
        return asyncio.run(_run(args))
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # a clear one-line error for the terminal, not a traceback
        print(f"\nrxagent: {type(error).__name__}: {error}", file=sys.stderr)
        return 1

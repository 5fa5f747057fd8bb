"""The :class:`~rxagent.agent.nodes.CheckOutput` step: accept a structured answer, or ask again.

On the tool path the answer is the output tool's arguments (the call gets an ``ok`` or an ``error``
result, and other calls of the same message are not run); on the native path it is the answer text; on
the prompted path it is the JSON object found in the answer text. A refused answer goes back to the
model with the validation error, up to ``AgentOptions.structured_retries`` times; then the run finishes
``STRUCTURED_OUTPUT`` with ``structured_error`` saying why.
"""

from __future__ import annotations

from reactivex import Observable

from rxagent.agent.decisions import continue_reasoning
from rxagent.agent.nodes import CheckOutput, Finish, Reason, StepOutput
from rxagent.agent.reasoning import structured_path
from rxagent.agent.run import RunState
from rxagent.agent.steps import emit
from rxagent.agent.structured import OUTPUT_TOOL, OutputSpec
from rxagent.events import AgentEvent, MessageCompleted
from rxagent.messages import Msg, ToolResultBlock
from rxagent.tools import result_of

__all__ = ["check_output_step"]


def check_output_step(node: CheckOutput, run: RunState) -> Observable[StepOutput[Finish | Reason]]:
    """Validate the structured answer in ``node.message``; finish with it, or ask the model again."""
    output = run.deps.output
    if output is None:
        raise RuntimeError("CheckOutput needs an agent with an output_type")
    message = node.message
    if any(c.name == OUTPUT_TOOL for c in message.tool_calls):
        return _from_tool(run, output, node)
    path = structured_path(run)
    if path == "tool":
        return _retry(
            run, node, f"you answered in text; call the `{OUTPUT_TOOL}` tool with the answer", False
        )
    try:
        value = (
            output.validate_text(message.text) if path == "native" else output.validate_answer(message.text)
        )
    except ValueError as error:
        return _retry(run, node, str(error), False)
    return emit(then=Finish("STRUCTURED_OUTPUT", message, structured=value))


def _from_tool(
    run: RunState, output: OutputSpec, node: CheckOutput
) -> Observable[StepOutput[Finish | Reason]]:
    message = node.message
    results: list[ToolResultBlock] = []
    accepted: object = None
    problem: str | None = None
    for call in message.tool_calls:
        if call.name != OUTPUT_TOOL:
            results.append(
                result_of(call, "Not run: the final answer was given in the same message.", "error")
            )
            continue
        if accepted is not None:
            results.append(result_of(call, "Ignored: an answer was already accepted.", "error"))
            continue
        try:
            if call.state != "complete" or call.input is None:
                raise ValueError(call.error or "the arguments could not be read")
            accepted = output.validate(call.input)
            results.append(result_of(call, "Answer accepted.", "ok"))
        except ValueError as error:
            problem = str(error)
            again = f"Invalid answer: {problem}. Call `{OUTPUT_TOOL}` again with corrected arguments."
            results.append(result_of(call, again, "error"))
    tool_message = Msg.from_tool_results(*results)
    run.state.messages.append(tool_message)
    closing: list[AgentEvent] = [] if run.quiet else [MessageCompleted(**run.head, message=tool_message)]
    if accepted is not None:
        return emit(*closing, then=Finish("STRUCTURED_OUTPUT", message, structured=accepted))
    return _retry(run, node, problem or "invalid answer", True, closing)


def _retry(
    run: RunState, node: CheckOutput, problem: str, answered: bool, events: list[AgentEvent] | None = None
) -> Observable[StepOutput[Finish | Reason]]:
    """Ask again with ``problem`` (``answered``: the tool result already told the model), or give up."""
    attempts = node.attempts + 1
    if attempts > run.deps.options.structured_retries:
        why = f"no valid structured output in {attempts} attempts: {problem}"
        return emit(*(events or []), then=Finish("STRUCTURED_OUTPUT", run.last_message, structured_error=why))
    if not answered:
        run.add_messages([Msg.user(f"Your answer did not match the required output: {problem}. Try again.")])
    return emit(*(events or []), then=continue_reasoning(run, attempts=attempts))

"""The type checker verifies a loop's edges: basedpyright (strict) run on small user snippets.

A wrong edge of a custom assembly must be found by the checker, not at run time, so typing the edges
cannot silently regress. Each snippet below is what a user assembling a loop would write; the test runs
basedpyright once over all of them in a temporary project (strict, Python 3.11, this checkout's
``rxagent`` first on the path) and compares, per snippet, the checker's findings with the markers in the
snippet's own lines:

- ``# error: <rule>``: exactly these lines have an error, of that rule (and no other line has an error
  or a warning, so an unrelated error cannot make a test pass);
- ``# reveal: <type>``: ``reveal_type`` on that line shows that type.

What each test adds is the error's message: that the checker refused for the reason the test is about.
basedpyright comes with the ``test`` extra; the test fails if it is missing.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
"""This checkout: its ``rxagent`` is the one the snippets are checked against."""

# ---- the snippets ------------------------------------------------------------------------------------------

PLAN = '''
from __future__ import annotations

from dataclasses import dataclass

from reactivex import Observable

from rxagent.agent.loop import Finish, Node, Reason, RunState, Step, StepOutput, emit
from rxagent.messages import Msg


@dataclass(frozen=True, slots=True)
class Plan(Node):
    """A node of the user's own: a plan to tell the model before it reasons."""

    text: str


def tell_plan(node: Plan, run: RunState) -> Observable[StepOutput[Reason]]:
    run.add_messages([Msg.system(node.text)])
    return emit(then=Reason())


planning: Step[Plan, Reason] = tell_plan


def read_plan(node: Reason, message: Msg | None, run: RunState) -> Plan | Finish:
    """After a model turn: a plan goes to Plan, anything else finishes."""
    if message is not None and message.text.startswith("PLAN:"):
        return Plan(message.text.removeprefix("PLAN:"))
    return Finish("MODEL_STOP", message)
'''
"""The user's module the snippets import: a node of its own, its step, a decision that goes to it."""

SNIPPETS = {
    "plan.py": PLAN,
    "assembly.py": '''
from __future__ import annotations

from reactivex import Observable

from plan import Plan, planning, read_plan
from rxagent import ScriptedModel
from rxagent.agent import Agent
from rxagent.agent.loop import (
    ReActNode,
    Reason,
    RunInput,
    RunState,
    Start,
    StepOutput,
    Steps,
    model_turn,
    new_run,
    react_steps,
    reason_step,
    run_loop,
)
from rxagent.events import AgentEvent
from rxagent.messages import Msg
from rxagent.model import ChatRequest

steps: Steps[ReActNode | Plan] = react_steps().on(Plan, planning).on(Reason, reason_step(decide=read_plan))
agent = Agent(ScriptedModel(["PLAN: be brief", "Hi."]), steps=steps)


def check_plan(node: Plan, run: RunState) -> Observable[StepOutput[Reason]]:
    """A side turn ending a step: the model checks the plan, then the run reasons."""
    request = ChatRequest((*run.deps.system, *run.history(), Msg.user(f"Is this plan sound? {node.text}")))
    return model_turn(run, request, then=lambda message: Reason())


checked = steps.on(Plan, check_plan)
run = new_run(ScriptedModel(["Hi."]))
events: Observable[AgentEvent] = run_loop(checked, Start(RunInput((Msg.user("hi"),))), run)
''',
    "wrong_node.py": """
from __future__ import annotations

from plan import planning
from rxagent.agent.loop import Act, react_steps

steps = react_steps().on(Act, planning)  # error: reportArgumentType
""",
    "missing_step.py": """
from __future__ import annotations

from plan import read_plan
from rxagent.agent.loop import Reason, react_steps, reason_step

steps = react_steps().on(Reason, reason_step(decide=read_plan))  # error: reportArgumentType
""",
    "output_type.py": """
from __future__ import annotations

from pydantic import BaseModel

from rxagent import ScriptedModel
from rxagent.agent import Agent


class City(BaseModel):
    name: str


class Town(BaseModel):
    name: str


async def ask() -> None:
    typed = Agent(ScriptedModel(['{"name": "Oslo"}']), output_type=City)
    result = await typed.call("Which city?")
    reveal_type(result.structured)  # reveal: City | None
    city: City | None = result.structured
    town: Town | None = result.structured  # error: reportAssignmentType
    plain = await Agent(ScriptedModel(["Oslo."])).call("Which city?")
    reveal_type(plain.structured)  # reveal: None
    print(city, town)
""",
    "deps.py": """
from __future__ import annotations

from dataclasses import dataclass

from reactivex import Observable

from rxagent import ScriptedModel
from rxagent.agent import Agent
from rxagent.agent.loop import ReActNode, Reason, RunState, StepOutput, react_steps, reason_step
from rxagent.context import RunContext
from rxagent.tools import ToolContext, Toolkit, tool


@dataclass
class Db:
    balances: dict[str, int]


@dataclass
class Other:
    pass


@tool
def balance(account: str, context: ToolContext[Db]) -> int:
    reveal_type(context.deps)  # reveal: Db
    return context.deps.balances[account]


def told(ctx: RunContext[Db]) -> int:
    reveal_type(ctx.deps)  # reveal: Db
    return len(ctx.deps.balances)


reason = reason_step()


def greet(node: Reason, run: RunState) -> Observable[StepOutput[ReActNode]]:
    reveal_type(run.deps_of(Db))  # reveal: Db
    return reason(node, run)


agent = Agent(ScriptedModel(["Hi."]), Toolkit([balance]), deps_type=Db, steps=react_steps().on(Reason, greet))


async def ask() -> None:
    await agent.call("hi", deps=Db({"alice": 1}))
    await agent.call("hi", deps=Other())  # error: reportArgumentType
""",
}


# ---- running the checker ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One diagnostic of basedpyright's ``--outputjson``."""

    line: int
    """1-based, as the marker comments count."""
    severity: str
    rule: str | None
    message: str


def basedpyright() -> str:
    """The checker of the test extra: beside this Python, or on the PATH; the test fails without it."""
    beside = Path(sys.executable).parent / "basedpyright"
    found = str(beside) if beside.exists() else shutil.which("basedpyright")
    if found is None:
        pytest.fail(
            "basedpyright is missing: install the test extra (pip install -e '.[test]')", pytrace=False
        )
    return found


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Finding]]:
    """Every snippet checked in one basedpyright run: its findings, by file name."""
    project = tmp_path_factory.mktemp("typed-edges")
    for name, source in SNIPPETS.items():
        (project / name).write_text(source.lstrip("\n"), encoding="utf-8")
    config = {
        "include": sorted(SNIPPETS),
        "typeCheckingMode": "strict",
        "pythonVersion": "3.11",
        "extraPaths": [str(ROOT)],  # ahead of site-packages, whose editable install the checker cannot read
        "reportMissingTypeStubs": False,  # as the project's own configuration
    }
    (project / "pyrightconfig.json").write_text(json.dumps(config), encoding="utf-8")
    done = subprocess.run(
        [basedpyright(), "--outputjson", "--pythonpath", sys.executable],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"basedpyright gave no report (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    assert report["summary"]["filesAnalyzed"] == len(SNIPPETS), report["summary"]
    findings: dict[str, list[Finding]] = {name: [] for name in SNIPPETS}
    for item in report["generalDiagnostics"]:
        name = Path(item["file"]).name
        line = item["range"]["start"]["line"] + 1
        findings[name].append(Finding(line, item["severity"], item.get("rule"), item["message"]))
    return findings


_MARKER = re.compile(r"#\s*(error|reveal):\s*(.+?)\s*$")


def markers(name: str, kind: str) -> list[tuple[int, str]]:
    """``(line, text)`` of each ``# kind: text`` marker in the snippet ``name``."""
    lines = SNIPPETS[name].lstrip("\n").splitlines()
    found = [(number, _MARKER.search(line)) for number, line in enumerate(lines, start=1)]
    return [(number, match.group(2)) for number, match in found if match and match.group(1) == kind]


def verdict(checked: dict[str, list[Finding]], name: str) -> list[Finding]:
    """The errors of snippet ``name``, after checking that they and its reveals are exactly its markers."""
    findings = checked[name]
    errors = [f for f in findings if f.severity in ("error", "warning")]
    assert [(f.line, f.severity, f.rule) for f in errors] == [
        (line, "error", rule) for line, rule in markers(name, "error")
    ], "\n".join(f"{name}:{f.line} {f.severity} {f.rule}: {f.message}" for f in findings)
    revealed = [(f.line, f.message) for f in findings if f.message.startswith("Type of ")]
    expected = markers(name, "reveal")
    assert [line for line, _ in revealed] == [line for line, _ in expected], revealed
    for (line, message), (_, shown) in zip(revealed, expected, strict=True):
        assert message.endswith(f' is "{shown}"'), f"{name}:{line}: {message}"
    return errors


# ---- what the checker must say ----------------------------------------------------------------------------


def test_a_correct_custom_assembly_checks_clean(checked: dict[str, list[Finding]]) -> None:
    assert verdict(checked, "plan.py") == []
    assert verdict(checked, "assembly.py") == []


def test_a_step_registered_for_the_wrong_node_type_is_an_error(checked: dict[str, list[Finding]]) -> None:
    (error,) = verdict(checked, "wrong_node.py")
    assert 'parameter "step"' in error.message
    assert '"Act" is not assignable to "Plan"' in error.message


def test_a_decision_going_to_a_node_the_assembly_has_no_step_for_is_an_error(
    checked: dict[str, list[Finding]],
) -> None:
    (error,) = verdict(checked, "missing_step.py")
    assert 'parameter "step"' in error.message
    # the step's outputs (the decision's nodes) are not all nodes of the assembly: Plan has no step
    assert '"Observable[StepOutput[Plan | Finish]]" is incompatible' in error.message


def test_an_output_type_types_the_results_structured_value(checked: dict[str, list[Finding]]) -> None:
    (error,) = verdict(checked, "output_type.py")
    assert '"City" is not assignable to "Town"' in error.message


def test_typed_deps_reach_tools_steps_and_hooks(checked: dict[str, list[Finding]]) -> None:
    (error,) = verdict(checked, "deps.py")
    assert 'parameter "deps"' in error.message
    assert '"Other" is not assignable to "Db"' in error.message


def test_the_markers_are_read() -> None:
    """The markers the verdicts compare with are found (a typo in one would make a test weaker)."""
    assert markers("wrong_node.py", "error") == [(6, "reportArgumentType")]
    assert [text for _, text in markers("deps.py", "reveal")] == ["Db", "Db", "Db"]
    assert sum(len(markers(name, "error")) for name in SNIPPETS) == 4

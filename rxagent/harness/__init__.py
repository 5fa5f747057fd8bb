"""The harness: a workspace the agent works in, and the capabilities around its ReAct loop.

Each capability is a :class:`HarnessPart` (tools, middleware, a system-prompt section); the reasoning
stays with the inner :class:`~rxagent.agent.Agent`.
"""

from rxagent.harness._part import HarnessPart, compose_parts
from rxagent.harness.todos import todos_part

__all__ = [
    "HarnessPart",
    "compose_parts",
    "todos_part",
]

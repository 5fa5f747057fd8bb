"""The harness: a workspace the agent works in, and the capabilities around its ReAct loop.

Each capability is a :class:`HarnessPart` (tools, middleware, a system-prompt section); the reasoning
stays with the inner :class:`~rxagent.agent.Agent`.
"""

from rxagent.harness._part import HarnessPart, compose_parts
from rxagent.harness.budget import ContextBudget, ContextBudgetExceeded, budget_part
from rxagent.harness.skills import Skill, SkillError, SkillSet, load_skills, skills_part
from rxagent.harness.todos import todos_part

__all__ = [
    "ContextBudget",
    "ContextBudgetExceeded",
    "HarnessPart",
    "Skill",
    "SkillError",
    "SkillSet",
    "budget_part",
    "compose_parts",
    "load_skills",
    "skills_part",
    "todos_part",
]

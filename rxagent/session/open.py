"""A session store from a path or URL: what ``ReActAgent(store="...")`` and the CLI's ``--db`` take."""

from __future__ import annotations

import importlib
from typing import cast

from rxagent.session.memory import MemoryStore
from rxagent.session.store import SessionStore

__all__ = ["open_store"]


def open_store(where: str) -> SessionStore:
    """Open the session store ``where`` names.

    - ``"memory"``: a :class:`~rxagent.session.MemoryStore` (nothing outlives the process);
    - ``"postgresql://…"`` (or ``postgres://``): a ``PostgresStore`` (``pip install 'rxagent[postgres]'``);
    - ``"sqlite:///path/to/file.db"``, or any other text as a file path: a
      :class:`~rxagent.session.SQLiteStore` (the file is created; its folder must exist).

    Raises:
        ValueError: an empty string.
        ImportError: PostgreSQL without the extra installed.
    """
    text = where.strip()
    if not text:
        raise ValueError("a session store needs a path or a URL")
    if text in ("memory", "memory://"):
        return MemoryStore()
    if text.startswith(("postgresql://", "postgres://")):
        try:
            module = importlib.import_module("rxagent.session.postgres")
        except ImportError as error:
            raise ImportError(
                f"a PostgreSQL session store needs the extra: pip install 'rxagent[postgres]' ({error})"
            ) from error
        return cast("SessionStore", module.PostgresStore(text))
    from rxagent.session.sqlite import SQLiteStore

    path = text.removeprefix("sqlite:///") if text.startswith("sqlite:///") else text.removeprefix("sqlite:")
    return SQLiteStore(path)

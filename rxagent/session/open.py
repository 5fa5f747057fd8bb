"""A session store from a path or URL: what ``ReActAgent(store="...")`` and the CLI's ``--db`` take.

The library keeps sessions in memory unless told otherwise (``ReActAgent(store=None)``); the ``rxagent``
command keeps them in one SQLite file in the user's data folder (:func:`default_db_path`).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import cast

from rxagent.redaction import mask_url
from rxagent.session.in_process import MemoryStore
from rxagent.session.store import SessionStore
from rxagent.state import DEFAULT_SESSION

__all__ = ["check_store", "default_db_path", "open_store", "store_file", "store_name"]

_MEMORY = ("memory", "memory://", ":memory:")


def default_db_path() -> Path:
    """Where the ``rxagent`` command keeps sessions unless given ``--db`` (or ``$RXAGENT_DB``):
    ``$XDG_DATA_HOME/rxagent/sessions.db``, else ``~/.local/share/rxagent/sessions.db``.

    Only the command uses it; the library's own default is memory. A relative ``$XDG_DATA_HOME`` is
    ignored, as the XDG base directory specification asks. Nothing is created here.

    Example:
        >>> default_db_path().name
        'sessions.db'
    """
    data = os.environ.get("XDG_DATA_HOME", "")
    folder = Path(data) if os.path.isabs(data) else Path.home() / ".local" / "share"
    return folder / "rxagent" / "sessions.db"


def store_file(where: str) -> Path | None:
    """The SQLite file ``where`` names for :func:`open_store` (``None``: memory, or PostgreSQL).

    Example:
        >>> store_file("sqlite:///sessions.db"), store_file(":memory:"), store_file("postgresql://h/db")
        (PosixPath('sessions.db'), None, None)
    """
    text = where.strip()
    if not text or text in _MEMORY or text.startswith(("postgresql://", "postgres://")):
        return None
    return Path(
        text.removeprefix("sqlite:///") if text.startswith("sqlite:///") else text.removeprefix("sqlite:")
    )


def store_name(where: str) -> str:
    """``where`` as a person reads it: a file's path, ``memory``, or a PostgreSQL URL with its password and
    secret parameters masked (:func:`~rxagent.redaction.mask_url`: a log line must not carry a password).

    Example:
        >>> store_name("postgresql://ada:s3cret@db.example:5433/agents?sslmode=require")
        'postgresql://ada:**********@db.example:5433/agents?sslmode=require'
    """
    path = store_file(where)
    if path is not None:
        return str(path)
    if where.strip() in _MEMORY:
        return "memory"
    return mask_url(where.strip())


def open_store(where: str) -> SessionStore:
    """Open the session store ``where`` names.

    - ``"memory"`` (or ``":memory:"``): a :class:`~rxagent.session.MemoryStore` (nothing outlives the
      process);
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
    if text in _MEMORY:
        return MemoryStore()
    path = store_file(text)
    if path is None:
        try:
            module = importlib.import_module("rxagent.session.postgres")
        except ImportError as error:
            raise ImportError(
                f"a PostgreSQL session store needs the extra: pip install 'rxagent[postgres]' ({error})"
            ) from error
        return cast("SessionStore", module.PostgresStore(text))
    from rxagent.session.sqlite import SQLiteStore

    return SQLiteStore(path)


async def check_store(store: SessionStore) -> None:
    """Reach ``store`` now: connect to its database (creating or migrating the schema) or read its file.

    A store opens lazily (PostgreSQL connects at its first call), so without this a database that cannot
    be reached shows only when the first run fails. Call it before serving or running. It reads one
    session's head and changes nothing.

    Raises:
        Exception: what the store raises when it cannot be used, e.g. ``StoreUnavailableError`` (a
            ``ConnectionError``: the database cannot be reached, or does not exist) or
            ``SchemaVersionError`` (a ``RuntimeError``: a newer rxagent's schema).
    """
    await store.head((None, DEFAULT_SESSION))

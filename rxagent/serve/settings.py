"""How a server listens and guards itself: one frozen settings object, checked when it is made."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from rxagent.serve.cors import origin_of

__all__ = ["LOOPBACK_NAMES", "ServeSettings", "is_loopback"]

LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})
"""Host names that always mean this machine (besides loopback addresses)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is this machine's loopback:
    ``127.0.0.0/8``, ``::1`` or ``localhost``. An empty host and ``0.0.0.0`` mean every interface: not
    loopback."""
    name = host.strip().lower().removeprefix("[").removesuffix("]")
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """How ``rxagent serve`` listens and guards itself.

    Attributes:
        host: the interface to bind; loopback by default. Any other needs ``token``.
        port: the port (``0``: a free one, see :attr:`~rxagent.serve.AgentServer.url`).
        token: when set, every request must carry it (``Authorization: Bearer …``, a ``token`` query
            parameter, or an ``rxagent_token_<port>`` cookie).
        heartbeat: seconds of silence after which an event stream sends a comment line (``: ping``), so
            proxies keep it open and a client that left is noticed.
        send_timeout: seconds an event stream waits for a client to take a write before it drops the
            client (which resumes with ``Last-Event-ID``).
        max_body: the largest request body accepted, in bytes (larger: 413).
        stop_timeout: seconds a stopping server waits for interrupted runs to end before it cancels them.
        allow_origins: origins (``http://localhost:5173``) whose pages may call the server from the
            browser: their CORS preflights are answered and their requests may change things (still with
            the token, which such a page sends as ``Authorization: Bearer …``). Each is
            ``scheme://host[:port]`` (anything else is a ``ValueError``). See :mod:`rxagent.serve.cors`.
        cancel_on_disconnect: an AG-UI client that goes away before its run ends interrupts the run (each
            request may say otherwise, see :mod:`rxagent.serve.agui`); by default the run goes on.

    Raises:
        ValueError: a host off loopback without a token, an empty token, or a setting out of range.
    """

    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    heartbeat: float = 15.0
    send_timeout: float = 60.0
    max_body: int = 1 << 20
    stop_timeout: float = 10.0
    allow_origins: tuple[str, ...] = ()
    cancel_on_disconnect: bool = False

    def __post_init__(self) -> None:
        origins = self.allow_origins
        if isinstance(origins, str):  # a lone string would be read letter by letter
            raise ValueError("allow_origins must be a tuple of origins, not a string")
        object.__setattr__(self, "allow_origins", tuple(origin_of(o) for o in origins))
        if self.token is not None and not self.token.strip():
            raise ValueError("the token must not be empty")
        if not is_loopback(self.host) and self.token is None:
            where = self.host or "every interface"
            raise ValueError(
                f"serving on {where} (not loopback) needs a token: pass --token (or set $RXAGENT_TOKEN), "
                "or serve on 127.0.0.1"
            )
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be between 0 and 65535, not {self.port}")
        if not (self.heartbeat > 0 and self.send_timeout > 0 and self.stop_timeout > 0):
            raise ValueError("heartbeat, send_timeout and stop_timeout must be positive")
        if self.max_body < 1024:
            raise ValueError("max_body must be at least 1024 bytes")

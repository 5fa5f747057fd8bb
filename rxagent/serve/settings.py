"""How a server listens and guards itself: one frozen settings object, checked when it is made."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TypeAlias

from rxagent.serve.cors import origin_of

__all__ = ["LOOPBACK_NAMES", "ProxyNetwork", "ServeSettings", "is_loopback", "proxy_networks"]

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
        trusted_proxies: addresses or networks (``"127.0.0.1"``, ``"10.0.0.0/8"``) of the reverse proxies in
            front of the server: from those alone, ``X-Forwarded-Proto``, ``X-Forwarded-Host`` and
            ``X-Forwarded-For`` say the scheme, host and client of a request (the origin check, the
            cookie's ``Secure`` flag and the access log use them). Needs ``token``: behind a proxy the
            server is reachable from the network.
        heartbeat: seconds of silence after which an event stream sends a comment line (``: ping``), so
            proxies keep it open and a client that left is noticed.
        send_timeout: seconds an event stream waits for a client to take a write before it drops the
            client (which resumes with ``Last-Event-ID``).
        max_body: the largest request body accepted, in bytes (larger: 413, from the ``Content-Length``
            before anything of the body is read).
        header_timeout: seconds a connection has to send a whole request head, from when it opens or its
            previous answer ended (aiohttp's ``keepalive_timeout``: an idle keep-alive connection closes
            after as long). Longer than the 60 s nginx keeps idle connections to its upstreams.
        body_timeout: seconds a request's body has to arrive whole once its head has (408 otherwise).
        max_connections: connections open at once at most; one more is answered 503 and closed.
        send_buffer: the system's send buffer of each connection, in bytes (``SO_SNDBUF``); ``None``
            leaves it to the system, which may give a client that stops reading megabytes.
        session_ttl: seconds after which a session nothing uses (no run going or queued, no request,
            no feed client) leaves the server's memory; its log keeps it, and the next request loads it.
        stop_timeout: seconds a stopping server waits for interrupted runs to end before it cancels them.
        allow_origins: origins (``http://localhost:5173``) whose pages may call the server from the
            browser: their CORS preflights are answered and their requests may change things (still with
            the token, which such a page sends as ``Authorization: Bearer …``). Each is
            ``scheme://host[:port]`` (anything else is a ``ValueError``). See :mod:`rxagent.serve.cors`.
        cancel_on_disconnect: an AG-UI client that goes away before its run ends interrupts the run (each
            request may say otherwise, see :mod:`rxagent.serve.agui`); by default the run goes on.

    Raises:
        ValueError: a host off loopback without a token, an empty token, trusted proxies without a token
            or that are not addresses, or a setting out of range.
    """

    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    trusted_proxies: tuple[str, ...] = ()
    heartbeat: float = 15.0
    send_timeout: float = 60.0
    max_body: int = 1 << 20
    header_timeout: float = 75.0
    body_timeout: float = 30.0
    max_connections: int = 1000
    send_buffer: int | None = None
    session_ttl: float = 600.0
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
                f"serving on {where} (not loopback) needs a token: pass --token-file (or set "
                "$RXAGENT_TOKEN), or serve on 127.0.0.1"
            )
        if isinstance(self.trusted_proxies, str):  # a lone string would be read letter by letter
            raise ValueError("trusted_proxies must be a tuple of addresses, not a string")
        proxy_networks(self.trusted_proxies)  # each must be an address or a network
        if self.trusted_proxies and self.token is None:
            raise ValueError(
                "a server behind a proxy is reachable from the network: trusting proxies needs a token "
                "(--token-file, or $RXAGENT_TOKEN)"
            )
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be between 0 and 65535, not {self.port}")
        timeouts = (self.heartbeat, self.send_timeout, self.stop_timeout, self.header_timeout)
        if not (all(t > 0 for t in timeouts) and self.body_timeout > 0 and self.session_ttl > 0):
            raise ValueError(
                "heartbeat, send_timeout, stop_timeout, header_timeout, body_timeout and session_ttl "
                "must be positive"
            )
        if self.max_body < 1024:
            raise ValueError("max_body must be at least 1024 bytes")
        if self.max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if self.send_buffer is not None and self.send_buffer < 4096:
            raise ValueError("send_buffer must be at least 4096 bytes (or None: the system's)")


ProxyNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
"""A trusted proxy's address, or a network of them."""


def proxy_networks(proxies: tuple[str, ...]) -> tuple[ProxyNetwork, ...]:
    """The networks ``proxies`` name (``"127.0.0.1"`` is the network of that one address).

    Raises:
        ValueError: one is neither an address nor a network.
    """
    networks: list[ProxyNetwork] = []
    for proxy in proxies:
        try:
            networks.append(
                ipaddress.ip_network(proxy.strip().removeprefix("[").removesuffix("]"), strict=False)
            )
        except ValueError:
            raise ValueError(
                f"a trusted proxy is an address or a network (127.0.0.1, 10.0.0.0/8, ::1), not {proxy!r}"
            ) from None
    return tuple(networks)

"""Connections that cannot lock callers out: uvicorn's HTTP/1.1 protocol with a header timeout
and eviction of idle connections.

uvicorn starts no timer on a fresh connection, and its keep-alive timer stops at the first byte
of the next request, so a client that connects and sends nothing (or its headers a byte at a
time) holds the connection for ever; and its `limit_concurrency` answers every request 503, health
checks included, once that many connections are open, idle ones included. Here instead:

- *Header timeout.* From the moment a connection is waiting for a request (opened, or its last
  response sent), the whole request head must arrive within `header_timeout_s`
  (DEVPLAN_HEADER_TIMEOUT_S); else the connection is closed. Bytes trickling in do not restart it.
- *Eviction.* At most `max_connections` (DEVPLAN_MAX_CONNECTIONS) connections are open; a new
  one beyond it closes the connection that has waited longest without a request in progress
  (an idle or slow one), never one whose request is running. Only when every open connection
  has a request running is the new one closed at once.

So idle and slow connections make room for callers, and a health check gets a connection as
long as not every connection is running a request; requests with a body are bounded well below
that by the admission control (service.middleware), after the API key is checked.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("devplan.connections")

HEADER_TIMEOUT_S = 10.0


class _Waiting:
    """The connections of one server that wait for a request, oldest first (a dict keeps order)."""

    def __init__(self) -> None:
        self.order: dict[GuardedH11Protocol, None] = {}


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the header timeout and the eviction above. Its limits come
    from the service's settings (the environment `devplan serve` sets for every worker)."""

    _header_timer: asyncio.TimerHandle | None = None
    _limits: tuple[float, int] | None = None

    @classmethod
    def limits(cls) -> tuple[float, int]:
        """(header timeout in seconds, most connections open), read once per process."""
        if cls._limits is None:
            from service.config import get_settings

            settings = get_settings()
            cls._limits = (settings.header_timeout_s, settings.open_connections)
        return cls._limits

    def _waiting(self) -> _Waiting:
        state: Any = self.server_state
        waiting: _Waiting | None = getattr(state, "devplan_waiting", None)
        if waiting is None:
            waiting = _Waiting()
            state.devplan_waiting = waiting
        return waiting

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_request()
        _, most = self.limits()
        if len(self.connections) > most:
            self._make_room()

    def _make_room(self) -> None:
        """Close the connection that has waited longest for a request (this one when it is the
        only waiting one: then every other connection is running a request)."""
        waiting = self._waiting().order
        victim = next((c for c in waiting if c is not self), self)
        log.warning(
            "%d connections open (DEVPLAN_MAX_CONNECTIONS); closing the one waiting longest for a request",
            len(self.connections),
        )
        victim._close_waiting()

    def _await_request(self) -> None:
        """Start the header timer: a request head must arrive before it fires."""
        self._cancel_header_timer()
        timeout_s, _ = self.limits()
        self._header_timer = self.loop.call_later(timeout_s, self._close_waiting)
        self._waiting().order[self] = None

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _close_waiting(self) -> None:
        """Close a connection that has no request in progress."""
        self._cancel_header_timer()
        self._waiting().order.pop(self, None)
        if not self.transport.is_closing():
            self.transport.close()

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # a request head arrived: it runs now
            self._cancel_header_timer()
            self._waiting().order.pop(self, None)

    def on_response_complete(self) -> None:
        if not self.transport.is_closing():
            self._await_request()  # before the next pipelined request is read (it cancels it)
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        self._waiting().order.pop(self, None)
        super().connection_lost(exc)

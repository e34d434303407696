"""Structured JSON logs, one object per line, carrying the current request id.

Logging never blocks the caller: records go through a bounded queue to a writer
thread per process (web process, planning and compile workers); when the output
stalls, records are dropped and counted (`devplan_log_records_dropped_total`).
"""

from __future__ import annotations

import contextvars
import json
import logging
import logging.handlers
import os
import queue
import re
import sys
import threading
import time
import uuid
from typing import Any

_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("devplan_request_id", default=None)
_VALID_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")


def current_request_id() -> str | None:
    return _request_id.get()


def set_request_id(value: str | None) -> contextvars.Token[str | None]:
    return _request_id.set(value)


def reset_request_id(token: contextvars.Token[str | None]) -> None:
    _request_id.reset(token)


def accept_request_id(header: str | None) -> str:
    """The client's X-Request-ID when it is a sane token, else a fresh one."""
    if header and _VALID_ID.match(header):
        return header
    return uuid.uuid4().hex


_STD_ATTRS = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "color_message",
}


class JsonFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "msg", "request_id", ...extra}` per record."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        rid = getattr(record, "request_id", None) or current_request_id()
        if rid:
            out["request_id"] = rid
        for key, value in record.__dict__.items():
            if key not in _STD_ATTRS and key != "request_id" and not key.startswith("_"):
                out[key] = value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


DEFAULT_QUEUE_SIZE = 1000
"""Lines a process holds while its log output is blocked (a few hundred bytes each); more are dropped."""


class _Sink:
    """One process's log output: a bounded queue drained by a daemon thread that writes lines.

    Requests (and plans) only ever put a finished line on the queue, never wait: when the
    output blocks (a pipe nobody reads, a stalled log shipper) the thread blocks alone, the
    queue fills and further records are dropped and counted. When a write succeeds again,
    the thread logs how many were dropped meanwhile.
    """

    def __init__(self, queue_size: int, stream: Any = None) -> None:
        self.queue_size = max(1, queue_size)
        self.queue: queue.Queue[str] = queue.Queue(self.queue_size)
        self._lock = threading.Lock()
        self.dropped = 0  # records dropped in this process since it started
        self._announced = 0  # drops already written as a "records dropped" line
        self._unreported = 0  # drops not yet handed to the web process (workers)
        self._stream = stream if stream is not None else sys.stderr
        self._fd = _fileno(self._stream)
        self._thread = threading.Thread(target=self._drain, name="devplan-log-writer", daemon=True)
        self._thread.start()

    def count_drop(self) -> None:
        with self._lock:
            self.dropped += 1
            self._unreported += 1

    def take_unreported(self) -> int:
        with self._lock:
            n, self._unreported = self._unreported, 0
            return n

    def _drain(self) -> None:
        while True:
            self._write(self.queue.get())
            with self._lock:
                missed = self.dropped - self._announced
                self._announced = self.dropped
            if missed:
                self._write(_drop_line(missed, self.dropped), count_failure=False)
            self.queue.task_done()

    def flush(self, timeout_s: float) -> bool:
        """Wait until every queued line is written, at most `timeout_s` (a blocked
        output must not hold the caller longer); whether it got there."""
        end = time.monotonic() + timeout_s
        done = self.queue.all_tasks_done
        with done:
            while self.queue.unfinished_tasks:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                done.wait(left)
        return True

    def _write(self, line: str, count_failure: bool = True) -> None:
        data = (line + "\n").encode("utf-8", errors="replace")
        try:
            if self._fd is None:
                self._stream.write(data.decode("utf-8"))
                self._stream.flush()
                return
            view = memoryview(data)
            while view:  # a blocking write to a pipe may be partial past PIPE_BUF
                view = view[os.write(self._fd, view) :]
        except (OSError, ValueError):  # output closed (EPIPE, EBADF): a record is lost, counted
            if count_failure:
                self.count_drop()


def _fileno(stream: Any) -> int | None:
    """The descriptor under a stream; None for streams without one (test captures)."""
    try:
        return int(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None


def _drop_line(missed: int, total: int) -> str:
    record = logging.LogRecord(
        "devplan.logs",
        logging.WARNING,
        __file__,
        0,
        "%d log records dropped while the log output was blocked",
        (missed,),
        None,
    )
    record.dropped = missed
    record.dropped_total = total
    return JsonFormatter().format(record)


_sink: _Sink | None = None
_sink_lock = threading.Lock()
# Drops that worker processes reported to this (web) process, by worker kind.
_reported: dict[str, int] = {"planning": 0, "compile": 0}


def _current_sink(queue_size: int = DEFAULT_QUEUE_SIZE) -> _Sink:
    global _sink
    with _sink_lock:
        if _sink is None:
            _sink = _Sink(queue_size)
        return _sink


class DroppingQueueHandler(logging.handlers.QueueHandler):
    """A QueueHandler that never blocks: the record is formatted here (in the caller's
    thread, where the request id is known), its line queued, or dropped and counted
    when the queue is full."""

    def __init__(self, sink: _Sink) -> None:
        super().__init__(sink.queue)  # holds lines, not records (see emit)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        queue_ = self.sink.queue
        if queue_.full():  # the common case of a stall: skip formatting a line nobody gets
            self.sink.count_drop()
            return
        try:
            line = self.format(record)
        except Exception:  # noqa: BLE001 - a bad record: counted, never written to stderr from here
            self.sink.count_drop()
            return
        try:
            queue_.put_nowait(line)
        except queue.Full:
            self.sink.count_drop()


def queue_handler(queue_size: int = DEFAULT_QUEUE_SIZE) -> logging.Handler:
    """The handler factory of log_config: this process's non-blocking queue handler.

    The first call in a process fixes its queue size and starts the writer thread;
    later calls (dictConfig runs again in uvicorn) reuse both.
    """
    return DroppingQueueHandler(_current_sink(queue_size))


def flush(timeout_s: float = 1.0) -> bool:
    """Before a process ends on its own terms (a work horse after its job): wait
    up to `timeout_s` until this process's queued lines are written."""
    return _sink.flush(timeout_s) if _sink is not None else True


def queue_size() -> int:
    """The queue size of this process's sink (workers get the same), or the default."""
    return _sink.queue_size if _sink is not None else DEFAULT_QUEUE_SIZE


def take_unreported_drops() -> int:
    """In a worker: records dropped since the last call, to hand to the web process."""
    return _sink.take_unreported() if _sink is not None else 0


def note_worker_drops(kind: str, count: int) -> None:
    """In the web process: `count` records dropped by a worker of `kind` (planning, compile)."""
    if count > 0:
        with _sink_lock:
            _reported[kind] = _reported.get(kind, 0) + count


def dropped_counts() -> dict[str, int]:
    """Records dropped so far: this process's own (`web`) and those its workers reported."""
    with _sink_lock:
        counts = dict(_reported)
    counts["web"] = _sink.dropped if _sink is not None else 0
    return counts


def log_config(level: str, queue_size: int = DEFAULT_QUEUE_SIZE) -> dict[str, Any]:
    """A logging.dictConfig for the service and uvicorn: JSON lines to stderr through
    this process's bounded queue (see _Sink), so logging never blocks a request."""
    level = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "service.logs.JsonFormatter"}},
        "handlers": {
            "stderr": {"()": "service.logs.queue_handler", "formatter": "json", "queue_size": queue_size}
        },
        "loggers": {
            "devplan": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
            "py.warnings": {"handlers": ["stderr"], "level": "WARNING", "propagate": False},
        },
    }


def configure(level: str, queue_size: int = DEFAULT_QUEUE_SIZE) -> None:
    """Install the JSON config in this process (used by `devplan serve` and workers);
    warnings become log records too, so nothing else writes to stderr."""
    import logging.config

    logging.config.dictConfig(log_config(level, queue_size))
    logging.captureWarnings(True)

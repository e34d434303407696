"""The per-process log sink drops (and counts) instead of blocking, and says so
once its output drains again."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from service.logs import DroppingQueueHandler, JsonFormatter, _Sink


def _read_lines(fd: int, count: int) -> list[dict[str, object]]:
    """Read from the pipe until `count` whole lines arrived (blocking reads, no clock)."""
    data = b""
    while data.count(b"\n") < count:
        data += os.read(fd, 65536)
    return [json.loads(line) for line in data.decode().splitlines()]


def _piped_logger(name: str, queue_size: int) -> tuple[int, Any, _Sink, logging.Logger]:
    """A logger whose records go through a sink into a pipe: (read end, the
    write end's stream, the sink, the logger)."""
    read_end, write_end = os.pipe()
    stream = os.fdopen(write_end, "w")
    sink = _Sink(queue_size=queue_size, stream=stream)
    handler = DroppingQueueHandler(sink)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(name)
    logger.propagate = False
    logger.addHandler(handler)
    return read_end, stream, sink, logger


def test_a_blocked_output_drops_records_and_reports_them_when_it_drains() -> None:
    read_end, stream, sink, logger = _piped_logger("devplan.test.sink", 3)
    big = "x" * 70_000  # one line larger than the pipe: the writer blocks inside it

    logger.warning(big)
    while sink.queue.qsize():  # until the writer took the big line (and so is stuck in it)
        time.sleep(0.001)
    finished = threading.Event()

    def log_many() -> None:
        for i in range(200):
            logger.warning("record %d", i)
        finished.set()

    threading.Thread(target=log_many).start()
    assert finished.wait(60), "logging blocked while the output was stalled"
    assert sink.dropped >= 200 - 3  # the writer holds the big line, the queue 3 more
    assert sink.take_unreported() == sink.dropped
    assert sink.take_unreported() == 0

    # Draining the pipe lets the writer finish the big line; right after it, the writer
    # says how many records it dropped, then writes the queued ones.
    lines = _read_lines(read_end, 1 + 1 + 3)
    assert lines[0]["msg"] == big
    assert [line["msg"] for line in lines[2:]] == ["record 0", "record 1", "record 2"]
    report = lines[1]
    assert report["logger"] == "devplan.logs" and report["level"] == "warning"
    assert report["dropped"] == sink.dropped and str(sink.dropped) in str(report["msg"])
    stream.close()
    os.close(read_end)


def _log_into_an_unread_pipe(job: Any, conn: Any) -> None:
    """A compile process's target: its stderr becomes a pipe nobody reads, it logs far more
    than the pipe and its queue hold, and answers as the real worker does."""
    from service.compile_workers import send_answer

    _, write_end = os.pipe()
    os.dup2(write_end, 2)
    log = logging.getLogger("devplan.compile")
    for i in range(3000):
        log.warning("compile progress %d", i)
    send_answer(conn, {"ok": {"sha256": "0" * 64}})


def test_a_compile_process_reports_the_records_it_dropped(tmp_path: Path) -> None:
    from service.compile_workers import LOG_DROPS_KEY, CompileJob, CompileRun
    from service.logs import DEFAULT_QUEUE_SIZE, dropped_counts
    from service.planning import PlanJob

    job = CompileJob(PlanJob(module="def @main() { 1 }"), None, None, False, str(tmp_path / "lib.so"))
    before = dropped_counts()["compile"]
    run = CompileRun(job, target=_log_into_an_unread_pipe)
    try:
        answer = asyncio.run(run.wait(120))
    finally:
        run.stop()
    assert answer == {"ok": {"sha256": "0" * 64}}  # the count went to the metric, not the client
    assert LOG_DROPS_KEY not in answer
    # 3,000 records; the queue holds DEFAULT_QUEUE_SIZE, the one-page-or-more pipe a few dozen.
    assert dropped_counts()["compile"] - before >= 3000 - DEFAULT_QUEUE_SIZE - 1000


def test_lines_written_to_a_closed_output_are_counted() -> None:
    read_end, stream, sink, logger = _piped_logger("devplan.test.closed", 10)
    os.close(read_end)  # nobody will ever read: writes fail with EPIPE (SIGPIPE is ignored)
    for i in range(5):
        logger.warning("lost %d", i)
    sink.queue.put("sentinel")
    assert sink.flush(60)  # the writer took each line and failed to write it
    assert sink.dropped == 6  # one per record; the "records dropped" lines are not counted
    stream.close()


def test_flush_waits_for_the_written_lines_and_gives_up_on_a_blocked_output() -> None:
    read_end, stream, sink, logger = _piped_logger("devplan.test.flush", 10)
    logger.warning("small")
    reader = threading.Thread(target=_read_lines, args=(read_end, 1))
    reader.start()
    assert sink.flush(60)  # the line reached the pipe (a reader takes it)
    reader.join()
    # A line larger than the pipe, nobody reading: the writer is stuck in it and
    # flush returns (False) when its time is up instead of waiting for it.
    logger.warning("x" * 70_000)
    assert not sink.flush(0.2)
    os.close(read_end)  # the stuck write fails now (EPIPE): counted, the writer moves on
    assert sink.flush(60)
    stream.close()

"""Request and response models of the job API (`/jobs`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from service.models import CompileResponse

JobStatus = Literal["queued", "started", "finished", "failed", "canceled"]


class JobOut(BaseModel):
    """A compile job on the queue."""

    id: str = Field(..., description="The job id (GET/DELETE /jobs/{id}).")
    status: JobStatus = Field(
        ...,
        description="queued (RQ's deferred and scheduled too), started, finished, failed (a compile "
        "error, a time-out, or a worker that died more often than the retries allow), canceled.",
    )
    position: int | None = Field(None, description="Place in the queue (0 is next) while queued.")
    enqueued_at: str | None = Field(None, description="ISO 8601, UTC.")
    started_at: str | None = Field(None, description="Start of the latest attempt.")
    ended_at: str | None = None
    worker: str | None = Field(None, description="Name of the worker of the latest attempt.")
    attempts: int = Field(0, description="Attempts started (a retry after a worker died adds one).")
    result: CompileResponse | None = Field(None, description="The /compile response, when finished.")
    problem: dict[str, Any] | None = Field(
        None, description="The problem+json object the job ended with, when failed or canceled."
    )
    waiters: int = Field(0, description="Requests still waiting on this job (identical requests share it).")
    waiter: str | None = Field(
        None,
        description="Your waiter token (POST only): DELETE /jobs/{id}?waiter=... withdraws just your "
        "interest; the job is cancelled when no request waits on it any more.",
    )


class JobList(BaseModel):
    jobs: list[JobOut]


class CancelOut(BaseModel):
    canceled: bool = Field(..., description="True when the job was cancelled by this request.")
    job: JobOut | None = Field(None, description="The job after the request.")

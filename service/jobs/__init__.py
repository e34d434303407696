"""The build farm's compile jobs (docs/farm.md): the RQ queue client
(`queue`), the job a worker runs (`task`), Redis-kept metrics (`stats`), and what
the HTTP routes share (`http`, `models`). rq and redis are imported lazily, so the
service runs without the farm extra when no queue is configured."""

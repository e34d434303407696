"""POST /compile and GET /artifacts/{id}: owned by the TVM bridge issue, not built yet.

When the bridge lands, add its routes to `router` here. Import `tvm_bridge`
inside the handlers (never at module level) so the service starts, and
/plan works, on machines without TVM; store artifacts under
`Settings.artifact_dir`. main.py already includes this router.
"""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["compile"])

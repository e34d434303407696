"""GET /docs: Swagger UI served from an installed package's assets (works offline).

FastAPI's built-in page loads its scripts from a CDN and stays blank on an
air-gapped build farm; here the same UI comes from local files. The assets
come from `fastapi-offline` (Swagger UI 5.x): the `swagger-ui-bundle` package
(latest 1.1.0) ships Swagger UI 4.15, which cannot render the OpenAPI 3.1
documents FastAPI generates ("Unable to render this definition").
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse

router = APIRouter(include_in_schema=False)

STATIC_PREFIX = "/docs/static"


def swagger_ui_dir() -> str:
    """The folder holding swagger-ui-bundle.js, swagger-ui.css and favicon.png."""
    from importlib import resources

    return str(resources.files("fastapi_offline") / "static")


@router.get("/docs")
async def docs(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "").rstrip("/")
    return get_swagger_ui_html(
        openapi_url=f"{root}/openapi.json",
        title="devplan - Swagger UI",
        swagger_js_url=f"{root}{STATIC_PREFIX}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{STATIC_PREFIX}/swagger-ui.css",
        swagger_favicon_url=f"{root}{STATIC_PREFIX}/favicon.png",
        swagger_ui_parameters={"tryItOutEnabled": True, "displayRequestDuration": True},
    )

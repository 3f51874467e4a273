"""The ingress's FastAPI app: the one ``api`` every route module adds its routes to.

Invariant: every route reads its body through ``StrictJSONRoute`` (a key twice is a 422) under
``BodyLimits`` (413 over ``max_body_bytes``, 408 for a body that stops arriving; added beside the
``Ingress`` that configures it), and every error is answered by ``errors``' handlers; the routes
themselves are methods of the ``Ingress`` deployment's bases (``rollouts``, ``openai``, ``sglang``,
``weights``, ``control``), bound to it by ``serve.ingress(api)``.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from swagger_ui_bundle import swagger_ui_path

from app.serve.ingress import errors
from app.serve.ingress.strict_json import StrictJSONRoute

api = FastAPI(
    title="Seer rollout service",
    version="0.2.0",
    description="Grouped rollouts for synchronous LLM RL (Seer). Jobs: POST /v1/rollouts.",
    docs_url=None,  # served below from local assets: the default loads them from a CDN
    openapi_url=None,  # served by the Ingress: the deployment's schema (see Ingress.openapi)
)
api.router.route_class = StrictJSONRoute  # before any route: a key twice in a body is a 422
api.mount("/static/swagger", StaticFiles(directory=str(swagger_ui_path)), name="swagger")
api.exception_handler(StarletteHTTPException)(errors.http_error)
api.exception_handler(RequestValidationError)(errors.validation_error)


@api.get("/docs", include_in_schema=False)
async def _docs(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "").rstrip("/")
    return get_swagger_ui_html(
        openapi_url=f"{root}/openapi.json",
        title="Seer rollout service - API",
        swagger_js_url=f"{root}/static/swagger/swagger-ui-bundle.js",
        swagger_css_url=f"{root}/static/swagger/swagger-ui.css",
        swagger_favicon_url="",
    )

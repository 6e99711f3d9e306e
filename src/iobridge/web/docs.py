"""``/docs`` (Swagger UI) and ``/redoc`` served from files shipped in a package, never a CDN.

FastAPI's own pages load their scripts from a CDN, so they are blank on a machine without
network access. The assets come from ``fastapi-offline`` (a dependency); only its static
files are used, the app stays a plain ``FastAPI``. ReDoc's bundle names one more CDN file
(the Redocly logo of its sidebar footer): it is served with that URL pointing at the local
favicon instead, so no page of the server contacts another host.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

__all__ = ["ASSETS_URL", "install_docs"]

#: Where the Swagger UI / ReDoc scripts, stylesheet and favicon are served.
ASSETS_URL = "/docs-assets"

OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"
#: The image ReDoc's sidebar footer loads from Redocly's CDN.
REDOC_CDN_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"


def install_docs(app: FastAPI) -> None:
    """Add ``/docs`` and ``/redoc`` to an app created with ``docs_url=None, redoc_url=None``.

    Swagger UI's validator badge (which calls an external service) is turned off.
    """
    openapi_url = app.openapi_url or "/openapi.json"
    folder = Path(fastapi_offline.__file__).parent / "static"
    redoc_bundle = (folder / "redoc.standalone.js").read_bytes().replace(
        REDOC_CDN_LOGO, f"{ASSETS_URL}/favicon.png".encode()
    )

    # Registered before the mount, so it answers for the bundle the mount also holds.
    @app.get(f"{ASSETS_URL}/redoc.standalone.js", include_in_schema=False)
    async def redoc_script() -> Response:
        return Response(redoc_bundle, media_type="text/javascript; charset=utf-8")

    app.mount(ASSETS_URL, StaticFiles(directory=folder), name="docs-assets")
    parameters = {"validatorUrl": None, **(app.swagger_ui_parameters or {})}

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - API",
            oauth2_redirect_url=OAUTH2_REDIRECT_URL,
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
            swagger_ui_parameters=parameters,
        )

    @app.get(OAUTH2_REDIRECT_URL, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )

"""The `endpoint` image backend: a vLLM someone else started; probe it, read its version, build nothing."""

from __future__ import annotations

import time

import httpx

from specwatch.engine.images import ImageError, register
from specwatch.records import ImageRef
from specwatch.spec import ImageSpec


class EndpointBackend:
    """A vLLM someone else started: probe it, read its version, build nothing."""

    name = "endpoint"

    def __init__(self, timeout_s: float = 5.0, transport: httpx.BaseTransport | None = None) -> None:
        self.timeout_s = timeout_s
        self.transport = transport  # tests inject an httpx.MockTransport

    def ensure(self, spec: ImageSpec) -> ImageRef:
        assert spec.url is not None
        url = spec.url.rstrip("/")
        started = time.monotonic()
        try:
            with httpx.Client(timeout=self.timeout_s, transport=self.transport) as client:
                models = client.get(f"{url}/v1/models")
                if models.status_code != 200:
                    raise ImageError(
                        f"image {spec.name}: {url}/v1/models answered HTTP {models.status_code}; "
                        "is it an OpenAI-compatible vLLM?"
                    )
                version: str | None = None
                try:  # /version is vLLM-specific; other servers may lack it
                    resp = client.get(f"{url}/version")
                    if resp.status_code == 200:
                        found = resp.json().get("version")
                        version = str(found) if found else None
                except (httpx.HTTPError, ValueError, AttributeError):
                    version = None
        except httpx.HTTPError as exc:
            raise ImageError(
                f"image {spec.name}: endpoint {url} unreachable ({type(exc).__name__}); start the server or fix url"
            ) from None
        return ImageRef(
            name=spec.name,
            backend="endpoint",
            vllm_version=version,
            url=url,
            build_s=time.monotonic() - started,
            reused=True,  # nothing was built: the server already existed
        )


register(EndpointBackend())

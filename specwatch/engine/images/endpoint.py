"""The `endpoint` image backend: a vLLM someone else started; probe it, read its version, build nothing."""

from __future__ import annotations

import time

import httpx

from specwatch.engine.images import ImageError, installs_nothing, probed
from specwatch.records import ImageRef
from specwatch.spec import ArmSpec, ImageSpec


class EndpointBackend:
    """A vLLM someone else started: probe it, read its version, build nothing."""

    name = "endpoint"
    containers = False
    launcher: str | None = "endpoint"  # already running: whatever the arm names, nothing is started
    knows_package = False

    def check_image(self, spec: ImageSpec, on_disk: bool) -> str | None:
        if problem := installs_nothing(spec):
            return problem
        return None if spec.url else f"image {spec.name!r}: backend endpoint needs url (e.g. url: http://127.0.0.1:8000)"

    def check_arm(self, arm: ArmSpec, spec: ImageSpec) -> str | None:
        if arm.command:  # the arm's own serve command would be silently ignored
            return f"arm {arm.name!r}: an endpoint image is already running; drop launcher: command"
        return None

    def describe(self, spec: ImageSpec) -> str:
        return spec.url or ""

    def package(self, spec: ImageSpec) -> str | None:
        return spec.package

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

    def built(self, spec: ImageSpec) -> ImageRef | None:
        return probed(self, spec)


PLUGIN = EndpointBackend()

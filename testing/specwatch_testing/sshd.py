"""A real sshd on loopback for tests, and a separate user with a home of its own to log in as:
nothing of the test's own files is on the path."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from specwatch.engine import processes
from specwatch.engine.launchers import free_port

USER = "swremote"


@dataclass(frozen=True)
class Sshd:
    address: str
    port: int
    user: str
    key_file: Path  # the client's private key
    known_hosts: Path  # holds the server's real host key
    host_public_key: str
    home: Path


# What fake_vllm imports (httpx: a multi-process server sums its siblings' /metrics).
REMOTE_SERVER_DEPS = ("fastapi", "uvicorn", "prometheus_client", "pydantic", "httpx")

def fake_vllm_on(s: Sshd) -> tuple[str, str]:
    """The user's own environment with the fake vLLM server: (its python, the server script).

    The remote user cannot read this machine's interpreters (under /root), as on a real host:
    it gets a venv of its own from Debian's python, with the server's few dependencies.
    """
    import specwatch_testing.fake_vllm as fake

    venv, script = s.home / "venv", s.home / "fake_vllm.py"
    ready = venv / ".ready"
    # The marker names what was installed: a venv made before fake_vllm needed more is topped up.
    if not ready.exists() or ready.read_text().split() != list(REMOTE_SERVER_DEPS):
        run = ["runuser", "-u", s.user, "--"]
        if not (venv / "bin" / "pip").exists():
            subprocess.run([*run, "/usr/bin/python3", "-m", "venv", str(venv)], check=True, capture_output=True,
                           timeout=120)
        subprocess.run([*run, str(venv / "bin" / "pip"), "install", "-q", *REMOTE_SERVER_DEPS], check=True,
                       capture_output=True, timeout=600)
        ready.write_text(" ".join(REMOTE_SERVER_DEPS))
    shutil.copy(fake.__file__, script)
    os.chmod(script, 0o644)
    return str(venv / "bin" / "python"), str(script)


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, timeout=30)
    return path.with_suffix(".pub").read_text().strip()


def _user(home: Path) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/sh", USER],
                       check=True, capture_output=True, timeout=30)
        # no password, but not locked: sshd refuses a locked account ("!") even with a key
        subprocess.run(["usermod", "-p", "*", USER], check=True, capture_output=True, timeout=30)
        return pwd.getpwnam(USER)


@contextlib.contextmanager
def sshd(root: Path) -> Iterator[Sshd]:
    if shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists():
        raise RuntimeError("sshd is not installed: `make engine` (apt-get install openssh-server) installs it")
    root.mkdir(parents=True, exist_ok=True)
    user = _user(Path("/home") / USER)
    home = Path(user.pw_dir)
    client_pub = _keygen(root / "client_key")
    host_pub = _keygen(root / "host_key")
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text(client_pub + "\n")
    for p in (ssh_dir, ssh_dir / "authorized_keys"):
        os.chown(p, user.pw_uid, user.pw_gid)
    port = free_port()
    config = root / "sshd_config"
    config.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root / 'host_key'}\n"
                      f"PidFile {root / 'sshd.pid'}\n"
                      "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
                      f"AllowUsers {USER}\nAuthorizedKeysFile .ssh/authorized_keys\n")
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    known = root / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {host_pub.rsplit(' ', 1)[0] if host_pub.count(' ') > 1 else host_pub}\n")
    log = root / "sshd.log"
    proc = processes.spawn([shutil.which("sshd") or "/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
                           dict(os.environ), log, tracked=False)
    try:
        deadline = time.monotonic() + 15
        while "Server listening" not in (log.read_text() if log.exists() else ""):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield Sshd("127.0.0.1", port, USER, root / "client_key", known, host_pub, home)
    finally:
        processes.stop(proc, grace_s=5.0)

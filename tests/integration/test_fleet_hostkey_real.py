"""SSH host-key checking against a real OpenSSH server on 127.0.0.1 (tests/sshd_local.py): under
``host_key = "strict"`` an unknown key is refused with one line saying how to add it, and accepted once
``ssh-keyscan`` has put it in known_hosts; ``"accept-new"`` trusts it once and saves it; a changed key is
refused under either policy. A login that got through is shown by the host's own answer: its workspace
has no llamaforge venv, which only a remote command can tell."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
from sshd_local import local_sshd, sshd_binary  # noqa: E402

_LOGGED_IN = "llamaforge is not installed in"


def _doctor(ws: Path, fleet: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMAFORGE_")}
    env.update(LLAMAFORGE_WORKSPACE=str(ws), PYTHONPATH=str(REPO / "src"), COLUMNS="250", NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "llamaforge", "fleet.doctor", "--fleet", str(fleet)], cwd=ws,
                          env=env, capture_output=True, text=True, timeout=120)


def test_strict_refuses_an_unknown_key_accept_new_saves_it_and_a_changed_key_is_refused(tmp_path):
    if sshd_binary() is None:
        pytest.skip("sshd is not installed (apt-get install openssh-server; scripts/setup.sh does it)")
    with local_sshd(tmp_path / "sshd") as sshd:
        kh = tmp_path / "known_hosts"
        fleet = tmp_path / "fleet.toml"

        def write(policy: str) -> None:
            fleet.write_text(f'[hosts.box]\ntarget = "{sshd.user}@127.0.0.1:{sshd.port}"\nidentity = "{sshd.user_key}"\n'
                             f'workspace = "{tmp_path / "ws-box"}"\nhost_key = "{policy}"\nknown_hosts = "{kh}"\n')

        write("strict")
        r = _doctor(tmp_path, fleet)
        assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
        assert f"SSH host key of [127.0.0.1]:{sshd.port} is not in {kh}" in r.stdout, r.stdout
        assert f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> {kh}" in r.stdout, r.stdout
        assert _LOGGED_IN not in r.stdout and not kh.exists()

        scan = subprocess.run(["ssh-keyscan", "-p", str(sshd.port), "127.0.0.1"], capture_output=True, text=True,
                              check=True, timeout=30).stdout
        kh.write_text(scan)   # what the fix line says to do
        r = _doctor(tmp_path, fleet)
        assert _LOGGED_IN in r.stdout and "host key" not in r.stdout, r.stdout + r.stderr

        kh.unlink()
        write("accept-new")
        r = _doctor(tmp_path, fleet)
        assert _LOGGED_IN in r.stdout, r.stdout + r.stderr
        saved = kh.read_text()
        assert saved.startswith(f"[127.0.0.1]:{sshd.port} ssh-ed25519 ") and saved.split()[2] in scan
        write("strict")   # saved by accept-new: the strict policy now finds it
        assert _LOGGED_IN in _doctor(tmp_path, fleet).stdout

        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
        other = (tmp_path / "other.pub").read_text().split()
        kh.write_text(f"[127.0.0.1]:{sshd.port} {other[0]} {other[1]}\n")   # the host's key "changed"
        for policy in ("strict", "accept-new"):
            write(policy)
            r = _doctor(tmp_path, fleet)
            assert r.returncode == 2 and "CHANGED" in r.stdout and "ssh-keygen -R" in r.stdout, r.stdout + r.stderr
            assert _LOGGED_IN not in r.stdout
        assert kh.read_text().count("\n") == 1   # accept-new never replaces a changed key

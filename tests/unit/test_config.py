"""pins.toml parsing and its error messages."""

from pathlib import Path

import pytest

from llamaforge.config import UPSTREAM_URL, SourceSpec, load_pins, parse_pins
from llamaforge.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_repo_pins_file_has_default_pin_from_upstream_then_pypi():
    pins = load_pins(REPO / "pins.toml")
    pin = pins.get(None)
    assert pin.name == "default" and pin.commit == "0c1e57098"
    assert [s.kind for s in pin.sources] == ["git", "pypi"]
    assert pin.sources[0].arg == UPSTREAM_URL
    assert pin.sources[1].arg == "llama-cpp-python==0.3.36"


def test_bare_commit_resolves_with_default_sources():
    pins = parse_pins('[pins.a]\ncommit = "abcdef012"\nsources = ["path:/x"]\n')
    pin = pins.resolve("0123456789abcdef")
    assert pin.commit == "0123456789abcdef" and pin.sources == pins.get("a").sources


@pytest.mark.parametrize("text,needle", [
    ("[pins.a\n", "not valid TOML"),
    ("x = 1\n", "defines no pins"),
    ('[pins.a]\ncommit = "zzz"\n', "is not a commit hash"),
    ('[pins.a]\ncommit = "abcdef0"\nsources = ["ftp:x"]\n', "unknown source kind"),
    ('[pins.a]\ncommit = "abcdef0"\nsources = "git"\n', "must be a non-empty list"),
    ('[pins.a]\ncommit = "abcdef0"\nsources = ["pypi:llama-cpp-python"]\n', "exact version"),
    ('default = "b"\n[pins.a]\ncommit = "abcdef0"\n', "default pin 'b'"),
    ('[pins.a]\ncommit = "abcdef0"\nbuild_number = "x"\n', "build_number"),
])
def test_malformed_pins_give_one_clear_error_with_fix(text, needle):
    with pytest.raises(ConfigError) as e:
        parse_pins(text)
    assert needle in e.value.message and e.value.fix


def test_unknown_pin_names_the_known_ones():
    pins = parse_pins('[pins.a]\ncommit = "abcdef0"\n')
    with pytest.raises(ConfigError) as e:
        pins.get("nope")
    assert "nope" in e.value.message and "a" in e.value.fix


def test_sha256_per_source_is_attached():
    pins = parse_pins('[pins.a]\ncommit = "abcdef0"\nsources = ["tarball:/x.tgz"]\n[pins.a.sha256]\n"tarball:/x.tgz" = "ABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABAB"\n')
    assert pins.get("a").sources[0] == SourceSpec("tarball", "/x.tgz", "abababababababababababababababababababababababababababababababab")


@pytest.mark.parametrize("sha,needle", [
    ('sha256 = "x"', "sha256 must be a table"),
    ('sha256 = ""', "sha256 must be a table"),
    ('sha256 = ["' + "a" * 64 + '"]', "sha256 must be a table"),
    ('sha256 = { "tarball:/other.tgz" = "' + "a" * 64 + '" }', "not one of the pin's sources"),
    ('sha256 = { "tarball:/x.tgz" = 5 }', "must be a string of 64 hex digits"),
])
def test_a_sha256_that_would_be_ignored_is_refused(sha, needle):
    """``sha256 = "x"`` (not a table) was silently ignored: the pin then had no checksum at all."""
    with pytest.raises(ConfigError) as e:
        parse_pins(f'[pins.a]\ncommit = "abcdef0"\nsources = ["tarball:/x.tgz"]\n{sha}\n')
    assert needle in e.value.message and e.value.fix and "\n" not in str(e.value)


def test_pins_file_that_is_not_utf8_is_one_line_naming_the_file(tmp_path):
    f = tmp_path / "pins.toml"
    f.write_bytes(b'# pins\n[pins.a]\ncommit = "abcdef0"\ndescription = "caf\xff"\n')
    with pytest.raises(ConfigError) as e:
        load_pins(f)
    assert str(f) in e.value.message and "byte 0xff on line 4" in e.value.message and "UTF-8" in e.value.fix


def test_pins_file_that_is_not_utf8_is_one_line_from_the_cli(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "pins.toml").write_bytes(b'[pins.a]\ncommit = "abcdef0\xff"\n')
    env = {**os.environ, "LLAMAFORGE_WORKSPACE": str(tmp_path), "PYTHONPATH": str(REPO / "src"), "COLUMNS": "300"}
    env.pop("LLAMAFORGE_DEBUG", None)
    r = subprocess.run([sys.executable, "-m", "llamaforge", "pins"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "is not UTF-8 text" in r.stderr and r.stderr.strip().startswith("error:"), r.stderr


def test_a_bare_commit_takes_no_snapshot_source_of_another_commit():
    """A pypi sdist or tarball holds its pin's commit only: a bare commit keeps the default pin's git sources."""
    pins = parse_pins('[pins.a]\ncommit = "abcdef012"\nsources = ["git", "pypi:llama-cpp-python==0.3.36"]\n')
    other = pins.resolve("0123456789abcdef")
    assert [s.kind for s in other.sources] == ["git"]
    same = pins.resolve("abcdef0123")
    assert [s.kind for s in same.sources] == ["git", "pypi"]
    only_pypi = parse_pins('[pins.a]\ncommit = "abcdef012"\nsources = ["pypi:llama-cpp-python==0.3.36"]\n')
    assert [str(s) for s in only_pypi.resolve("0123456789").sources] == [f"git:{UPSTREAM_URL}"]

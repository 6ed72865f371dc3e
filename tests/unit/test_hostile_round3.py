"""The third hostile-input review (issue 41): each finding, one test that failed before its fix.

Driver choice stays a knob within limits (an ICD manifest only from the system's Vulkan ICD folders, naming a
system library, else only what the user names with ``--allow-icd``); preload, layer and program-choosing
variables are refused wherever a file sets them; store columns, archives and pins files are data written by
strangers: bounded, typed, and a bad one is one line, never a traceback.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from llamaforge.errors import ConfigError
from llamaforge.fleet.config import parse_fleet
from llamaforge.variants.check import check_env, from_records
from llamaforge.variants.model import parse_cli

# ---- High: a variant's VK_ICD_FILENAMES loaded any shared object ----------------------------------------


def _manifest(folder: Path, lib: str, name: str = "evil_icd.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    m = folder / name
    m.write_text(json.dumps({"file_format_version": "1.0.0", "ICD": {"library_path": lib, "api_version": "1.3.0"}}))
    return m


@pytest.fixture
def icd_dirs(tmp_path, monkeypatch):
    """A system ICD folder of this test's own (``$XDG_DATA_DIRS/vulkan/icd.d``) and a folder anyone writes to."""
    monkeypatch.setenv("XDG_DATA_DIRS", str(tmp_path / "share"))
    monkeypatch.delenv("LLAMAFORGE_ALLOW_ICD", raising=False)
    return tmp_path / "share" / "vulkan" / "icd.d", tmp_path / "anywhere"


@pytest.mark.parametrize("var", ["VK_ICD_FILENAMES", "VK_DRIVER_FILES"])
def test_an_icd_manifest_outside_the_system_folders_is_refused_in_one_line(icd_dirs, var):
    _system, anywhere = icd_dirs
    m = _manifest(anywhere, str(anywhere / "evil.so"))
    with pytest.raises(ConfigError) as e:
        check_env(parse_cli(f"x=vulkan:{var}={m}"))
    assert "is not in the system's Vulkan ICD folders" in e.value.message and "\n" not in str(e.value)
    assert f"--allow-icd {m}" in e.value.fix


def test_a_system_manifest_naming_a_library_elsewhere_is_refused(icd_dirs):
    system, anywhere = icd_dirs
    m = _manifest(system, str(anywhere / "evil.so"))
    with pytest.raises(ConfigError, match="names a library outside the system library folders"):
        check_env(parse_cli(f"x=vulkan:VK_ICD_FILENAMES={m}"))
    rel = _manifest(system, "../../../../anywhere/evil.so", "rel.json")     # relative: from the manifest's folder
    with pytest.raises(ConfigError, match="names a library outside"):
        check_env(parse_cli(f"x=vulkan:VK_ICD_FILENAMES={rel}"))
    link = system / "link.json"                                           # a symlink out of the folder
    link.symlink_to(_manifest(anywhere, "libvulkan_radeon.so", "x.json"))
    with pytest.raises(ConfigError, match="not in the system's Vulkan ICD folders"):
        check_env(parse_cli(f"x=vulkan:VK_ICD_FILENAMES={link}"))


def test_driver_choice_stays_a_knob_radv_vs_amdvlk(icd_dirs):
    system, _ = icd_dirs
    radv = _manifest(system, "libvulkan_radeon.so", "radeon_icd.x86_64.json")    # a bare name: the system's search
    amdvlk = _manifest(system, "/usr/lib/x86_64-linux-gnu/amdvlk64.so", "amd_icd64.json")
    check_env(parse_cli(f"radv=vulkan:VK_ICD_FILENAMES={radv}"))
    check_env(parse_cli(f"amdvlk=vulkan:VK_DRIVER_FILES={amdvlk}:{radv}"))
    for value in ("RADV", "AMDVLK", "radv"):
        check_env(parse_cli(f"x=vulkan:AMD_VULKAN_ICD={value}"))
    with pytest.raises(ConfigError, match="is not RADV or AMDVLK"):
        check_env(parse_cli("x=vulkan:AMD_VULKAN_ICD=/tmp/x.json"))


def test_a_manifest_elsewhere_needs_the_users_own_allow_icd_flag(icd_dirs, monkeypatch):
    from llamaforge.cli import program

    _, anywhere = icd_dirs
    m = _manifest(anywhere, str(anywhere / "my-driver.so"))
    v = parse_cli(f"x=vulkan:VK_ICD_FILENAMES={m}")
    with pytest.raises(ConfigError):
        check_env(v)
    monkeypatch.setattr(os, "environ", dict(os.environ))     # the flag sets LLAMAFORGE_ALLOW_ICD for this process
    program.parse_core(["llamaforge", "--allow-icd", str(m), "runs"])
    assert os.environ["LLAMAFORGE_ALLOW_ICD"] == str(m)
    check_env(v)
    other = _manifest(anywhere, str(anywhere / "b.so"), "other.json")
    with pytest.raises(ConfigError):
        check_env(parse_cli(f"x=vulkan:VK_ICD_FILENAMES={m}:{other}"))


def test_a_variants_file_with_an_icd_manifest_is_one_line_through_the_cli(icd_dirs, tmp_path, monkeypatch):
    from test_cli_battery import run_cli

    _, anywhere = icd_dirs
    m = _manifest(anywhere, str(anywhere / "evil.so"))
    vf = tmp_path / "variants.toml"
    vf.write_text(f'[variants.evil]\nbackend = "vulkan"\nenv = {{ VK_ICD_FILENAMES = "{m}" }}\n')
    monkeypatch.setenv("LLAMAFORGE_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("LLAMAFORGE_RESULTS", str(tmp_path / "results"))
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["bench", "--model", str(tmp_path / "m.gguf"), "--variants-file", str(vf)])
    assert code != 0 and "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "ICD manifest" in lines[0], err


def test_a_stored_variant_cannot_name_an_icd_manifest(icd_dirs):
    _, anywhere = icd_dirs
    m = _manifest(anywhere, str(anywhere / "evil.so"))

    class B:
        key = "vulkan-x"

    rec = {"name": "evil", "backend": "vulkan", "env": {"VK_ICD_FILENAMES": str(m)}, "build": "vulkan-x"}
    with pytest.raises(ConfigError, match="ICD manifest"):
        from_records([rec], [B()])


@pytest.mark.parametrize("name", ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "DYLD_INSERT_LIBRARIES", "VK_LAYER_PATH",
                                  "VK_ADD_LAYER_PATH", "VK_INSTANCE_LAYERS", "VK_ADD_DRIVER_FILES",
                                  "VK_IMPLICIT_LAYER_PATH", "VK_LOADER_LAYERS_ENABLE", "PATH", "LLAMAFORGE_GLSLC",
                                  "LLAMAFORGE_BUILD_ROOT", "PYTHONPATH"])
def test_preload_layer_and_program_choosing_variables_are_refused_in_a_variant(name):
    with pytest.raises(ConfigError) as e:
        check_env(parse_cli(f"x=vulkan:{name}=/tmp/x"))
    assert f"{name} is refused: it" in e.value.message and "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["LLAMAFORGE_GLSLC", "LLAMAFORGE_BUILD_ROOT", "LLAMAFORGE_VULKAN_INCLUDE",
                                  "LLAMAFORGE_CONFIG", "LLAMAFORGE_ALLOW_ICD"])
def test_a_fleet_host_env_cannot_choose_the_programs_that_run(name):
    with pytest.raises(ConfigError) as e:
        parse_fleet(f'[hosts.x]\ntarget = "h"\n[hosts.x.env]\n{name} = "/tmp/x"\n')
    assert f"{name} is refused: it chooses a program" in e.value.message and "on the host itself" in e.value.fix


@pytest.mark.parametrize("name", ["VK_LAYER_PATH", "VK_ADD_LAYER_PATH", "DYLD_INSERT_LIBRARIES", "LD_AUDIT"])
def test_a_fleet_host_env_says_why_a_loader_variable_is_refused(name):
    with pytest.raises(ConfigError) as e:
        parse_fleet(f'[hosts.x]\ntarget = "h"\n[hosts.x.env]\n{name} = "/tmp/x"\n')
    assert "loads code into every process" in e.value.message


@pytest.mark.parametrize("python", ["/tmp/python3", "/var/tmp/x/python3.12", "/dev/shm/python", "bash", "/bin/sh",
                                    "/usr/bin/../../tmp/python3", "python3-evil"])
def test_a_fleet_hosts_python_must_name_a_python_outside_shared_folders(python):
    with pytest.raises(ConfigError) as e:
        parse_fleet(f'[hosts.x]\ntarget = "h"\npython = "{python}"\n')
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("python", ["python3", "python3.12", "/usr/bin/python3.12", "/opt/py/bin/python3",
                                    "/home/u/.pyenv/versions/3.11.7/bin/python"])
def test_a_fleet_hosts_usual_pythons_are_accepted(python):
    assert parse_fleet(f'[hosts.x]\ntarget = "h"\npython = "{python}"\n').hosts["x"].python == python


# ---- Medium: crafted JSON columns in a store gave tracebacks (RecursionError too) --------------------------

DEEP = "[" * 100_000 + "]" * 100_000
#: (table, column, value): each a store a stranger could hand over
CRAFTED = [("runs", "plan_json", DEEP), ("runs", "plan_json", "[1, 2]"), ("runs", "plan_json", "{bad"),
           ("runs", "plan_json", '{"backends": 5}'), ("runs", "env_json", DEEP), ("runs", "env_json", "5"),
           ("runs", "summary_json", DEEP), ("runs", "summary_json", "[]"), ("runs", "created", "abc"),
           ("runs", "summary_json", '{"x": [1, {"y": ' + "[" * 500 + "]" * 500 + "}]}"),
           ("points", "extra_json", DEEP), ("points", "extra_json", "[1]"), ("points", "extra_json", '{"launches": 5}'),
           ("points", "ncmoe", "abc"), ("points", "command_json", '"ls"'), ("samples", "raw_json", DEEP),
           ("samples", "tg_tps", "fast"), ("builds", "manifest_json", DEEP), ("builds", "manifest_json", "[]")]


@pytest.fixture(scope="module")
def crafted_ws(tmp_path_factory):
    import shutil

    import run_fake

    ws = tmp_path_factory.mktemp("crafted")
    shutil.copy(Path(__file__).resolve().parents[2] / "pins.toml", ws / "pins.toml")
    (ws / "results").mkdir()
    store, _ = run_fake.build(ws / "results", db="clean.sqlite")
    store.close()
    return ws


def _crafted_store(ws: Path, table: str, column: str, value: str) -> Path:
    import shutil
    import sqlite3

    db = ws / "results" / "llamaforge.sqlite"
    for f in (ws / "results").glob("llamaforge.sqlite*"):
        f.unlink()
    shutil.copy(ws / "results" / "clean.sqlite", db)
    with sqlite3.connect(db) as c:
        c.execute(f"UPDATE {table} SET {column}=? WHERE rowid=(SELECT min(rowid) FROM {table})", (value,))
    return db


@pytest.mark.parametrize("argv", [["runs"], ["runs", "latest"], ["export", "latest"],
                                  ["export", "latest", "--format", "csv"], ["report", "latest"]],
                         ids=lambda a: "-".join(a))
@pytest.mark.parametrize(("table", "column", "value"), CRAFTED, ids=[f"{t}.{c}-{i}" for i, (t, c, _v) in enumerate(CRAFTED)])
def test_a_crafted_store_column_is_one_line_never_a_traceback(crafted_ws, tmp_path, monkeypatch, table, column, value,
                                                               argv):
    from test_cli_battery import run_cli

    _crafted_store(crafted_ws, table, column, value)
    monkeypatch.setenv("LLAMAFORGE_WORKSPACE", str(crafted_ws))
    monkeypatch.setenv("LLAMAFORGE_RESULTS", str(crafted_ws / "results"))
    monkeypatch.chdir(crafted_ws)
    code, out, err = run_cli([*argv, *(["--out", str(tmp_path / "r")] if argv[0] == "report" else [])])
    shown = f"{argv} {table}.{column}={value[:40]!r}: exit {code}\n{err[-3000:]}"
    assert "Traceback" not in err + out and code in (0, 2), shown
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if not ln.startswith("notice: ")]     # what was skipped: notices, one line each
    assert len(errors) == (1 if code else 0), shown
    if code:
        assert any(w in errors[0] for w in ("damaged", "nested deeper", "holds", "JSON")), shown


def test_a_damaged_run_is_skipped_from_the_listing_with_one_notice(crafted_ws, monkeypatch):
    import run_fake
    from test_cli_battery import run_cli

    db = _crafted_store(crafted_ws, "runs", "plan_json", DEEP)
    from llamaforge.store import Store

    store, good = run_fake.build(db.parent, db=db.name)     # a second, sound run beside the damaged one
    store.close()
    monkeypatch.setenv("LLAMAFORGE_WORKSPACE", str(crafted_ws))
    monkeypatch.setenv("LLAMAFORGE_RESULTS", str(crafted_ws / "results"))
    from llamaforge.console import console

    monkeypatch.setattr(console, "_width", 250)    # the run id whole on one line of the table, whatever the terminal
    code, out, err = run_cli(["runs"])
    assert code == 0 and good in out, err
    assert [ln for ln in err.splitlines() if ln.strip()] == [next(ln for ln in err.splitlines() if "skipped 1 damaged runs" in ln)]
    with Store(db) as s:
        assert [r.id for r in s.list_runs()] == [good]


def test_a_huge_log_tail_is_never_read_whole(crafted_ws, monkeypatch):
    """A 300 MiB ``log_tail`` drove ``runs`` to 2.5 GB RSS: the listing reads none, a run's points read its end."""
    import tracemalloc

    from test_cli_battery import run_cli

    from llamaforge.store import MAX_LONG_TEXT, Store

    big = "x" * (24 * 2**20) + "THE END"
    db = _crafted_store(crafted_ws, "points", "log_tail", big)
    del big
    monkeypatch.setenv("LLAMAFORGE_WORKSPACE", str(crafted_ws))
    monkeypatch.setenv("LLAMAFORGE_RESULTS", str(crafted_ws / "results"))
    with Store(db) as s:
        tails = [p.log_tail for p in s.points(s.get_run("latest").id, with_samples=False) if p.log_tail]
    assert tails and all(len(t) <= MAX_LONG_TEXT for t in tails) and any(t.endswith("THE END") for t in tails)
    for argv in (["runs"], ["runs", "latest", "--failed"]):
        tracemalloc.start()
        code, _out, err = run_cli(argv)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert code == 0, err
        assert peak < 16 * 2**20, f"{argv}: Python peak {peak / 2**20:.0f} MiB for a 24 MiB log tail"


# ---- Medium: archive bombs (read_member read a member whole; extract had no caps) ---------------------------

def _tar(path: Path, members: dict[str, bytes]) -> Path:
    import io
    import tarfile

    with tarfile.open(path, "w:gz", compresslevel=1) as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def test_an_archive_member_larger_than_the_cap_is_refused_unread(tmp_path):
    import tracemalloc

    from llamaforge.errors import SourceError
    from llamaforge.sources import archives

    bomb = _tar(tmp_path / "llama_cpp_python-0.3.9.tar.gz",
                {"llama_cpp_python-0.3.9/CHANGELOG.md": b"\0" * (archives.MAX_MEMBER_READ + 1024)})
    assert bomb.stat().st_size < 200_000           # a small download that unpacks to more than the cap
    tracemalloc.start()
    with pytest.raises(SourceError) as e:
        archives.read_member(bomb, "CHANGELOG.md")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert "CHANGELOG.md" in e.value.message and "not read" in e.value.message and "\n" not in str(e.value)
    assert peak < 4 * 2**20
    ok = _tar(tmp_path / "ok.tar.gz", {"x-1/CHANGELOG.md": b"## [1]\n"})
    assert archives.read_member(ok, "CHANGELOG.md") == "## [1]\n"


def test_extract_refuses_too_many_members_and_too_many_bytes(tmp_path, monkeypatch):
    from llamaforge.errors import SourceError
    from llamaforge.sources import archives

    monkeypatch.setattr(archives, "MAX_MEMBERS", 50)
    many = _tar(tmp_path / "many.tar.gz", {f"llama.cpp-x/f{i}.c": b"" for i in range(60)})
    with pytest.raises(SourceError, match="more than 50 members"):
        archives.extract(many, tmp_path / "out1")
    with pytest.raises(SourceError, match="more than 50 members"):
        archives.read_member(many, "f59.c")
    assert not (tmp_path / "out1").exists()
    monkeypatch.setattr(archives, "MAX_MEMBERS", 100_000)
    monkeypatch.setattr(archives, "MAX_UNPACKED", 2**20)
    big = _tar(tmp_path / "big.tar.gz", {"llama.cpp-x/a.c": b"\0" * 2**20, "llama.cpp-x/b.c": b"\0" * 1024})
    with pytest.raises(SourceError, match="would unpack to .* not extracted"):
        archives.extract(big, tmp_path / "out2")
    assert not (tmp_path / "out2").exists()
    small = _tar(tmp_path / "small.tar.gz", {"llama.cpp-x/a.c": b"int x;\n"})
    assert (archives.extract(small, tmp_path / "out3") / "a.c").read_text() == "int x;\n"


# ---- Low: pins.toml ignored unknown keys (a sha265 typo left the tarball unchecked) and took a bool --------

_PIN = '[pins.default]\ncommit = "0c1e57098"\nsources = ["tarball:https://example.org/x.tar.gz"]\n'


@pytest.mark.parametrize(("extra", "said"), [
    ('sha265 = { "tarball:https://example.org/x.tar.gz" = "' + "a" * 64 + '" }\n', "unknown key 'sha265' (did you mean 'sha256'?)"),
    ('commmit = "x"\n', "unknown key 'commmit' (did you mean 'commit'?)"),
    ('build_numbr = 5\n', "unknown key 'build_numbr' (did you mean 'build_number'?)"),
    ('flags = ["-DX=1"]\n', "unknown key 'flags'"),
    ("build_number = true\n", "build_number must be a whole number"),
    ("build_number = -3\n", "build_number must be a whole number"),
    ('build_number = "6000"\n', "build_number must be a whole number"),
    ("description = 5\n", "description must be a string"),
])
def test_pins_refuse_unknown_keys_and_wrong_types_naming_the_key(extra, said):
    from llamaforge.config import parse_pins

    with pytest.raises(ConfigError) as e:
        parse_pins(_PIN + extra)
    assert said in e.value.message and "\n" not in str(e.value), e.value.message


@pytest.mark.parametrize(("text", "said"), [
    ('defualt = "default"\n' + _PIN, "unknown key 'defualt' (did you mean 'default'?)"),
    ("default = 1\n" + _PIN, "default must be a string"),
    ('[pins.default]\ncommit = 1234567\nsources = ["git"]\n', "commit must be a string"),
    ('[pins.default]\ncommit = "0c1e57098"\nsources = ["git", 5]\n', "sources must be a non-empty list of strings"),
])
def test_pins_refuse_unknown_top_level_keys_and_wrong_types(text, said):
    from llamaforge.config import parse_pins

    with pytest.raises(ConfigError) as e:
        parse_pins(text)
    assert said in e.value.message, e.value.message


def test_the_shipped_pins_still_parse():
    from llamaforge.config import load_pins
    from llamaforge.paths import shipped_pins_file

    assert load_pins(shipped_pins_file()).pins


# ---- Misleading answers (7 of 372 inputs) and the BrokenPipe of `--help | head` -------------------------

@pytest.fixture
def cli_ws(tmp_path, monkeypatch):
    import shutil

    from models_fake import tiny_moe_gguf

    shutil.copy(Path(__file__).resolve().parents[2] / "pins.toml", tmp_path / "pins.toml")
    (tmp_path / "results").mkdir()
    for k, v in {"LLAMAFORGE_WORKSPACE": tmp_path, "LLAMAFORGE_RESULTS": tmp_path / "results",
                 "LLAMAFORGE_CACHE": tmp_path / "cache", "LLAMAFORGE_BUILD_ROOT": tmp_path / "builds"}.items():
        monkeypatch.setenv(k, str(v))
    monkeypatch.chdir(tmp_path)
    return tmp_path, str(tiny_moe_gguf(tmp_path / "tiny.gguf"))


@pytest.mark.parametrize(("argv", "said"), [
    (["model.twin", "-m"], "'-m' looks like an option"),
    (["model.twin", "--src", "{gguf}", "-m"], "'-m' looks like an option"),
    (["model.twin", "--src", "{gguf}", "--out", "-m"], "--out '-m' looks like an option"),
    (["bench", "--model", "{gguf}", "--repeats", "３"], "--repeats '３' is not a whole number"),
    (["bench", "--model", "{gguf}", "--ncmoe", "１:３"], "bad --ncmoe range '１:３'"),
    (["bench", "--model", "{gguf}", "--ngl", "٣"], "bad --ngl value '٣'"),
    (["compare", "--base", "default", "--min-effect", "５%"], "--min-effect '５%' is not a number"),
    (["bench", "--model", "{gguf}", "--vram-budget", "1e6"], "--vram-budget '1e6' is out of range"),
    (["bench", "--model", "{gguf}", "--depths", "-5"], "--depths values must be ≥ 0"),
    (["bench", "--model", "{gguf}", "--ngl", "1,1,1"], "--ngl 1,1,1 names 1 more than once"),
    (["bench", "--model", "{gguf}", "--ncmoe", "0:2,2"], "--ncmoe 0:2,2 names 2 more than once"),
    (["bench", "--ncmoe", "5:1"], "bad --ncmoe range '5:1': the end is before the start"),
    (["bench", "--ngl", "0:99999999999"], "goes beyond the largest --ngl accepted"),
    (["fitmap", "--ncmoe", "5:1"], "bad --ncmoe range '5:1'"),
], ids=lambda v: "-".join(v) if isinstance(v, list) else None)
def test_a_misleading_answer_is_now_one_clear_line(cli_ws, argv, said):
    from test_cli_battery import run_cli

    _ws, gguf = cli_ws
    code, out, err = run_cli([a.replace("{gguf}", gguf) for a in argv])
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert said in lines[0], lines[0]
    assert not (_ws / "-m").exists()


def test_an_upper_case_https_scheme_is_a_url(cli_ws, monkeypatch):
    """``HTTPS://`` is ``https://`` (RFC 3986: schemes are case-insensitive): it is downloaded, not "no model"."""
    from llamaforge.models import refs
    from llamaforge.paths import Paths

    seen = []
    monkeypatch.setattr(refs, "download", lambda url, dest, **kw: seen.append(url) or dest)
    monkeypatch.setattr(refs, "_cached_or_fetch", lambda dest, sha, ref, url, fetch: fetch(sha))
    for ref in ("HTTPS://example.org/m.gguf", "Https://example.org/m.gguf", "HTTP://example.org/m.gguf#sha256=" + "a" * 64):
        refs.resolve_model(ref, Paths.discover() if hasattr(Paths, "discover") else __import__(
            "llamaforge.commands._common", fromlist=["paths"]).paths())
    assert [u.split("://")[0] for u in seen] == ["https", "https", "http"]
    assert seen[0] == "https://example.org/m.gguf"


def test_help_piped_into_head_ends_quietly():
    """``llamaforge --help | head -1`` ended in a BrokenPipeError traceback (fixed in issue 40; kept here)."""
    import subprocess
    import sys

    r = subprocess.run(f"{sys.executable} -m llamaforge --help | head -1", shell=True, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")})
    assert r.stdout.strip() and "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr

"""Install anywhere (issue 40): the per-user places, the optional workspace, the shipped pins and ``init``, with
an empty HOME and no llamaforge variable set — what a `pipx install`ed llamaforge meets in a fresh folder."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from llamaforge.config import load_pins
from llamaforge.errors import ConfigError
from llamaforge.paths import Paths, cache_root, shipped_pins_file
from llamaforge.workspace import init_workspace

SRC = Path(__file__).resolve().parents[2] / "src"
_VARS = ("LLAMAFORGE_WORKSPACE", "LLAMAFORGE_CACHE", "LLAMAFORGE_DATA", "LLAMAFORGE_CONFIG", "LLAMAFORGE_RESULTS",
         "LLAMAFORGE_BUILD_ROOT", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty HOME, no llamaforge or XDG variable, the current folder an empty one outside any workspace."""
    for v in _VARS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path / "empty")
    return tmp_path / "home"


def test_an_empty_folder_uses_the_per_user_places_and_the_shipped_pins(home: Path) -> None:
    p = Paths.default()
    assert not p.anchored
    assert p.pins_file == shipped_pins_file()
    assert p.cache == home / ".cache" / "llamaforge"
    assert p.builds == home / ".cache" / "llamaforge" / "builds"
    assert p.store_db == home / ".local" / "share" / "llamaforge" / "results" / "llamaforge.sqlite"
    assert p.vendor.is_relative_to(p.cache)
    assert not any(Path.cwd().iterdir())          # nothing was written into the current folder
    where = dict((what, at) for what, at, _ in p.places())
    assert where["cache"] == str(p.cache) and where["pins"] == str(shipped_pins_file())


def test_the_shipped_pins_are_the_checked_releases(home: Path) -> None:
    pins = load_pins(shipped_pins_file())
    releases = [p for p in pins.pins.values() if p.name.startswith("lcpp-")]
    assert len(releases) >= 4 and pins.get(None).commit
    for p in releases:
        pypi = [s for s in p.sources if s.kind == "pypi"]
        assert pypi and pypi[0].sha256 and len(pypi[0].sha256) == 64, p.name


def test_each_place_moves_by_variable_and_workspace_settings(home: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "proj"
    (ws / "deep").mkdir(parents=True)
    (ws / "llamaforge.toml").write_text('[paths]\ncache = "c"\ndata = "/srv/lf-data"\nbuilds = "b"\n')
    monkeypatch.chdir(ws / "deep")
    p = Paths.default()
    assert p.anchored and p.workspace == ws
    assert p.cache == ws / "c" and p.builds == ws / "b" and p.results == Path("/srv/lf-data/results")
    assert p.pins_file == shipped_pins_file()        # a workspace without pins.toml keeps the shipped pins
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "env-cache"))
    monkeypatch.setenv("LLAMAFORGE_DATA", str(tmp_path / "env-data"))
    assert p.cache == tmp_path / "env-cache" and p.results == tmp_path / "env-data" / "results"


def test_the_users_config_folder_holds_pins_and_paths(home: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = home / ".config" / "llamaforge"
    cfg.mkdir(parents=True)
    (cfg / "pins.toml").write_text('[pins.mine]\ncommit = "abcdef1"\nsources = ["git"]\n')
    (cfg / "config.toml").write_text(f'[paths]\ncache = "{tmp_path / "big"}"\n')
    p = Paths.default()
    assert p.pins_file == cfg / "pins.toml" and load_pins(p.pins_file).default == "mine"
    assert p.cache == tmp_path / "big"


@pytest.mark.parametrize("text, says", [
    ("[paths]\ncache = 3\n", "is not understood"),
    ("[paths]\ncahce = \"x\"\n", "is not understood"),
    ("[path]\ncache = \"x\"\n", "only a [paths] table is understood"),
    ("[paths\n", "is not valid TOML"),
])
def test_a_strangers_settings_file_is_one_line(home: Path, text: str, says: str) -> None:
    (Path.cwd() / "llamaforge.toml").write_text(text)
    with pytest.raises(ConfigError, match=says.replace("[", r"\[")):
        _ = Paths.default().cache


def test_a_cache_that_cannot_be_made_is_one_line(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "afile" / "cache"))
    with pytest.raises(ConfigError) as e:
        cache_root()
    assert "cannot create the cache folder" in e.value.message and "LLAMAFORGE_CACHE" in e.value.fix


def test_init_writes_a_workspace_and_never_overwrites_without_force(home: Path) -> None:
    here = Path.cwd()
    written = init_workspace(here)
    assert sorted(f.name for f in written) == ["llamaforge.toml", "pins.toml"]
    assert (here / "pins.toml").read_text() == shipped_pins_file().read_text()
    assert tomllib.loads((here / "llamaforge.toml").read_text()) == {}      # every setting commented out
    assert Paths.default().anchored and Paths.default().pins_file == here / "pins.toml"
    (here / "pins.toml").write_text("# mine\n")
    with pytest.raises(ConfigError) as e:
        init_workspace(here)
    assert "already exist" in e.value.message and "--force" in e.value.fix
    assert (here / "pins.toml").read_text() == "# mine\n"
    init_workspace(here, force=True)
    assert (here / "pins.toml").read_text() == shipped_pins_file().read_text()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in _VARS} | {"PYTHONPATH": str(SRC), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "llamaforge", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_program_in_an_empty_folder(home: Path, tmp_path: Path) -> None:
    pins = _cli("pins")
    assert pins.returncode == 0 and "shipped release pins" in pins.stdout and "lcpp-0.3.36" in pins.stdout
    places = _cli("--cache-dir", str(tmp_path / "moved"), "doctor")
    assert places.returncode == 0 and str(tmp_path / "moved") in places.stdout
    assert _cli("init").returncode == 0
    again = _cli("init")
    assert again.returncode != 0 and again.stderr.count("\n") == 1 and "already exist" in again.stderr
    assert "Traceback" not in again.stderr


def test_verbose_flag_sets_the_switch_children_see(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llamaforge import cli

    monkeypatch.setenv("LLAMAFORGE_VERBOSE", "")     # restored (removed) after the test, like the one below
    monkeypatch.setenv("LLAMAFORGE_DATA", "")
    cli.program.parse_core(["llamaforge", "--verbose", "--data-dir", "d", "pins"])
    assert os.environ["LLAMAFORGE_VERBOSE"] == "1" and os.environ["LLAMAFORGE_DATA"] == str(Path.cwd() / "d")


def test_the_cache_folder_is_settled_once_per_settings_state(home: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import llamaforge.paths as paths_mod

    reads: list[Path] = []
    real = paths_mod.read_paths_table
    monkeypatch.setattr(paths_mod, "read_paths_table", lambda f: reads.append(f) or real(f))
    (Path.cwd() / "llamaforge.toml").write_text(f'[paths]\ncache = "{tmp_path / "one"}"\n')
    p = Paths.default()
    assert [p.cache, p.mirror.parent, p.ccache_dir.parent, p.model_cache.parent] == [tmp_path / "one"] * 4
    assert len(reads) == 1                      # every place under the cache: one read of the settings
    (Path.cwd() / "llamaforge.toml").write_text(f'[paths]\ncache = "{tmp_path / "other-two"}"\n')
    assert p.cache == tmp_path / "other-two"    # an edited settings file counts at once
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "env"))
    assert p.cache == tmp_path / "env" and (tmp_path / "env").is_dir()

"""The installed tool (issue 40): this repository built as a wheel, installed into a fresh venv, run with an empty
HOME from folders that are not this repository — an empty one, and a real llama.cpp git checkout (a clone of the
bisect fixture: llama.cpp's tree followed by small commits, one of which makes every generated token sleep 20 ms).
No pins file anywhere; every command is the installed ``llamaforge`` program, every build and measurement real.

What is shared with the other slow tests: ``LLAMAFORGE_CACHE`` (the git mirror, sdists and ccache: a place moved
by its variable, as a user with a big disk would), the host-wide measurement lock and the venv's base (``venv
--system-site-packages``: the dependencies are the ones ``scripts/setup.sh`` installed; llamaforge itself comes
from the wheel, which the test checks). Config, data, builds and synthetic models are the per-user defaults under
the empty HOME's cache folder, so the first run builds llama.cpp there (fed by ccache) and later runs find it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llamaforge.store import Store

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
from fixture_repo import SLOW_INDEX, make_fixture  # noqa: E402

_DROP = ("LLAMAFORGE_", "XDG_", "HF_", "PYTHON", "VIRTUAL_ENV")
_KEEP = ("LLAMAFORGE_LOCK_DIR",)
#: a tiny measurement: the 20 ms a token slowdown is ~10x, so one short request a start resolves it
_QUICK = ["--repeats", "1", "--prompt-tokens", "32", "--n-predict", "8", "--threads", "1"]


def _shared_cache() -> Path:
    return Path(os.environ.get("LLAMAFORGE_CACHE") or Path.home() / ".cache" / "llamaforge")


@pytest.fixture(scope="module")
def tool(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """``run(args, cwd)`` of the installed ``llamaforge``, with an empty HOME; the HOME is ``run.home``."""
    d = tmp_path_factory.mktemp("installed")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(d / "wheel"), str(REPO)],
                   check=True, timeout=600, capture_output=True)
    wheel = next((d / "wheel").glob("llamaforge-*.whl"))
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(d / "venv")], check=True, timeout=300)
    pip = str(d / "venv" / "bin" / "pip")
    # --ignore-installed: into the venv even where this checkout is installed (editable) in the base; `pip check`:
    # every dependency the wheel declares is there
    subprocess.run([pip, "install", "-q", "--no-index", "--no-deps", "--ignore-installed", str(wheel)], check=True,
                   timeout=600, capture_output=True)
    subprocess.run([pip, "check"], check=True, timeout=300, capture_output=True)
    home = d / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROP) or k in _KEEP}
    env.update(HOME=str(home), LLAMAFORGE_CACHE=str(_shared_cache()), NO_COLOR="1", COLUMNS="250",
               PATH=f"{d / 'venv' / 'bin'}{os.pathsep}{os.environ['PATH']}")

    def run(args: list[str], cwd: Path, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["llamaforge", *args], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    where = subprocess.run([str(d / "venv" / "bin" / "python"), "-c", "import llamaforge; print(llamaforge.__file__)"],
                           cwd=home, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(d / "venv"), f"llamaforge imported from {where}, not the wheel"
    run.home = home
    return run


def _ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, f"rc {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r.stdout


def _one_line_error(r: subprocess.CompletedProcess[str], says: str) -> None:
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and says in lines[0], r.stderr


def _store(home: Path) -> Path:
    return home / ".local" / "share" / "llamaforge" / "results" / "llamaforge.sqlite"


def test_from_an_empty_folder_doctor_pins_init_build_bench_report(tool, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    doctor = _ok(tool(["doctor"], empty))
    assert "places" in doctor and "none (the per-user places below)" in doctor
    assert str(_store(tool.home)) in doctor
    pins = _ok(tool(["pins"], empty))
    assert "shipped release pins" in pins and "lcpp-0.3.36" in pins

    mine = tmp_path / "mine"
    mine.mkdir()
    _ok(tool(["init"], mine))
    assert (mine / "pins.toml").is_file() and (mine / "llamaforge.toml").is_file()
    _one_line_error(tool(["init"], mine), "already exist")
    assert "(" + str(mine / "pins.toml") + ")" in _ok(tool(["pins"], mine))   # its pins, not the shipped ones

    build = _ok(tool(["build", "--backends", "cpu"], empty))
    assert "cpu" in build
    bench = _ok(tool(["bench", "--model", "synth:tiny-qwen35moe", "--backends", "cpu", "--ncmoe", "0",
                      "--launches", "2", *_QUICK], empty))
    run_id = bench.split("run id:")[1].split()[0]
    report = _ok(tool(["report", run_id], empty))
    assert "report" in report.lower()
    with Store(_store(tool.home)) as store:
        run = store.get_run(run_id)
        assert run.status == "done" and [p.status for p in store.points(run_id)] == ["ok"]
    reports = list((_store(tool.home).parent / "reports" / run_id).glob("*.md"))
    assert reports, "the report lands in the data folder"
    built = list((_shared_cache() / "builds").glob("*-cpu-*/manifest.json"))
    assert built, "the build lands in the per-user cache's builds/"
    assert not any(empty.iterdir()), "nothing is written into the folder the user ran it in"


def _git(repo: Path, *args: str, **kw) -> str:  # noqa: ANN003
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "U",
           "GIT_AUTHOR_EMAIL": "u@x.invalid", "GIT_COMMITTER_NAME": "U", "GIT_COMMITTER_EMAIL": "u@x.invalid"}
    return subprocess.run(["git", "-C", str(repo), *args], env={**env, **kw}, check=True, capture_output=True,
                          text=True, timeout=300).stdout.strip()


def _state(repo: Path) -> tuple:
    """HEAD, branches, the index file's bytes and time, and the working tree's status: what must not change."""
    index = repo / ".git" / "index"
    return (_git(repo, "rev-parse", "HEAD"), _git(repo, "show-ref"), index.read_bytes(), index.stat().st_mtime_ns,
            _git(repo, "--no-optional-locks", "status", "--porcelain"))


@pytest.fixture
def checkout(cpu_build, tmp_path: Path):  # noqa: ANN001, ANN201
    """A developer's clone: ``master`` just before the slowdown, ``feature`` (checked out) = the slowdown commit."""
    fx = make_fixture(cpu_build.source_dir)
    co = tmp_path / "llama.cpp"
    subprocess.run(["git", "clone", "-q", "--shared", str(fx.path), str(co)], check=True, timeout=300)
    _git(co, "checkout", "-q", "-B", "feature", fx.slow)
    _git(co, "branch", "-q", "-f", "master", fx.commits[SLOW_INDEX - 1])
    return co, fx


def test_inside_a_llama_cpp_checkout_compare_and_bisect_take_its_revisions(tool, checkout) -> None:
    co, fx = checkout
    model = ["--model", "synth:tiny-qwen35moe"]
    (co / "docs" / "scratch.md").write_text("uncommitted notes\n")      # an untracked file
    before = _state(co)

    _one_line_error(tool(["compare", "no-such-branch", "HEAD", *model], co), "is not a revision of the checkout")

    # did my branch make it slower? exit 3, tg worse, judged on the starts
    r = tool(["compare", "master", "HEAD", *model, "--launches", "3", "--min-effect", "30%", "--fail-on-worse",
              *_QUICK], co)
    assert r.returncode == 3 and re.search(r"^WORSE: .*\btg at ncmoe 0 ", r.stdout, re.M), r.stdout[-3000:] + r.stderr[-3000:]

    # bench takes the checkout's revisions too (its builds are the ones compare just made)
    out = _ok(tool(["bench", *model, "--backends", "cpu", "--pins", "master", "--ncmoe", "0", "--launches", "2",
                    *_QUICK], co))
    bench_id = out.split("run id:")[1].split()[0]
    with Store(_store(tool.home)) as store:
        assert store.get_run(bench_id).plan.pins == [fx.commits[SLOW_INDEX - 1]]

    r = tool(["bisect", "--good", "master", "--bad", "HEAD", *model, "--repeats", "1", "--n-predict", "8"], co)
    out = _ok(r)
    run_id = out.split("stored as run")[1].split(";")[0].strip()
    with Store(_store(tool.home)) as store:
        summary = store.get_run(run_id).summary
    assert summary.status == "found" and summary.first_bad == fx.slow, summary
    assert _state(co) == before, "compare or bisect changed the user's checkout"

    # uncommitted changes as WORKTREE: built from a snapshot, recorded dirty with the diff's hash
    llama_cpp = co / "src" / "llama.cpp"
    llama_cpp.write_text(llama_cpp.read_text() + "\n// an uncommitted comment\n")
    dirty_state = _state(co)
    built = _ok(tool(["build", "--backends", "cpu", "--pins", "WORKTREE", "--no-verify"], co))
    assert "WORKTREE" in built
    manifests = [json.loads(m.read_text()) for m in (_shared_cache() / "builds").glob("*-cpu-*/manifest.json")]
    dirty = [m for m in manifests if m.get("pin") == "WORKTREE" and m["source"].get("dirty")]
    assert dirty and len(dirty[-1]["source"]["dirty"]["diff_sha256"]) == 64
    assert _state(co) == dirty_state, "the build changed the user's checkout"
    llama_cpp.write_text(llama_cpp.read_text().removesuffix("\n// an uncommitted comment\n"))
    assert _state(co)[:2] == before[:2]

    # a rebase stopped half way: its HEAD is in flux, bisect refuses in one line
    _git(co, "stash", "-q", "-u")
    _git(co, "rebase", "-q", "-i", "HEAD~2", GIT_SEQUENCE_EDITOR="sed -i 1ibreak")
    _one_line_error(tool(["bisect", "--good", "master", "--bad", "HEAD", *model], co), "rebase in progress")
    _git(co, "rebase", "--abort")

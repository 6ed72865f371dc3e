"""``bench.engines.fit.fit_params_once``: a point's llama-fit-params run once per process, reused while the
binary, model file, options and environment are the same; a failed fit is asked again."""

from __future__ import annotations

from pathlib import Path

from fakes import FakeBuild, write_executable
from llamaforge.bench.engines import fit as fitmod
from llamaforge.bench.plan import PointSpec

# counts its runs in calls.txt beside it; prints a fitted context unless FAIL exists there
FIT = """import sys, pathlib
here = pathlib.Path(sys.argv[0]).parent
if '--help' in sys.argv:
    print('-m, --model F\\n-ncmoe, --n-cpu-moe N\\n-fitt, --fit-target M')
    raise SystemExit(0)
with open(here / 'calls.txt', 'a') as f:
    f.write(' '.join(sys.argv[1:]) + '\\n')
if (here / 'FAIL').exists():
    print('failed to fit params'); raise SystemExit(1)
print('-c 4096 -ngl -1')
"""


def _setup(tmp_path: Path) -> tuple[FakeBuild, Path, Path]:
    d = tmp_path / "bin"
    d.mkdir()
    write_executable(d / "llama-fit-params", FIT)
    for name in ("llama-server", "llama-bench"):
        write_executable(d / name, "print('-m, --model F\\n-ncmoe, --n-cpu-moe N')\n")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 60)
    fitmod._FITS.clear()
    return FakeBuild("fit-once", d, mode=None), model, d / "calls.txt"


def _calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_a_points_fit_runs_once_and_is_marked_reused(tmp_path):
    b, model, log = _setup(tmp_path)
    first, reused1 = fitmod.fit_params_once(b, model, PointSpec(2), threads=1)
    again, reused2 = fitmod.fit_params_once(b, model, PointSpec(2), threads=1)
    assert first.ok and first.n_ctx == 4096 and (reused1, reused2) == (False, True) and again is first
    assert _calls(log) == 1
    fitmod.fit_params_once(b, model, PointSpec(3), threads=1)        # another point: its own fit
    fitmod.fit_params_once(b, model, PointSpec(2), threads=2)        # other options: asked again
    assert _calls(log) == 3


def test_a_changed_model_file_or_environment_is_fitted_again(tmp_path):
    b, model, log = _setup(tmp_path)
    fitmod.fit_params_once(b, model, PointSpec(2))
    model.write_bytes(b"GGUF" + b"\0" * 80)                         # replaced: another size
    _fit, reused = fitmod.fit_params_once(b, model, PointSpec(2))
    assert not reused and _calls(log) == 2
    other = FakeBuild("fit-once", b.dir, mode=None, extra_env={"GGML_VK_VISIBLE_DEVICES": "1"})
    _fit, reused = fitmod.fit_params_once(other, model, PointSpec(2))
    assert not reused and _calls(log) == 3


def test_a_failed_fit_is_not_kept(tmp_path):
    b, model, log = _setup(tmp_path)
    (b.dir / "FAIL").write_text("")
    for _ in range(2):
        fit, reused = fitmod.fit_params_once(b, model, PointSpec(2))
        assert not fit.ok and not reused
    assert _calls(log) == 2
    (b.dir / "FAIL").unlink()
    fit, reused = fitmod.fit_params_once(b, model, PointSpec(2))
    assert fit.ok and not reused


def test_a_fit_whose_output_was_lost_at_exit_is_a_failed_fit_and_other_errors_keep_their_class():
    # llama-fit-params' async logger loses lines at exit(1): all of them, or all but a timestamp (a CI run)
    for tail in ("", "0.00.075.943 ", "0.00.075.943 E ",
                 "0.00.075.972 E llama_fit_params: failed to fit CLI arguments to free memory, exiting..."):
        assert fitmod.failure_class(tail) == "fit", tail
    assert fitmod.failure_class("0.00.012.001 E error: invalid argument: --nope") == "error"
    assert fitmod.failure_class("0.00.012.001 E llama_model_load: error loading model") == "crash"
    assert fitmod.failure_class("ggml_aligned_malloc: failed to allocate 12.0 MiB") == "oom"

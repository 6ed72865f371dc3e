"""``compare``, ``bisect`` and ``bisect-run``: thin option parsing around llamaforge.compare / llamaforge.bisect."""

from __future__ import annotations

import sys
from pathlib import Path

from ..console import console, esc, info, notice, print_error
from ..errors import LlamaforgeError
from ..options.table import convert, help_for, parse_launches, task_values
from ..pathsafe import under
from ..store import Store
from ._common import as_float, lf_task, paths, pins_or_empty, writable_dir


def _source(value) -> str | None:  # noqa: ANN001
    """``--source`` checked before anything runs (it reaches git: ``git:--upload-pack=...`` is refused)."""
    if value is None:
        return None
    from ..config import SourceSpec

    SourceSpec.parse(str(value), where="--source")
    return str(value)


@lf_task(positional=["base", "head"], help=help_for(
    "compare",
    base="A: a revision of the llama.cpp checkout you are in (branch, tag, sha, HEAD, WORKTREE), else a pin name or "
         "commit (the baseline)",
    head="B: as A (compared against A; default: same as A, for two backends)",
    base_backend="backend of A (overrides --backend)", head_backend="backend of B (overrides --backend)", **{
    "base_host": "measure A on this fleet host (fleet.toml); with --head-host: one build on two machines",
    "head_host": "measure B on this fleet host (with --base-host)",
    "fleet": "the fleet file (default: fleet.toml next to pins.toml)",
    "fail_on_worse": "exit 3 when any metric of any point is worse (for CI: scheduled regression checks)",
    "fail_on_inconclusive": "exit 4 when no metric is worse but a verdict is inconclusive: not proven either way, "
                            "add starts (--launches/--max-launches); with --fail-on-worse, exit 0 then means every "
                            "metric was judged same or better",
    "base_variant": "A as a variant: NAME=BACKEND[@PIN][:ENV=V ... ARGS] or a NAME from variants.toml (its backend, "
                    "environment and arguments; its @PIN, else --base)",
    "head_variant": "B as a variant (as --base-variant; its @PIN, else --head, else --base)",
}))
def compare(c, base, head=None, backend="cpu", base_backend=None, head_backend=None, model="synth:tiny-qwen35moe",
            ncmoe="0", repeats=3, launches="auto", max_launches=None, rounds=None, min_effect="5%", engine="server",
            prompt_tokens=2500, n_predict=128, threads=None, source=None, base_host=None, head_host=None, fleet=None,
            fail_on_worse=False, fail_on_inconclusive=False, base_variant=None, head_variant=None):
    """Compare two commits (or two backends of one commit): build both, measure them interleaved
    (A B B A ...) in server starts at the same points, and judge each metric on the starts: the ratio B/A
    with its 95 % CI and a verdict — same (within --min-effect), better / worse, or inconclusive — with
    Holm's method over the points. --launches auto adds starts only while a verdict is open. Stored as a
    run of kind compare.

    Inside a llama.cpp checkout (or with --source DIR), A and B are its revisions: `llamaforge compare master
    HEAD` answers "did my branch make it slower?"; WORKTREE is the uncommitted state. The checkout's files,
    index and branches are never touched (commits are fetched into llamaforge's private mirror).

    With --base-host H1 --head-host H2: one build measured on two fleet hosts at the same time (no
    interleaving across machines), compared with the same statistics."""
    from ..bench.plan import make_points
    from ..compare.session import CompareRequest, run_compare
    from ..compare.show import print_compare

    given = convert(task_values("compare", locals()))    # every value checked before anything runs
    p = paths()
    source = _source(source)
    lo = parse_launches(given["rounds"] if rounds is not None else given["launches"], given["max_launches"])
    va, vb = _side_variants(p, base_variant, head_variant, base_backend or head_backend or base_host or head_host)
    a_ref, b_ref = (va.pin if va and va.pin else base), (vb.pin if vb and vb.pin else head or base)
    req = CompareRequest(
        base=_make_side("A", a_ref, va.backend if va else (base_backend or backend), source),
        head=_make_side("B", b_ref, vb.backend if vb else (head_backend or backend), source),
        model=model, points=make_points(ncmoe), repeats=given["repeats"], rounds=lo.fixed,
        max_launches=lo.policy.max_starts, min_effect=given["min_effect"], engine=engine,
        prompt_tokens=given["prompt_tokens"], n_predict=given["n_predict"], threads=given["threads"])
    if base_host or head_host:
        run_id = _compare_hosts(p, req, str(ncmoe), base_host, head_host, fleet)
    else:
        with Store(p.store_db) as store:
            builds = _variant_builds(p, req, va, vb, engine) if va or vb else None
            run_id = run_compare(p, store, req, builds=builds, command=" ".join(sys.argv))
            print_compare(store, run_id)
    info(f"stored as run [bold]{esc(run_id)}[/] " + esc(f"(`llamaforge report {run_id}`)"))
    if fail_on_worse or fail_on_inconclusive:
        _exit_by_verdict(p, run_id, worse=bool(fail_on_worse), inconclusive=bool(fail_on_inconclusive))


#: ``compare`` exit codes by verdict (for CI): a metric worse (``--fail-on-worse``); none worse but one not proven
#: either way (``--fail-on-inconclusive``: add starts)
EXIT_WORSE, EXIT_INCONCLUSIVE = 3, 4


def _exit_by_verdict(p, run_id: str, *, worse: bool, inconclusive: bool) -> None:  # noqa: ANN001
    """Exit 3 when a metric is worse (``worse``), else 4 when a verdict is inconclusive (``inconclusive``), naming
    them in one line each; return (exit 0) only when neither applies."""
    from ..compare.judged import inconclusive_rows, worse_rows

    with Store(p.store_db) as store:
        run = store.get_run(run_id)
        bad, open_ = worse_rows(run), inconclusive_rows(run)
    if worse and bad:
        console.print(esc(f"WORSE: {', '.join(bad)} (run {run_id})"), markup=False, highlight=False)
        sys.exit(EXIT_WORSE)
    if inconclusive and open_:
        console.print(esc(f"INCONCLUSIVE (not proven either way: add starts): {', '.join(open_)} (run {run_id})"),
                      markup=False, highlight=False)
        sys.exit(EXIT_INCONCLUSIVE)


def _make_side(name: str, ref: str, backend: str, source: str | None):  # noqa: ANN202
    """A side; inside a llama.cpp checkout (or ``--source DIR``) ``ref`` is its revision, checked now (a name the
    checkout lacks is one line before anything is built), unless it is only a pin's name."""
    from ..compare.session import Side
    from ..sources.localrepo import WORKTREE, checkout_from, rev_sha

    co = checkout_from(source)
    if co is None:
        return Side(name, ref, backend, source)
    if ref != WORKTREE:
        try:
            rev_sha(co, ref)
        except LlamaforgeError:
            if ref not in pins_or_empty().pins:
                raise
            return Side(name, ref, backend, None)
    else:
        rev_sha(co, "HEAD")
    return Side(name, ref, backend, str(co.spec), checkout=co.root)


def _side_variants(p, base_variant, head_variant, other):  # noqa: ANN001, ANN202
    """(A's variant, B's variant) from --base-variant / --head-variant (``None`` where not given)."""
    if not base_variant and not head_variant:
        return None, None
    from ..errors import ConfigError
    from ..variants.files import VARIANTS_FILE, choose

    if other:
        raise ConfigError("--base-variant/--head-variant carry their backends: they take no --base-backend, "
                          "--head-backend or fleet hosts", "give the backend inside the variant, e.g. 'fa-on=cuda:-fa on'")
    from ..variants.check import check_env

    picked = choose([s for s in (base_variant, head_variant) if s], None, p.pins_file.parent / VARIANTS_FILE)
    for v in picked:      # before anything is built
        check_env(v)
    it = iter(picked)
    return (next(it) if base_variant else None), (next(it) if head_variant else None)


def _variant_builds(p, req, va, vb, engine: str):  # noqa: ANN001, ANN202
    """Both sides built (cached) with their variants' defines, then bound to the variants (checked)."""
    from ..builds import BuildOptions
    from ..compare.session import build_side
    from ..variants.check import bind

    out = []
    for side, v in ((req.base, va), (req.head, vb)):
        b = build_side(p, side, BuildOptions(defines=v.defines_dict) if v else None)
        out.append(bind(v, b, [engine]) if v else b)
    return out[0], out[1]


def _compare_hosts(p, req, ncmoe: str, base_host: str | None, head_host: str | None, fleet: str | None) -> str:  # noqa: ANN001
    from ..compare.show import print_compare
    from ..errors import FleetError
    from ..fleet.config import FLEET_FILE, load_fleet
    from ..fleet.cross_host import CROSS_MACHINE, run_host_compare
    from ..fleet.jobs import Progress

    if not (base_host and head_host):
        raise FleetError("give both --base-host and --head-host", "e.g. --base-host desk --head-host cloud")
    f = load_fleet(Path(fleet) if fleet else p.workspace / FLEET_FILE)
    hosts = f.select([base_host, head_host])
    with Store(p.store_db) as store, Progress([h.name for h in hosts]) as pr:
        run_id = run_host_compare(store, p, f, req, ncmoe, base_host=base_host, head_host=head_host,
                                  command=" ".join(sys.argv), progress=pr)
    with Store(p.store_db) as store:
        print_compare(store, run_id)
    notice(CROSS_MACHINE)
    return run_id


@lf_task(help=help_for(
    "bisect",
    good="a revision where the metric was good (older): of the llama.cpp checkout you are in (branch, tag, sha, "
         "HEAD), else a commit or pin",
    bad="a later revision on the same first-parent line where it is bad (WORKTREE: the uncommitted state)",
    out="folder for the plot and the Markdown (default results/reports/<run id>)"))
def bisect(c, good, bad, metric="tg", backend="cpu", threshold="5%", model="synth:tiny-qwen35moe", repeats=3,
           max_launches=None, source=None, n_predict=32, threads=None, quiet_starts=True, out=None):
    """Find the first commit that made --metric worse between --good and --bad (first-parent
    history). Measures both endpoints first in sequential server starts (ABBA) and refuses, before
    building anything else, when their change cannot be located within --max-launches starts per
    commit (it says how many it would take); then binary-searches with incremental builds, each probe
    judged against both endpoints' starts until clearly good or bad (undecided at the maximum: it
    stops and says so, never guesses); finally re-measures the commit found against its parent (ABBA)
    and prints the change with its CI. Commits that do not build are skipped. Stores every start and
    probe, writes a report with a plot of the metric over the commits."""
    from ..bisect import BisectRequest, print_result, run_bisect
    from ..report import write_report

    given = convert(task_values("bisect", locals()), check_group=False)   # checked before anything runs
    p = paths()
    if out is not None:
        writable_dir(out, "--out")     # before the endpoints are built and measured
    good, bad, source = _checkout_range(p, good, bad, _source(source))
    req = BisectRequest(good=good, bad=bad, metric=metric, backend=backend, threshold=given["threshold"],
                        model=model, repeats=given["repeats"], max_launches=given["max_launches"],
                        source=source, n_predict=given["n_predict"], threads=given["threads"],
                        quiet=given["quiet_starts"])
    with Store(p.store_db) as store:
        run_id, _res = run_bisect(p, store, req, command=" ".join(sys.argv))
        print_result(store, run_id)
        out_dir = Path(out) if out else under(p.results / "reports", run_id)
        rp = write_report(store, run_id, out_dir)
    info(f"stored as run [bold]{esc(run_id)}[/]" + esc(f"; report {rp.md} ({rp.html})"))


def _checkout_range(p, good: str, bad: str, source: str | None) -> tuple[str, str, str | None]:  # noqa: ANN001
    """Inside a llama.cpp checkout (or ``--source DIR``): --good and --bad as mirror shas of its revisions (fetched
    into the private mirror; a rebase in progress or a name it lacks is one line), and the checkout as the source."""
    from ..sources.localrepo import checkout_from, revision_shas

    co = checkout_from(source)
    if co is None:
        return good, bad, source
    g, b = revision_shas(co, [good, bad], p)
    return g, b, str(co.spec)


@lf_task(name="bisect-run", error_exit=128, help=help_for(
    "bisect-run", good_value="t/s of a known good commit", bad_value="t/s of a known bad commit",
    reference="instead of good/bad values: a reference t/s; bad when clearly more than --threshold below it"))
def bisect_run(c, metric="tg", backend="cpu", good_value=None, bad_value=None, reference=None, threshold="5%",
               source=".", model="synth:tiny-qwen35moe", repeats=3, max_launches=None, n_predict=32):
    """For `git bisect run`: build the current checkout (HEAD of --source) in place, measure it in
    sequential server starts and exit 0 (good) or 1 (bad) once the interval of its level clears the
    boundary (the midpoint of --good-value and --bad-value, or --reference less --threshold), and 125
    (skip) when it does not build or is still undecided at --max-launches. The values are taken as
    exact: use ones measured over several starts. Setup errors exit 128, which stops git bisect
    instead of marking the commit bad."""
    from ..bisect import BisectRequest, bisect_run_once

    try:
        given = convert(task_values("bisect-run", locals()), check_group=False)
        req = BisectRequest(good="HEAD", bad="HEAD", metric=metric, backend=backend, model=model,
                            repeats=given["repeats"], n_predict=given["n_predict"], max_launches=given["max_launches"])
        out = bisect_run_once(paths(), Path(source), req, good_value=_num(good_value, "--good-value"),
                              bad_value=_num(bad_value, "--bad-value"), reference=_num(reference, "--reference"),
                              threshold=given["threshold"], command=" ".join(sys.argv))
    except LlamaforgeError as e:
        print_error(e)
        sys.exit(128)
    if out.error is not None:
        print_error(out.error)
    console.print(esc(out.line))
    sys.exit(out.code)


def _num(value: object, what: str) -> float | None:
    """An optional t/s value (``None`` when not given)."""
    return None if value is None else as_float(value, what)


TASKS = [compare, bisect, bisect_run]

"""Secrets in URLs never reach the store, reports or exports; data in report.md stays text."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import run_fake
from markdown_it import MarkdownIt

from llamaforge.bench.export import export_run
from llamaforge.bench.plan import PointSpec, make_plan
from llamaforge.mdtext import md_code, md_text
from llamaforge.redact import redact_obj, redact_text, redact_url
from llamaforge.report import kinds, write_report
from llamaforge.store import Point, Probe, Sample, Store

SHA = "ab" * 32
PRESIGNED = ("https://user:pw_secret@cdn.example:8443/models/m.gguf?X-Amz-Credential=cred_secret"
             "&X-Amz-Signature=sig_secret")
SECRETS = ("pw_secret", "cred_secret", "sig_secret", "frag_secret", "tok_secret")
HOSTILE = "<script>alert(1)</script> [x](javascript:alert(1)) `<img src=x onerror=alert(1)>`"


def _clean(text: str) -> bool:
    return not any(s in text for s in SECRETS)


def test_redact_url_removes_credentials_query_and_fragment_but_keeps_our_hash():
    assert redact_url(PRESIGNED) == "https://REDACTED@cdn.example:8443/models/m.gguf?REDACTED"
    assert redact_url(f"https://h/m.gguf?a=1#sha256={SHA}") == f"https://h/m.gguf?REDACTED#sha256={SHA}"
    assert redact_url("https://h/m.gguf#frag_secret") == "https://h/m.gguf#REDACTED"
    assert redact_url("https://tok_secret@github.com/o/r.git") == "https://REDACTED@github.com/o/r.git"
    assert redact_url("https://h/a@b/m.gguf") == "https://h/a@b/m.gguf"            # '@' in the path is no userinfo
    for untouched in ("synth:tiny-qwen35moe", "hf:org/repo/m.gguf", "/models/what?.gguf", f"hf:o/r/f#sha256={SHA}"):
        assert redact_url(untouched) == untouched
    text = f"inv bench --model={PRESIGNED} --pins 'git:https://x:tok_secret@h/r.git' --ncmoe 0:4"
    assert redact_text(text) == ("inv bench --model=https://REDACTED@cdn.example:8443/models/m.gguf?REDACTED "
                                 "--pins 'git:https://REDACTED@h/r.git' --ncmoe 0:4")
    assert redact_obj({"a": [PRESIGNED, 3, None], "b": {"c": "https://h/x#frag_secret"}}) == \
        {"a": [redact_url(PRESIGNED), 3, None], "b": {"c": "https://h/x#REDACTED"}}


def test_plan_json_keeps_no_url_secret(tmp_path):
    plan = make_plan(model_ref=PRESIGNED, model_path=tmp_path / "m.gguf", model_facts={}, points=[PointSpec(0)])
    assert _clean(json.dumps(plan.to_json()))


def test_store_neither_keeps_nor_shows_url_secrets(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        run_id = store.new_run("sweep", {"model": {"ref": PRESIGNED, "path": "/m/m.gguf", "facts": {}},
                                         "pins": ["git:https://u:tok_secret@h/r.git"]},
                               command=f"llamaforge bench --model {PRESIGNED}#frag_secret")
        run = store.get_run(run_id)
        assert _clean(json.dumps([run.plan.to_json(), run.command]))
        assert run.plan.model.ref == redact_url(PRESIGNED)
    raw = sqlite3.connect(tmp_path / "s.sqlite").execute("SELECT command, plan_json FROM runs").fetchall()
    assert raw and _clean(json.dumps(raw))


def _write_raw(store, table: str, columns: dict[str, object], where: str, *args: object) -> None:
    """Write ``columns`` of ``table`` straight into the database, past the store's redaction (as versions
    before it did)."""
    sets = ", ".join(f"{c}=?" for c in columns)
    store.db.execute(f"UPDATE {table} SET {sets} WHERE {where}", (*columns.values(), *args))


def _report_and_exports(store, run_id: str, out: Path) -> dict[str, str]:
    """The run's report (``md``, ``html``) and every export (``json``, ``csv``, ``jsonl``), by name."""
    rp = write_report(store, run_id, out)
    return {"md": rp.md.read_text(), "html": rp.html.read_text(),
            **{fmt: export_run(store, run_id, fmt) for fmt in ("json", "csv", "jsonl")}}


@pytest.fixture
def old_store_with_secrets(tmp_path):
    """A run written before redaction existed: the secrets sit in the database itself."""
    store, run_id = run_fake.build(tmp_path)
    plan = store.get_run(run_id).plan.to_json()
    plan["model"]["ref"] = PRESIGNED + "#frag_secret"
    plan["fit"] = {}          # a real plan's shape (the fake's ``True`` is enough for reports, not for jsonl)
    _write_raw(store, "runs", {"plan_json": json.dumps(plan), "command": f"llamaforge bench --model '{PRESIGNED}'"},
               "id=?", run_id)
    yield store, run_id, tmp_path
    store.close()


def test_reports_and_exports_of_an_old_store_show_no_url_secret(old_store_with_secrets):
    store, run_id, tmp = old_store_with_secrets
    assert _clean(json.dumps([(r.plan.to_json(), r.command) for r in store.list_runs()]))
    texts = _report_and_exports(store, run_id, tmp / "out")
    assert [name for name, text in texts.items() if not _clean(text)] == []
    assert "cdn.example:8443/models/m.gguf" in texts["md"]     # redacted, not dropped


def _html_of(md: str) -> str:
    """report.md as GitHub-like renderers show it: raw HTML allowed, GFM tables."""
    return MarkdownIt("commonmark", {"html": True}).enable("table").render(md)


def _inert(html: str) -> bool:
    return "<script" not in html and "<img src=x" not in html and 'href="javascript:' not in html


def test_md_text_and_md_code_keep_html_and_markdown_inert():
    assert not _inert(_html_of(HOSTILE))                   # the hostile string is live when pasted raw
    assert _inert(_html_of(md_text(HOSTILE))) and _inert(_html_of("| a |\n|---|\n| " + md_text(HOSTILE) + " |"))
    for value in (HOSTILE, "a ``` b", "`x`", "a | b"):
        out = _html_of(f"| c |\n|---|\n| {md_code(value, in_table=True)} |")
        assert _inert(out) and out.count("<code>") == 1, (value, out)
    assert md_code("llama-server -m /m.gguf") == "`llama-server -m /m.gguf`"


def test_report_md_renders_hostile_run_names_model_paths_and_logs_as_text(tmp_path):
    store, run_id = run_fake.build(tmp_path)
    plan = store.get_run(run_id).plan.to_json()
    plan["model"]["ref"] = "/models/" + HOSTILE + ".gguf"
    store.db.execute("UPDATE runs SET name=?, plan_json=?, command=? WHERE id=?",
                     (HOSTILE, json.dumps(plan), "llamaforge bench --name '" + HOSTILE + "'", run_id))
    store.db.execute("UPDATE points SET failure_detail=?, log_tail=?, command_json=?",
                     (HOSTILE, HOSTILE, json.dumps(["llama-server", "-m", HOSTILE])))
    md = write_report(store, run_id, tmp_path / "out").md.read_text()
    html = (tmp_path / "out" / "report.html").read_text()
    store.close()
    assert "alert(1)" in md and _inert(_html_of(md))
    assert "alert(1)" in html and _inert(html)


def test_compare_and_bisect_markdown_keep_hostile_values_inert(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        side = {"ref": HOSTILE, "backend": HOSTILE, "commit": "c" * 40, "build": HOSTILE}
        cid = store.new_run("compare", {"model": {"ref": HOSTILE}, "engine": "server",
                                        "compare": {"A": side, "B": side, "repeats": 3, "rounds": 1}})
        store.set_run_summary(cid, {"comparisons": [], "min_effect": 0.05})
        bid = store.new_run("bisect", {"model": {"ref": HOSTILE}, "bisect": {"backend": HOSTILE, "metric": "tg"}})
        store.set_run_summary(bid, {"first_bad": "d" * 40, "subject": HOSTILE})
        for md in (kinds.compare.lead(store, store.get_run(cid)), kinds.bisect.lead(store, store.get_run(bid))):
            assert "alert(1)" in md and _inert(_html_of(md)), md


# ---- issue 22: every stored field, error messages and the HF_TOKEN value ------------------------
GIT_ORIGIN = "git:https://oauth2:tok_secret@gitlab.example/group/llama.cpp.git"
SIGNED = "https://bucket.example/x.tgz?X-Amz-Signature=sig_secret"
HF_VALUE = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"


def _hostile_text() -> str:
    return f"fetching {GIT_ORIGIN} ... {SIGNED} failed; token {HF_VALUE} rejected"


def _clean22(text: str) -> bool:
    return _clean(text) and HF_VALUE not in text and "oauth2:" not in text


def test_the_hf_token_value_is_redacted_wherever_it_appears_even_split_by_line_breaks(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", HF_VALUE)
    assert redact_text(f"Authorization: Bearer {HF_VALUE}") == "Authorization: Bearer REDACTED"
    assert redact_obj({"k": [f"x{HF_VALUE}y"]}) == {"k": ["xREDACTEDy"]}
    crlf = "hf_FirstLineOfTheToken\r\nX-Injected: SecondLineOfIt"
    monkeypatch.setenv("HF_TOKEN", crlf)
    for shown in (crlf, repr(crlf), "hf_FirstLineOfTheToken", "X-Injected: SecondLineOfIt"):
        out = redact_text(f"error: {shown}!")
        assert "FirstLine" not in out and "SecondLine" not in out, out
    monkeypatch.setenv("HF_TOKEN", "short")
    assert redact_text("a short word") == "a short word"      # too short to be a token: text stays readable


def test_error_messages_never_carry_url_secrets_or_the_token(monkeypatch, capsys):
    from llamaforge.console import print_error
    from llamaforge.errors import SourceError

    monkeypatch.setenv("HF_TOKEN", HF_VALUE)
    e = SourceError(_hostile_text(), f"retry {SIGNED}")
    assert _clean22(str(e)) and _clean22(e.message) and _clean22(e.fix)
    assert "gitlab.example/group/llama.cpp.git" in e.message        # redacted, not dropped
    print_error(e)
    assert _clean22(capsys.readouterr().err)


def _secret_point(run_id: str, key: str) -> Point:
    return Point(run_id, key, "server", ncmoe=0, status="failed", failure_class="crash",
                 failure_detail=_hostile_text(), log_tail=_hostile_text(), build_info=_hostile_text(),
                 command=["llama-server", "--model-url", SIGNED, "--hf-token", HF_VALUE],
                 detail={"why": _hostile_text()}, mem_breakdown={"note": SIGNED},
                 samples=[Sample(1, False, raw={"content": _hostile_text()})])


def test_store_keeps_no_secret_in_any_field_of_points_builds_probes_and_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", HF_VALUE)
    with Store(tmp_path / "s.sqlite") as store:
        run_id = store.new_run("sweep", {"model": {"ref": "synth:x"}}, env={"note": _hostile_text()})
        store.add_build({"key": "cpu-1", "backend": "cpu", "source": {"origin": GIT_ORIGIN}}, run_id)
        store.record_point(_secret_point(run_id, "cpu-1"))
        store.add_probe(Probe(run_id, 1, "c" * 40, subject=_hostile_text(), note=_hostile_text()))
        store.set_run_summary(run_id, {"error": _hostile_text()})
        got = (store.builds_for_run(run_id), store.get_build("cpu-1"), store.points(run_id), store.probes(run_id),
               store.get_run(run_id))
        assert _clean22(repr(got))
        assert store.get_build("cpu-1")["source"]["origin"] == "git:https://REDACTED@gitlab.example/group/llama.cpp.git"
    db = sqlite3.connect(tmp_path / "s.sqlite")
    dump = "\n".join(db.iterdump())
    assert "cpu-1" in dump and _clean22(dump)


@pytest.fixture
def old_store_with_secret_points(tmp_path, monkeypatch):
    """Points and builds written before they were redacted: the secrets sit in the database itself."""
    monkeypatch.setenv("HF_TOKEN", HF_VALUE)
    (tmp_path / "results").mkdir()
    store, run_id = run_fake.build(tmp_path, db="results/llamaforge.sqlite")
    cmd = json.dumps(["llama-server", "--model-url", SIGNED, "--hf-token", HF_VALUE])
    _write_raw(store, "points", {"failure_detail": _hostile_text(), "log_tail": _hostile_text(), "command_json": cmd},
               "status='failed'")
    manifest = store.builds_for_run(run_id)[0] | {"source": {"origin": GIT_ORIGIN}}
    _write_raw(store, "builds", {"manifest_json": json.dumps(manifest)}, "key=?", manifest["key"])
    raw = "\n".join(store.db.iterdump())
    assert not _clean22(raw)          # the secrets really are in the file
    yield store, run_id, tmp_path
    store.close()


def test_reports_exports_and_runs_failed_of_an_old_store_show_no_secret(old_store_with_secret_points):
    import os
    import subprocess
    import sys

    store, run_id, tmp = old_store_with_secret_points
    texts = _report_and_exports(store, run_id, tmp / "out")
    assert [name for name, text in texts.items() if not _clean22(text)] == []
    env = {**os.environ, "LLAMAFORGE_WORKSPACE": str(tmp), "LLAMAFORGE_RESULTS": str(tmp / "results"),
           "COLUMNS": "400"}
    r = subprocess.run([sys.executable, "-m", "llamaforge", "runs", "--run", run_id, "--failed"], cwd=tmp, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "bucket.example/x.tgz" in r.stdout and _clean22(r.stdout + r.stderr)


def test_an_imported_source_commit_in_the_mirror_keeps_no_url_secret(tmp_path):
    from llamaforge.sources.mirror import Mirror

    root = tmp_path / "tree"
    root.mkdir()
    (root / "CMakeLists.txt").write_text("x\n")
    m = Mirror(tmp_path / "m.git")
    sha = m.import_tree(root, "1234567abc", f"tarball:{SIGNED}", f"fetched from {GIT_ORIGIN[4:]}")
    message = m.git(["cat-file", "commit", sha]).output
    assert "origin: tarball:https://bucket.example/x.tgz?REDACTED" in message and _clean22(message)

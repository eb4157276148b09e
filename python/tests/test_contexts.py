"""Code contexts in the driver: independent namespaces and Bash sessions in one process, spoken
to over the real protocol (context_create / context_restart / context_delete, and the execute
frame's "context" field)."""

from __future__ import annotations

import base64
import textwrap
import uuid

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def code(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def run_in(driver, context, source: str, language: str = "python"):
    """Runs a cell in a context (None: no "context" field, i.e. the default one)."""
    driver.pending.clear()
    exec_id = uuid.uuid4().hex
    message = {"type": "execute", "id": exec_id, "code": source, "language": language}
    if context is not None:
        message["context"] = context
    driver.send(message)
    return driver.collect(exec_id)


def context_op(driver, kind: str, context) -> dict:
    driver.pending.clear()
    driver.send({"type": f"context_{kind}", "context": context})
    frame = driver.next_frame()
    assert frame["type"] == "context_done", frame
    assert frame["context"] == context
    return frame


def text_result(execution) -> str:
    assert execution.status == "ok", (execution.error, execution.stderr)
    return execution.result["data"]["text/plain"]


def test_variables_imports_and_functions_do_not_leak(driver):
    assert context_op(driver, "create", "ctx_a")["ok"] is True
    assert context_op(driver, "create", "ctx_b")["ok"] is True
    run_in(driver, None, "x = 'default'\nimport json\ndef f(): return 'default f'")
    run_in(driver, "ctx_a", "x = 'a'\nimport fractions\ndef f(): return 'a f'")
    assert text_result(run_in(driver, "ctx_b", "'x' in dir(), 'json' in dir(), 'f' in dir()")) \
        == "(False, False, False)"
    assert text_result(run_in(driver, "ctx_a", "x, f(), 'json' in dir(), 'fractions' in dir()")) \
        == "('a', 'a f', False, True)"
    assert text_result(run_in(driver, None, "x, f(), 'fractions' in dir()")) \
        == "('default', 'default f', False)"
    assert text_result(run_in(driver, "default", "x")) == "'default'"
    failed = run_in(driver, "ctx_b", "x")
    assert failed.status == "error"
    assert failed.error["name"] == "NameError"


def test_execution_counter_and_output_history_are_per_context(driver):
    context_op(driver, "create", "ctx_a")
    for _ in range(3):
        run_in(driver, None, "1 + 1")
    first = run_in(driver, "ctx_a", "40 + 2")
    assert first.result["execution_count"] == 1
    assert text_result(run_in(driver, "ctx_a", "_ , Out[1], len(In)")) == "(42, 42, 3)"
    assert text_result(run_in(driver, None, "_, sorted(Out), _i1")) == "(2, [1, 2, 3], '1 + 1')"
    again = run_in(driver, "ctx_a", "_2")
    assert again.result["execution_count"] == 3
    assert text_result(again) == "(42, 42, 3)"


def test_who_tracebacks_display_and_figures_in_a_new_context(driver):
    context_op(driver, "create", "ctx_plot")
    run_in(driver, None, "default_only = 1")
    who = run_in(driver, "ctx_plot", "alpha = 1\nbeta = 2\n%who")
    assert who.status == "ok"
    assert who.stdout.split() == ["alpha", "beta"]
    failed = run_in(driver, "ctx_plot", code("""
        def inner():
            raise ValueError("from the context")
        inner()
    """))
    assert failed.error["name"] == "ValueError"
    joined = "\n".join(failed.error["traceback"])
    assert "inner()" in joined and "from the context" in joined
    assert "driver.py" not in joined
    shown = run_in(driver, "ctx_plot", code("""
        import matplotlib.pyplot as plt
        from IPython.display import display, HTML
        display(HTML("<b>hi</b>"))
        plt.plot([1, 2, 3])
        plt.show()
        plt.figure(); plt.plot([3, 2, 1])
    """))
    assert shown.status == "ok", shown.stderr
    displays = shown.of_type("display_data")
    assert displays[0]["data"]["text/html"] == "<b>hi</b>"
    pngs = [base64.b64decode(d["data"]["image/png"]) for d in displays[1:]]
    assert len(pngs) == 2
    assert all(png.startswith(PNG_MAGIC) for png in pngs)
    # The default context did not get the context's import.
    assert text_result(run_in(driver, None, "'plt' in dir(), default_only")) == "(False, 1)"


def test_contexts_share_the_filesystem_and_the_process(driver):
    context_op(driver, "create", "ctx_w")
    run_in(driver, "ctx_w", "open('shared.txt', 'w').write('from ctx_w')")
    assert text_result(run_in(driver, None, "open('shared.txt').read()")) == "'from ctx_w'"
    assert text_result(run_in(driver, "ctx_w", "import os; os.getpid()")) == \
        text_result(run_in(driver, None, "import os; os.getpid()"))


def test_pickle_finds_classes_of_the_running_context(driver):
    context_op(driver, "create", "ctx_p")
    source = code("""
        import pickle
        class Point:
            def __init__(self, x): self.x = x
        pickle.loads(pickle.dumps(Point(3))).x
    """)
    assert text_result(run_in(driver, "ctx_p", source)) == "3"
    assert text_result(run_in(driver, None, source)) == "3"


def test_each_context_has_its_own_bash_session(driver, tmp_path):
    context_op(driver, "create", "ctx_sh")
    (tmp_path / "sub").mkdir()
    assert run_in(driver, "ctx_sh", f"cd {tmp_path}/sub; V=ctx", "bash").status == "ok"
    assert run_in(driver, None, "V=default", "bash").status == "ok"
    here = run_in(driver, "ctx_sh", "pwd; echo $V", "bash")
    assert here.stdout.split() == [f"{tmp_path}/sub", "ctx"]
    there = run_in(driver, None, "pwd; echo $V", "bash")
    assert there.stdout.split() == [str(driver.workdir), "default"]


def test_restart_clears_a_context_and_its_bash_session(driver):
    context_op(driver, "create", "ctx_r")
    run_in(driver, "ctx_r", "kept = 1")
    run_in(driver, "ctx_r", "V=before", "bash")
    run_in(driver, None, "other = 2")
    assert context_op(driver, "restart", "ctx_r")["ok"] is True
    gone = run_in(driver, "ctx_r", "kept")
    assert gone.error["name"] == "NameError"
    assert run_in(driver, "ctx_r", "echo \"[$V]\"", "bash").stdout == "[]\n"
    assert text_result(run_in(driver, None, "other")) == "2"
    # Restarting the context that is active (ctx_r ran last) works the same way.
    run_in(driver, "ctx_r", "kept = 3")
    assert context_op(driver, "restart", "ctx_r")["ok"] is True
    assert run_in(driver, "ctx_r", "kept").error["name"] == "NameError"
    counted = run_in(driver, "ctx_r", "1")
    assert counted.result["execution_count"] == 2  # the failed cell counted too


def test_restart_default_gives_a_fresh_namespace(driver):
    context_op(driver, "create", "ctx_keep")
    run_in(driver, "ctx_keep", "mine = 'kept'")
    run_in(driver, None, "lost = 1")
    assert context_op(driver, "restart", "default")["ok"] is True
    assert run_in(driver, None, "lost").error["name"] == "NameError"
    assert run_in(driver, None, "1").result["execution_count"] == 2
    assert text_result(run_in(driver, "ctx_keep", "mine")) == "'kept'"


def test_delete_and_unknown_contexts(driver):
    context_op(driver, "create", "ctx_d")
    run_in(driver, "ctx_d", "x = 1")
    assert context_op(driver, "delete", "ctx_d")["ok"] is True
    missing = run_in(driver, "ctx_d", "x")
    assert missing.status == "error"
    assert missing.error["name"] == "ValueError"
    assert "no context 'ctx_d'" in missing.error["value"]
    bash_missing = run_in(driver, "nope", "echo hi", "bash")
    assert bash_missing.status == "error" and bash_missing.stdout == ""
    for kind in ("restart", "delete"):
        answer = context_op(driver, kind, "nope")
        assert answer["ok"] is False and "no context" in answer["error"]
    refused = context_op(driver, "delete", "default")
    assert refused["ok"] is False and "default" in refused["error"]
    context_op(driver, "create", "ctx_e")
    duplicate = context_op(driver, "create", "ctx_e")
    assert duplicate["ok"] is False and "already exists" in duplicate["error"]
    driver.pending.clear()
    driver.send({"type": "context_create", "context": 5})
    assert driver.next_frame()["ok"] is False
    # The driver is fine afterwards, and a deleted name can be created again, empty.
    assert text_result(run_in(driver, None, "1 + 1")) == "2"
    assert context_op(driver, "create", "ctx_d")["ok"] is True
    assert run_in(driver, "ctx_d", "x").error["name"] == "NameError"


def test_deleting_the_active_context_falls_back_to_default(driver):
    context_op(driver, "create", "ctx_x")
    run_in(driver, None, "base = 'default'")
    run_in(driver, "ctx_x", "base = 'x'")
    run_in(driver, "ctx_x", "sleep 30 &", "bash")
    assert context_op(driver, "delete", "ctx_x")["ok"] is True
    assert text_result(run_in(driver, None, "base")) == "'default'"


def test_template_setup_names_are_in_every_fresh_context(make_driver):
    script = code("""
        import sys
        from sandlot_runtime import driver
        driver.prepare("import math\\nfrom_setup = 41")
        driver.main(int(sys.argv[1]))
    """)
    driver = make_driver(script=script)
    context_op(driver, "create", "ctx_t")
    assert text_result(run_in(driver, "ctx_t", "from_setup + 1, math.pi > 3")) == "(42, True)"
    run_in(driver, None, "from_setup = 0")
    context_op(driver, "restart", "default")
    assert text_result(run_in(driver, None, "from_setup")) == "41"


def test_each_context_works_in_its_own_directory(make_driver, tmp_path):
    driver = make_driver()
    (tmp_path / "there").mkdir()
    driver.pending.clear()
    driver.send({"type": "context_create", "context": "c1", "cwd": str(tmp_path / "there")})
    assert driver.next_frame()["ok"] is True
    here = "import os; os.getcwd()"
    assert text_result(run_in(driver, "c1", here)) == repr(str(tmp_path / "there"))
    assert text_result(run_in(driver, None, here)) == repr(str(driver.workdir))
    # A move stays in its context, in Python and in its Bash session.
    run_in(driver, "c1", "os.chdir('/')")
    assert run_in(driver, "c1", "pwd", "bash").stdout == "/\n"
    assert text_result(run_in(driver, None, here)) == repr(str(driver.workdir))
    assert run_in(driver, None, "pwd", "bash").stdout == f"{driver.workdir}\n"
    assert text_result(run_in(driver, "c1", here)) == "'/'"
    # A restart starts it again where it was created to work.
    assert context_op(driver, "restart", "c1")["ok"] is True
    assert text_result(run_in(driver, "c1", "import os; os.getcwd()")) == \
        repr(str(tmp_path / "there"))


def test_a_context_cwd_that_is_no_directory_is_refused(make_driver, tmp_path):
    driver = make_driver()
    (tmp_path / "file").write_text("x")
    for cwd, says in [("relative", "absolute"), (str(tmp_path / "missing"), "not a directory"),
                      (str(tmp_path / "file"), "not a directory"), ("/a\0b", "absolute"),
                      (5, "absolute")]:
        driver.pending.clear()
        driver.send({"type": "context_create", "context": "bad", "cwd": cwd})
        frame = driver.next_frame()
        assert frame["ok"] is False and says in frame["error"], (cwd, frame)
    assert context_op(driver, "delete", "bad")["ok"] is False  # none was made


def test_the_creators_workdir_is_where_code_starts(make_driver, tmp_path):
    driver = make_driver()
    (tmp_path / "home").mkdir()
    driver.send({"type": "env", "env": {}, "workdir": str(tmp_path / "home")})
    assert text_result(run_in(driver, None, "import os; os.getcwd()")) == \
        repr(str(tmp_path / "home"))
    assert run_in(driver, None, "pwd", "bash").stdout == f"{tmp_path / 'home'}\n"
    # New contexts start there too; a workdir that is not a directory is ignored.
    assert context_op(driver, "create", "c2")["ok"] is True
    assert text_result(run_in(driver, "c2", "import os; os.getcwd()")) == \
        repr(str(tmp_path / "home"))
    driver.send({"type": "env", "env": {}, "workdir": str(tmp_path / "nope")})
    assert text_result(run_in(driver, None, "import os; os.getcwd()")) == \
        repr(str(tmp_path / "home"))

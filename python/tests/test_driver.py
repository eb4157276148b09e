"""The driver, spoken to over its real protocol (see conftest.py for the client)."""

from __future__ import annotations

import base64
import os
import textwrap
import time


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def code(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def assert_no_driver_frames(traceback: list[str]) -> None:
    text = "\n".join(traceback)
    assert "driver.py" not in text
    assert "sandlot_runtime" not in text  # none of the driver's modules either
    assert "interactiveshell.py" not in text


# ---------------------------------------------------------------------------------------------
# Start-up and prepare()
# ---------------------------------------------------------------------------------------------


def test_hello_names_the_python_version(driver):
    assert driver.hello["type"] == "hello"
    assert driver.hello["python"].count(".") == 2
    assert "id" not in driver.hello


def test_prepare_starts_no_thread_and_runs_setup_code(python_process, tmp_path):
    script = code("""
        import os, threading, time
        started = time.monotonic()
        from sandlot_runtime import driver
        driver.prepare("import numpy as np\\ndataset = np.arange(5)")
        elapsed = time.monotonic() - started
        shell = driver.state.shell
        print(threading.active_count(), len(os.listdir("/proc/self/task")),
              shell.user_ns["dataset"].tolist(), f"{elapsed:.2f}")
    """)
    out = python_process(script, home=tmp_path)
    assert out.returncode == 0, out.stderr
    python_threads, native_threads, dataset, _seconds = out.stdout.split(" ", 3)
    assert (python_threads, native_threads) == ("1", "1")
    assert dataset == "[0,"
    assert os.listdir(tmp_path) == []  # nothing written to HOME


def test_prepare_reports_failing_setup_code(python_process, tmp_path):
    script = "from sandlot_runtime import driver; driver.prepare('x = 1\\nundefined_name')"
    out = python_process(script, home=tmp_path)
    assert out.returncode != 0
    assert "setup code failed: NameError" in out.stderr
    assert "undefined_name" in out.stderr


ZYGOTE_LIKE = code("""
    # What the zygote does: prepare, then fork a child that becomes the driver.
    import os, sys
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    import numpy as np
    from sandlot_runtime import driver
    driver.prepare("print('zygote setup output')\\nloaded = [1, 2, 3]")
    sys.stdout.write("unflushed zygote output")  # must not reach the sandbox's stdout
    state = np.random.get_state()
    driver.state.shell.user_ns["zygote_next"] = np.random.rand()
    np.random.set_state(state)
    pid = os.fork()
    if pid == 0:
        driver.main(int(sys.argv[1]))
    os.close(int(sys.argv[1]))
    sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
""")


def test_fork_after_prepare(make_driver):
    driver = make_driver(script=ZYGOTE_LIKE)
    first = driver.run("import numpy as np\nprint(loaded)\nnp.random.rand() != zygote_next")
    assert first.status == "ok", first.events
    assert first.stdout == "[1, 2, 3]\n"
    assert first.result["data"]["text/plain"] == "True"  # numpy reseeded in the child
    assert driver.run("echo child-bash", language="bash").stdout == "child-bash\n"
    assert driver.close() == 0


def test_prepare_imports_every_driver_module(make_driver):
    # The zygote imports the driver before it forks: no sandbox may pay for loading a module.
    script = code("""
        import sys
        from sandlot_runtime import driver
        driver.prepare()
        driver.state.shell.user_ns["at_prepare"] = {m for m in sys.modules
                                                    if m.startswith("sandlot_runtime.")}
        driver.main(int(sys.argv[1]))
    """)
    driver = make_driver(script=script)
    execution = driver.run(code("""
        import os, sandlot_runtime
        files = os.listdir(os.path.dirname(sandlot_runtime.__file__))
        modules = {"sandlot_runtime." + f[:-3] for f in files if f.endswith(".py")}
        not_loaded = modules - at_prepare - {"sandlot_runtime.__init__", "sandlot_runtime.zygote"}
        sorted(not_loaded), len(modules)
    """))
    assert execution.status == "ok", execution.events
    missing, count = eval(execution.result["data"]["text/plain"])
    assert count > 10  # the package was found, split into its modules
    assert missing == []


def test_ipython_writes_nothing_to_home_or_ipythondir(make_driver, tmp_path):
    ipython_dir = tmp_path / "no-such-ipython-dir"
    driver = make_driver(IPYTHONDIR=str(ipython_dir))
    assert driver.run("x = 1\nx").status == "ok"
    assert driver.run("1/0").status == "error"
    assert driver.run("%timeit -n1 -r1 pass").status == "ok"
    assert os.listdir(driver.home) == []
    assert not ipython_dir.exists()


def test_closing_the_control_stream_ends_the_driver(driver):
    assert driver.run("x = 1").status == "ok"
    assert driver.close() == 0


# ---------------------------------------------------------------------------------------------
# Python: state, results, rich output
# ---------------------------------------------------------------------------------------------


def test_state_persists_across_cells(shared, tmp_path):
    setup = shared.run(code(f"""
        import json as j
        counter = 41
        def bump(n):
            return n + 1
        import os
        os.chdir({str(tmp_path)!r})
    """))
    assert setup.status == "ok", setup.events
    again = shared.run("(bump(counter), j.dumps([1]), os.getcwd())")
    assert again.result["data"]["text/plain"] == repr((42, "[1]", str(tmp_path)))


def test_last_expression_is_the_result(shared):
    execution = shared.run("a = 6\na * 7")
    assert execution.status == "ok"
    assert execution.result["data"] == {"text/plain": "42"}
    assert execution.result["execution_count"] >= 1
    assert execution.done["exit_code"] is None


def test_scalar_results_respect_printers_users_register(driver):
    # Builtin scalars skip the rich formatters, unless a printer was registered for the type.
    assert driver.run("'x' * 3").result["data"] == {"text/plain": "'xxx'"}
    assert driver.run("None").result is None
    execution = driver.run(
        "f = get_ipython().display_formatter.formatters['text/html']\n"
        "f.for_type(int, lambda n: f'<b>{n}</b>')\n"
        "20 + 22")
    assert execution.result["data"] == {"text/plain": "42", "text/html": "<b>42</b>"}
    execution = driver.run("get_ipython().display_formatter.formatters['text/plain'].for_type("
                           "float, lambda x, p, cycle: p.text('about %.0f' % x))\n2.4")
    assert execution.result["data"] == {"text/plain": "about 2"}


def test_no_result_for_statements_or_a_trailing_semicolon(shared):
    assert shared.run("b = 1").result is None
    assert shared.run("b + 1;").result is None


def test_display_is_ordered_with_prints(shared):
    execution = shared.run("print('a')\ndisplay(1)\nprint('b')\n2")
    assert execution.timeline() == [("stdout", "a\n"), "display_data", ("stdout", "b\n"),
                                    "result", "done"]
    assert execution.of_type("display_data")[0]["data"] == {"text/plain": "1"}


def test_dataframe_result_has_html(shared):
    execution = shared.run("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
    data = execution.result["data"]
    assert "<table" in data["text/html"]
    assert "a" in data["text/plain"] and "b" in data["text/plain"]


def test_rich_mime_types_come_back_jupyter_style(shared):
    execution = shared.run(code("""
        from IPython.display import HTML, Markdown, Latex, SVG, JSON, Javascript
        import numpy as np
        class Pic:
            def _repr_png_(self):
                return b"\\x89PNG\\r\\n\\x1a\\nfake"
        display(HTML("<b>x</b>"), Markdown("# t"), Latex("$x$"),
                SVG('<svg xmlns="http://www.w3.org/2000/svg"></svg>'),
                JSON({"n": 1, "nan": float("nan")}), Javascript("1"), Pic())
        display({"application/json": {"v": np.int64(3), "arr": np.arange(2)}}, raw=True)
    """))
    assert execution.status == "ok", execution.events
    bundles = [d["data"] for d in execution.of_type("display_data")]
    assert bundles[0]["text/html"] == "<b>x</b>"
    assert bundles[1]["text/markdown"] == "# t"
    assert bundles[2]["text/latex"] == "$x$"
    assert bundles[3]["image/svg+xml"].startswith("<svg")
    assert bundles[4]["application/json"] == {"n": 1, "nan": "nan"}
    assert bundles[5]["application/javascript"] == "1"
    assert base64.b64decode(bundles[6]["image/png"]) == b"\x89PNG\r\n\x1a\nfake"
    assert bundles[7]["application/json"] == {"v": 3, "arr": [0, 1]}


def test_two_figures_become_two_pngs_in_order(shared):
    execution = shared.run(code("""
        import matplotlib.pyplot as plt
        print("before")
        plt.plot([1, 2, 3])
        plt.show()
        print("between")
        plt.figure()
        plt.plot([3, 2, 1])
        print("after")
    """))
    assert execution.status == "ok", execution.events
    assert execution.timeline() == [("stdout", "before\n"), "display_data",
                                    ("stdout", "between\nafter\n"), "display_data", "done"]
    for frame in execution.of_type("display_data"):
        png = base64.b64decode(frame["data"]["image/png"], validate=True)
        assert png.startswith(PNG_MAGIC)
        assert len(png) > 1000


def test_figures_left_open_are_shown_once(shared):
    first = shared.run("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
                       "ax.plot([1, 2]);")
    assert len(first.of_type("display_data")) == 1
    assert shared.run("1").of_type("display_data") == []  # closed after being shown


def test_a_figure_that_fails_to_render_reports_on_stderr(shared):
    execution = shared.run(code(r"""
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots()
        ax.set_title(r"$\frac{$")
        print("after")
    """))
    assert execution.status == "ok"
    assert "after" in execution.stdout
    assert "Traceback" in execution.stderr
    following = shared.run("plt.plot([1]);")
    assert "image/png" in following.of_type("display_data")[0]["data"]


def test_broken_reprs_do_not_kill_the_cell(shared):
    execution = shared.run(code("""
        class BadHtml:
            def _repr_html_(self):
                raise ValueError("boom in html")
            def __repr__(self):
                return "BadHtml()"
        class BadRepr:
            def __repr__(self):
                raise RuntimeError("boom in repr")
        display(BadHtml())
        display(BadRepr())
        print("still running")
        BadHtml()
    """))
    assert execution.status == "ok"
    assert "still running" in execution.stdout
    assert execution.of_type("display_data")[0]["data"] == {"text/plain": "BadHtml()"}
    assert execution.of_type("display_data")[1]["data"]["text/plain"].startswith("<BadRepr object")
    assert execution.result["data"] == {"text/plain": "BadHtml()"}
    assert "boom in html" in execution.stderr and "boom in repr" in execution.stderr
    assert execution.error is None


def test_strings_that_json_cannot_carry_are_made_safe(shared):
    execution = shared.run(code(r"""
        display({"text/plain": "nul\x00 lone\udc80 pair\ud83d\ude00"}, raw=True)
        print("lone\udcff surrogate")
        "\ud800"
    """))
    assert execution.status == "ok", execution.events
    text = execution.of_type("display_data")[0]["data"]["text/plain"]
    assert text == "nul\x00 lone\\udc80 pair\U0001f600"
    assert "lone\\udcff surrogate" in execution.stdout
    assert execution.result["data"]["text/plain"] == repr("\ud800")


# ---------------------------------------------------------------------------------------------
# Python: errors
# ---------------------------------------------------------------------------------------------


def test_traceback_points_at_user_code(shared):
    shared.run(code("""
        def inner(x):
            return 1 / x

        def outer():
            return inner(0)
    """))
    execution = shared.run("outer()")
    assert execution.status == "error"
    error = execution.error
    assert (error["name"], error["value"]) == ("ZeroDivisionError", "division by zero")
    text = "\n".join(error["traceback"])
    assert "Cell In[" in text
    assert "return 1 / x" in text and "return inner(0)" in text
    assert "\x1b[" not in text  # plain text, no colours
    assert_no_driver_frames(error["traceback"])
    assert execution.timeline()[-2:] == ["error", "done"]


def test_syntax_error_has_a_traceback(shared):
    execution = shared.run("x = (1,\ny = 2 +")
    assert execution.status == "error"
    assert execution.error["name"] == "SyntaxError"
    assert "Cell In[" in "\n".join(execution.error["traceback"])


def test_exception_group_has_a_plain_traceback(shared):
    execution = shared.run("raise ExceptionGroup('several', [ValueError('one'), KeyError('two')])")
    assert execution.status == "error"
    assert execution.error["name"] == "ExceptionGroup"
    text = "".join(execution.error["traceback"])
    assert "ValueError: one" in text and "KeyError: 'two'" in text
    assert_no_driver_frames(execution.error["traceback"])
    assert execution.stderr == ""


def test_usage_error_is_reported(shared):
    execution = shared.run("%no_such_magic")
    assert execution.status == "error"
    assert execution.error["name"] == "UsageError"


def test_system_exit_does_not_end_the_driver(shared):
    for statement in ("exit()", "quit()", "exit", "import sys; sys.exit(3)", "raise SystemExit"):
        execution = shared.run(statement)
        assert execution.status == "error", statement
        assert execution.error["name"] == "SystemExit", statement
    assert shared.run("import sys; sys.exit(3)").error["value"] == "3"
    assert shared.run("40 + 2").result["data"]["text/plain"] == "42"


# ---------------------------------------------------------------------------------------------
# Python: interrupts
# ---------------------------------------------------------------------------------------------


def test_interrupt_stops_the_cell_and_keeps_state(driver):
    driver.run("kept = 'still here'")
    exec_id = driver.start("import time\nprint('started', flush=True)\ntime.sleep(30)\n"
                           "print('not reached')")
    driver.wait_for_stdout("started")
    driver.interrupt()
    execution = driver.collect(exec_id, timeout=20)  # well before the 30 s sleep would end
    assert execution.status == "interrupted"
    assert execution.error["name"] == "KeyboardInterrupt"
    assert "time.sleep(30)" in "\n".join(execution.error["traceback"])
    assert_no_driver_frames(execution.error["traceback"])
    assert "not reached" not in execution.stdout
    assert driver.run("kept").result["data"]["text/plain"] == "'still here'"


def test_sigint_while_idle_is_ignored(driver):
    driver.run("value = 7")
    for _ in range(3):
        driver.interrupt()
        time.sleep(0.1)
    assert driver.proc.poll() is None
    execution = driver.run("value")
    assert execution.status == "ok"
    assert execution.result["data"]["text/plain"] == "7"


def test_interrupt_never_cuts_a_frame(driver):
    exec_id = driver.start("print('started', flush=True)\nfor i in range(10**7):\n"
                           "    display({'text/plain': 'x' * 2000}, raw=True)")
    driver.wait_for_stdout("started")
    time.sleep(0.3)
    driver.interrupt()
    execution = driver.collect(exec_id, timeout=20)  # every frame decoded, so none was cut
    assert execution.status == "interrupted"
    assert driver.run("1").status == "ok"


def test_interrupt_a_shell_escape(driver):
    exec_id = driver.start("print('started', flush=True)\n!sleep 30")
    driver.wait_for_stdout("started")
    driver.interrupt()
    assert driver.collect(exec_id, timeout=10).status == "interrupted"


# ---------------------------------------------------------------------------------------------
# Python: output at the fd level, and user code that breaks its streams
# ---------------------------------------------------------------------------------------------


def test_output_of_subprocesses_and_c_level_writes_is_captured(shared):
    execution = shared.run(code("""
        import os, sys
        print("py", flush=True)
        os.system("echo from-os-system")
        os.write(1, b"raw-fd-write\\n")
        os.write(2, b"raw-fd-err\\n")
        !echo from-bang
    """))
    assert execution.status == "ok", execution.events
    stdout = execution.stdout
    for text in ("py", "from-os-system", "raw-fd-write", "from-bang"):
        assert text in stdout
    assert "raw-fd-err" in execution.stderr
    assert stdout.index("py") < stdout.index("from-os-system") < stdout.index("raw-fd-write")


def test_invalid_utf8_on_stdout_breaks_nothing(shared):
    execution = shared.run("import os\nos.write(1, b'bad \\xff\\xfe bytes\\n')\nprint('fine')")
    assert execution.status == "ok"
    assert "fine" in execution.stdout
    assert shared.run("print('next')").stdout == "next\n"


def test_ipython_conveniences(shared):
    timeit = shared.run("%timeit -n1 -r1 sum(range(10))")
    assert timeit.status == "ok" and "loop" in timeit.stdout
    bash_magic = shared.run("%%bash\necho from-bash-magic")
    assert "from-bash-magic" in bash_magic.stdout


def test_stdin_is_empty(shared):
    execution = shared.run("input()")
    assert execution.error["name"] == "EOFError"


def test_replaced_or_closed_streams_are_restored(driver):
    driver.run("import os, sys\nsys.stdout = open(os.devnull, 'w')")
    assert "back" in driver.run("print('back')").stdout
    driver.run("sys.stdout.close()")
    assert "again" in driver.run("print('again')").stdout
    driver.run("os.close(1)")
    assert "reopened" in driver.run("print('reopened')").stdout
    driver.run("fd = os.open(os.devnull, os.O_WRONLY)\nos.dup2(fd, 2)")
    assert "err-back" in driver.run("import sys\nprint('err-back', file=sys.stderr)").stderr


def test_a_forked_child_does_not_take_over_the_driver(shared):
    execution = shared.run("import os\npid = os.fork()\nif pid == 0:\n    print('child')\n"
                           "else:\n    os.waitpid(pid, 0)\n    print('parent')")
    assert execution.status == "ok"
    assert "child" in execution.stdout and "parent" in execution.stdout
    assert shared.run("1 + 1").result["data"]["text/plain"] == "2"


def test_malformed_frames_and_unknown_languages(driver):
    driver.server_sock.sendall((5).to_bytes(4, "little") + b"nope!")
    driver.send({"type": "unknown"})
    bad = driver.run("x", language="cobol")
    assert bad.status == "error" and "cobol" in bad.error["value"]
    assert driver.run("1 + 1").result["data"]["text/plain"] == "2"


# ---------------------------------------------------------------------------------------------
# Bash
# ---------------------------------------------------------------------------------------------


def test_bash_session_keeps_cwd_variables_and_functions(shared, tmp_path):
    first = shared.run(f"cd {tmp_path}\nexport EXPORTED=e1\nPLAIN=p1\ngreet() {{ echo hi-$1; }}",
                       language="bash")
    assert first.status == "ok" and first.done["exit_code"] == 0
    second = shared.run('echo "$PWD|$EXPORTED|$PLAIN"; greet you', language="bash")
    assert second.stdout == f"{tmp_path}|e1|p1\nhi-you\n"


def test_bash_exit_code(shared):
    failed = shared.run("echo out; echo err >&2; false", language="bash")
    assert (failed.status, failed.done["exit_code"]) == ("error", 1)
    assert (failed.stdout, failed.stderr) == ("out\n", "err\n")
    assert shared.run("true", language="bash").done["exit_code"] == 0


def test_bash_syntax_error_keeps_the_session(shared):
    shared.run("KEEP=yes", language="bash")
    broken = shared.run("if then fi", language="bash")
    assert broken.status == "error" and broken.done["exit_code"] == 2
    assert "syntax error" in broken.stderr
    assert shared.run("echo $KEEP", language="bash").stdout == "yes\n"


def test_bash_reads_no_stdin(shared):
    execution = shared.run("cat; read line; echo rc=$?", language="bash")
    assert execution.stdout == "rc=1\n"


def test_bash_exit_ends_the_session_and_the_next_cell_starts_a_new_one(driver):
    driver.run("LOST=1", language="bash")
    exited = driver.run("echo bye; exit 3", language="bash")
    assert (exited.status, exited.done["exit_code"]) == ("error", 3)
    assert "bye" in exited.stdout
    assert "bash session exited" in exited.stderr
    fresh = driver.run('echo "new:${LOST:-unset}"', language="bash")
    assert (fresh.status, fresh.stdout) == ("ok", "new:unset\n")
    assert "bash session exited" not in fresh.stderr


def test_bash_interrupt_stops_the_command_and_keeps_the_session(driver, tmp_path):
    driver.run(f"cd {tmp_path}; export KEPT=k; LOCAL=l", language="bash")
    exec_id = driver.start("echo started; sleep 30; echo not-reached", language="bash")
    driver.wait_for_stdout("started")
    driver.interrupt()
    execution = driver.collect(exec_id, timeout=20)  # well before the 30 s sleep would end
    assert execution.status == "interrupted"
    assert "not-reached" not in execution.stdout
    after = driver.run('echo "$PWD $KEPT $LOCAL"', language="bash")
    assert (after.status, after.stdout) == ("ok", f"{tmp_path} k l\n")


def test_bash_interrupt_stops_a_loop(driver):
    exec_id = driver.start("echo started; while true; do :; done; echo not-reached",
                           language="bash")
    driver.wait_for_stdout("started")
    driver.interrupt()
    execution = driver.collect(exec_id, timeout=10)
    assert execution.status == "interrupted"
    assert "not-reached" not in execution.stdout
    assert driver.run("echo alive", language="bash").stdout == "alive\n"


def test_python_and_bash_cells_interleave(shared):
    assert shared.run("echo from-bash", language="bash").stdout == "from-bash\n"
    assert shared.run("print('from-python')").stdout == "from-python\n"
    assert shared.run("echo again", language="bash").stdout == "again\n"


# ---------------------------------------------------------------------------------------------
# Workspace changes in the done frame
# ---------------------------------------------------------------------------------------------


def test_done_lists_created_and_modified_files(driver):
    first = driver.run(code("""
        import os
        os.makedirs("out", exist_ok=True)
        with open("out/report.csv", "w") as f:
            f.write("a,b\\n1,2\\n")
        with open("keep.txt", "w") as f:
            f.write("x")
    """))
    assert first.status == "ok", first.stderr
    assert first.done["changes"] == [
        {"path": "keep.txt", "size": 1, "change": "created"},
        {"path": "out/report.csv", "size": 8, "change": "created"},
    ]
    assert "changes_truncated" not in first.done
    # Same size, right after the last write: caught by the checksum of racy files.
    second = driver.run("open('keep.txt', 'w').write('y')")
    assert second.done["changes"] == [{"path": "keep.txt", "size": 1, "change": "modified"}]
    assert driver.run("x = 1").done["changes"] == []
    third = driver.run("echo hi >> keep.txt; rm out/report.csv", language="bash")
    assert third.done["changes"] == [{"path": "keep.txt", "size": 4, "change": "modified"}]


def test_changes_skip_symlinks_fifos_and_directories(driver):
    done = driver.run(code("""
        import os
        os.symlink("/etc/passwd", "link")
        os.mkfifo("pipe")
        os.makedirs("empty/dir")
        os.link("link", "hard", follow_symlinks=False)
    """)).done
    assert done["status"] == "ok"
    assert done["changes"] == []


def test_changes_are_capped(driver):
    done = driver.run("for i in range(250): open(f'f{i:03}', 'w').close()").done
    assert len(done["changes"]) == 200
    assert done["changes_truncated"] is True
    assert done["changes"][0] == {"path": "f000", "size": 0, "change": "created"}


def test_a_huge_workspace_skips_change_detection(driver):
    from sandlot_runtime import changes as module

    n = module.MAX_SNAPSHOT_ENTRIES + 1
    for i in range(n):
        (driver.workdir / f"{i}").touch()
    done = driver.run("open('new.txt', 'w').close()").done
    assert done["status"] == "ok"
    assert done["changes"] == []
    assert done["changes_truncated"] is True


def test_snapshots_of_an_empty_workspace_show_no_change(tmp_path, monkeypatch):
    # How fast this runs per cell is measured by sandlot-bench, not asserted here.
    from sandlot_runtime import changes as module

    monkeypatch.setattr(module, "WORKSPACE", str(tmp_path))
    before = module.safe_snapshot(racy=True)
    assert before == {}
    assert module.changes_between(before, module.safe_snapshot()) == {"changes": []}

"""JavaScript and TypeScript cells in the driver: one node per context, spoken to over the real
protocol (see js_session.py and js_kernel.js)."""

from __future__ import annotations

import shutil
import textwrap
import time
import uuid

import pytest

pytestmark = pytest.mark.skipif(shutil.which("node") is None and shutil.which("nodejs") is None,
                                reason="JavaScript cells need node (scripts/test installs it)")


def js(driver, source: str, language: str = "javascript", context: str | None = None):
    message = {"type": "execute", "id": uuid.uuid4().hex,
               "code": textwrap.dedent(source).strip("\n"), "language": language}
    if context is not None:
        message["context"] = context
    driver.pending.clear()
    driver.send(message)
    return driver.collect(message["id"])


def text(execution) -> str | None:
    return None if execution.result is None else execution.result["data"]["text/plain"]


def test_last_expression_is_the_result_and_state_persists(shared):
    assert text(js(shared, "1 + 1")) == "2"
    first = js(shared, """
        const greeting = 'hi'
        let count = 1
        var list = [1, 2]
        function twice(x) { return x * 2 }
        class Box { constructor(v) { this.v = v } }
        const { a, b: [c] } = { a: 5, b: [6] }
    """)
    assert first.status == "ok" and first.result is None, first.events
    again = js(shared, "count += 1; [greeting, count, list.length, twice(a), new Box(c).v]")
    assert text(again) == "[ 'hi', 2, 2, 10, 6 ]"
    # Declaring the same name again, as re-running a cell does, is not an error.
    assert text(js(shared, "const greeting = 'again'; greeting")) == "'again'"


def test_console_output_is_stdout_and_stderr_in_order(shared):
    execution = js(shared, """
        console.log('one')
        console.error('two')
        process.stdout.write('three\\n')
        'value'
    """)
    # Each stream in order, and all of it before the result (two pipes: no order between them).
    assert execution.stdout == "one\nthree\n" and execution.stderr == "two\n"
    assert execution.timeline()[-2:] == ["result", "done"]


def test_errors_have_name_value_and_stack(shared):
    execution = js(shared, "function boom() { throw new TypeError('bad thing') }\nboom()")
    assert execution.status == "error"
    assert execution.error["name"] == "TypeError"
    assert execution.error["value"] == "bad thing"
    trace = "\n".join(execution.error["traceback"])
    assert "at boom (<cell" in trace and "js_kernel" not in trace and "node:internal" not in trace
    syntax = js(shared, "let = = 2")
    assert syntax.error["name"] == "SyntaxError" and syntax.status == "error"
    thrown = js(shared, "throw 'plain'")
    assert thrown.error["value"] == "Uncaught 'plain'"
    assert text(js(shared, "'still alive'")) == "'still alive'"


def test_top_level_await_and_imports(shared):
    assert text(js(shared, "await Promise.resolve('Hello')")) == "'Hello'"
    execution = js(shared, """
        import { readFileSync } from 'fs'
        import * as path from 'node:path'
        import os from 'os'
        console.log(typeof readFileSync, typeof path.join, typeof os.cpus)
    """)
    assert execution.stdout == "function function function\n", execution.events
    assert text(js(shared, "typeof readFileSync")) == "'function'"  # imports persist
    dynamic = js(shared, "const { sep } = await import('path'); sep")
    assert text(dynamic) == "'/'"
    assert text(js(shared, "typeof require('util').inspect")) == "'function'"


def test_packages_resolve_from_the_working_directory(driver):
    pkg = driver.workdir / "node_modules" / "tiny-pkg"
    pkg.mkdir(parents=True)
    (pkg / "package.json").write_text('{"name": "tiny-pkg", "main": "index.js"}')
    (pkg / "index.js").write_text("module.exports = { answer: 42 }")
    esm = driver.workdir / "node_modules" / "esm-only"
    esm.mkdir(parents=True)
    (esm / "package.json").write_text('{"name": "esm-only", "exports": {".": {"import": "./m.mjs"}}}')
    (esm / "m.mjs").write_text("export const hello = 'esm'")
    js(driver, "process.chdir(%r)" % str(driver.workdir))
    assert text(js(driver, "require('tiny-pkg').answer")) == "42"
    assert text(js(driver, "import { answer } from 'tiny-pkg'\nanswer")) == "42"
    assert text(js(driver, "import { hello } from 'esm-only'\nhello")) == "'esm'"


def test_typescript_types_are_stripped(shared):
    execution = js(shared, "const message: string = 'Hello, TS'; console.log(message)",
                   language="typescript")
    assert execution.stdout == "Hello, TS\n", execution.events
    typed = js(shared, """
        interface Point { x: number; y?: number }
        type Pair = [number, number]
        function add(p: Point, q: Pair): number { return p.x + q[0] }
        const f = (n: number): number => n * 2
        class Counter {
          private n: number = 0
          constructor(public step: number) {}
          next(): number { return this.n += this.step }
        }
        const c = new Counter(3)
        c.next()
        f(add({ x: 1 } as Point, [2, 3]))!
    """, language="typescript")
    assert text(typed) == "6", typed.events
    # TypeScript and JavaScript cells of a context share its node.
    assert text(js(shared, "c.next()")) == "6"


def test_output_after_a_cell_ended_is_background_output(driver):
    first = js(driver, "setTimeout(() => console.log('later'), 50); 'now'")
    assert text(first) == "'now'"
    time.sleep(0.2)
    second = js(driver, "'next'")
    assert second.stdout == ""
    assert driver.background_text("stdout", first.done["id"]) == "later\n"


def test_an_interrupt_abandons_an_await_and_keeps_state(driver):
    js(driver, "globalThis.kept = 7")
    exec_id = uuid.uuid4().hex
    driver.send({"type": "execute", "id": exec_id, "language": "javascript",
                 "code": "await new Promise(() => {})"})
    time.sleep(0.5)
    started = time.monotonic()
    driver.interrupt()
    execution = driver.collect(exec_id, timeout=10)
    assert execution.status == "interrupted"
    assert execution.error["name"] == "KeyboardInterrupt"
    assert time.monotonic() - started < 0.4  # node's own handler, no grace waited
    assert text(js(driver, "kept")) == "7"


def test_a_synchronous_loop_gets_node_killed_and_the_cell_says_so(driver):
    js(driver, "globalThis.lost = 1")
    for code in ("while (true) {}", "await null; while (true) {}"):
        exec_id = uuid.uuid4().hex
        driver.send({"type": "execute", "id": exec_id, "language": "javascript", "code": code})
        time.sleep(0.5)
        driver.interrupt()
        execution = driver.collect(exec_id, timeout=10)
        assert execution.status == "interrupted"
        assert "JavaScript kernel exited (killed by SIGKILL)" in execution.stderr
        assert "did not stop within 0.5 s of the interrupt" in execution.stderr
    assert text(js(driver, "typeof lost")) == "'undefined'"
    assert text(js(driver, "'a new node'")) == "'a new node'"


def test_process_exit_is_reported_and_node_replaced(driver):
    died = js(driver, "process.exit(3)")
    assert died.status == "error" and died.error["name"] == "KernelDied"
    assert "exit status 3" in died.error["value"]
    assert text(js(driver, "2 * 3")) == "6"


def test_contexts_have_their_own_node(driver):
    driver.send({"type": "context_create", "context": "other"})
    assert driver.next_frame()["ok"]
    js(driver, "globalThis.where = 'default'")
    js(driver, "globalThis.where = 'other'", context="other")
    assert text(js(driver, "where")) == "'default'"
    assert text(js(driver, "where", context="other")) == "'other'"
    driver.send({"type": "context_restart", "context": "other"})
    assert driver.next_frame()["ok"]
    assert text(js(driver, "typeof where", context="other")) == "'undefined'"


def test_environment_and_working_directory_are_the_drivers(driver):
    driver.send({"type": "env", "env": {"SANDLOT_JS_TEST": "yes"}})
    execution = js(driver, "[process.env.SANDLOT_JS_TEST, process.cwd()]")
    assert text(execution) == f"[ 'yes', '{driver.workdir}' ]"


def test_fetch_goes_through_the_proxy_in_the_environment(make_driver):
    import http.server
    import threading

    seen = []

    class Proxy(http.server.BaseHTTPRequestHandler):
        def do_CONNECT(self):  # noqa: N802 (the stdlib's name)
            seen.append(self.path)  # a refusal is enough: the request came here
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        proxy = f"http://127.0.0.1:{server.server_address[1]}"
        driver = make_driver(HTTP_PROXY=proxy, HTTPS_PROXY=proxy, NO_PROXY="")
        execution = js(driver, "await fetch('https://packages.invalid/x')")
        assert execution.error["value"] == "fetch failed", execution.events
        assert seen == ["packages.invalid:443"]
        assert execution.stderr == ""  # no "experimental" warning either
    finally:
        server.shutdown()


# -- JavaScript state across a save and a load (a pause, a fork, a snapshot) ---------------------


def _carried(make_driver, tmp_path, parent):
    """Saves the parent's state and loads it into a fresh driver, as a fork or a resume does."""
    from test_snapshot import load, save

    saved = save(parent, tmp_path / "state")
    assert saved["ok"], saved
    child = make_driver()
    loaded = load(child, tmp_path / "state")
    assert loaded["ok"], loaded
    return saved, child


def test_js_declarations_come_back_after_a_load(make_driver, tmp_path):
    parent = make_driver()
    assert js(parent, """
        const path = require('node:path')
        let count = 1
        function twice(x) { return x * 2 }
        class Box { constructor(v) { this.v = v } }
        console.log('said once')
    """).status == "ok"
    assert js(parent, "count += 1").status == "ok"
    # A cell that failed half-way still declared what it reached, as it did in the parent.
    failed = js(parent, "globalThis.partial = 'set'; throw new Error('after partial')")
    assert failed.status == "error"
    assert js(parent, "const label: string = 'typed'", language="typescript").status == "ok"
    parent.send({"type": "context_create", "context": "second"})
    assert parent.next_frame()["ok"]
    assert js(parent, "const mine = 'second context'", context="second").status == "ok"

    saved, child = _carried(make_driver, tmp_path, parent)
    assert not [e for e in saved["not_captured"] if e["name"] == "javascript state"], saved
    first = js(child, "[count, twice(21), new Box(3).v, path.basename('/a/b.txt'), partial, label]")
    assert text(first) == "[ 2, 42, 3, 'b.txt', 'set', 'typed' ]", first.events
    # The replay is silent: its output was seen when the cells first ran.
    assert first.stdout == "" and first.stderr == "", first.events
    assert text(js(child, "mine", context="second")) == "'second context'"
    # The child's own state goes on from there, and is carried again by its own save.
    assert js(child, "count += 10").status == "ok"
    (tmp_path / "again").mkdir()
    _, grandchild = _carried(make_driver, tmp_path / "again", child)
    assert text(js(grandchild, "[count, twice(count)]")) == "[ 12, 24 ]"


def test_a_replay_that_fails_says_so_on_the_next_cell(make_driver, tmp_path):
    parent = make_driver()
    marker = tmp_path / "marker.txt"
    marker.write_text("was here")
    assert js(parent, f"const seen = require('fs').readFileSync({str(marker)!r}, 'utf8')").status == "ok"
    marker.unlink()  # what the cell read is gone when it runs again
    _, child = _carried(make_driver, tmp_path, parent)
    execution = js(child, "typeof seen")
    assert text(execution) == "'undefined'"
    assert "JavaScript state was not restored: replaying cell 1 of 1 failed with Error" in execution.stderr
    assert "ENOENT" in execution.stderr
    # Said once; the context goes on with a fresh node.
    again = js(child, "1 + 1")
    assert text(again) == "2" and again.stderr == ""


def test_a_log_past_its_bounds_is_not_carried_and_says_so(make_driver, tmp_path):
    parent = make_driver()
    big = "globalThis.big = 1 // " + "x" * (1 << 20)
    assert js(parent, big).status == "ok"
    saved, child = _carried(make_driver, tmp_path, parent)
    lost = [e for e in saved["not_captured"] if e["name"] == "javascript state"]
    assert lost and "log's bounds" in lost[0]["reason"], saved
    execution = js(child, "typeof big")
    assert text(execution) == "'undefined'"
    assert "JavaScript state was not restored (its cells passed the log's bounds" in execution.stderr

"""JavaScript and TypeScript cells through the unmodified E2B code interpreter SDK
(`e2b-code-interpreter` from the registry) and through sandlot's own SDK, against a real
`sandlot serve` (see conftest.py). The scenarios are those E2B's own suite checks for its
JavaScript kernel, written for sandlot: console output, ESM imports, top-level await, types
stripped, environment variables per sandbox and per execution, the default contexts, and
contexts of their own; plus what E2B's suite leaves out (state across cells, errors, the
working directory, languages sandlot refuses)."""

from __future__ import annotations

import shutil

import pytest

from sandlot import Sandbox

from ._e2b import e2b_env  # noqa: F401  (a fixture)

e2b_ci = pytest.importorskip("e2b_code_interpreter")

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(shutil.which("node") is None,
                       reason="JavaScript cells need node on the host (scripts/test installs it)"),
]


@pytest.fixture(scope="module")
def sbx(e2b_env):
    """One sandbox for the module: the tests below keep their names apart."""
    sb = e2b_ci.Sandbox.create(timeout=300, envs={"JS_SANDBOX_VAR": "from-create"})
    try:
        yield sb
    finally:
        sb.kill()


def test_console_log_is_stdout_and_values_are_text(sbx):
    execution = sbx.run_code("console.log('hello from node')", language="js")
    assert execution.error is None, execution.error
    assert execution.logs.stdout == ["hello from node\n"]
    assert execution.results == []  # console.log's undefined is no result
    assert sbx.run_code("40 + 2", language="javascript").text == "42"
    # A string value comes back without its quotes, as E2B shows it.
    assert sbx.run_code("'plain ' + 'text'", language="js").text == "plain text"


def test_state_persists_between_cells(sbx):
    sbx.run_code("const base = 10\nlet counter = 0\nfunction bump() { return ++counter + base }",
                 language="js")
    sbx.run_code("bump()", language="js")
    assert sbx.run_code("bump()", language="js").text == "12"
    # Running a declaring cell again is not an error (re-running cells is what notebooks do).
    assert sbx.run_code("const base = 20; base", language="js").text == "20"


def test_esm_imports_and_top_level_await(sbx):
    imported = sbx.run_code("import { readFileSync } from 'fs'\nconsole.log(typeof readFileSync)",
                            language="js")
    assert imported.logs.stdout == ["function\n"], imported.error
    awaited = sbx.run_code("await Promise.resolve('Hello World!')", language="js")
    assert awaited.text == "Hello World!"


def test_typescript_types_are_stripped(sbx):
    execution = sbx.run_code(
        "const message: string = 'typed'; console.log(message)", language="ts")
    assert execution.logs.stdout == ["typed\n"], execution.error
    shaped = sbx.run_code(
        "interface Pt { x: number }\nconst pts: Pt[] = [{ x: 2 }, { x: 3 }]\n"
        "pts.map((p: Pt): number => p.x * 2).join(',')", language="typescript")
    assert shaped.text == "4,6", shaped.error


def test_errors_have_name_value_and_traceback(sbx):
    execution = sbx.run_code("null.field", language="js")
    assert execution.error is not None
    assert execution.error.name == "TypeError"
    assert "null" in execution.error.value
    assert "<cell" in execution.error.traceback
    syntax = sbx.run_code("let = ;", language="js")
    assert syntax.error is not None and syntax.error.name == "SyntaxError"


def test_environment_variables(sbx):
    assert sbx.run_code("process.env.JS_SANDBOX_VAR", language="js").text == "from-create"
    scoped = sbx.run_code("process.env.JS_SANDBOX_VAR + '/' + process.env.JS_ONE_RUN",
                          language="javascript",
                          envs={"JS_SANDBOX_VAR": "overridden", "JS_ONE_RUN": "once"})
    assert scoped.text == "overridden/once", scoped.error
    after = sbx.run_code("[process.env.JS_SANDBOX_VAR, process.env.JS_ONE_RUN || 'gone'].join()",
                         language="javascript")
    assert after.text == "from-create,gone"


def test_working_directory_is_pythons(sbx):
    python_cwd = "".join(sbx.run_code("import os; print(os.getcwd())").logs.stdout).strip()
    assert sbx.run_code("process.cwd()", language="js").text == python_cwd
    assert sbx.run_code("process.cwd()", language="ts").text == python_cwd


def test_default_contexts_and_contexts_of_their_own(sbx):
    languages = {c.language for c in sbx.list_code_contexts()}
    assert {"python", "javascript"} <= languages
    ctx = sbx.create_code_context(language="javascript")
    assert ctx.language == "javascript"
    assert ctx.id in {c.id for c in sbx.list_code_contexts() if c.language == "javascript"}
    sbx.run_code("globalThis.mine = 'ctx'", context=ctx)
    assert sbx.run_code("typeof mine", language="js").text == "undefined"  # not the default's
    assert sbx.run_code("mine", context=ctx).text == "ctx"
    sbx.restart_code_context(ctx)
    assert sbx.run_code("typeof mine", context=ctx).text == "undefined"
    sbx.remove_code_context(ctx)
    assert ctx.id not in {c.id for c in sbx.list_code_contexts()}


def test_r_and_java_are_refused_clearly(sbx):
    for language in ("r", "java"):
        with pytest.raises(Exception) as raised:
            sbx.run_code("1", language=language)
        assert "not available" in str(raised.value)


def test_sandlots_own_sdk_runs_javascript(sandlot_url):
    with Sandbox(url=sandlot_url) as sb:
        first = sb.run_code("const xs = [1, 2, 3]; console.log('sum'); xs.reduce((a, b) => a + b)",
                            language="javascript")
        assert first.stdout == "sum\n" and first.text == "6", first
        typed = sb.run_code("const n: number = xs.length; n", language="typescript")
        assert typed.text == "3"
        failed = sb.run_code("throw new Error('nope')", language="javascript")
        assert failed.error is not None and failed.error.name == "Error"
        assert failed.error.value == "nope"

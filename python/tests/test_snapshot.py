"""Saving and loading interpreter state (state_save / state_load) with the real driver: the
server's frames, with the state file's descriptor attached the way the server attaches it
(SCM_RIGHTS on the frame's first bytes), and loads into fresh drivers like a fork or a resume."""

from __future__ import annotations

import array
import hashlib
import json
import os
import socket
import textwrap
import time
import uuid

import pytest

MAGIC = b"SANDLOT-STATE\n"
HEADER_LEN = 96


def code(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def send_with_fd(driver, message: dict, *fds: int) -> None:
    """Sends a frame with ``fds`` attached to its first bytes, as the server does (one)."""
    body = json.dumps(message).encode()
    frame = len(body).to_bytes(4, "little") + body
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
    sent = driver.server_sock.sendmsg([frame], rights)
    driver.server_sock.sendall(frame[sent:])


def answer(driver, kind: str, op: str, timeout: float = 60) -> dict:
    """The answer to request ``op``; output read meanwhile stays in driver.pending."""
    frame = driver.next_frame(timeout)
    assert frame["type"] == kind and frame["id"] == op, frame
    return frame


def save(driver, path, **fields) -> dict:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        return save_to_fd(driver, fd, **fields)
    finally:
        os.close(fd)


def save_to_fd(driver, fd: int, **fields) -> dict:
    op = uuid.uuid4().hex
    send_with_fd(driver, {"type": "state_save", "id": op, "fd": True, **fields}, fd)
    return answer(driver, "state_saved", op)


def load(driver, path, reseed: bool = True) -> dict:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        op = uuid.uuid4().hex
        send_with_fd(driver, {"type": "state_load", "id": op, "fd": True, "reseed": reseed}, fd)
        return answer(driver, "state_loaded", op)
    finally:
        os.close(fd)


def run_in(driver, context, source: str, language: str = "python"):
    driver.pending.clear()
    exec_id = uuid.uuid4().hex
    message = {"type": "execute", "id": exec_id, "code": source, "language": language}
    if context is not None:
        message["context"] = context
    driver.send(message)
    return driver.collect(exec_id)


def value(driver, source: str, context=None) -> str:
    execution = run_in(driver, context, source)
    assert execution.status == "ok", (execution.error, execution.stderr)
    return execution.result["data"]["text/plain"]


def context_create(driver, name: str) -> None:
    driver.pending.clear()
    driver.send({"type": "context_create", "context": name})
    assert driver.next_frame()["ok"] is True


def names(entries: list) -> dict:
    return {(e["context"], e["name"]): e["reason"] for e in entries}


def test_variables_functions_classes_modules_and_a_dataframe_come_back(make_driver, tmp_path):
    parent = make_driver()
    assert run_in(parent, None, code("""
        import numpy as np
        import pandas as pd
        import json as jsonmod
        x = 40
        text = "héllo"
        data = {"a": [1, 2], "b": (3, None)}
        def helper(v):
            return v * 2
        def f(v):
            return helper(v) + x
        class Point:
            def __init__(self, x, y):
                self.x, self.y = x, y
            def norm2(self):
                return self.x ** 2 + self.y ** 2
        p = Point(3, 4)
        square = lambda v: v * v
        df = pd.DataFrame({"a": np.arange(5), "b": list("abcde")})
        arr = np.linspace(0, 1, 11)
    """)).status == "ok"
    path = tmp_path / "state"
    saved = save(parent, path)
    assert saved["ok"] is True, saved
    assert saved["not_captured"] == []
    # np, pd, jsonmod as module aliases; x, text, data, helper, f, Point, p, square, df, arr
    assert saved["variables"] == 13
    raw = path.read_bytes()
    assert saved["bytes"] == len(raw)
    assert raw.startswith(MAGIC + b"1\n")
    assert raw[len(MAGIC) + 2:len(MAGIC) + 66].decode() == saved["sha256"]
    assert hashlib.sha256(raw[HEADER_LEN:]).hexdigest() == saved["sha256"]
    assert len(raw[:HEADER_LEN].split(b"\n")) == 5 and raw[HEADER_LEN - 1:HEADER_LEN] == b"\n"

    child = make_driver()
    loaded = load(child, path)
    assert loaded["ok"] is True, loaded
    assert loaded["not_restored"] == []
    assert loaded["variables"] == 13
    assert loaded["contexts"] == ["default"]
    assert value(child, "x, text, data, f(1), square(7)") == \
        "(40, 'héllo', {'a': [1, 2], 'b': (3, None)}, 42, 49)"
    assert value(child, "isinstance(p, Point), p.norm2(), type(p).__module__") == \
        "(True, 25, '__main__')"
    assert value(child, "np.__name__, pd.__name__, jsonmod.dumps([1])") == \
        "('numpy', 'pandas', '[1]')"
    assert value(child, "df.equals(pd.DataFrame({'a': np.arange(5), 'b': list('abcde')})), "
                        "round(float(arr.sum()), 9)") == "(True, 5.5)"
    # Functions see the namespace they were loaded into, as they did before the save.
    assert value(child, "x = 100\nf(1)") == "102"
    assert value(child, "def helper(v):\n    return 0\nf(1)") == "100"
    assert value(child, "f.__globals__ is globals(), Point.norm2.__globals__ is globals()") == \
        "(True, True)"
    # A class defined after the load still pickles (the context's __main__ is in place).
    assert value(child, "import pickle\npickle.loads(pickle.dumps(p)).norm2()") == "25"
    # The parent is untouched and its IPython history was not carried.
    assert value(parent, "f(1)") == "42"
    assert value(child, "_i1") == repr("x, text, data, f(1), square(7)")


def test_every_context_and_its_bash_session_are_carried(make_driver, tmp_path):
    parent = make_driver()
    context_create(parent, "ctx_a")
    context_create(parent, "ctx_never_used")
    run_in(parent, None, "where = 'default'")
    run_in(parent, "ctx_a", "where = 'a'\nonly_a = [1, 2, 3]")
    (parent.workdir / "sub dir").mkdir()
    assert run_in(parent, "ctx_a", "cd 'sub dir'; export MYVAR='two words'; PLAIN=1; "
                  "export MULTI=$'line1\\nline2'", "bash").status == "ok"
    assert run_in(parent, None, "export DEFVAR=d", "bash").status == "ok"
    path = tmp_path / "state"
    saved = save(parent, path)
    assert saved["ok"] is True and saved["not_captured"] == [], saved

    child = make_driver()
    loaded = load(child, path)
    assert loaded["ok"] is True and loaded["not_restored"] == [], loaded
    assert loaded["contexts"] == ["default", "ctx_a", "ctx_never_used"]
    assert value(child, "where") == "'default'"
    assert value(child, "where, only_a", "ctx_a") == "('a', [1, 2, 3])"
    assert run_in(child, None, "only_a").error["name"] == "NameError"
    here = run_in(child, "ctx_a", 'pwd; echo "$MYVAR"; echo "[$PLAIN]"; echo "$MULTI"', "bash")
    assert here.stdout.splitlines() == [f"{parent.workdir}/sub dir", "two words", "[]",
                                        "line1", "line2"]
    there = run_in(child, None, 'echo "$DEFVAR"; echo "[$MYVAR]"', "bash")
    assert there.stdout.splitlines() == ["d", "[]"]
    assert run_in(child, "ctx_never_used", "1 + 1").status == "ok"


def test_a_bash_directory_missing_in_the_new_sandbox_is_reported(make_driver, tmp_path):
    parent = make_driver()
    gone = tmp_path / "gone"
    gone.mkdir()
    run_in(parent, None, f"cd {gone}; export KEPT=yes", "bash")
    saved = save(parent, tmp_path / "state")
    gone.rmdir()
    child = make_driver()
    loaded = load(child, tmp_path / "state")
    assert loaded["ok"] is True
    assert "does not exist" in names(loaded["not_restored"])[("default", "bash session")]
    # The session starts where the context's Python code was (restored with the state: the
    # parent's directory, which a sandbox's always shares, /workspace, and here still exists).
    assert run_in(child, None, 'pwd; echo "$KEPT"', "bash").stdout.splitlines() == \
        [str(parent.workdir), "yes"]
    assert saved["variables"] == 0


def test_each_context_comes_back_in_its_own_directory(make_driver, tmp_path):
    parent = make_driver()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    parent.pending.clear()
    parent.send({"type": "context_create", "context": "c1", "cwd": str(tmp_path / "a")})
    assert parent.next_frame()["ok"] is True
    run_in(parent, None, f"import os; os.chdir({str(tmp_path / 'b')!r})")
    run_in(parent, "c1", "import os; os.makedirs('sub'); os.chdir('sub')")
    saved = save(parent, tmp_path / "state")
    assert saved["ok"] is True, saved
    child = make_driver()
    assert load(child, tmp_path / "state")["ok"] is True
    here = "import os; print(os.getcwd())"
    assert run_in(child, None, here).stdout.strip() == str(tmp_path / "b")
    assert run_in(child, "c1", here).stdout.strip() == str(tmp_path / "a" / "sub")
    assert run_in(child, None, here).stdout.strip() == str(tmp_path / "b")


def test_what_cannot_be_pickled_is_reported_by_name_and_the_rest_is_saved(make_driver,
                                                                          tmp_path):
    parent = make_driver()
    assert run_in(parent, None, code("""
        import socket, threading
        gen = (i for i in range(3))
        lock = threading.Lock()
        sock = socket.socket()
        thread = threading.Thread(target=print)
        handle = open(__import__("os").devnull)
        keep = "kept"
    """)).status == "ok"
    saved = save(parent, tmp_path / "state")
    assert saved["ok"] is True, saved
    reasons = names(saved["not_captured"])
    assert set(reasons) == {("default", n) for n in ("gen", "lock", "sock", "thread", "handle")}
    assert "cannot pickle 'generator' object" in reasons[("default", "gen")]
    assert "open file" in reasons[("default", "handle")]
    assert "lock" in reasons[("default", "lock")]
    assert all(reason and len(reason) <= 300 for reason in reasons.values())
    assert saved["variables"] == 3  # keep, and the socket and threading modules
    child = make_driver()
    assert load(child, tmp_path / "state")["ok"] is True
    assert value(child, "keep, socket.__name__") == "('kept', 'socket')"
    assert run_in(child, None, "gen").error["name"] == "NameError"


def test_a_pickling_that_never_ends_is_cut_by_the_time_bound(make_driver, tmp_path):
    parent = make_driver()
    assert run_in(parent, None, code("""
        import signal
        class Forever:
            def __reduce__(self):
                while True:
                    pass
        class Stubborn:  # swallows the first timeout and loops again
            def __reduce__(self):
                try:
                    while True:
                        pass
                except BaseException:
                    while True:
                        pass
        forever, stubborn, keep = Forever(), Stubborn(), 7
        fired = []
        signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
        signal.setitimer(signal.ITIMER_REAL, 30)
    """)).status == "ok"
    started = time.monotonic()
    saved = save(parent, tmp_path / "state", object_secs=0.3, total_secs=5)
    took = time.monotonic() - started
    assert saved["ok"] is True, saved
    assert names(saved["not_captured"]) == {("default", "forever"): "timed out after 0.3 s",
                                            ("default", "stubborn"): "timed out after 0.3 s"}
    assert took < 3, took
    # The user's own SIGALRM handler and timer are back, less the time the save took.
    assert value(parent, "signal.getsignal(signal.SIGALRM) is not signal.default_int_handler, "
                         "20 < signal.getitimer(signal.ITIMER_REAL)[0] < 30, fired") == \
        "(True, True, [])"
    run_in(parent, None, "signal.setitimer(signal.ITIMER_REAL, 0)")
    child = make_driver()
    assert load(child, tmp_path / "state")["ok"] is True
    assert value(child, "keep") == "7"


def test_the_whole_save_is_bounded_too(make_driver, tmp_path):
    parent = make_driver()
    assert run_in(parent, None, code("""
        import time
        class Slow:
            def __reduce__(self):
                time.sleep(0.25)
                return (int, ())
        slow = [Slow() for _ in range(40)]  # 10 s to pickle
        a, b = Slow(), Slow()
    """)).status == "ok"
    started = time.monotonic()
    saved = save(parent, tmp_path / "state", object_secs=30, total_secs=1)
    assert time.monotonic() - started < 4
    assert saved["ok"] is True, saved
    reasons = names(saved["not_captured"])
    assert reasons[("default", "slow")] == "timed out: the save's bound of 1 s was reached"
    assert "used up" in reasons[("default", "b")]


def test_a_corrupt_or_truncated_state_is_refused_and_nothing_is_loaded(make_driver, tmp_path):
    parent = make_driver()
    run_in(parent, None, "import numpy as np\nx = np.arange(100000)\ny = 'why'")
    path = tmp_path / "state"
    assert save(parent, path)["ok"] is True
    good = path.read_bytes()
    child = make_driver()

    def refused(data: bytes) -> str:
        broken = tmp_path / "broken"
        broken.write_bytes(data)
        loaded = load(child, broken)
        assert loaded["ok"] is False, loaded
        return loaded["error"]

    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0xFF
    assert "corrupt" in refused(bytes(flipped))
    assert "corrupt" in refused(good[:len(good) // 2])
    assert "truncated" in refused(good[:50])
    assert "truncated" in refused(b"")
    assert "not a sandlot state file" in refused(b"x" * 500)
    assert "version" in refused(good.replace(b"\n1\n", b"\n7\n", 1))
    assert "SHA-256" in refused(good[:len(MAGIC) + 2] + b"z" * 64 + good[len(MAGIC) + 66:])
    for name in ("x", "y", "np"):
        assert run_in(child, None, name).error["name"] == "NameError"
    assert load(child, path)["ok"] is True
    assert value(child, "int(x.sum()), y") == "(4999950000, 'why')"


def test_fresh_entropy_unless_the_same_seed_is_asked_for(make_driver, tmp_path):
    parent = make_driver()
    run_in(parent, None, "import random\nimport numpy as np\nrandom.random(); np.random.random()")
    path = tmp_path / "state"
    assert save(parent, path)["ok"] is True
    draw = "random.random(), float(np.random.random())"
    parents_next = value(parent, draw)
    same = make_driver()
    assert load(same, path, reseed=False)["ok"] is True
    assert value(same, draw) == parents_next
    fresh = make_driver()
    assert load(fresh, path, reseed=True)["ok"] is True
    fresh_draw = eval(value(fresh, draw))
    assert fresh_draw[0] != eval(parents_next)[0]
    assert fresh_draw[1] != eval(parents_next)[1]


FDS = code("""
    import os
    def targets():
        seen = []
        for n in os.listdir("/proc/self/fd"):
            try:
                seen.append(os.readlink(f"/proc/self/fd/{n}"))
            except OSError:  # listdir's own descriptor, closed by now
                pass
        return sorted(seen)
    targets()
""")


def test_descriptors_that_no_request_claims_are_closed(driver, tmp_path):
    marker = tmp_path / "marker"
    marker.write_text("x")
    fd = os.open(marker, os.O_RDONLY | os.O_CLOEXEC)
    try:
        exec_id = uuid.uuid4().hex
        send_with_fd(driver, {"type": "execute", "id": exec_id, "code": FDS}, fd)
        shown = driver.collect(exec_id).result["data"]["text/plain"]
        assert str(marker) not in shown
        # A frame that says "fd": true but does not use one closes it before anything runs.
        exec_id = uuid.uuid4().hex
        send_with_fd(driver, {"type": "execute", "id": exec_id, "code": FDS, "fd": True}, fd)
        assert str(marker) not in driver.collect(exec_id).result["data"]["text/plain"]
    finally:
        os.close(fd)
    assert value(driver, "from sandlot_runtime.state import state\nlen(state.received_fds)") \
        == "0"
    # With two, the request takes the first (here /dev/full: the save fails) and the second
    # is closed.
    full = os.open("/dev/full", os.O_RDWR | os.O_CLOEXEC)
    second = os.open(marker, os.O_RDONLY | os.O_CLOEXEC)
    try:
        driver.pending.clear()
        send_with_fd(driver, {"type": "state_save", "id": "two", "fd": True}, full, second)
        assert "No space left" in answer(driver, "state_saved", "two")["error"]
    finally:
        os.close(full)
        os.close(second)
    shown = value(driver, FDS)
    assert str(marker) not in shown and "/dev/full" not in shown
    # A state request with no descriptor is refused; one with is closed after use.
    driver.pending.clear()
    driver.send({"type": "state_save", "id": "op1", "fd": True})
    refused = answer(driver, "state_saved", "op1")
    assert refused["ok"] is False and "no state file" in refused["error"]
    assert save(driver, tmp_path / "state")["ok"] is True
    assert load(driver, tmp_path / "state")["ok"] is True
    shown = value(driver, FDS)
    assert "state" not in shown and str(tmp_path) not in shown
    assert str(tmp_path) not in value(driver, "open('/proc/self/maps').read()")


def test_a_full_disk_fails_the_save_and_leaves_the_sandbox_as_it_was(driver, tmp_path):
    run_in(driver, None, "import numpy as np\nbig = np.ones(1 << 20)\nsmall = 's'\ncount = 0")
    fd = os.open("/dev/full", os.O_RDWR | os.O_CLOEXEC)
    try:
        failed = save_to_fd(driver, fd)
    finally:
        os.close(fd)
    assert failed["ok"] is False
    assert "No space left on device" in failed["error"]
    assert value(driver, "count += 1\nint(big.sum()), small, count") == "(1048576, 's', 1)"
    assert save(driver, tmp_path / "state")["ok"] is True


def test_a_variable_that_fails_half_written_leaves_no_trace(make_driver, tmp_path):
    parent = make_driver()
    # Megabytes are written (and hashed on the helper thread) before the lock fails the last
    # variable: the file must end where the last saved variable did.
    assert run_in(parent, None, code("""
        import threading
        import numpy as np
        first = np.arange(1 << 20)
        half = [b"x" * (3 << 20), threading.Lock()]
    """)).status == "ok"
    path = tmp_path / "state"
    saved = save(parent, path)
    assert saved["ok"] is True, saved
    assert set(names(saved["not_captured"])) == {("default", "half")}
    assert saved["bytes"] == path.stat().st_size < (8 << 20) + (3 << 20)
    child = make_driver()
    loaded = load(child, path)
    assert loaded["ok"] is True, loaded
    assert value(child, "int(first[-1])") == str((1 << 20) - 1)


DRIVER_WITH = """
import resource, sys
from sandlot_runtime import digest, driver, snapshot
{setup}
driver.prepare()
driver.main(int(sys.argv[1]))
"""


def test_a_file_size_limit_fails_the_save_cleanly(make_driver, tmp_path):
    limited = make_driver(script=DRIVER_WITH.format(
        setup="resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))"))
    run_in(limited, None, "big = bytes(2 << 20)")
    failed = save(limited, tmp_path / "state")
    assert failed["ok"] is False
    assert "File too large" in failed["error"] and "RLIMIT_FSIZE" in failed["error"]
    assert value(limited, "len(big)") == str(2 << 20)


def test_a_variable_over_the_size_limit_is_reported(make_driver, tmp_path):
    capped = make_driver(script=DRIVER_WITH.format(setup="snapshot.MAX_VARIABLE_BYTES = 1 << 20"))
    run_in(capped, None, "big = bytes(2 << 20)\nsmall = 1")
    saved = save(capped, tmp_path / "state")
    assert saved["ok"] is True
    assert "over the limit" in names(saved["not_captured"])[("default", "big")]
    assert saved["bytes"] < 100_000


def test_a_running_bash_session_takes_the_carried_state_at_once(make_driver, tmp_path):
    parent = make_driver()
    run_in(parent, None, f"cd {tmp_path}; export CARRIED=1", "bash")
    assert save(parent, tmp_path / "state")["ok"] is True
    child = make_driver()
    run_in(child, None, "LOCAL=kept", "bash")
    assert load(child, tmp_path / "state")["ok"] is True
    shown = run_in(child, None, 'pwd; echo "$CARRIED $LOCAL"', "bash")
    assert shown.stdout.splitlines() == [str(tmp_path), "1 kept"]


def test_an_interrupt_stops_a_save_and_keeps_the_sandbox(driver, tmp_path):
    run_in(driver, None, code("""
        import time
        class Slow:
            def __reduce__(self):
                print("pickling", flush=True)
                time.sleep(30)
        slow, keep = Slow(), "kept"
    """))
    op = uuid.uuid4().hex
    fd = os.open(tmp_path / "state", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        driver.pending.clear()
        send_with_fd(driver, {"type": "state_save", "id": op, "fd": True, "object_secs": 60},
                     fd)
        driver.wait_for_stdout("pickling")
        driver.interrupt()
        stopped = answer(driver, "state_saved", op, timeout=10)
    finally:
        os.close(fd)
    assert stopped["ok"] is False and "interrupted" in stopped["error"]
    assert value(driver, "keep") == "'kept'"
    assert driver.proc.poll() is None


@pytest.mark.parametrize("size", ["small", "50MB"])
def test_save_and_load_times(make_driver, tmp_path, size):
    """Measures the round trip (frame sent to answer read) the server would see."""
    parent = make_driver()
    # A template's zygote has numpy and pandas imported before it forks; these drivers do not.
    imports = "import numpy as np, pandas as pd"
    setup = (f"{imports}\n"
             "df = pd.DataFrame(np.random.rand(625_000, 10))" if size == "50MB" else
             "import math\na, b, c = 1, 'two', [3.0] * 10\ndef f(x):\n    return x + a")
    assert run_in(parent, None, setup).status == "ok"
    path = tmp_path / "state"
    saves, loads = [], []
    for _ in range(3):
        started = time.perf_counter()
        assert save(parent, path)["ok"] is True
        saves.append(time.perf_counter() - started)
        child = make_driver()
        assert run_in(child, None, imports).status == "ok"
        started = time.perf_counter()
        assert load(child, path)["ok"] is True
        loads.append(time.perf_counter() - started)
        child.close()
    print(f"\n{size}: {path.stat().st_size} bytes, save {min(saves) * 1e3:.1f} ms "
          f"(all {[round(s * 1e3, 1) for s in saves]}), load {min(loads) * 1e3:.1f} ms "
          f"(all {[round(s * 1e3, 1) for s in loads]})")
    # Generous bounds: the machine is shared; the figures above are what is reported.
    assert min(saves) < 1.0 and min(loads) < 1.0


# -- digests (state_digest, for the server's diff of two sandboxes) ----------------------------


def digest(driver, **fields) -> dict:
    op = uuid.uuid4().hex
    driver.pending.clear()
    driver.send({"type": "state_digest", "id": op, **fields})
    return answer(driver, "state_digested", op)


def hashes(digested: dict) -> dict:
    return {(ctx, name): e["sha256"] for ctx, entries in digested["contexts"].items()
            for name, e in entries.items()}


def test_a_digest_lists_what_a_save_carries_with_sizes_and_hashes(make_driver):
    parent = make_driver()
    context_create(parent, "ctx_a")
    assert run_in(parent, None, code("""
        import numpy as np, pandas as pd
        import cloudpickle
        x = 40
        def f(v):
            return v + x
        class Point:
            def __init__(self, a):
                self.a = a
        p = Point(3)
        df = pd.DataFrame({"a": np.arange(1000), "b": ["s"] * 1000})
        want = len(cloudpickle.dumps(df, protocol=5))
    """)).status == "ok"
    run_in(parent, "ctx_a", "only_a = [1, 2, 3]")
    got = digest(parent)
    assert got["ok"] is True and got["not_digested"] == [], got
    ctx = got["contexts"]
    assert set(ctx) == {"default", "ctx_a"}
    # The names a save carries: no IPython names, history or setup names.
    assert set(ctx["default"]) == {"np", "pd", "cloudpickle", "x", "f", "Point", "p", "df", "want"}
    assert set(ctx["ctx_a"]) == {"only_a"}
    assert ctx["default"]["df"]["type"] == "DataFrame"
    assert ctx["default"]["np"] == {"type": "module", "size": 0,
                                    "sha256": hashlib.sha256(b"numpy").hexdigest()}
    assert ctx["default"]["p"]["type"] == "Point" and ctx["default"]["f"]["type"] == "function"
    # The size is what a save writes for it.
    assert ctx["default"]["df"]["size"] == int(value(parent, "want"))
    assert all(len(e["sha256"]) == 64 and e["size"] >= 0 for c in ctx.values() for e in c.values())
    # Nothing changed, so nothing differs (pickling `p` cached __slotnames__ on Point
    # meanwhile: a digest leaves such caches out), and the sandbox is as it was.
    assert hashes(digest(parent)) == hashes(got)
    assert value(parent, "f(2), p.a, len(df)") == "(42, 3, 1000)"


def test_a_loaded_copy_digests_like_its_original_until_it_changes(make_driver, tmp_path):
    # Equal values whose parts are shared differently (a loaded copy shares strings, dtypes
    # and class attributes differently from its original) digest the same.
    parent = make_driver()
    assert run_in(parent, None, code("""
        import dataclasses, enum
        import numpy as np, pandas as pd
        x = 40
        def f(v):
            return v + x
        def outer():
            k = 3
            def inner(z):
                return z + k
            return inner
        inner = outer()
        class Point:
            def __init__(self, a):
                self.a = a
        class Sub(Point):  # super(): a cycle through the method's __class__ cell
            def __init__(self, a):
                super().__init__(a)
        @dataclasses.dataclass
        class Pair:
            a: int
            b: list
        p, s, pair = Point(3), Sub(4), Pair(1, [2])
        Color = enum.Enum("Color", "RED GREEN")
        df = pd.DataFrame({"a": np.arange(10), "b": ["s"] * 10,
                           "c": pd.date_range("2020", periods=10)})
        cat = pd.Series(["a", "b", "a"], dtype="category")
        arr = np.arange(100).reshape(10, 10).T
        shared = [1, 2]
        d = {"a": shared, "b": shared, "s": {"x", "y", "z", "w"}}
        cyc = []
        cyc.append(cyc)
        one = Point(1)
        shared_parts, own_parts = [[1, "a"]] * 2, [[1, "a"], [1, "a"]]
        shared_points, own_points = [one, one], [Point(1), Point(1)]
    """)).status == "ok"
    before = digest(parent)
    assert before["ok"] is True and before["not_digested"] == [], before
    # One object met twice digests like two equal ones.
    default = before["contexts"]["default"]
    assert default["shared_parts"]["sha256"] == default["own_parts"]["sha256"]
    assert default["shared_points"]["sha256"] == default["own_points"]["sha256"]
    assert save(parent, tmp_path / "state")["ok"] is True
    child = make_driver()
    assert load(child, tmp_path / "state")["ok"] is True
    assert hashes(digest(child)) == hashes(before) == hashes(digest(parent))
    run_in(child, None, "df.loc[0, 'a'] = -1\nx = 41\nnew = 'n'\ndel p\nd['s'].add('v')")
    after = hashes(digest(child))
    changed = {name for (_, name), sha in after.items() if hashes(before).get(("default", name)) != sha}
    assert changed == {"df", "x", "new", "d"}  # f's globals are not part of it
    assert ("default", "p") not in after


def test_what_cannot_be_digested_is_reported_and_the_time_bounds_apply(make_driver):
    parent = make_driver()
    assert run_in(parent, None, code("""
        import threading, time
        class Forever:
            def __reduce__(self):
                while True:
                    pass
        class Slow:
            def __reduce__(self):
                time.sleep(0.4)
                return (int, ())
        lock = threading.Lock()
        gen = (i for i in range(3))
        forever = Forever()
        slow = [Slow() for _ in range(10)]
        keep = "kept"
    """)).status == "ok"
    started = time.monotonic()
    got = digest(parent, object_secs=0.3, total_secs=2)
    assert time.monotonic() - started < 4
    assert got["ok"] is True, got
    reasons = names(got["not_digested"])
    assert set(reasons) == {("default", n) for n in ("lock", "gen", "forever", "slow")}
    assert reasons[("default", "forever")] == "timed out after 0.3 s"
    assert "cannot pickle" in reasons[("default", "lock")]
    assert {"keep", "threading", "time", "Forever", "Slow"} <= set(got["contexts"]["default"])
    assert value(parent, "keep") == "'kept'"


def test_a_digest_over_its_count_reports_the_rest(make_driver):
    capped = make_driver(script=DRIVER_WITH.format(setup="digest.MAX_DIGESTED = 5"))
    run_in(capped, None, "\n".join(f"v{i} = {i}" for i in range(8)))
    got = digest(capped)
    assert got["ok"] is True
    assert len(got["contexts"]["default"]) == 5
    [rest] = got["not_digested"]
    assert rest["name"] == "" and rest["reason"].startswith("3 more variables")

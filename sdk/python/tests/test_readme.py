"""The README runs as written: every shell and Python snippet of its tour, run in order in one
directory against a real server, printing exactly what the README says it prints.

Rules the README follows (and this test enforces):

* Every ``sh``/``bash``/``python`` block of the "A 30-second tour" section runs, unless the
  line before it is ``<!-- not run: why -->``. Blocks elsewhere run when the line before them
  is ``<!-- run -->``.
* In a shell block, a command whose comment ends in ``→ x`` must print exactly ``x`` (one line);
  every command must succeed (the block runs under ``set -eo pipefail``). ``localhost:7878``
  (and ``127.0.0.1:7878`` in Python blocks) is the test server's address, ``sandlot`` is the
  binary under test, and the E2B settings point at the test server.
* The snippets run as on the server's machine: HOME is a temp dir whose
  ``~/.local/share/sandlot/api-key`` holds the test server's key, and no ``$SANDLOT_API_KEY``
  is set, so every client finds the key where ``sandlot serve`` keeps it, as the README says.
* A block followed by ``<!-- output -->`` and a ``text`` block must print exactly that text.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from ._e2b import server_key
from .conftest import local_client_env

REPO = Path(__file__).resolve().parents[3]
README = REPO / "README.md"
TOUR = "## A 30-second tour"
RUNNABLE = {"sh": "sh", "bash": "sh", "shell": "sh", "python": "python", "py": "python"}
ARROW_RE = re.compile(r"\s#[^\n]*?→ (.*)$")
TIMEOUT = 300


@dataclass
class Block:
    lang: str  # info string as written
    code: str
    line: int  # 1-based line of the opening fence
    marker: Optional[str]  # the HTML comment just before it, if any
    in_tour: bool
    output: Optional[str] = None  # the <!-- output --> block that follows, if any

    @property
    def kind(self) -> Optional[str]:
        return RUNNABLE.get(self.lang)

    @property
    def runs(self) -> bool:
        if self.kind is None or (self.marker or "").startswith("<!-- not run"):
            return False
        return self.in_tour or self.marker == "<!-- run -->"


def parse(text: str) -> List[Block]:
    lines = text.splitlines()
    blocks: List[Block] = []
    section = ""
    marker: Optional[str] = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line.strip()
        fence = re.match(r"^```(\S*)\s*$", line)
        if fence:
            start = i
            i += 1
            body: List[str] = []
            while i < len(lines) and lines[i].rstrip() != "```":
                body.append(lines[i])
                i += 1
            block = Block(fence.group(1), "\n".join(body) + "\n", start + 1, marker, section == TOUR)
            if marker == "<!-- output -->":
                assert blocks, f"README.md:{start + 1}: an output block with no block before it"
                blocks[-1].output = block.code
            else:
                blocks.append(block)
            marker = None
        elif line.strip().startswith("<!--") and line.strip().endswith("-->"):
            marker = line.strip()
        elif line.strip():
            marker = None if not line.startswith("```") else marker
        i += 1
    return blocks


def commands(code: str) -> List[Tuple[str, Optional[str]]]:
    """The logical commands of a shell block (continuation lines joined), each with the
    output its ``→`` comment promises."""
    out: List[Tuple[str, Optional[str]]] = []
    pending: List[str] = []
    for line in code.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending.append(line)
        if line.rstrip().endswith("\\"):
            continue
        cmd = "\n".join(pending)
        pending = []
        m = ARROW_RE.search(cmd.splitlines()[-1])
        out.append((cmd, m.group(1).rstrip() if m else None))
    assert not pending, f"a command ends with a continuation: {pending}"
    return out


def test_the_readme_is_parsed_as_intended() -> None:
    blocks = parse(README.read_text())
    tour = [b for b in blocks if b.in_tour]
    assert any(b.runs and b.kind == "sh" for b in tour)
    assert any(b.runs and b.kind == "python" and b.output for b in tour)
    for b in tour:
        if b.kind is None:
            pytest.fail(f"README.md:{b.line}: a ```{b.lang} block in the tour that is neither runnable nor output")
        if not b.runs:
            assert (b.marker or "").startswith("<!-- not run:"), f"README.md:{b.line}: say why it is not run"
    assert commands("a  # x → 1\nb \\\n  c  # → two words\n# only a comment\n") == [("a  # x → 1", "1"), ("b \\\n  c  # → two words", "two words")]


def _bin() -> Path:
    return Path(os.environ.get("SANDLOT_BIN") or REPO / "target" / "debug" / "sandlot")


@pytest.mark.live
@pytest.mark.timeout(1200)  # every snippet of the tour, each bounded by TIMEOUT
def test_every_tour_snippet_prints_what_the_readme_says(sandlot_url: str, local_key_home: Path, tmp_path: Path) -> None:
    if not _bin().exists():
        pytest.skip(f"needs the sandlot binary: {_bin()}")
    for tool in ("curl", "jq", "bash"):
        if shutil.which(tool) is None:
            pytest.fail(f"the README's tour uses {tool}, which is not installed")
    hostport = sandlot_url.split("://", 1)[1]
    # `sandlot` on PATH is the binary under test, whatever its file is called.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sandlot").symlink_to(_bin())
    env = local_client_env(local_key_home, SANDLOT_URL=sandlot_url, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    # The E2B settings the README has a user export, for this server.
    env.update(E2B_API_URL=sandlot_url, E2B_SANDBOX_URL=sandlot_url, E2B_API_KEY=server_key())
    env.pop("E2B_DOMAIN", None)
    work = tmp_path / "work"
    work.mkdir()
    ran = 0
    for block in parse(README.read_text()):
        if not block.runs:
            continue
        ran += 1
        where = f"README.md:{block.line}"
        if block.kind == "sh":
            cmds = commands(block.code)
            script = ["set -eo pipefail"]
            for n, (cmd, _) in enumerate(cmds):
                script.append(f"{{\n{cmd.replace('localhost:7878', hostport)}\n}} > {tmp_path}/cmd-{block.line}-{n}.out")
            proc = subprocess.run(["bash", "-c", "\n".join(script)], cwd=work, env=env, capture_output=True, text=True, timeout=TIMEOUT)
            assert proc.returncode == 0, f"{where}: the block failed ({proc.returncode})\n{proc.stderr}"
            printed = ""
            for n, (cmd, expected) in enumerate(cmds):
                got = (tmp_path / f"cmd-{block.line}-{n}.out").read_text()
                printed += got
                if expected is not None:
                    assert got == expected + "\n", f"{where}: `{cmd}` printed {got!r}, the README says {expected!r}"
        else:
            code = block.code.replace("127.0.0.1:7878", hostport).replace("localhost:7878", hostport)
            proc = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True, timeout=TIMEOUT)
            assert proc.returncode == 0, f"{where}: the block failed\n{proc.stderr}"
            printed = proc.stdout
        if block.output is not None:
            assert printed == block.output, f"{where}: printed\n{printed}\nthe README shows\n{block.output}"
    assert ran >= 3
    # What the tour says it leaves behind.
    assert (work / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- the Execution shortcuts the tour relies on (offline) -----------------------------------

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


def test_execution_shortcuts_find_the_figure_wherever_it_is(tmp_path: Path) -> None:
    from sandlot.models import Execution

    # What `plt.plot([1, 3, 2])` returns: the value (the lines) first, then the figure.
    ex = Execution.from_json(
        {
            "end_state": "ok",
            "outputs": [
                {"type": "result", "data": {"text/plain": "[<matplotlib.lines.Line2D at 0x7f>]"}},
                {"type": "display_data", "data": {"text/plain": "<Figure size 640x480 with 1 Axes>", "image/png": PNG}},
                {"type": "display_data", "data": {"image/jpeg": "/9j/4AAQ"}},
            ],
        }
    )
    assert [r.is_main_result for r in ex.results] == [True, False, False]
    assert isinstance(ex.images, list) and len(ex.images) == 2
    assert ex.image is ex.images[0] and ex.image.text.startswith("<Figure")
    assert list(ex.images()) == ex.images  # the method spelling of earlier versions still works
    assert ex.png == PNG and ex.png_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert ex.save_png(tmp_path / "f.png") == str(tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes() == ex.png_bytes()
    with pytest.raises(ValueError, match="result has no png output"):
        ex.results[0].save_png(tmp_path / "no.png")

    none = Execution.from_json({"end_state": "ok", "outputs": [{"type": "result", "data": {"text/plain": "1"}}]})
    assert none.images == [] and none.image is None and none.png is None and none.png_bytes() is None
    with pytest.raises(ValueError, match="the execution produced no PNG image \\(text\\)"):
        none.save_png(tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()

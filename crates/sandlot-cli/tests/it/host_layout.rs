//! Attack cases: the host's layout is invisible from inside a sandbox. Code looks for the
//! server's data dir and the environments dir (where the Python environment lives on the host)
//! everywhere a path could leak: the environment variables, `sys.path` and the interpreter's
//! prefixes, the mount table, the memory map, the command line, and every readable file under
//! `/opt/sandlot`. Then it checks that the environment works where it is seen: console scripts
//! run, and `pip install` targets `/opt/sandlot/env` (read-only) rather than a host path.

use crate::common;

use common::TestServer;
use serde_json::{json, Value};

/// Searches for each of `NEEDLES` and prints `LAYOUT {json}`.
const PROBE: &str = r#"
import json, os, sys
needles = NEEDLES
def hits(text):
    return [n for n in needles if n in text]
def read(path):
    try:
        with open(path, 'rb') as f:
            return f.read().decode('utf-8', 'replace')
    except OSError as e:
        return 'errno %d' % e.errno
found = {
    'os.environ': hits(json.dumps(dict(os.environ))),
    'sys.path': hits(json.dumps(sys.path)),
    'sys prefixes': hits(json.dumps([sys.prefix, sys.exec_prefix, sys.base_prefix,
                                     sys.executable, getattr(sys, '_base_executable', '')])),
    'modules': hits(json.dumps([getattr(m, '__file__', None) or '' for m in list(sys.modules.values())])),
}
for f in ['/proc/self/mountinfo', '/proc/1/mountinfo', '/proc/self/maps', '/proc/self/cmdline',
          '/proc/self/environ', '/proc/self/cgroup']:
    found[f] = hits(read(f))
files, scanned = [], 0
for d, dirs, names in os.walk('/opt/sandlot'):
    for n in names:
        p = os.path.join(d, n)
        try:
            with open(p, 'rb') as f:
                data = f.read()
        except OSError:
            continue
        scanned += 1
        if any(x.encode() in data for x in needles):
            files.append(p)
found['files under /opt/sandlot'] = files
print('LAYOUT ' + json.dumps({'found': found, 'scanned': scanned, 'prefix': sys.prefix,
                               'VIRTUAL_ENV': os.environ.get('VIRTUAL_ENV')}))
"#;

/// Builds a one-module wheel in /tmp and asks pip to install it without an index: pip gets as
/// far as writing into the environment, which is read-only.
const PIP_INSTALL: &str = r#"
import subprocess, sys, zipfile
whl = '/tmp/sandlotdemo-1.0-py3-none-any.whl'
with zipfile.ZipFile(whl, 'w') as z:
    z.writestr('sandlotdemo.py', 'x = 1\n')
    z.writestr('sandlotdemo-1.0.dist-info/METADATA',
               'Metadata-Version: 2.1\nName: sandlotdemo\nVersion: 1.0\n')
    z.writestr('sandlotdemo-1.0.dist-info/WHEEL',
               'Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n')
    z.writestr('sandlotdemo-1.0.dist-info/RECORD', '')
p = subprocess.run(['pip', 'install', '--no-index', '--no-deps', whl],
                   capture_output=True, text=True, timeout=120)
print('PIP ' + json.dumps({'rc': p.returncode, 'out': p.stdout + p.stderr}))
"#;

fn tagged(stdout: &str, tag: &str) -> Value {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(tag))
        .unwrap_or_else(|| panic!("no {tag} line in {stdout:?}"));
    serde_json::from_str(line).unwrap()
}

#[test]
fn the_host_layout_is_invisible_and_the_env_works_where_it_is_seen() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let data_dir = std::fs::canonicalize(server.data_dir()).unwrap();
    let env_dir = std::fs::canonicalize(common::env_dir()).unwrap();
    let needles = json!([
        data_dir.display().to_string(),
        server.data_dir().display().to_string(),
        env_dir.display().to_string(),
        common::env_dir().display().to_string(),
    ]);
    let code = format!("NEEDLES = {needles}\n{PROBE}");
    let result = server.execute(&id, &code);
    assert_eq!(result["end_state"], "ok", "{result}");
    let got = tagged(result["stdout"].as_str().unwrap(), "LAYOUT ");
    let nothing = json!({
        "os.environ": [], "sys.path": [], "sys prefixes": [], "modules": [],
        "/proc/self/mountinfo": [], "/proc/1/mountinfo": [], "/proc/self/maps": [],
        "/proc/self/cmdline": [], "/proc/self/environ": [], "/proc/self/cgroup": [],
        "files under /opt/sandlot": [],
    });
    assert_eq!(
        got["found"], nothing,
        "host paths {needles} seen inside: {got}"
    );
    // The scan read the environment and sandlot's own files, not an empty directory.
    assert!(got["scanned"].as_u64().unwrap() > 1000, "{got}");
    assert_eq!(got["prefix"], "/opt/sandlot/env");
    assert_eq!(got["VIRTUAL_ENV"], "/opt/sandlot/env");

    // Console scripts work at the neutral path; pip and %pip know where they are.
    let scripts = server.execute_bash(
        &id,
        "pip --version; ipython --version; python -c 'import sys; print(sys.executable)'",
    );
    let out = scripts["stdout"].as_str().unwrap();
    assert!(
        out.contains("from /opt/sandlot/env/lib/python3"),
        "pip --version: {scripts}"
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.get(2),
        Some(&"/opt/sandlot/env/bin/python"),
        "{scripts}"
    );
    let magic = server.execute(&id, "%pip --version");
    assert!(
        magic["stdout"]
            .as_str()
            .unwrap()
            .contains("from /opt/sandlot/env/lib/python3"),
        "{magic}"
    );
    // pip install puts packages in the workspace (`PIP_TARGET`), never in the environment,
    // which stays read-only; and what it prints names no host path.
    let pip = server.execute(&id, &format!("import json\n{PIP_INSTALL}"));
    let pip = tagged(pip["stdout"].as_str().unwrap(), "PIP ");
    let out = pip["out"].as_str().unwrap();
    assert_eq!(pip["rc"], 0, "{pip}");
    let placed = server.execute(
        &id,
        "import os, sandlotdemo\nprint(sandlotdemo.__file__)\n\
         try:\n    open('/opt/sandlot/env/lib/x', 'w')\nexcept OSError as e:\n    print(e.errno)",
    );
    let placed = placed["stdout"].as_str().unwrap();
    assert!(
        placed.starts_with("/workspace/.packages/sandlotdemo.py\n"),
        "{placed}"
    );
    assert!(
        placed.ends_with("30\n"),
        "the environment is read-only (EROFS): {placed}"
    );
    for needle in needles.as_array().unwrap() {
        assert!(!out.contains(needle.as_str().unwrap()), "{needle} in {out}");
    }
}

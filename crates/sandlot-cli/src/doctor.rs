//! `sandlot doctor`: which kernel features this host has, which isolation layers sandboxes get,
//! and what to do about each one missing.

use sandlot_jail::probe::Check;
use std::io::Write;

/// Runs the probe, prints the report; returns whether every required layer is available.
pub fn doctor(json: bool) -> anyhow::Result<bool> {
    let checks = sandlot_jail::probe::probe();
    let ready = ready(&checks);
    let mut out = std::io::stdout().lock();
    if json {
        let report = serde_json::json!({ "ready": ready, "checks": checks });
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        out.write_all(report(&checks).as_bytes())?;
    }
    out.flush()?;
    Ok(ready)
}

fn ready(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.ok || !c.required)
}

/// The report in plain words.
fn report(checks: &[Check]) -> String {
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut s = String::from("Kernel features and isolation layers on this host:\n\n");
    for c in checks {
        let mark = match (c.ok, c.required) {
            (true, _) => "ok     ",
            (false, true) => "MISSING",
            (false, false) => "missing",
        };
        let kind = if c.required { "required" } else { "optional" };
        s.push_str(&format!(
            "  {mark}  {:<width$}  ({kind}) {}\n",
            c.name, c.detail
        ));
        if let (false, Some(fix)) = (c.ok, &c.fix) {
            s.push_str(&format!("           {:<width$}  to fix: {fix}\n", ""));
        }
    }
    let missing_required = checks.iter().filter(|c| !c.ok && c.required).count();
    let missing_optional = checks.iter().filter(|c| !c.ok && !c.required).count();
    s.push('\n');
    if missing_required > 0 {
        s.push_str(&format!(
            "{missing_required} required layer(s) missing: sandlot cannot isolate sandboxes on this host until they are fixed.\n"
        ));
    } else {
        s.push_str("Every required layer is available: sandboxes can run here.\n");
    }
    if missing_optional > 0 {
        s.push_str(&format!(
            "{missing_optional} optional layer(s) missing: sandboxes run without them, with weaker isolation.\n"
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &'static str, ok: bool, required: bool) -> Check {
        Check {
            name,
            ok,
            required,
            detail: format!("{name} detail"),
            fix: (!ok).then(|| format!("fix {name}")),
        }
    }

    #[test]
    fn ready_needs_only_required_layers() {
        assert!(ready(&[check("a", true, true), check("b", false, false)]));
        assert!(!ready(&[check("a", false, true), check("b", true, false)]));
    }

    #[test]
    fn report_says_what_to_do() {
        let r = report(&[
            check("user namespace", true, true),
            check("landlock", false, false),
            check("seccomp", false, true),
        ]);
        assert!(r.contains("ok       user namespace"), "{r}");
        assert!(r.contains("to fix: fix landlock"), "{r}");
        assert!(r.contains("MISSING  seccomp"), "{r}");
        assert!(r.contains("1 required layer(s) missing"), "{r}");
        assert!(r.contains("1 optional layer(s) missing"), "{r}");
    }
}

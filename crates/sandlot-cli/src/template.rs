//! `sandlot template build FILE` and `sandlot template list`: a template file (TOML) turned
//! into a [`TemplateSpec`], sent to a server, and its build followed until it is ready or failed.
//!
//! ```toml
//! name = "sales"
//! description = "pandas with the sales data loaded"
//! packages = ["tabulate==0.9.0"]        # optional, pinned name==version
//! requirements = "requirements.txt"     # optional, next to this file, pinned lines only
//! imports = ["numpy", "pandas"]
//! setup = """
//! import pandas as pd
//! sales = pd.DataFrame({"region": ["n", "s"], "amount": [10, 20]})
//! """
//! [limits]
//! memory_mb = 2048
//! ```

use anyhow::anyhow;
use indicatif::{ProgressBar, ProgressStyle};
use sandlot_client::Client;
use sandlot_types::{Limits, Template, TemplateSpec, TemplateStatus};
use serde::Deserialize;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the build's status is asked for.
const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// A template file as written: [`TemplateSpec`]'s fields, plus `requirements`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TemplateFile {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    packages: Vec<String>,
    /// A requirements file, relative to the template file's directory.
    #[serde(default)]
    requirements: Option<PathBuf>,
    #[serde(default)]
    imports: Vec<String>,
    #[serde(default)]
    setup: Option<String>,
    #[serde(default)]
    limits: Limits,
}

/// Why a template file could not be turned into a spec.
#[derive(Debug, thiserror::Error)]
pub enum TemplateFileError {
    #[error("cannot read the template file {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Bad TOML, an unknown key or a wrong type; toml's message names the line and column.
    #[error("invalid template file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("cannot read the requirements file {path} (named by `requirements` in {file})")]
    ReadRequirements {
        path: PathBuf,
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {text:?} {reason}")]
    Requirement {
        path: PathBuf,
        line: usize,
        text: String,
        reason: &'static str,
    },
}

/// Reads a template file (and the requirements file it names) into a spec.
pub fn load(path: &Path) -> Result<TemplateSpec, TemplateFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| TemplateFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(path, &text)
}

/// The spec of a template file's text; `path` places the requirements file and names errors.
pub fn parse(path: &Path, text: &str) -> Result<TemplateSpec, TemplateFileError> {
    let file: TemplateFile = toml::from_str(text).map_err(|e| TemplateFileError::Parse {
        path: path.to_owned(),
        message: e.to_string().trim_end().to_owned(),
    })?;
    let mut packages = file.packages;
    if let Some(req) = &file.requirements {
        let req_path = path.parent().unwrap_or(Path::new(".")).join(req);
        let text = std::fs::read_to_string(&req_path).map_err(|source| {
            TemplateFileError::ReadRequirements {
                path: req_path.clone(),
                file: path.to_owned(),
                source,
            }
        })?;
        for pin in parse_requirements(&req_path, &text)? {
            if !packages.contains(&pin) {
                packages.push(pin);
            }
        }
    }
    Ok(TemplateSpec {
        name: file.name,
        description: file.description,
        packages,
        imports: file.imports,
        setup: file.setup,
        limits: file.limits,
    })
}

/// The pins of a requirements file: one `name==version` a line; comments and blank lines are
/// skipped; anything else (a range, an option, a URL) is an error naming the line.
pub fn parse_requirements(path: &Path, text: &str) -> Result<Vec<String>, TemplateFileError> {
    let mut pins = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = match raw.find('#') {
            Some(at) => &raw[..at],
            None => raw,
        }
        .trim();
        if line.is_empty() {
            continue;
        }
        let err = |reason| TemplateFileError::Requirement {
            path: path.to_owned(),
            line: i + 1,
            text: line.to_owned(),
            reason,
        };
        if line.starts_with('-') {
            return Err(err(
                "is an option; only pinned `name==version` lines are supported",
            ));
        }
        let Some((name, version)) = line.split_once("==") else {
            return Err(err("is not pinned: write it as name==version"));
        };
        let (name, version) = (name.trim(), version.trim());
        let name_ok = name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        let version_ok = !version.is_empty()
            && version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._+!-".contains(c));
        if !name_ok || !version_ok {
            return Err(err(
                "is not a plain name==version pin (no extras, markers, ranges or URLs)",
            ));
        }
        pins.push(format!("{name}=={version}"));
    }
    Ok(pins)
}

// ---------------------------------------------------------------------------------------------
// Talking to the server.

async fn create_template(client: &Client, spec: &TemplateSpec) -> anyhow::Result<Template> {
    Ok(client.post_json("/v1/templates", spec).await?)
}

async fn get_template(client: &Client, name: &str) -> anyhow::Result<Template> {
    Ok(client.get_json(&format!("/v1/templates/{name}")).await?)
}

async fn list_templates(client: &Client) -> anyhow::Result<Vec<Template>> {
    #[derive(Deserialize)]
    struct List {
        templates: Vec<Template>,
    }
    Ok(client.get_json::<List>("/v1/templates").await?.templates)
}

/// Shows the build while it runs: a spinner with the elapsed time on a terminal, a line at
/// the start and one a minute otherwise. Everything goes to stderr.
struct Progress {
    bar: Option<ProgressBar>,
    started: Instant,
    last_note: Instant,
}

impl Progress {
    fn start(name: &str) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} building template {msg} [{elapsed}]")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_message(name.to_owned());
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        if bar.is_none() {
            eprintln!("sandlot: building template {name}");
        }
        Progress {
            bar,
            started: Instant::now(),
            last_note: Instant::now(),
        }
    }

    fn tick(&mut self, name: &str) {
        if self.bar.is_none() && self.last_note.elapsed() >= Duration::from_secs(60) {
            self.last_note = Instant::now();
            eprintln!(
                "sandlot: still building template {name} ({:.0} s)",
                self.started.elapsed().as_secs_f64()
            );
        }
    }

    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

/// `sandlot template build`: exit status 0 when the template is ready, 1 when it failed.
pub async fn build(file: &Path, url: &str, timeout: Duration) -> anyhow::Result<u8> {
    let spec = load(file)?;
    let client = crate::client::connect(url)?;
    let name = spec.name.clone();
    let created = create_template(&client, &spec).await?;
    let mut progress = Progress::start(&name);
    let deadline = Instant::now() + timeout;
    let mut template = created;
    let outcome = loop {
        match template.status {
            TemplateStatus::Building => {}
            TemplateStatus::Ready | TemplateStatus::Failed => break Ok(template),
        }
        if Instant::now() >= deadline {
            break Err(anyhow!(
                "template {name} is still building after {} s; it goes on building on the \
                 server (see `sandlot template list`)",
                timeout.as_secs()
            ));
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL_INTERVAL) => {}
            _ = tokio::signal::ctrl_c() => {
                progress.finish();
                eprintln!("sandlot: stopped waiting; template {name} goes on building on the server");
                return Ok(crate::run::EXIT_CANCELLED);
            }
        }
        progress.tick(&name);
        template = match get_template(&client, &name).await {
            Ok(t) => t,
            Err(e) => break Err(e),
        };
    };
    let elapsed = progress.started.elapsed();
    progress.finish();
    let template = outcome?;
    if template.status == TemplateStatus::Failed {
        eprintln!(
            "sandlot: template {name} failed after {:.1} s:\n{}",
            elapsed.as_secs_f64(),
            template
                .error
                .as_deref()
                .unwrap_or("the server gave no reason")
                .trim_end()
        );
        return Ok(1);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "name: {}", template.name)?;
    writeln!(out, "version: {}", template.version)?;
    match template.prepare_seconds {
        Some(s) => writeln!(out, "prepare_seconds: {s:.3}")?,
        None => writeln!(out, "prepare_seconds: -")?,
    }
    out.flush()?;
    eprintln!(
        "sandlot: template {name} is ready ({:.1} s)",
        elapsed.as_secs_f64()
    );
    Ok(0)
}

/// `sandlot template delete NAME [--tenant T]`.
pub async fn delete(url: &str, name: &str, tenant: Option<&str>) -> anyhow::Result<u8> {
    // Template and tenant names are [a-z0-9_-]: anything else would change the path.
    let plain = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    };
    if !plain(name) || !tenant.is_none_or(plain) {
        anyhow::bail!("template and tenant names are [a-z0-9_-]");
    }
    let path = match tenant {
        Some(t) => format!("/v1/templates/{name}?tenant={t}"),
        None => format!("/v1/templates/{name}"),
    };
    crate::client::connect(url)?.delete(&path).await?;
    eprintln!("sandlot: template {name} deleted");
    Ok(0)
}

/// `sandlot template list`: a table, or the templates as JSON.
pub async fn list(url: &str, json: bool) -> anyhow::Result<u8> {
    let templates = list_templates(&crate::client::connect(url)?).await?;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &templates)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", table(&templates))?;
    }
    out.flush()?;
    Ok(0)
}

fn status_word(s: TemplateStatus) -> &'static str {
    match s {
        TemplateStatus::Building => "building",
        TemplateStatus::Ready => "ready",
        TemplateStatus::Failed => "failed",
    }
}

/// NAME, TENANT, STATUS, VERSION, PREPARE and what the template is (or why it failed, first
/// line).
fn table(templates: &[Template]) -> String {
    let rows: Vec<[String; 6]> = templates
        .iter()
        .map(|t| {
            let about = match (&t.error, &t.spec.description) {
                (Some(e), _) => e.lines().next().unwrap_or("").to_owned(),
                (None, Some(d)) => d.lines().next().unwrap_or("").to_owned(),
                (None, None) => String::new(),
            };
            [
                t.name.clone(),
                t.tenant.clone(),
                status_word(t.status).to_owned(),
                t.version.clone(),
                t.prepare_seconds
                    .map_or_else(|| "-".to_owned(), |s| format!("{s:.2}s")),
                about,
            ]
        })
        .collect();
    let header = ["NAME", "TENANT", "STATUS", "VERSION", "PREPARE", "ABOUT"].map(String::from);
    let mut widths = [0usize; 5];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut s = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (w, cell) in widths.iter().zip(row) {
            line.push_str(&format!("{cell:<w$}  ", w = *w));
        }
        line.push_str(&row[5]);
        s.push_str(line.trim_end());
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const SALES: &str = r#"
name = "sales"
description = "pandas with the sales data loaded"
packages = ["tabulate==0.9.0"]
imports = ["numpy", "pandas"]
setup = """
import pandas as pd
sales = pd.DataFrame({"region": ["n", "s"], "amount": [10, 20]})
"""
[limits]
memory_mb = 2048
"#;

    #[test]
    fn a_template_file_becomes_a_spec() {
        let spec = parse(Path::new("/x/sales.toml"), SALES).unwrap();
        assert_eq!(spec.name, "sales");
        assert_eq!(spec.packages, ["tabulate==0.9.0"]);
        assert_eq!(spec.imports, ["numpy", "pandas"]);
        assert!(spec.setup.unwrap().starts_with("import pandas as pd\n"));
        assert_eq!(spec.limits.memory_mb, Some(2048));
        assert_eq!(spec.limits.cpu_millis, None);
        // Only the name is required.
        let spec = parse(Path::new("t.toml"), "name = \"bare\"").unwrap();
        assert_eq!(
            spec,
            TemplateSpec {
                name: "bare".into(),
                ..Default::default()
            }
        );
    }

    #[test]
    fn bad_files_say_where() {
        let e = parse(Path::new("t.toml"), "name = \"a\"\nimports = [\"x\"\n").unwrap_err();
        let m = e.to_string();
        assert!(m.contains("t.toml") && m.contains("line 2"), "{m}");
        let e = parse(Path::new("t.toml"), "name = \"a\"\npakages = []\n").unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("unknown field `pakages`") && m.contains("line 2"),
            "{m}"
        );
        let e = parse(Path::new("t.toml"), "name = \"a\"\n[limits]\nmemory = 1\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `memory`"), "{e}");
        let e = parse(Path::new("t.toml"), "description = \"a\"\n").unwrap_err();
        assert!(e.to_string().contains("missing field `name`"), "{e}");
        let e = parse(Path::new("t.toml"), "name = 3\n").unwrap_err();
        assert!(e.to_string().contains("invalid type"), "{e}");
        let e = anyhow::Error::from(load(Path::new("/nonexistent/t.toml")).unwrap_err());
        let m = format!("{e:#}");
        assert!(
            m.contains("/nonexistent/t.toml") && m.contains("No such file"),
            "{m}"
        );
    }

    #[test]
    fn requirements_are_pinned_lines() {
        let p = Path::new("req.txt");
        let pins = parse_requirements(
            p,
            "# data\n\ntabulate==0.9.0  # tables\n  Foo_Bar == 1.2.post1\n",
        )
        .unwrap();
        assert_eq!(pins, ["tabulate==0.9.0", "Foo_Bar==1.2.post1"]);
        for (text, line, why) in [
            ("a==1\nrequests\n", 2, "not pinned"),
            ("requests>=2\n", 1, "not pinned"),
            ("\n\n-r other.txt\n", 3, "option"),
            ("a[x]==1\n", 1, "extras"),
            ("a==1; python_version>'3'\n", 1, "markers"),
            ("a==\n", 1, "name==version"),
        ] {
            let e = parse_requirements(p, text).unwrap_err();
            let TemplateFileError::Requirement { line: l, .. } = &e else {
                panic!("{e}");
            };
            assert_eq!(*l, line, "{text}: {e}");
            let m = e.to_string();
            assert!(m.starts_with(&format!("req.txt:{line}: ")), "{m}");
            assert!(m.contains(why), "{m}");
        }
    }

    #[test]
    fn requirements_file_is_read_next_to_the_template() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("requirements.txt"),
            "tabulate==0.9.0\nsix==1.16.0\n",
        )
        .unwrap();
        let file = dir.path().join("t.toml");
        std::fs::write(
            &file,
            "name = \"t\"\npackages = [\"tabulate==0.9.0\"]\nrequirements = \"requirements.txt\"\n",
        )
        .unwrap();
        let spec = load(&file).unwrap();
        assert_eq!(spec.packages, ["tabulate==0.9.0", "six==1.16.0"]);
        std::fs::write(&file, "name = \"t\"\nrequirements = \"missing.txt\"\n").unwrap();
        let e = load(&file).unwrap_err();
        assert!(
            matches!(e, TemplateFileError::ReadRequirements { .. }),
            "{e}"
        );
        assert!(e.to_string().contains("missing.txt"), "{e}");
    }

    #[test]
    fn the_list_is_a_table() {
        let t = |name: &str, status, error: Option<&str>| Template {
            name: name.into(),
            version: "abcdef0123456789".into(),
            status,
            error: error.map(String::from),
            spec: TemplateSpec {
                name: name.into(),
                description: Some("the data stack".into()),
                ..Default::default()
            },
            created_at: "2025-01-01T00:00:00Z".into(),
            tenant: "default".into(),
            prepare_seconds: (status == TemplateStatus::Ready).then_some(0.5),
        };
        let s = table(&[
            t("default", TemplateStatus::Ready, None),
            t("broken", TemplateStatus::Failed, Some("setup raised\nmore")),
        ]);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 3, "{s}");
        assert!(lines[0].starts_with("NAME "), "{s}");
        assert!(
            lines[1].contains("ready") && lines[1].contains("0.50s"),
            "{s}"
        );
        assert!(lines[1].ends_with("the data stack"), "{s}");
        assert!(lines[2].ends_with("setup raised"), "{s}");
    }
}

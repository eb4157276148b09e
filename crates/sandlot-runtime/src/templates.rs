//! Templates: named environments sandboxes are forked from. Each has a spec (extra pinned
//! packages, modules to pre-import, setup code, default limits), a content-addressed version, a
//! Python environment (the default one, or one provisioned with its extra packages) and a
//! zygote that has imported its modules and run its setup once.

use crate::zygote::{Zygote, ZygoteSpec};
use sandlot_types::{ApiError, ErrorCode, Template, TemplateSpec, TemplateStatus};
use std::sync::{Arc, Mutex};

/// The built-in template: the data stack, imported once.
pub fn default_spec() -> TemplateSpec {
    TemplateSpec {
        name: "default".into(),
        description: Some(
            "Python with numpy, pandas, matplotlib (inline PNG figures) and IPython pre-imported"
                .into(),
        ),
        packages: vec![],
        imports: [
            "numpy",
            "pandas",
            "matplotlib",
            "matplotlib.pyplot",
            "IPython",
        ]
        .map(String::from)
        .to_vec(),
        setup: None,
        limits: Default::default(),
    }
}

/// A template the runtime knows, and its zygote once built.
pub struct Tmpl {
    pub spec: TemplateSpec,
    pub version: String,
    pub created_at: String,
    pub state: Mutex<(TemplateStatus, Option<String>, Option<f64>)>,
    pub zygote_spec: Mutex<Option<ZygoteSpec>>,
    pub zygote: tokio::sync::RwLock<Option<Arc<Zygote>>>,
    /// Host uid of this template's zygote.
    pub zygote_uid: u32,
    /// The Python environment its zygote and sandboxes run in.
    pub env_root: std::path::PathBuf,
    /// Booted, idle sandboxes waiting to be handed out, and whether a refill is running.
    pub pool: Mutex<Vec<Arc<crate::sandbox::Live>>>,
    pub refilling: std::sync::atomic::AtomicBool,
}

impl Tmpl {
    pub fn view(&self) -> Template {
        let (status, error, prepare) = self.state.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Template {
            name: self.spec.name.clone(),
            version: self.version.clone(),
            status,
            error,
            spec: self.spec.clone(),
            created_at: self.created_at.clone(),
            prepare_seconds: prepare,
        }
    }

    pub fn set(&self, status: TemplateStatus, error: Option<String>, prepare: Option<f64>) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = (status, error, prepare);
    }

    pub fn status(&self) -> (TemplateStatus, Option<String>) {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (s.0, s.1.clone())
    }
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidArgument, msg)
}

fn is_identifier_path(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 200
        && s.split('.').all(|part| {
            let mut c = part.chars();
            matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_')
                && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
        })
}

/// Checks a spec before anything is built.
pub fn validate(spec: &TemplateSpec) -> Result<(), ApiError> {
    let name_ok = !spec.name.is_empty()
        && spec.name.len() <= 63
        && spec
            .name
            .starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && spec
            .name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !name_ok {
        return Err(bad(format!(
            "template name {:?} must be 1-63 characters of a-z, 0-9, '-' and '_', starting with a letter or digit",
            spec.name
        )));
    }
    if spec.packages.len() > 200 {
        return Err(bad("at most 200 packages"));
    }
    for p in &spec.packages {
        let Some((name, version)) = p.split_once("==") else {
            return Err(bad(format!(
                "package {p:?} must be pinned as name==version"
            )));
        };
        let name_ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && name.starts_with(|c: char| c.is_ascii_alphanumeric());
        let version_ok = !version.is_empty()
            && version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._+!-".contains(c));
        if !name_ok || !version_ok {
            return Err(bad(format!(
                "package {p:?} is not a valid name==version pin"
            )));
        }
    }
    if spec.imports.len() > 200 {
        return Err(bad("at most 200 imports"));
    }
    for m in &spec.imports {
        if !is_identifier_path(m) {
            return Err(bad(format!("import {m:?} is not a module name")));
        }
    }
    if spec
        .setup
        .as_ref()
        .is_some_and(|s| s.len() > (1 << 20) || s.contains('\0'))
    {
        return Err(bad(
            "setup code must be at most 1 MiB and contain no NUL byte",
        ));
    }
    if spec.description.as_ref().is_some_and(|d| d.len() > 4096) {
        return Err(bad("description must be at most 4096 bytes"));
    }
    Ok(())
}

/// The template file the zygote reads: what to import and the setup code.
pub fn zygote_file(spec: &TemplateSpec) -> String {
    serde_json::json!({"name": spec.name, "imports": spec.imports, "setup": spec.setup}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> TemplateSpec {
        TemplateSpec {
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn validates_names_packages_imports() {
        assert!(validate(&spec("data-2")).is_ok());
        assert!(validate(&spec("Data")).is_err());
        assert!(validate(&spec("../x")).is_err());
        assert!(validate(&spec("")).is_err());
        let mut s = spec("ok");
        s.packages = vec!["requests".into()];
        assert!(validate(&s).is_err(), "unpinned");
        s.packages = vec!["requests==2.32.3".into()];
        assert!(validate(&s).is_ok());
        s.packages = vec!["--index-url==x".into()];
        assert!(validate(&s).is_err());
        s.packages.clear();
        s.imports = vec!["os.path".into(), "numpy".into()];
        assert!(validate(&s).is_ok());
        s.imports = vec!["os; import sys".into()];
        assert!(validate(&s).is_err());
    }
}

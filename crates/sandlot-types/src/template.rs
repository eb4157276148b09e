//! Templates: the spec of `POST /v1/templates`, its build status and the template as listed.

use crate::Limits;
use serde::{Deserialize, Serialize};

/// A template: a named environment sandboxes are forked from. Body of `POST /v1/templates`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TemplateSpec {
    /// `[a-z0-9][a-z0-9_-]{0,62}`; `default` is the built-in template and cannot be replaced.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Extra Python packages, each pinned as `name==version`, installed on top of the default
    /// stack (ipython, numpy, pandas, matplotlib, cloudpickle).
    #[serde(default)]
    pub packages: Vec<String>,
    /// Modules imported once in the template's zygote, so every sandbox starts with them loaded.
    #[serde(default)]
    pub imports: Vec<String>,
    /// Python run once in the zygote; the variables it leaves are in every sandbox, shared
    /// copy-on-write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    /// Default limits of the template's sandboxes (a create request may override them).
    #[serde(default)]
    pub limits: Limits,
}

/// Where a template's build is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TemplateStatus {
    Building,
    Ready,
    Failed,
}

/// A template as the API reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Template {
    pub name: String,
    /// Content hash of the spec and the environment it resolved to.
    pub version: String,
    pub status: TemplateStatus,
    /// Why the build failed (an unknown package, a setup script that raised, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub spec: TemplateSpec,
    pub created_at: String,
    /// The tenant whose template it is (names are per tenant; the built-in `default` is the
    /// tenant `default`'s and every tenant's to use).
    #[serde(default)]
    pub tenant: String,
    /// Seconds the zygote took to import the modules and run the setup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare_seconds: Option<f64>,
}

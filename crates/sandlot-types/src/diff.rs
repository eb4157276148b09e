//! The divergence of two sandboxes of one family (`GET /v1/sandboxes/{id}/diff/{other}`).

use serde::{Deserialize, Serialize};

/// `GET /v1/sandboxes/{id}/diff/{other}` response: which variables and which workspace
/// entries differ between two sandboxes of one family. `a` is `{id}`, `b` is `{other}`;
/// `added` means only in `b`, `removed` only in `a`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxDiff {
    pub a: String,
    pub b: String,
    /// Variables that differ, `default` context first, then by context and name.
    pub variables: Vec<VariableDiff>,
    /// Workspace entries that differ, by path.
    pub files: Vec<FileDiff>,
    /// Whether the file comparison stopped short: a workspace with more entries than a diff
    /// walks (only paths up to where both walks stopped are compared), or more differing
    /// entries than a diff lists.
    pub truncated: bool,
    /// What could not be compared, and why.
    pub not_compared: Vec<NotCompared>,
}

/// How an entry differs between `a` and `b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffChange {
    /// Only in `b`.
    Added,
    /// Only in `a`.
    Removed,
    /// In both, different.
    Changed,
}

/// A variable that differs: `a` and `b` are what each side holds (null where it has none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariableDiff {
    pub context: String,
    pub name: String,
    pub change: DiffChange,
    pub a: Option<VariableSummary>,
    pub b: Option<VariableSummary>,
}

/// One side of a differing variable: its type's name and the size of its pickle in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariableSummary {
    #[serde(rename = "type")]
    pub type_name: String,
    pub size: u64,
}

/// A workspace entry (path relative to `/workspace`) that differs. Kinds are `file`, `dir`,
/// `symlink` or `other`; sizes are a file's length, a symlink's target length, 0 for the rest;
/// null on the side that does not have it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDiff {
    pub path: String,
    pub change: DiffChange,
    pub a_kind: Option<String>,
    pub b_kind: Option<String>,
    pub a_size: Option<u64>,
    pub b_size: Option<u64>,
}

/// What a diff compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffItemKind {
    Variable,
    File,
}

/// Something a diff could not compare: a variable one side could not digest (as a save
/// could not capture it), or a workspace entry it could not read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotCompared {
    /// The sandbox it concerns; null when it concerns both.
    pub sandbox: Option<String>,
    pub kind: DiffItemKind,
    /// The code context of a variable; null for a file.
    pub context: Option<String>,
    /// The variable's name, or the entry's path.
    pub name: String,
    pub reason: String,
}

//! The gates: one Cedar action of the `Sandlot` namespace each. The vocabulary both the schema
//! (which declares an action per gate) and the queries (which name the gate they ask about)
//! are written in, so it sits below both.

use serde::{Deserialize, Serialize};

/// A gate: one Cedar action of the `Sandlot` namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Gate {
    CreateSandbox,
    SelectTier,
    Execute,
    ReadFile,
    WriteFile,
    Egress,
    BuildTemplate,
    OutputRedact,
    OutputWithhold,
    OutputContain,
    MountHostPath,
}

impl Gate {
    pub const ALL: [Gate; 11] = [
        Gate::CreateSandbox,
        Gate::SelectTier,
        Gate::Execute,
        Gate::ReadFile,
        Gate::WriteFile,
        Gate::Egress,
        Gate::BuildTemplate,
        Gate::OutputRedact,
        Gate::OutputWithhold,
        Gate::OutputContain,
        Gate::MountHostPath,
    ];

    /// The Cedar action id (`Sandlot::Action::"<this>"`), also the serde name.
    pub fn as_str(self) -> &'static str {
        match self {
            Gate::CreateSandbox => "create_sandbox",
            Gate::SelectTier => "select_tier",
            Gate::Execute => "execute",
            Gate::ReadFile => "read_file",
            Gate::WriteFile => "write_file",
            Gate::Egress => "egress",
            Gate::BuildTemplate => "build_template",
            Gate::OutputRedact => "output_redact",
            Gate::OutputWithhold => "output_withhold",
            Gate::OutputContain => "output_contain",
            Gate::MountHostPath => "mount_host_path",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

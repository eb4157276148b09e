//! The shipped `Sandlot` Cedar schema and default policy set, and the entity type names and
//! action ids the engine builds requests from (parsed once, reused by every decision).

use crate::gate::Gate;
use cedar_policy::{EntityId, EntityTypeName, EntityUid};
use std::str::FromStr;
use std::sync::LazyLock;

/// The schema written to `<dir>/schema.cedarschema` when absent. Every attribute and context
/// field the engine fills in is declared here; policies are validated strictly against it.
pub const SCHEMA: &str = r#"// The sandlot policy schema (Cedar). Policies in policies.cedar are validated strictly
// against it on load and on every replace. The server fills in exactly these attributes and
// context fields; an edited schema must keep them (the server refuses to start otherwise).
namespace Sandlot {
  // A tenant: owns keys, sandboxes, templates. `plan` is "local" for the bootstrap tenant
  // `default`, "free" for new tenants unless set otherwise.
  entity Tenant = { plan: String };

  // The principal of every request: an API key. Its uid is the key id.
  entity Key in [Tenant] = {
    tenant: Tenant,
    role: String,   // "admin" | "member"
    plan: String,   // the tenant's plan, copied for convenience
    prefix: String, // the key's public prefix (the 8 characters after "sl_")
  };

  entity Sandbox in [Tenant] = { tenant: Tenant, template: String, tier: String };
  entity Template = { name: String };
  entity Domain = { name: String };
  entity Tier = { name: String };
  entity Output = { sandbox: Sandbox };
  // A host file or directory (its absolute path) a trusted-tier sandbox asks to mount.
  entity HostPath = { path: String };

  // What a sandbox creation asks for (also the context of the tier choice).
  type SandboxRequest = {
    memory_mb: Long,
    cpu_millis: Long,
    pids: Long,
    disk_mb: Long,
    network: Bool,        // true when any egress is asked for
    allow: Set<String>,   // the egress allowlist asked for (domains, CIDRs)
    tier: String,         // the tier asked for
    ports: Long,          // how many ports are exposed
  };

  // A guardrail finding in a sandbox's output.
  type Finding = {
    rule: String,   // the detector rule, e.g. "aws-access-key-id"
    kind: String,   // "secret" | "canary"
    stream: String, // "stdout" | "stderr" | "result" | "file" | "egress"
  };

  action create_sandbox appliesTo { principal: Key, resource: Template, context: SandboxRequest };
  action select_tier appliesTo { principal: Key, resource: Tier, context: SandboxRequest };
  // `code` is the code itself (a policy may hold or refuse code that matches a pattern:
  // `context.code like "*rm -rf*"`).
  action execute appliesTo {
    principal: Key, resource: Sandbox, context: { code_bytes: Long, language: String, code: String }
  };
  // `bytes` is the size written (0 for a read).
  action read_file, write_file appliesTo {
    principal: Key, resource: Sandbox, context: { path: String, bytes: Long }
  };
  // `ip` is "" before name resolution; `method` is "CONNECT", "GET", ...
  action egress appliesTo {
    principal: Key, resource: Domain,
    context: { host: String, port: Long, ip: String, method: String }
  };
  action build_template appliesTo { principal: Key, resource: Template, context: { packages: Long } };
  // Output outcomes: tried contain, withhold, redact in that order; the first permitted wins,
  // none permitted = the output passes.
  action output_redact, output_withhold, output_contain appliesTo {
    principal: Key, resource: Output, context: Finding
  };
  // A read-only host path mounted at `target` (under /mnt) in a sandbox of tier `tier`; asked
  // at creation (and again by whoever forks it). The shipped set permits it for no one.
  action mount_host_path appliesTo {
    principal: Key, resource: HostPath, context: { target: String, tier: String }
  };
}
"#;

/// Schemas shipped before, word for word: a schema file on disk equal to one of them was never
/// edited, and is replaced with [`SCHEMA`] when the engine opens (an edited one is kept, and
/// refused if it lacks what the server sends now).
pub(crate) const PREVIOUS_SCHEMAS: &[&str] = &[
    r#"// The sandlot policy schema (Cedar). Policies in policies.cedar are validated strictly
// against it on load and on every replace. The server fills in exactly these attributes and
// context fields; an edited schema must keep them (the server refuses to start otherwise).
namespace Sandlot {
  // A tenant: owns keys, sandboxes, templates. `plan` is "local" for the bootstrap tenant
  // `default`, "free" for new tenants unless set otherwise.
  entity Tenant = { plan: String };

  // The principal of every request: an API key. Its uid is the key id.
  entity Key in [Tenant] = {
    tenant: Tenant,
    role: String,   // "admin" | "member"
    plan: String,   // the tenant's plan, copied for convenience
    prefix: String, // the key's public prefix (the 8 characters after "sl_")
  };

  entity Sandbox in [Tenant] = { tenant: Tenant, template: String, tier: String };
  entity Template = { name: String };
  entity Domain = { name: String };
  entity Tier = { name: String };
  entity Output = { sandbox: Sandbox };

  // What a sandbox creation asks for (also the context of the tier choice).
  type SandboxRequest = {
    memory_mb: Long,
    cpu_millis: Long,
    pids: Long,
    disk_mb: Long,
    network: Bool,        // true when any egress is asked for
    allow: Set<String>,   // the egress allowlist asked for (domains, CIDRs)
    tier: String,         // the tier asked for
    ports: Long,          // how many ports are exposed
  };

  // A guardrail finding in a sandbox's output.
  type Finding = {
    rule: String,   // the detector rule, e.g. "aws-access-key-id"
    kind: String,   // "secret" | "canary"
    stream: String, // "stdout" | "stderr" | "result" | "file" | "egress"
  };

  action create_sandbox appliesTo { principal: Key, resource: Template, context: SandboxRequest };
  action select_tier appliesTo { principal: Key, resource: Tier, context: SandboxRequest };
  // `code` is the code itself (a policy may hold or refuse code that matches a pattern:
  // `context.code like "*rm -rf*"`).
  action execute appliesTo {
    principal: Key, resource: Sandbox, context: { code_bytes: Long, language: String, code: String }
  };
  // `bytes` is the size written (0 for a read).
  action read_file, write_file appliesTo {
    principal: Key, resource: Sandbox, context: { path: String, bytes: Long }
  };
  // `ip` is "" before name resolution; `method` is "CONNECT", "GET", ...
  action egress appliesTo {
    principal: Key, resource: Domain,
    context: { host: String, port: Long, ip: String, method: String }
  };
  action build_template appliesTo { principal: Key, resource: Template, context: { packages: Long } };
  // Output outcomes: tried contain, withhold, redact in that order; the first permitted wins,
  // none permitted = the output passes.
  action output_redact, output_withhold, output_contain appliesTo {
    principal: Key, resource: Output, context: Finding
  };
}
"#,
    r#"// The sandlot policy schema (Cedar). Policies in policies.cedar are validated strictly
// against it on load and on every replace. The server fills in exactly these attributes and
// context fields; an edited schema must keep them (the server refuses to start otherwise).
namespace Sandlot {
  // A tenant: owns keys, sandboxes, templates. `plan` is "local" for the bootstrap tenant
  // `default`, "free" for new tenants unless set otherwise.
  entity Tenant = { plan: String };

  // The principal of every request: an API key. Its uid is the key id.
  entity Key in [Tenant] = {
    tenant: Tenant,
    role: String,   // "admin" | "member"
    plan: String,   // the tenant's plan, copied for convenience
    prefix: String, // the key's public prefix (the 8 characters after "sl_")
  };

  entity Sandbox in [Tenant] = { tenant: Tenant, template: String, tier: String };
  entity Template = { name: String };
  entity Domain = { name: String };
  entity Tier = { name: String };
  entity Output = { sandbox: Sandbox };

  // What a sandbox creation asks for (also the context of the tier choice).
  type SandboxRequest = {
    memory_mb: Long,
    cpu_millis: Long,
    pids: Long,
    disk_mb: Long,
    network: Bool,        // true when any egress is asked for
    allow: Set<String>,   // the egress allowlist asked for (domains, CIDRs)
    tier: String,         // the tier asked for
    ports: Long,          // how many ports are exposed
  };

  // A guardrail finding in a sandbox's output.
  type Finding = {
    rule: String,   // the detector rule, e.g. "aws-access-key-id"
    kind: String,   // "secret" | "canary"
    stream: String, // "stdout" | "stderr" | "result" | "file" | "egress"
  };

  action create_sandbox appliesTo { principal: Key, resource: Template, context: SandboxRequest };
  action select_tier appliesTo { principal: Key, resource: Tier, context: SandboxRequest };
  action execute appliesTo {
    principal: Key, resource: Sandbox, context: { code_bytes: Long, language: String }
  };
  // `bytes` is the size written (0 for a read).
  action read_file, write_file appliesTo {
    principal: Key, resource: Sandbox, context: { path: String, bytes: Long }
  };
  // `ip` is "" before name resolution; `method` is "CONNECT", "GET", ...
  action egress appliesTo {
    principal: Key, resource: Domain,
    context: { host: String, port: Long, ip: String, method: String }
  };
  action build_template appliesTo { principal: Key, resource: Template, context: { packages: Long } };
  // Output outcomes: tried contain, withhold, redact in that order; the first permitted wins,
  // none permitted = the output passes.
  action output_redact, output_withhold, output_contain appliesTo {
    principal: Key, resource: Output, context: Finding
  };
}
"#,
];

/// The policy set written to `<dir>/policies.cedar` when absent.
pub const DEFAULT_POLICIES: &str = r#"// sandlot policies (Cedar). Every policy needs a unique @id("...") (lowercase letters,
// digits, '_', '.', '-'; at most 64) naming it in decisions; @reason("...") is the text a
// denial gives. Validated strictly against schema.cedarschema; replace with PUT /v1/policies.

@id("allow-all-gates")
@reason("every authenticated key may use every gate")
permit (
  principal,
  action in [
    Sandlot::Action::"create_sandbox",
    Sandlot::Action::"execute",
    Sandlot::Action::"read_file",
    Sandlot::Action::"write_file",
    Sandlot::Action::"egress"
  ],
  resource
);

// A template's imports and setup run in its zygote, confined like a sandbox: every key may
// build one. Installing packages runs the packages' own code (at install, import and byte
// compilation) in a build jail; still, which packages exist on this box is the operator's to
// decide, so only the operator may, unless a policy grants it to others.
@id("templates-without-packages")
@reason("every key may build a template that installs no packages")
permit (principal, action == Sandlot::Action::"build_template", resource)
when { context.packages == 0 };

@id("templates-with-packages-operator")
@reason("only the operator (an admin key of tenant default) may build a template that installs packages")
permit (principal, action == Sandlot::Action::"build_template", resource)
when { principal.role == "admin" && principal.tenant == Sandlot::Tenant::"default" };

// Tiers are chosen from the least privileged upward: everyone may run isolated; the trusted
// tier (network, host paths, higher limits) only for the local single-user plan.
@id("isolated-tier")
@reason("every key may run in the isolated tier")
permit (principal, action == Sandlot::Action::"select_tier", resource == Sandlot::Tier::"isolated");

@id("trusted-tier-local")
@reason("the trusted tier is for the local single-user plan")
permit (principal, action == Sandlot::Action::"select_tier", resource == Sandlot::Tier::"trusted")
when { principal.plan == "local" };

@id("contain-canary")
@reason("the sandbox's canary credential appeared in its output: contained")
permit (principal, action == Sandlot::Action::"output_contain", resource)
when { context.kind == "canary" };

@id("redact-secrets")
@reason("secrets are redacted from output")
permit (principal, action == Sandlot::Action::"output_redact", resource)
when { context.kind == "secret" };
"#;

/// Entity type names and action uids, parsed once.
pub(crate) struct Names {
    pub key: EntityTypeName,
    pub tenant: EntityTypeName,
    pub sandbox: EntityTypeName,
    pub template: EntityTypeName,
    pub domain: EntityTypeName,
    pub tier: EntityTypeName,
    pub output: EntityTypeName,
    pub host_path: EntityTypeName,
    actions: Vec<EntityUid>,
}

impl Names {
    fn new() -> Names {
        // Constant names: a typo would fail every test.
        let ty = |n: &str| EntityTypeName::from_str(n).expect("valid entity type name");
        let action_ty = ty("Sandlot::Action");
        Names {
            key: ty("Sandlot::Key"),
            tenant: ty("Sandlot::Tenant"),
            sandbox: ty("Sandlot::Sandbox"),
            template: ty("Sandlot::Template"),
            domain: ty("Sandlot::Domain"),
            tier: ty("Sandlot::Tier"),
            output: ty("Sandlot::Output"),
            host_path: ty("Sandlot::HostPath"),
            actions: Gate::ALL
                .iter()
                .map(|g| {
                    EntityUid::from_type_name_and_id(action_ty.clone(), EntityId::new(g.as_str()))
                })
                .collect(),
        }
    }

    /// The action uid of a gate (`Sandlot::Action::"<gate>"`).
    pub fn action(&self, gate: Gate) -> &EntityUid {
        &self.actions[gate.index()]
    }

    pub fn uid(&self, ty: &EntityTypeName, id: &str) -> EntityUid {
        EntityUid::from_type_name_and_id(ty.clone(), EntityId::new(id))
    }
}

pub(crate) static NAMES: LazyLock<Names> = LazyLock::new(Names::new);

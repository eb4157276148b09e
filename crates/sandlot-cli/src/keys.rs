//! `sandlot keys create|list|revoke` and `sandlot tenants create|list|set`: a server's API keys
//! and tenants from the command line, through its admin routes (`/v1/keys`, `/v1/tenants`).
//!
//! `keys create` prints the key alone on stdout (so `KEY=$(sandlot keys create ...)` works)
//! and what it is on stderr: the server shows a key once, at creation, and keeps only its hash.
//! `tenants set` changes only the flags given: it reads the tenant's quotas, applies the flags
//! and sends the whole set back (the server replaces quotas as a whole). A quota flag given
//! `unlimited` removes that quota.
//!
//! The key these commands send is `$SANDLOT_API_KEY`, else the local admin key in the data dir
//! (see `config::api_key`); managing tenants and other tenants' keys needs an admin key.

use clap::{Args, Subcommand};
use sandlot_client::segment;
use sandlot_types::{ApiKeyInfo, CreateKey, CreateTenant, CreatedKey, Role, Tenant, TenantQuotas};
use serde::Deserialize;
use std::io::Write;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create an API key for a tenant; the key is printed once and never shown again.
    #[command(after_help = crate::config::env_help(&[crate::config::URL, crate::config::API_KEY]))]
    Create {
        /// The tenant the key acts for (it must exist)
        #[arg(long, value_name = "TENANT")]
        tenant: String,
        /// An admin key (manages tenants and keys) instead of a member key
        #[arg(long)]
        admin: bool,
        /// A label to recognise the key by
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Print the key and its record as JSON
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        url: UrlArg,
    },
    /// List API keys (never their secrets): every tenant's for an admin, else the caller's own.
    #[command(after_help = crate::config::env_help(&[crate::config::URL, crate::config::API_KEY]))]
    List {
        /// Only this tenant's keys
        #[arg(long, value_name = "TENANT")]
        tenant: Option<String>,
        /// Print the keys as JSON
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        url: UrlArg,
    },
    /// Revoke API keys by id; they are refused from the server's next request on.
    #[command(after_help = crate::config::env_help(&[crate::config::URL, crate::config::API_KEY]))]
    Revoke {
        #[arg(value_name = "ID", required = true)]
        ids: Vec<String>,
        #[command(flatten)]
        url: UrlArg,
    },
}

#[derive(Debug, Subcommand)]
pub enum TenantsCommand {
    /// Create a tenant (admin).
    #[command(after_help = crate::config::env_help(&[crate::config::URL, crate::config::API_KEY]))]
    Create {
        #[arg(value_name = "NAME")]
        name: String,
        #[command(flatten)]
        settings: TenantArgs,
        /// Print the tenant as JSON
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        url: UrlArg,
    },
    /// List tenants with their plans and quotas (admin).
    #[command(after_help = crate::config::env_help(&[crate::config::URL, crate::config::API_KEY]))]
    List {
        /// Print the tenants as JSON
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        url: UrlArg,
    },
    /// Change a tenant's plan or quotas (admin); quotas not named keep their values.
    #[command(after_help = crate::config::env_help(&[crate::config::URL, crate::config::API_KEY]))]
    Set {
        #[arg(value_name = "NAME")]
        name: String,
        #[command(flatten)]
        settings: TenantArgs,
        /// Print the tenant as JSON
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        url: UrlArg,
    },
}

#[derive(Debug, Args)]
pub struct UrlArg {
    /// The sandlot server
    #[arg(long, value_name = "URL", env = crate::config::URL, default_value = crate::config::DEFAULT_URL)]
    url: String,
}

/// A tenant's plan and quotas as flags; quota flags take a number or `unlimited`.
#[derive(Debug, Args)]
pub struct TenantArgs {
    /// The plan policies test (`free` for a new tenant when not given)
    #[arg(long, value_name = "PLAN")]
    plan: Option<String>,
    /// Most sandboxes running at once (paused ones do not count)
    #[arg(long, value_name = "N", value_parser = parse_count)]
    max_sandboxes: Option<Setting<u64>>,
    /// Most CPU across running sandboxes, in thousandths of a core
    #[arg(long, value_name = "N", value_parser = parse_count)]
    max_cpu_millis: Option<Setting<u64>>,
    /// Most memory across running sandboxes, in MiB
    #[arg(long, value_name = "N", value_parser = parse_count)]
    max_memory_mb: Option<Setting<u64>>,
    /// Sandbox creations per second (burst of one second's worth)
    #[arg(long, value_name = "R", value_parser = parse_number)]
    creates_per_second: Option<Setting<f64>>,
    /// Seconds a creation over quota waits in line before it fails [server default: 10]
    #[arg(long, value_name = "S", value_parser = parse_number)]
    wait_seconds: Option<Setting<f64>>,
    /// A cap on the tenant's share of what all tenants draw on, `QUOTA=N` or `QUOTA=default`
    /// (max_paused_sandboxes, max_volumes, max_snapshots, max_snapshot_bytes, max_disk_bytes, max_templates,
    /// max_mcp_sessions, max_jobs, max_webhooks, max_event_streams); repeatable
    #[arg(long = "share", value_name = "QUOTA=N", value_parser = parse_share)]
    shares: Vec<(String, Option<u64>)>,
}

const SHARES: [&str; 10] = [
    "max_paused_sandboxes",
    "max_volumes",
    "max_snapshots",
    "max_snapshot_bytes",
    "max_disk_bytes",
    "max_templates",
    "max_mcp_sessions",
    "max_jobs",
    "max_webhooks",
    "max_event_streams",
];

fn parse_share(s: &str) -> Result<(String, Option<u64>), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| "expected QUOTA=N or QUOTA=default".to_owned())?;
    let name = name.trim();
    if !SHARES.contains(&name) {
        return Err(format!(
            "unknown share {name:?}; shares are {}",
            SHARES.join(", ")
        ));
    }
    let value = match value.trim() {
        "default" => None,
        v => Some(
            v.parse::<u64>()
                .map_err(|e| format!("not a count or `default`: {e}"))?,
        ),
    };
    Ok((name.to_owned(), value))
}

/// The slot of share `name` (one of [`SHARES`]) in `q`.
fn share_slot<'a>(q: &'a mut TenantQuotas, name: &str) -> Option<&'a mut Option<u64>> {
    Some(match name {
        "max_paused_sandboxes" => &mut q.max_paused_sandboxes,
        "max_volumes" => &mut q.max_volumes,
        "max_snapshots" => &mut q.max_snapshots,
        "max_snapshot_bytes" => &mut q.max_snapshot_bytes,
        "max_disk_bytes" => &mut q.max_disk_bytes,
        "max_templates" => &mut q.max_templates,
        "max_mcp_sessions" => &mut q.max_mcp_sessions,
        "max_jobs" => &mut q.max_jobs,
        "max_webhooks" => &mut q.max_webhooks,
        "max_event_streams" => &mut q.max_event_streams,
        _ => return None,
    })
}

/// A quota flag's value: a limit, or `unlimited` to remove it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Setting<T> {
    Limit(T),
    Unlimited,
}

impl<T: Copy> Setting<T> {
    fn apply(self, slot: &mut Option<T>) {
        *slot = match self {
            Setting::Limit(v) => Some(v),
            Setting::Unlimited => None,
        };
    }
}

fn is_unlimited(s: &str) -> bool {
    matches!(s.trim(), "unlimited" | "none")
}

fn parse_count(s: &str) -> Result<Setting<u64>, String> {
    if is_unlimited(s) {
        return Ok(Setting::Unlimited);
    }
    s.trim()
        .parse::<u64>()
        .map(Setting::Limit)
        .map_err(|e| format!("not a count or `unlimited`: {e}"))
}

/// A finite, non-negative number: JSON has no NaN or infinity (serde would send `null`, which
/// the server reads as "no quota"), so they are refused here rather than silently lifting one.
fn parse_number(s: &str) -> Result<Setting<f64>, String> {
    if is_unlimited(s) {
        return Ok(Setting::Unlimited);
    }
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|e| format!("not a number or `unlimited`: {e}"))?;
    if !v.is_finite() || v < 0.0 {
        return Err("must be a finite number of at least 0".into());
    }
    Ok(Setting::Limit(v))
}

impl TenantArgs {
    fn quotas_given(&self) -> bool {
        self.max_sandboxes.is_some()
            || self.max_cpu_millis.is_some()
            || self.max_memory_mb.is_some()
            || self.creates_per_second.is_some()
            || self.wait_seconds.is_some()
            || !self.shares.is_empty()
    }

    /// `q` with the flags given applied.
    fn apply(&self, mut q: TenantQuotas) -> TenantQuotas {
        if let Some(s) = self.max_sandboxes {
            s.apply(&mut q.max_sandboxes);
        }
        if let Some(s) = self.max_cpu_millis {
            s.apply(&mut q.max_cpu_millis);
        }
        if let Some(s) = self.max_memory_mb {
            s.apply(&mut q.max_memory_mb);
        }
        if let Some(s) = self.creates_per_second {
            s.apply(&mut q.creates_per_second);
        }
        if let Some(s) = self.wait_seconds {
            s.apply(&mut q.wait_seconds);
        }
        for (name, value) in &self.shares {
            if let Some(slot) = share_slot(&mut q, name) {
                *slot = *value;
            }
        }
        q
    }
}

#[derive(Deserialize)]
struct KeyList {
    keys: Vec<ApiKeyInfo>,
}

#[derive(Deserialize)]
struct TenantList {
    tenants: Vec<Tenant>,
}

/// Runs a `keys` subcommand; returns the exit status.
pub async fn keys(cmd: KeysCommand) -> anyhow::Result<u8> {
    match cmd {
        KeysCommand::Create {
            tenant,
            admin,
            name,
            json,
            url,
        } => {
            let req = CreateKey {
                tenant,
                role: if admin { Role::Admin } else { Role::Member },
                name,
            };
            let created: CreatedKey = crate::client::connect(&url.url)?
                .post_json("/v1/keys", &req)
                .await?;
            let mut out = std::io::stdout().lock();
            if json {
                serde_json::to_writer_pretty(&mut out, &created)?;
                writeln!(out)?;
            } else {
                writeln!(out, "{}", created.key)?;
                let i = &created.info;
                eprintln!(
                    "created {} key {} ({}) for tenant {}: keep it now, it is not shown again",
                    i.role.as_str(),
                    i.id,
                    i.prefix,
                    i.tenant
                );
            }
            Ok(0)
        }
        KeysCommand::List { tenant, json, url } => {
            let path = match &tenant {
                Some(t) => format!("/v1/keys?tenant={}", segment(t)),
                None => "/v1/keys".into(),
            };
            let keys = crate::client::connect(&url.url)?
                .get_json::<KeyList>(&path)
                .await?
                .keys;
            let mut out = std::io::stdout().lock();
            if json {
                serde_json::to_writer_pretty(&mut out, &keys)?;
                writeln!(out)?;
            } else {
                write!(out, "{}", key_table(&keys))?;
            }
            Ok(0)
        }
        KeysCommand::Revoke { ids, url } => {
            let client = crate::client::connect(&url.url)?;
            let mut code = 0;
            for id in &ids {
                match client.delete(&format!("/v1/keys/{}", segment(id))).await {
                    Ok(()) => println!("revoked {id}"),
                    Err(e) => {
                        eprintln!("{id}: {e}");
                        code = 1;
                    }
                }
            }
            Ok(code)
        }
    }
}

/// Runs a `tenants` subcommand; returns the exit status.
pub async fn tenants(cmd: TenantsCommand) -> anyhow::Result<u8> {
    match cmd {
        TenantsCommand::Create {
            name,
            settings,
            json,
            url,
        } => {
            let req = CreateTenant {
                name,
                plan: settings.plan.clone(),
                quotas: settings
                    .quotas_given()
                    .then(|| settings.apply(TenantQuotas::default())),
            };
            let t: Tenant = crate::client::connect(&url.url)?
                .post_json("/v1/tenants", &req)
                .await?;
            print_tenant(&t, json, "created")
        }
        TenantsCommand::List { json, url } => {
            let tenants = crate::client::connect(&url.url)?
                .get_json::<TenantList>("/v1/tenants")
                .await?
                .tenants;
            let mut out = std::io::stdout().lock();
            if json {
                serde_json::to_writer_pretty(&mut out, &tenants)?;
                writeln!(out)?;
            } else {
                write!(out, "{}", tenant_table(&tenants))?;
            }
            Ok(0)
        }
        TenantsCommand::Set {
            name,
            settings,
            json,
            url,
        } => {
            if settings.plan.is_none() && !settings.quotas_given() {
                anyhow::bail!("nothing to change: give --plan or a quota flag (see --help)");
            }
            let path = format!("/v1/tenants/{}", segment(&name));
            let quotas = if settings.quotas_given() {
                let current: Tenant = crate::client::connect(&url.url)?.get_json(&path).await?;
                Some(settings.apply(current.quotas))
            } else {
                None
            };
            let req = CreateTenant {
                name: String::new(),
                plan: settings.plan.clone(),
                quotas,
            };
            let t: Tenant = crate::client::connect_for(&url.url, Duration::from_secs(60))?
                .put_json(&path, &req)
                .await?;
            print_tenant(&t, json, "updated")
        }
    }
}

fn print_tenant(t: &Tenant, json: bool, what: &str) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, t)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "{what} tenant {} (plan {}): {}",
            t.name,
            t.plan,
            quota_summary(&t.quotas)
        )?;
    }
    Ok(0)
}

fn quota_summary(q: &TenantQuotas) -> String {
    let mut parts = Vec::new();
    if let Some(n) = q.max_sandboxes {
        parts.push(format!("max {n} sandboxes"));
    }
    if let Some(n) = q.max_cpu_millis {
        parts.push(format!("{n} millicores"));
    }
    if let Some(n) = q.max_memory_mb {
        parts.push(format!("{n} MiB"));
    }
    if let Some(r) = q.creates_per_second {
        parts.push(format!("{r} creations/s"));
    }
    if parts.is_empty() {
        parts.push("no quotas".into());
    }
    if let Some(w) = q.wait_seconds {
        parts.push(format!("waits up to {w} s"));
    }
    let mut q = q.clone();
    for name in SHARES {
        if let Some(Some(n)) = share_slot(&mut q, name).map(|s| *s) {
            parts.push(format!("{name} {n}"));
        }
    }
    parts.join(", ")
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn key_table(keys: &[ApiKeyInfo]) -> String {
    let header = [
        "ID", "PREFIX", "TENANT", "ROLE", "NAME", "CREATED", "REVOKED",
    ]
    .map(String::from);
    let rows: Vec<[String; 7]> = keys
        .iter()
        .map(|k| {
            [
                k.id.clone(),
                k.prefix.clone(),
                k.tenant.clone(),
                k.role.as_str().into(),
                opt(k.name.as_deref()),
                k.created_at.clone(),
                opt(k.revoked_at.as_deref()),
            ]
        })
        .collect();
    table(&header, &rows)
}

fn tenant_table(tenants: &[Tenant]) -> String {
    let header = [
        "NAME",
        "PLAN",
        "SANDBOXES",
        "CPU_MILLIS",
        "MEMORY_MB",
        "CREATES/S",
        "WAIT_S",
        "CREATED",
    ]
    .map(String::from);
    let rows: Vec<[String; 8]> = tenants
        .iter()
        .map(|t| {
            let q = &t.quotas;
            [
                t.name.clone(),
                t.plan.clone(),
                opt(q.max_sandboxes),
                opt(q.max_cpu_millis),
                opt(q.max_memory_mb),
                opt(q.creates_per_second),
                opt(q.wait_seconds),
                t.created_at.clone(),
            ]
        })
        .collect();
    table(&header, &rows)
}

/// Left-aligned columns two spaces apart, as `sandlot snapshots ls` prints them.
fn table<const N: usize>(header: &[String; N], rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in std::iter::once(header).chain(rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut s = String::new();
    for row in std::iter::once(header).chain(rows) {
        let line: Vec<String> = widths
            .iter()
            .zip(row)
            .map(|(w, cell)| format!("{cell:<w$}", w = *w))
            .collect();
        s.push_str(line.join("  ").trim_end());
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_values_are_numbers_or_unlimited() {
        assert_eq!(parse_count("10"), Ok(Setting::Limit(10)));
        assert_eq!(parse_count("unlimited"), Ok(Setting::Unlimited));
        assert!(parse_count("-1").is_err());
        assert!(parse_count("1.5").is_err());
        assert_eq!(parse_number("2.5"), Ok(Setting::Limit(2.5)));
        for bad in ["NaN", "nan", "inf", "-inf", "-1", "x", ""] {
            assert!(parse_number(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn set_changes_only_what_is_given() {
        let args = TenantArgs {
            plan: None,
            max_sandboxes: Some(Setting::Limit(5)),
            max_cpu_millis: None,
            max_memory_mb: Some(Setting::Unlimited),
            creates_per_second: None,
            wait_seconds: None,
            shares: vec![parse_share("max_volumes=3").unwrap()],
        };
        assert!(parse_share("max_cows=3").is_err());
        assert_eq!(
            parse_share("max_jobs=default"),
            Ok(("max_jobs".into(), None))
        );
        let before = TenantQuotas {
            max_sandboxes: Some(1),
            max_cpu_millis: Some(2000),
            max_memory_mb: Some(512),
            creates_per_second: Some(3.0),
            wait_seconds: Some(4.0),
            max_webhooks: Some(2),
            ..Default::default()
        };
        let after = args.apply(before);
        assert_eq!(after.max_sandboxes, Some(5));
        assert_eq!(after.max_cpu_millis, Some(2000));
        assert_eq!(after.max_memory_mb, None);
        assert_eq!(after.creates_per_second, Some(3.0));
        assert_eq!(after.wait_seconds, Some(4.0));
        assert_eq!(after.max_volumes, Some(3));
        assert_eq!(after.max_webhooks, Some(2));
    }

    #[test]
    fn every_share_the_server_knows_can_be_set() {
        for share in sandlot_tenancy::Share::ALL {
            let arg = format!("{}=7", share.quota());
            let (name, value) = parse_share(&arg).unwrap();
            let mut q = TenantQuotas::default();
            *share_slot(&mut q, &name).unwrap() = value;
            assert_eq!(share.limit(&q), 7, "{arg}");
        }
        assert!(parse_share("max_disk_bytes=-1").is_err());
        assert!(parse_share("max_disk_bytes=1GiB").is_err());
        assert_eq!(
            parse_share("max_disk_bytes=314572800"),
            Ok(("max_disk_bytes".into(), Some(314_572_800)))
        );
    }
}

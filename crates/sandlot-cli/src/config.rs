//! Every environment variable the `sandlot` binary reads, with its default, in one place. Flags
//! read them through clap's `env` (named by the constants here), and each command's `--help`
//! lists the ones it uses from [`VARS`].

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Address `sandlot serve` listens on (`--listen`).
pub const LISTEN: &str = "SANDLOT_LISTEN";
/// The data dir (`--data-dir`).
pub const DATA_DIR: &str = "SANDLOT_DATA_DIR";
/// The API key client commands send.
pub const API_KEY: &str = "SANDLOT_API_KEY";
/// Where Python environments are provisioned (`--env-dir`).
pub const ENV_DIR: &str = "SANDLOT_ENV_DIR";
/// Server `sandlot run` talks to (`--url`); unset means an embedded runtime. `sandlot template`
/// talks to it too, and to [`DEFAULT_URL`] when it is unset.
pub const URL: &str = "SANDLOT_URL";
/// Most live sandboxes `sandlot serve` runs at once (`--max-sandboxes`).
pub const MAX_SANDBOXES: &str = "SANDLOT_MAX_SANDBOXES";
/// Sandbox creations `sandlot serve` runs at once (`--max-concurrent-creates`).
pub const MAX_CONCURRENT_CREATES: &str = "SANDLOT_MAX_CONCURRENT_CREATES";
/// Creations that may wait for a slot before more fail with `capacity_exhausted`
/// (`--max-pending-creates`).
pub const MAX_PENDING_CREATES: &str = "SANDLOT_MAX_PENDING_CREATES";
/// Booted sandboxes kept ready per template (`--pool-size`); 0 turns the pool off.
pub const POOL_SIZE: &str = "SANDLOT_POOL_SIZE";
/// Size in MiB the workspaces' Btrfs image is first allocated at (`--disk-image-mb`).
pub const DISK_IMAGE_MB: &str = "SANDLOT_DISK_IMAGE_MB";
/// Most files (inodes) one workspace may hold (`--max-files`); 0: no cap beyond its bytes.
pub const MAX_FILES: &str = "SANDLOT_MAX_FILES";
/// Days a paused sandbox is kept before it expires (`--paused-retention-days`); 0 keeps it
/// until it is deleted.
pub const PAUSED_RETENTION_DAYS: &str = "SANDLOT_PAUSED_RETENTION_DAYS";
/// Log filter (tracing `EnvFilter` syntax, e.g. `info` or `sandlot_runtime=debug`).
pub const LOG: &str = "SANDLOT_LOG";
/// The Python the environment is built from; read by `sandlot-env` (which owns the name).
pub const PYTHON: &str = sandlot_env::BASE_PYTHON_VAR;
/// The package index environment builds download from (the only host their network
/// reaches); read by the runtime's and `sandlot env`'s builds.
pub const PIP_INDEX_URL: &str = "SANDLOT_PIP_INDEX_URL";
/// Path of the jail library (`libsandlot_jail.so`) the zygote loads; read by
/// `sandlot-runtime`, which looks next to the executable when it is unset.
pub const JAIL_LIB: &str = "SANDLOT_JAIL_LIB";
/// Consulted for the default data dir.
pub const XDG_DATA_HOME: &str = "XDG_DATA_HOME";
pub const HOME: &str = "HOME";

pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";
/// Server `sandlot template` talks to when neither `--url` nor [`URL`] is given.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7878";
/// The runtime's defaults (`RuntimeConfig::new`), as the help shows them; a test keeps them
/// in step.
pub const DEFAULT_MAX_SANDBOXES: &str = "2000";
pub const DEFAULT_MAX_CONCURRENT_CREATES: &str = "4";
pub const DEFAULT_MAX_PENDING_CREATES: &str = "256";
pub const DEFAULT_POOL_SIZE: &str = "2";
/// Log filter of `sandlot serve` when [`LOG`] is unset. rmcp logs every refused MCP request (a client probing a protocol version, a foreign Host)
/// at warn, which clients control; sandlot's own request line records them at info.
pub const DEFAULT_SERVE_LOG: &str = "info,rmcp=error";
/// Log filter of the other commands when [`LOG`] is unset: quiet, their output is the point.
pub const DEFAULT_CLI_LOG: &str = "warn";

/// One documented variable.
pub struct Var {
    pub name: &'static str,
    pub default: &'static str,
    pub help: &'static str,
}

pub const VARS: &[Var] = &[
    Var {
        name: LISTEN,
        default: DEFAULT_LISTEN,
        help: "address `sandlot serve` listens on (port 0 picks a free port)",
    },
    Var {
        name: DATA_DIR,
        default: "$XDG_DATA_HOME/sandlot, else ~/.local/share/sandlot",
        help: "data dir: the store (sandlot.db), templates and sandbox state",
    },
    Var {
        name: ENV_DIR,
        default: "<data dir>/envs",
        help: "where the Python environment sandboxes run in is provisioned",
    },
    Var {
        name: URL,
        default: "unset: `run` runs in-process; `template`, `snapshots`, `mcp` and `agent` use http://127.0.0.1:7878",
        help: "server for `sandlot run`, `template`, `snapshots`, `mcp` and `agent`, e.g. http://127.0.0.1:7878",
    },
    Var {
        name: MAX_SANDBOXES,
        default: DEFAULT_MAX_SANDBOXES,
        help: "most live sandboxes at once; past it creation fails with capacity_exhausted",
    },
    Var {
        name: MAX_CONCURRENT_CREATES,
        default: DEFAULT_MAX_CONCURRENT_CREATES,
        help: "sandbox creations running at once; more wait in a queue",
    },
    Var {
        name: MAX_PENDING_CREATES,
        default: DEFAULT_MAX_PENDING_CREATES,
        help: "bound of that queue; past it creation fails at once with capacity_exhausted",
    },
    Var {
        name: POOL_SIZE,
        default: DEFAULT_POOL_SIZE,
        help: "sandboxes kept booted and ready per template, handed out on creation (0: none)",
    },
    Var {
        name: DISK_IMAGE_MB,
        default: "4096",
        help: "MiB the workspaces' Btrfs image is first allocated at; it grows in steps while the host has room",
    },
    Var {
        name: MAX_FILES,
        default: "1000000",
        help: "most files (inodes) one workspace may hold; past it new files fail with EDQUOT (0: no cap)",
    },
    Var {
        name: PAUSED_RETENTION_DAYS,
        default: "30",
        help: "days a paused sandbox is kept before it expires (0: until deleted)",
    },
    Var {
        name: LOG,
        default: "info for serve, warn otherwise",
        help: "log filter, e.g. debug or sandlot_runtime=debug",
    },
    Var {
        name: PYTHON,
        default: sandlot_env::DEFAULT_BASE_PYTHON,
        help: "base Python the sandbox environment is built from",
    },
    Var {
        name: PIP_INDEX_URL,
        default: "pip's own default index (and its file host)",
        help: "package index environment builds download from, e.g. http://127.0.0.1:8080/simple; the build's network reaches only its host and port",
    },
    Var {
        name: JAIL_LIB,
        default: "next to the sandlot executable",
        help: "path of libsandlot_jail.so, which the zygote loads",
    },
    Var {
        name: LOG_FORMAT,
        default: "text",
        help: "json: one JSON object per log line (with the request's trace id)",
    },
    Var {
        name: AUDIT,
        default: "on",
        help: "off: no audit log (the switch itself is recorded)",
    },
    Var {
        name: AUDIT_SEGMENT_BYTES,
        default: "67108864 (64 MiB)",
        help: "the audit log starts a new segment past this size (and at each new UTC day); sealed segments can be archived (sandlot audit archive)",
    },
    Var {
        name: AUDIT_REFUSALS_SECONDS,
        default: "60",
        help: "requests refused without a valid key are counted per source address and recorded once per this many seconds",
    },
    Var {
        name: TRUSTED_PROXIES,
        default: "unset: the TCP peer is a request's source",
        help: "addresses and CIDR ranges of reverse proxies in front of sandlot (comma-separated); behind one, the audit tallies refused requests under the X-Forwarded-For hop it appended instead of under the proxy",
    },
    Var {
        name: METRICS_PUBLIC,
        default: "0: /metrics needs an operator key",
        help: "1: serve /metrics without a key",
    },
    Var {
        name: OTLP_ENDPOINT,
        default: "unset: no traces exported",
        help: "export traces there over OTLP/HTTP, e.g. http://127.0.0.1:4318",
    },
    Var {
        name: JOBS_CONCURRENCY,
        default: "4",
        help: "jobs run at most this many at a time",
    },
    Var {
        name: PORT_URL_TTL,
        default: "0: port URLs last until rotated",
        help: "port capability URLs (/v1/ports/{token}/...) stop working this many seconds after they are handed out; POST /v1/sandboxes/{id}/ports/rotate ends them at once",
    },
    Var {
        name: ENVD_TOKEN_TTL,
        default: "0: E2B tokens last until rotated",
        help: "E2B sandbox tokens (envdAccessToken, trafficAccessToken) stop working this many seconds after the control plane hands them out; clients get fresh ones from E2B's connect (Sandbox.connect); POST /v1/sandboxes/{id}/ports/rotate ends them at once",
    },
    Var {
        name: CONSOLE_SECURE_COOKIE,
        default: "0: plain HTTP (sandlot serves no TLS itself)",
        help: "1: the console's session cookie is marked Secure and its pages expect https:// origins; set when a TLS-terminating proxy serves sandlot",
    },
    Var {
        name: WEBHOOK_ALLOW_PRIVATE,
        default: "0: loopback and private addresses refused",
        help: "1: webhooks may target loopback and private addresses",
    },
];

/// The record's settings (read by `sandlot-record` and `sandlot-telemetry`).
pub const LOG_FORMAT: &str = "SANDLOT_LOG_FORMAT";
pub const AUDIT: &str = "SANDLOT_AUDIT";
pub const AUDIT_SEGMENT_BYTES: &str = "SANDLOT_AUDIT_SEGMENT_BYTES";
pub const AUDIT_REFUSALS_SECONDS: &str = "SANDLOT_AUDIT_REFUSALS_SECONDS";
pub const TRUSTED_PROXIES: &str = sandlot_record::audit::TRUSTED_PROXIES;
pub const METRICS_PUBLIC: &str = "SANDLOT_METRICS_PUBLIC";
pub const OTLP_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
pub const JOBS_CONCURRENCY: &str = "SANDLOT_JOBS_CONCURRENCY";
pub const WEBHOOK_ALLOW_PRIVATE: &str = "SANDLOT_WEBHOOK_ALLOW_PRIVATE";
pub const PORT_URL_TTL: &str = "SANDLOT_PORT_URL_TTL";
pub const ENVD_TOKEN_TTL: &str = "SANDLOT_ENVD_TOKEN_TTL";
pub const CONSOLE_SECURE_COOKIE: &str = "SANDLOT_CONSOLE_SECURE_COOKIE";

/// The variables `serve` and an embedded `run` read (besides their own flags' ones).
pub const RUNTIME_VARS: &[&str] = &[DATA_DIR, ENV_DIR, PYTHON, PIP_INDEX_URL, JAIL_LIB, LOG];
/// The variables only `serve` reads.
pub const SERVE_VARS: &[&str] = &[
    LISTEN,
    MAX_SANDBOXES,
    MAX_CONCURRENT_CREATES,
    MAX_PENDING_CREATES,
    POOL_SIZE,
    DISK_IMAGE_MB,
    MAX_FILES,
    PAUSED_RETENTION_DAYS,
    LOG_FORMAT,
    AUDIT,
    AUDIT_SEGMENT_BYTES,
    PORT_URL_TTL,
    ENVD_TOKEN_TTL,
    AUDIT_REFUSALS_SECONDS,
    TRUSTED_PROXIES,
    METRICS_PUBLIC,
    OTLP_ENDPOINT,
    JOBS_CONCURRENCY,
    WEBHOOK_ALLOW_PRIVATE,
    CONSOLE_SECURE_COOKIE,
];
/// The variables `sandlot env` reads.
pub const ENV_VARS: &[&str] = &[ENV_DIR, DATA_DIR, PYTHON, PIP_INDEX_URL, LOG];

/// [`PIP_INDEX_URL`], when set and not empty.
pub fn pip_index_url() -> Option<String> {
    std::env::var(PIP_INDEX_URL)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The "Environment:" section of a command's help, for the variables it reads.
pub fn env_help(names: &[&str]) -> String {
    let mut out = String::from("Environment:\n");
    for var in VARS.iter().filter(|v| names.contains(&v.name)) {
        let _ = writeln!(
            out,
            "  {:<18} {}\n  {:<18} (default: {})",
            var.name, var.help, "", var.default
        );
    }
    out
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot choose a data dir: neither {XDG_DATA_HOME} nor {HOME} is set; pass --data-dir or set {DATA_DIR}")]
    NoDataDir,
}

/// Capacity settings of `sandlot serve`; `None` keeps the runtime's default.
#[derive(Debug, Clone, Copy, Default)]
pub struct Capacity {
    pub max_sandboxes: Option<usize>,
    pub max_concurrent_creates: Option<usize>,
    pub max_pending_creates: Option<usize>,
    pub pool_size: Option<usize>,
    pub disk_image_mb: Option<u64>,
    /// Most files per workspace; `Some(0)` turns the cap off.
    pub max_files: Option<u64>,
    /// Days a paused sandbox is kept; `Some(0)` keeps it until deleted.
    pub paused_retention_days: Option<u64>,
}

impl Capacity {
    /// Writes the values that were given into `cfg`.
    pub fn apply(self, cfg: &mut sandlot_runtime::RuntimeConfig) {
        if let Some(v) = self.max_sandboxes {
            cfg.max_sandboxes = v;
        }
        if let Some(v) = self.max_concurrent_creates {
            cfg.max_concurrent_creates = v;
        }
        if let Some(v) = self.max_pending_creates {
            cfg.max_pending_creates = v;
        }
        if let Some(v) = self.pool_size {
            cfg.pool_size = v;
        }
        if let Some(v) = self.disk_image_mb {
            cfg.workspace_image_bytes = Some(v << 20);
        }
        match self.max_files {
            Some(0) => cfg.max_files = None,
            Some(n) => cfg.max_files = Some(n),
            None => {}
        }
        match self.paused_retention_days {
            Some(0) => cfg.paused_retention_secs = None,
            Some(days) => cfg.paused_retention_secs = Some(days.saturating_mul(24 * 3600)),
            None => {}
        }
    }
}

/// The directories a command works in, defaults filled in.
#[derive(Debug, Clone)]
pub struct Dirs {
    pub data_dir: PathBuf,
    pub env_dir: PathBuf,
}

impl Dirs {
    /// `data_dir` and `env_dir` as given on the command line (or by their variables, which
    /// clap has already read), else their defaults.
    pub fn resolve(
        data_dir: Option<PathBuf>,
        env_dir: Option<PathBuf>,
    ) -> Result<Dirs, ConfigError> {
        let data_dir = match data_dir {
            Some(d) => d,
            None => default_data_dir(std::env::var_os(XDG_DATA_HOME), std::env::var_os(HOME))?,
        };
        let env_dir = env_dir.unwrap_or_else(|| default_env_dir(&data_dir));
        Ok(Dirs { data_dir, env_dir })
    }
}

/// `$XDG_DATA_HOME/sandlot`, else `$HOME/.local/share/sandlot` (the XDG base directory rules:
/// a relative or empty `XDG_DATA_HOME` is ignored).
pub fn default_data_dir(
    xdg_data_home: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Result<PathBuf, ConfigError> {
    if let Some(xdg) = xdg_data_home.map(PathBuf::from).filter(|p| p.is_absolute()) {
        return Ok(xdg.join("sandlot"));
    }
    match home.filter(|h| !h.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".local/share/sandlot")),
        None => Err(ConfigError::NoDataDir),
    }
}

pub fn default_env_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("envs")
}

/// The API key client commands (`run`, `mcp`, `agent`, `template`, `snapshots`, `keys`) send
/// to the server at `url`: `$SANDLOT_API_KEY`, else, for a server on this machine (a loopback
/// URL), the local admin key a server keeps in its data dir (`$SANDLOT_DATA_DIR`, else the
/// default one) when this user can read it. This machine's key never goes to another host.
pub fn api_key_for(url: &str) -> Option<String> {
    if let Some(k) = std::env::var(API_KEY).ok().filter(|k| !k.trim().is_empty()) {
        return Some(k.trim().to_owned());
    }
    if !is_loopback_url(url) {
        return None;
    }
    let dir = match std::env::var_os(DATA_DIR).filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => default_data_dir(std::env::var_os(XDG_DATA_HOME), std::env::var_os(HOME)).ok()?,
    };
    let text = std::fs::read_to_string(dir.join(sandlot_tenancy::BOOTSTRAP_KEY_FILE)).ok()?;
    Some(text.trim().to_owned()).filter(|k| !k.is_empty())
}

/// Whether `url`'s host is this machine's loopback (`localhost`, `127.0.0.0/8`, `::1`).
pub fn is_loopback_url(url: &str) -> bool {
    let Ok(u) = reqwest::Url::parse(url) else {
        return false;
    };
    match u.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// The store's file in the data dir.
pub fn store_path(data_dir: &Path) -> PathBuf {
    data_dir.join("sandlot.db")
}

#[cfg(test)]
mod tests {
    use super::is_loopback_url;

    #[test]
    fn the_local_key_goes_to_loopback_servers_only() {
        for local in [
            "http://127.0.0.1:7878",
            "http://localhost:1",
            "http://LOCALHOST",
            "http://127.9.8.7",
            "http://[::1]:7878",
        ] {
            assert!(is_loopback_url(local), "{local}");
        }
        for remote in [
            "http://127.0.0.1.example.test",
            "http://localhost.example.test",
            "http://10.0.0.1:7878",
            "https://sandlot.example.test",
            "http://[::2]",
            "not a url",
            "http://user@evil.test/127.0.0.1",
        ] {
            assert!(!is_loopback_url(remote), "{remote}");
        }
    }

    use super::*;

    #[test]
    fn data_dir_follows_xdg() {
        let d = default_data_dir(Some("/x/data".into()), Some("/home/u".into())).unwrap();
        assert_eq!(d, PathBuf::from("/x/data/sandlot"));
        let d = default_data_dir(Some("relative".into()), Some("/home/u".into())).unwrap();
        assert_eq!(d, PathBuf::from("/home/u/.local/share/sandlot"));
        let d = default_data_dir(None, Some("/home/u".into())).unwrap();
        assert_eq!(d, PathBuf::from("/home/u/.local/share/sandlot"));
        assert!(default_data_dir(Some("".into()), None).is_err());
    }

    #[test]
    fn env_dir_defaults_under_data_dir() {
        let dirs = Dirs::resolve(Some("/d".into()), None).unwrap();
        assert_eq!(dirs.env_dir, PathBuf::from("/d/envs"));
        let dirs = Dirs::resolve(Some("/d".into()), Some("/e".into())).unwrap();
        assert_eq!(dirs.env_dir, PathBuf::from("/e"));
    }

    #[test]
    fn documented_defaults_are_the_runtimes() {
        let cfg = sandlot_runtime::RuntimeConfig::new("/d".into(), "/e".into());
        assert_eq!(DEFAULT_MAX_SANDBOXES, cfg.max_sandboxes.to_string());
        assert_eq!(
            DEFAULT_MAX_CONCURRENT_CREATES,
            cfg.max_concurrent_creates.to_string()
        );
        assert_eq!(
            DEFAULT_MAX_PENDING_CREATES,
            cfg.max_pending_creates.to_string()
        );
        assert_eq!(DEFAULT_POOL_SIZE, cfg.pool_size.to_string());
        let mut changed = cfg.clone();
        Capacity {
            max_sandboxes: Some(3),
            max_concurrent_creates: None,
            max_pending_creates: Some(7),
            pool_size: None,
            disk_image_mb: None,
            max_files: Some(0),
            paused_retention_days: Some(0),
        }
        .apply(&mut changed);
        assert_eq!(changed.paused_retention_secs, None);
        assert_eq!(changed.max_files, None);
        assert_eq!(cfg.paused_retention_secs, Some(30 * 24 * 3600));
        assert_eq!(
            (
                changed.max_sandboxes,
                changed.max_concurrent_creates,
                changed.max_pending_creates
            ),
            (3, cfg.max_concurrent_creates, 7)
        );
    }

    #[test]
    fn help_lists_every_variable_asked_for() {
        let help = env_help(&[LISTEN, DATA_DIR, ENV_DIR, LOG]);
        for name in [LISTEN, DATA_DIR, ENV_DIR, LOG] {
            assert!(help.contains(name), "{help}");
        }
        assert!(!help.contains(URL));
    }
}

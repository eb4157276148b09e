//! The trusted tier's grants and the policy's requirements on what it lets run (issue 23).
//!
//! **Rollback required by policy.** A permit on `execute` annotated `@on_failure("rollback")`
//! makes every execution it allows run with `on_failure: rollback`, whatever the caller asked
//! (the caller cannot opt out: the request's own `on_failure` is only ever raised, never
//! lowered). The decision carries it (`Decision::on_failure`); deciding it notes it in the
//! request's [`Note`], and the execution the request then starts (REST, MCP, E2B, every path
//! through [`crate::Backend::execute`] or [`apply_policy_rollback`]) reads it there. A permit
//! scoped to `resource.tier == "trusted"` is how a policy says it "for a tier".

use crate::note::Note;
use sandlot_types::{ExecuteRequest, OnFailure};

/// Whether the request being handled must roll back its execution on failure.
pub fn rollback_required() -> bool {
    Note::current().is_some_and(|n| n.data().rollback)
}

/// `req`, with `on_failure: rollback` when the policy that allowed it requires it.
pub fn apply_policy_rollback(mut req: ExecuteRequest) -> ExecuteRequest {
    if rollback_required() {
        req.on_failure = OnFailure::Rollback;
    }
    req
}

// ---------------------------------------------------------------------------------------
// Read-only host paths.
//
// `mounts: [{host, path}]` at creation: each a host directory or file shown read-only (also
// nosuid, nodev, noexec, without its submounts) at `path` under `/mnt`. The request must be on
// the trusted tier, and each host path must pass the `mount_host_path` gate (resource
// `HostPath::"<host>"`, context the target and the tier), which the shipped policy permits for
// no one: the operator grants a path by adding a permit. Each decision is journaled (so the
// creation's audit record names them) and the sandbox's record lists its mounts. A fork or a
// resume asks the gate again for the forking or resuming key.

use crate::governance::Governance;
use sandlot_policy::GateRequest;
use sandlot_types::{
    ApiError, CreateSandbox, ErrorCode, HostMount, Principal, ISOLATED_TIER, MAX_HOST_MOUNTS,
    TRUSTED_TIER,
};

/// Host paths no grant can name: the kernel's and the devices' pseudo-filesystems.
const NEVER: &[&str] = &["/proc", "/sys", "/dev"];

fn bad(msg: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidArgument, msg)
}

/// `/`-separated plain components: none empty, `.` or `..`, none longer than 255 bytes.
fn plain_components(rest: &str) -> bool {
    !rest.is_empty()
        && rest
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != ".." && p.len() <= 255)
}

/// Checks the form of `mounts` (400 `invalid_argument`): at most [`MAX_HOST_MOUNTS`]; each
/// host path absolute, plain (no `.`, `..`, empty component or trailing `/`), not `/` and not
/// in `/proc`, `/sys` or `/dev`; each target `/mnt/<plain components>`, none equal to or
/// inside another.
pub fn check_mounts(mounts: &[HostMount]) -> Result<(), ApiError> {
    if mounts.len() > MAX_HOST_MOUNTS {
        return Err(bad(format!(
            "at most {MAX_HOST_MOUNTS} host paths may be mounted, not {}",
            mounts.len()
        )));
    }
    for m in mounts {
        let host = m.host.as_str();
        if host.len() > 4096 || host.contains('\0') {
            return Err(bad(format!("host path {host:?} is too long or holds NUL")));
        }
        let Some(rest) = host.strip_prefix('/') else {
            return Err(bad(format!("host path {host:?} must be absolute")));
        };
        if rest.is_empty() {
            return Err(bad(
                "host path \"/\" (the whole host) cannot be mounted".into()
            ));
        }
        if !plain_components(rest) {
            return Err(bad(format!(
                "host path {host:?} must be plain: no '.', '..', empty component or trailing '/'"
            )));
        }
        if let Some(n) = NEVER
            .iter()
            .find(|n| host == **n || host.starts_with(&format!("{n}/")))
        {
            return Err(bad(format!("host paths under {n} cannot be mounted")));
        }
        let target = m.path.as_str();
        if target.len() > 1024 || !target.strip_prefix("/mnt/").is_some_and(plain_components) {
            return Err(bad(format!(
                "mount path {target:?} must be /mnt/<name>[/<name>...] (plain names): host paths appear under /mnt only, never over /workspace or the system's directories"
            )));
        }
    }
    for (i, a) in mounts.iter().enumerate() {
        for b in &mounts[i + 1..] {
            let nested = |x: &str, y: &str| x == y || y.starts_with(&format!("{x}/"));
            if nested(&a.path, &b.path) || nested(&b.path, &a.path) {
                return Err(bad(format!(
                    "mount paths {:?} and {:?} overlap",
                    a.path, b.path
                )));
            }
        }
    }
    Ok(())
}

/// The creation gate of `req`'s host paths, once its tier is chosen (`req.tier`): the form
/// (400), the trusted tier (403), each path's `mount_host_path` gate (403), then each path
/// opened as it will be mounted — without following a symlink anywhere on it — (400).
pub fn gate_mounts(
    gov: Option<&Governance>,
    who: &Principal,
    req: &CreateSandbox,
) -> Result<(), ApiError> {
    check_internal(&req.network, req.tier.as_deref().unwrap_or(ISOLATED_TIER))?;
    if req.mounts.is_empty() {
        return Ok(());
    }
    check_mounts(&req.mounts)?;
    if req.from_snapshot.is_some() {
        return Err(bad(
            "host paths cannot be mounted into a sandbox started from a snapshot".into(),
        ));
    }
    let Some(g) = gov else {
        return Err(ApiError::new(
            ErrorCode::PolicyDenied,
            "host paths are granted by the policy; this server runs without one",
        ));
    };
    let tier = req.tier.as_deref().unwrap_or(ISOLATED_TIER);
    g.gate_host_paths(who, &req.mounts, tier)
}

// ---------------------------------------------------------------------------------------
// Internal services.
//
// The operator names services on the host's network (`SANDLOT_INTERNAL_SERVICES=db=127.0.0.1:
// 5432`); a trusted-tier sandbox whose allowlist lists `service:db` reaches exactly that
// address and port through its egress proxy (CONNECT db:5432), every attempt passing the
// `egress` gate (resource `Domain::"db"`) and recorded like any egress. The allowlist is the
// creation's (and `select_tier`'s) context, so a policy may refuse a service by name
// (`context.allow.contains("service:db")`). Only the trusted tier may list one.

/// `allow` on tier `tier`: a `service:` entry outside the trusted tier is 403.
pub fn check_internal(allow: &[String], tier: &str) -> Result<(), ApiError> {
    if tier == TRUSTED_TIER {
        return Ok(());
    }
    match allow
        .iter()
        .find(|e| e.starts_with(sandlot_egress::SERVICE_PREFIX))
    {
        Some(e) => Err(ApiError::new(
            ErrorCode::PolicyDenied,
            format!("{e}: internal services are reachable from the trusted tier only; this sandbox's tier is {tier}"),
        )),
        None => Ok(()),
    }
}

impl Governance {
    /// The trusted tier (403 otherwise) and, for each of `mounts`, the `mount_host_path` gate
    /// for `who` (403 `policy_denied`, naming the path) and an open of it without following a
    /// symlink (400: a symlink anywhere on it, missing, neither a file nor a directory).
    pub fn gate_host_paths(
        &self,
        who: &Principal,
        mounts: &[HostMount],
        tier: &str,
    ) -> Result<(), ApiError> {
        if mounts.is_empty() {
            return Ok(());
        }
        if tier != TRUSTED_TIER {
            return Err(ApiError::new(
                ErrorCode::PolicyDenied,
                format!(
                    "host paths are mounted in the trusted tier only; this sandbox's tier is {tier}"
                ),
            ));
        }
        let pp = crate::gates::policy_principal(who);
        for m in mounts {
            let (id, d) = self.decide(
                &pp,
                GateRequest::MountHostPath {
                    host: m.host.clone(),
                    target: m.path.clone(),
                    tier: tier.to_owned(),
                },
                format!("HostPath::{:?}", m.host),
                Some(serde_json::json!({ "target": m.path, "tier": tier })),
            );
            if !d.allowed {
                return Err(crate::gates::denied(&d, &id));
            }
        }
        for m in mounts {
            if let Err(e) = sandlot_runtime::host_mounts::open_host_path(&m.host) {
                let why = sandlot_runtime::host_mounts::why_not(&e);
                return Err(bad(format!(
                    "host path {:?} cannot be mounted: {why}",
                    m.host
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(host: &str, path: &str) -> HostMount {
        HostMount {
            host: host.into(),
            path: path.into(),
        }
    }

    #[test]
    fn mount_forms_are_checked() {
        check_mounts(&[m("/srv/data", "/mnt/data"), m("/etc/hosts", "/mnt/h/hosts")]).unwrap();
        for bad in [
            m("srv/data", "/mnt/data"),
            m("/", "/mnt/data"),
            m("/srv/../etc", "/mnt/data"),
            m("/srv/./data", "/mnt/data"),
            m("/srv//data", "/mnt/data"),
            m("/srv/data/", "/mnt/data"),
            m("/proc", "/mnt/data"),
            m("/proc/1/root", "/mnt/data"),
            m("/sys/kernel", "/mnt/data"),
            m("/dev/sda", "/mnt/data"),
            m("/srv/data", "/workspace"),
            m("/srv/data", "/workspace/x"),
            m("/srv/data", "/etc"),
            m("/srv/data", "/mnt"),
            m("/srv/data", "/mnt/"),
            m("/srv/data", "/mnt/../etc"),
            m("/srv/data", "mnt/data"),
        ] {
            let e = check_mounts(std::slice::from_ref(&bad)).expect_err(&format!("{bad:?}"));
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{bad:?}");
        }
        let e = check_mounts(&[m("/a", "/mnt/x"), m("/b", "/mnt/x/y")]).unwrap_err();
        assert!(e.message.contains("overlap"), "{}", e.message);
        let many: Vec<HostMount> = (0..5).map(|i| m("/a", &format!("/mnt/{i}"))).collect();
        assert!(check_mounts(&many).is_err());
    }

    #[test]
    fn symlinks_anywhere_are_refused_when_opened() {
        let dir = std::env::temp_dir().join(format!("sandlot-trusted-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let dir = Dir(dir);
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        std::fs::create_dir(real.join("inner")).unwrap();
        let open = |p: std::path::PathBuf| {
            sandlot_runtime::host_mounts::open_host_path(p.to_str().unwrap())
        };
        assert!(open(real.clone()).is_ok());
        for p in [dir.path().join("link"), dir.path().join("link/inner")] {
            let e = open(p).expect_err("a symlink is refused");
            assert_eq!(
                sandlot_runtime::host_mounts::why_not(&e),
                "it is, or passes through, a symlink"
            );
        }
    }

    /// A scratch directory removed on drop.
    struct Dir(std::path::PathBuf);
    impl Dir {
        fn path(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

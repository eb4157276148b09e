//! The writer: appends records under one mutex (one `write` per record to the current
//! segment, opened `O_APPEND`), keeps the chain head and the Merkle frontier in memory, and
//! signs a checkpoint every N records or T seconds (a background thread) and at close, after
//! an `fsync` of the records it covers.
//!
//! "Nothing runs unrecorded" needs the space for a request's record before the request runs:
//! the writer keeps disk blocks allocated past the end of the segment and of
//! `checkpoints.jsonl` (`fallocate(FALLOC_FL_KEEP_SIZE)`), and [`AuditLog::admit`] admits a
//! request only while that reserve covers every admitted request's record (a slot of
//! [`SLOT`] bytes each). When the reserve cannot grow (the disk is full) admissions are
//! refused, while the records of requests already admitted still land in the reserve. A write
//! that fails anyway marks the log unavailable. On a filesystem without `fallocate` the
//! reserve is skipped and a failed write is the only signal.
//!
//! At open the tail after the last checkpoint is verified (from the checkpoint's hints: its
//! segment, offset, chain head and frontier). A last line cut short (a crash during a write)
//! is truncated and an `audit.recovered` record says so; any other fault marks the log
//! corrupt: nothing is appended until an operator seals it ([`AuditLog::seal`]).

use crate::archive;
use crate::chain::{
    read_checkpoints, walk_segments, Bad, CheckpointLine, Failure, Walker, SEALED_ACTION,
};
use crate::files::{
    fallocate_keep, open_append, release, seg_name, segments, sync_dir, write_new, CHECKPOINTS,
    LOCK, SIGNING_KEY, VERIFIER_KEY,
};
use crate::merkle::{leaf_hash, Frontier, Hash};
use crate::note::{checkpoint_body, NoteSigner};
use crate::record::{build_line, Entry};
use crate::seal::SealReport;
use crate::{now_rfc3339, AuditError};
use crate::{seal, verify};
use base64::Engine;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

/// Bytes of reserve each admitted request holds: its record and the lifecycle records its
/// action causes (a record is under 4 KiB: fields are bounded).
pub const SLOT: u64 = 16 << 10;
/// Reserve kept past the end of `checkpoints.jsonl` (a few checkpoints).
const CP_RESERVE: u64 = 64 << 10;

/// Settings of the log.
#[derive(Debug, Clone)]
pub struct Config {
    /// A checkpoint every this many records...
    pub checkpoint_every: u64,
    /// ...or this long after the last one, if records came since.
    pub checkpoint_interval: Duration,
    /// A new segment starts before the first record that would go past this size...
    pub segment_bytes: u64,
    /// ...and before the first record of a new UTC day, so sealed segments can be archived
    /// by date.
    pub segment_daily: bool,
    /// Disk reserved ahead of the segment's end, grown by this much at a time.
    pub reserve_bytes: u64,
    /// The origin (and key name) of a new log; default `sandlot.local/audit/<random>`.
    pub origin: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            checkpoint_every: 1000,
            checkpoint_interval: Duration::from_secs(10),
            segment_bytes: 64 << 20,
            segment_daily: true,
            reserve_bytes: 1 << 20,
            origin: None,
        }
    }
}

#[derive(Debug, Clone)]
enum State {
    Ok,
    Unavailable(String),
    Corrupt(Bad),
}

struct Inner {
    seg: u32,
    file: File,
    seg_len: u64,
    /// The UTC day (`YYYY-MM-DD`) of the current segment's first record.
    seg_day: Option<String>,
    reserved_to: u64,
    cps: File,
    cps_len: u64,
    cps_reserved_to: u64,
    /// `fallocate` works on this filesystem.
    reserve_ok: bool,
    size: u64,
    head: Hash,
    frontier: Frontier,
    last_cp: Option<(u64, String)>,
    last_cp_at: Instant,
    state: State,
    /// Admissions refused for want of space since then (retried once a second).
    short_since: Option<(Instant, String)>,
}

/// The log's condition, for the API and the CLI.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// `ok`, `unavailable` (cannot write: disk full, I/O error) or `corrupt`.
    pub state: &'static str,
    pub reason: Option<String>,
    pub first_bad: Option<Bad>,
    pub records: u64,
    pub last_checkpoint: Option<u64>,
    pub origin: String,
    pub verifier_key: String,
}

/// An append-only audit log open for writing (one process at a time: it holds `lock`).
pub struct AuditLog {
    dir: PathBuf,
    cfg: Config,
    signer: NoteSigner,
    inner: Mutex<Inner>,
    inflight: AtomicU64,
    closed: AtomicBool,
    _lock: File,
}

/// A request admitted to run: space for its record is reserved until this drops.
pub struct Admission {
    log: Arc<AuditLog>,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.log.inflight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Admission {
    pub fn log(&self) -> &Arc<AuditLog> {
        &self.log
    }
}

fn lock_of<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl AuditLog {
    /// Opens (creating on first use) the log in `dir`: its key, the tail check, the
    /// checkpoint timer.
    pub fn open(dir: &Path, cfg: Config) -> Result<Arc<Self>, AuditError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| AuditError::io(format!("creating {}", dir.display()), e))?;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(dir.join(LOCK))
            .map_err(|e| AuditError::io("opening the lock", e))?;
        // SAFETY: flock on a descriptor we own; held until the log drops.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(AuditError::Locked(dir.display().to_string()));
        }
        let signer = load_or_create_key(dir, cfg.origin.as_deref())?;
        let (inner, recovered) = load_inner(dir, &signer, &cfg)?;
        let log = Arc::new(Self {
            dir: dir.to_owned(),
            cfg,
            signer,
            inner: Mutex::new(inner),
            inflight: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            _lock: lock,
        });
        if let Some(target) = recovered {
            let _ = log.append(Entry {
                actor: "system".into(),
                action: "audit.recovered".into(),
                target,
                outcome: "ok".into(),
                ..Default::default()
            });
        }
        let weak = Arc::downgrade(&log);
        std::thread::Builder::new()
            .name("audit-checkpoints".into())
            .spawn(move || ticker(weak))
            .map_err(|e| AuditError::io("starting the checkpoint thread", e))?;
        Ok(log)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The verifier key of the checkpoints' signatures (`<origin>+<id>+<key>`).
    pub fn verifier_key(&self) -> String {
        self.signer.verifier().to_text()
    }

    pub fn origin(&self) -> &str {
        self.signer.name()
    }

    pub fn status(&self) -> Status {
        let inner = lock_of(&self.inner);
        let (state, reason, first_bad) = match &inner.state {
            State::Ok => match &inner.short_since {
                Some((_, why)) => ("unavailable", Some(why.clone()), None),
                None => ("ok", None, None),
            },
            State::Unavailable(r) => ("unavailable", Some(r.clone()), None),
            State::Corrupt(b) => ("corrupt", Some(b.to_string()), Some(b.clone())),
        };
        Status {
            state,
            reason,
            first_bad,
            records: inner.size,
            last_checkpoint: inner.last_cp.as_ref().map(|c| c.0),
            origin: self.signer.name().to_owned(),
            verifier_key: self.verifier_key(),
        }
    }

    /// The latest signed checkpoint (a C2SP note), if any.
    pub fn latest_checkpoint(&self) -> Option<(u64, String)> {
        lock_of(&self.inner).last_cp.clone()
    }

    /// Admits one request: refused (before it runs) when its record could not be written.
    pub fn admit(self: &Arc<Self>) -> Result<Admission, AuditError> {
        let mut inner = lock_of(&self.inner);
        match &inner.state {
            State::Corrupt(b) => return Err(AuditError::Corrupt(b.clone())),
            State::Unavailable(r) => {
                let r = r.clone();
                if !self.retry_due(&mut inner) {
                    return Err(AuditError::Unavailable(r));
                }
                // Try for fresh blocks: a write that failed may succeed again only once the
                // filesystem has room.
                let (from, to) = (
                    inner.reserved_to,
                    inner.reserved_to + self.cfg.reserve_bytes,
                );
                if inner.reserve_ok {
                    match fallocate_keep(&inner.file, from, to) {
                        Ok(_) => inner.reserved_to = to,
                        Err(_) => return Err(AuditError::Unavailable(r)),
                    }
                }
                inner.state = State::Ok;
                inner.short_since = None;
            }
            State::Ok => {}
        }
        let want = (self.inflight.load(Ordering::Relaxed) + 1) * SLOT;
        if inner.reserve_ok
            && (inner.reserved_to.saturating_sub(inner.seg_len) < want
                || inner.cps_reserved_to.saturating_sub(inner.cps_len) < CP_RESERVE / 2)
        {
            if let Some((_, why)) = inner.short_since.clone() {
                if !self.retry_due(&mut inner) {
                    return Err(AuditError::Unavailable(why));
                }
            }
            let to = inner.seg_len + want + self.cfg.reserve_bytes;
            let cp_to = inner.cps_len + CP_RESERVE;
            let r = fallocate_keep(&inner.file, inner.reserved_to, to)
                .and_then(|_| fallocate_keep(&inner.cps, inner.cps_reserved_to, cp_to));
            match r {
                Ok(_) => {
                    inner.reserved_to = inner.reserved_to.max(to);
                    inner.cps_reserved_to = inner.cps_reserved_to.max(cp_to);
                    inner.short_since = None;
                }
                Err(e) => {
                    let why = format!("no room for audit records: {e}");
                    inner.short_since = Some((Instant::now(), why.clone()));
                    return Err(AuditError::Unavailable(why));
                }
            }
        }
        self.inflight.fetch_add(1, Ordering::Relaxed);
        Ok(Admission { log: self.clone() })
    }

    /// Whether a refused log may try again (once a second).
    fn retry_due(&self, inner: &mut Inner) -> bool {
        let due = inner
            .short_since
            .as_ref()
            .is_none_or(|(t, _)| t.elapsed() >= Duration::from_secs(1));
        if due {
            if let Some((t, _)) = &mut inner.short_since {
                *t = Instant::now();
            }
        }
        due
    }

    /// Whether admissions are refused right now (without trying to grow the reserve).
    pub fn refusing(&self) -> Option<String> {
        let inner = lock_of(&self.inner);
        match &inner.state {
            State::Corrupt(b) => Some(format!("the audit log is corrupt at {b}")),
            State::Unavailable(r) => Some(r.clone()),
            State::Ok => inner.short_since.as_ref().map(|(_, w)| w.clone()),
        }
    }

    /// Appends a record; returns its seq.
    pub fn append(&self, entry: Entry) -> Result<u64, AuditError> {
        let middle = entry.bounded().middle();
        let at = now_rfc3339();
        let mut inner = lock_of(&self.inner);
        self.append_locked(&mut inner, &middle, &at)
    }

    fn append_locked(&self, inner: &mut Inner, middle: &[u8], at: &str) -> Result<u64, AuditError> {
        match &inner.state {
            State::Ok => {}
            State::Unavailable(r) => return Err(AuditError::Unavailable(r.clone())),
            State::Corrupt(b) => return Err(AuditError::Corrupt(b.clone())),
        }
        if inner.seg_len > 0 && self.rotation_due(inner, at) {
            self.rotate_locked(inner)?;
        }
        let seq = inner.size + 1;
        let (line, hash) = build_line(seq, at, middle, &inner.head);
        if let Err(e) = inner.file.write_all(&line) {
            // Take back a part written: the segment must end on a whole record.
            let _ = inner.file.set_len(inner.seg_len);
            let why = format!("writing {}: {e}", seg_name(inner.seg));
            inner.state = State::Unavailable(why.clone());
            inner.short_since = Some((Instant::now(), why.clone()));
            return Err(AuditError::Unavailable(why));
        }
        inner.seg_len += line.len() as u64;
        if inner.seg_day.is_none() {
            inner.seg_day = Some(day_of(at).to_owned());
        }
        inner.size = seq;
        inner.head = hash;
        inner.frontier.push(leaf_hash(&line[..line.len() - 1]));
        if inner.size - inner.last_cp.as_ref().map_or(0, |c| c.0) >= self.cfg.checkpoint_every {
            let _ = self.checkpoint_locked(inner);
        }
        Ok(seq)
    }

    /// Whether the record about to be written at `at` starts a new segment.
    fn rotation_due(&self, inner: &Inner, at: &str) -> bool {
        inner.seg_len >= self.cfg.segment_bytes
            || (self.cfg.segment_daily && inner.seg_day.as_deref().is_some_and(|d| d != day_of(at)))
    }

    /// Seals the current segment: its records synced, the next segment opened, and a
    /// checkpoint signed at the boundary (at offset 0 of the new segment), so every sealed
    /// segment ends on a signed checkpoint that an archive can start from. When the new file
    /// cannot be made the log stays in this segment: a bigger file is no fault.
    fn rotate_locked(&self, inner: &mut Inner) -> Result<(), AuditError> {
        if let Err(e) = inner.file.sync_data() {
            let why = format!("syncing the segment: {e}");
            inner.state = State::Unavailable(why.clone());
            return Err(AuditError::Unavailable(why));
        }
        let next = inner.seg + 1;
        let Ok(f) = open_append(&self.dir.join(seg_name(next))) else {
            return Ok(());
        };
        release(&inner.file, inner.seg_len, inner.reserved_to);
        inner.file = f;
        inner.seg = next;
        inner.seg_len = 0;
        inner.seg_day = None;
        inner.reserved_to = 0;
        if inner.reserve_ok {
            if let Ok(true) = fallocate_keep(&inner.file, 0, self.cfg.reserve_bytes) {
                inner.reserved_to = self.cfg.reserve_bytes;
            }
        }
        sync_dir(&self.dir);
        self.force_checkpoint(inner)
    }

    /// Signs a checkpoint now if records came since the last one.
    pub fn checkpoint(&self) -> Result<(), AuditError> {
        let mut inner = lock_of(&self.inner);
        self.checkpoint_locked(&mut inner)
    }

    fn checkpoint_locked(&self, inner: &mut Inner) -> Result<(), AuditError> {
        if !matches!(inner.state, State::Ok) {
            return Ok(());
        }
        if inner.last_cp.as_ref().is_some_and(|c| c.0 == inner.size) {
            inner.last_cp_at = Instant::now();
            return Ok(());
        }
        let fail = |inner: &mut Inner, what: &str, e: std::io::Error| {
            let why = format!("{what}: {e}");
            inner.state = State::Unavailable(why.clone());
            AuditError::Unavailable(why)
        };
        if let Err(e) = inner.file.sync_data() {
            return Err(fail(inner, "syncing the segment", e));
        }
        let root = inner.frontier.root();
        let note = self
            .signer
            .sign(&checkpoint_body(self.signer.name(), inner.size, &root));
        let meta = CheckpointLine {
            size: inner.size,
            segment: inner.seg,
            offset: inner.seg_len,
            head: hex::encode(inner.head),
            frontier: inner.frontier.stack().iter().map(hex::encode).collect(),
            note: note.clone(),
        };
        let mut line = serde_json::to_vec(&meta).expect("plain data");
        line.push(b'\n');
        if let Err(e) = inner
            .cps
            .write_all(&line)
            .and_then(|()| inner.cps.sync_data())
        {
            let _ = inner.cps.set_len(inner.cps_len);
            return Err(fail(inner, "writing a checkpoint", e));
        }
        inner.cps_len += line.len() as u64;
        inner.last_cp = Some((inner.size, note));
        inner.last_cp_at = Instant::now();
        Ok(())
    }

    /// Signs a last checkpoint and gives back the reserve; appends after this still work
    /// (and would be signed at the next close).
    pub fn close(&self) -> Result<(), AuditError> {
        let mut inner = lock_of(&self.inner);
        let r = if inner.last_cp.is_none() && matches!(inner.state, State::Ok) {
            // An empty log gets its checkpoint too: the key and origin are then on record.
            self.force_checkpoint(&mut inner)
        } else {
            self.checkpoint_locked(&mut inner)
        };
        release(&inner.file, inner.seg_len, inner.reserved_to);
        inner.reserved_to = inner.seg_len;
        release(&inner.cps, inner.cps_len, inner.cps_reserved_to);
        inner.cps_reserved_to = inner.cps_len;
        let _ = inner.file.sync_all();
        self.closed.store(true, Ordering::Relaxed);
        r
    }

    /// Lets go of the log as a crash would: no last checkpoint, the reserve left allocated.
    pub fn abandon(self: Arc<Self>) {
        self.closed.store(true, Ordering::Relaxed);
    }

    fn force_checkpoint(&self, inner: &mut Inner) -> Result<(), AuditError> {
        inner.last_cp = None;
        self.checkpoint_locked(inner)
    }

    /// The operator's action on a corrupt log: moves the bad part to `quarantine/` (see
    /// [`seal::seal`]), continues the chain after the last good record with an
    /// `audit.sealed` record by `actor` naming what was cut, and signs a checkpoint.
    pub fn seal(
        &self,
        actor: serde_json::Value,
        tenant: Option<String>,
    ) -> Result<SealReport, AuditError> {
        let mut inner = lock_of(&self.inner);
        if !matches!(inner.state, State::Corrupt(_)) {
            return Err(AuditError::Invalid(
                "the audit log is not corrupt: nothing to seal".into(),
            ));
        }
        let report = seal::seal(&self.dir)?.ok_or_else(|| {
            AuditError::Invalid("verification finds nothing wrong: nothing to seal".into())
        })?;
        let (fresh, _) = load_inner(&self.dir, &self.signer, &self.cfg)?;
        *inner = fresh;
        if let State::Corrupt(b) = &inner.state {
            return Err(AuditError::Corrupt(b.clone()));
        }
        let entry = Entry {
            actor,
            tenant,
            action: SEALED_ACTION.into(),
            target: serde_json::to_value(&report).unwrap_or_default(),
            outcome: "ok".into(),
            ..Default::default()
        };
        // The report names files and a reason: allow it more room than request records.
        let middle = entry.middle();
        self.append_locked(&mut inner, &middle, &now_rfc3339())?;
        self.force_checkpoint(&mut inner)?;
        Ok(report)
    }
}

impl AuditLog {
    /// Moves the sealed segments whose last record is before `before` (RFC 3339, or a date
    /// `YYYY-MM-DD`: records of that day stay) into `to`, as described in [`crate::archive`]:
    /// the log must verify; the archive is written and proven; an `audit.archived` record by
    /// `actor` names the boundary and is signed; only then are `boundary.json` placed and the
    /// segments and older checkpoints removed.
    pub fn archive(
        &self,
        before: &str,
        to: &Path,
        actor: serde_json::Value,
    ) -> Result<archive::ArchiveReport, AuditError> {
        let mut inner = lock_of(&self.inner);
        match &inner.state {
            State::Ok => {}
            State::Unavailable(r) => return Err(AuditError::Unavailable(r.clone())),
            State::Corrupt(b) => return Err(AuditError::Corrupt(b.clone())),
        }
        // The open segment is never archived: seal it first when its records are all before
        // the cut, so an archive "before now" takes everything recorded so far.
        let open_seg = self.dir.join(seg_name(inner.seg));
        if inner.seg_len > 0 && archive::last_at(&open_seg)?.is_some_and(|at| at.as_str() < before)
        {
            self.rotate_locked(&mut inner)?;
        }
        let verifier = self.signer.verifier();
        let report = verify::verify(&self.dir, Some(&verifier.to_text()))?;
        if let Some(f) = report.failure {
            return Err(AuditError::Invalid(format!(
                "the log does not verify, so nothing is archived: {f}"
            )));
        }
        let plan = archive::plan(&self.dir, &verifier, inner.seg, before)?;
        let bytes = archive::write_archive(&self.dir, &plan, to)?;
        let proof =
            archive::verify_archive_at(to, &verifier, plan.boundary.size, &plan.boundary_root)?;
        if let Some(f) = proof {
            return Err(AuditError::Invalid(format!(
                "the archive written to {} does not verify: {f}",
                to.display()
            )));
        }
        let root = base64::engine::general_purpose::STANDARD.encode(plan.boundary_root);
        let names: Vec<String> = plan.segments.iter().map(|(n, _)| seg_name(*n)).collect();
        let entry = Entry {
            actor,
            action: archive::ARCHIVED_ACTION.into(),
            target: serde_json::json!({
                "boundary": plan.boundary.size,
                "root": root,
                "from_record": plan.from_record,
                "segments": names.len(),
                "first_segment": names.first(),
                "last_segment": names.last(),
                "bytes": bytes,
                "to": to.display().to_string(),
            }),
            outcome: "ok".into(),
            ..Default::default()
        }
        .bounded();
        self.append_locked(&mut inner, &entry.middle(), &now_rfc3339())?;
        self.force_checkpoint(&mut inner)?;
        archive::cut(&self.dir, &plan)?;
        // `checkpoints.jsonl` was replaced: append to the new file from now on.
        release(&inner.cps, inner.cps_len, inner.cps_reserved_to);
        inner.cps = open_append(&self.dir.join(CHECKPOINTS))?;
        inner.cps_len = inner.cps.metadata().map(|m| m.len()).unwrap_or(0);
        inner.cps_reserved_to = inner.cps_len;
        if inner.reserve_ok
            && fallocate_keep(&inner.cps, inner.cps_len, inner.cps_len + CP_RESERVE)
                .unwrap_or(false)
        {
            inner.cps_reserved_to = inner.cps_len + CP_RESERVE;
        }
        Ok(archive::ArchiveReport {
            to: to.to_owned(),
            from_record: plan.from_record,
            boundary: plan.boundary.size,
            root,
            segments: names,
            bytes,
        })
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        if !self.closed.load(Ordering::Relaxed) {
            let _ = self.close();
        }
    }
}

/// Signs due checkpoints by time; ends with the log.
fn ticker(log: Weak<AuditLog>) {
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let Some(log) = log.upgrade() else { return };
        if log.closed.load(Ordering::Relaxed) {
            return;
        }
        let mut inner = lock_of(&log.inner);
        let pending = inner.size > inner.last_cp.as_ref().map_or(0, |c| c.0);
        if pending && inner.last_cp_at.elapsed() >= log.cfg.checkpoint_interval {
            let _ = log.checkpoint_locked(&mut inner);
        }
    }
}

fn load_or_create_key(dir: &Path, origin: Option<&str>) -> Result<NoteSigner, AuditError> {
    let path = dir.join(SIGNING_KEY);
    let signer = match std::fs::read_to_string(&path) {
        Ok(text) => NoteSigner::from_text(&text)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let origin = match origin {
                Some(o) => o.to_owned(),
                None => {
                    let mut id = [0u8; 6];
                    getrandom::fill(&mut id)
                        .map_err(|e| AuditError::Key(format!("randomness: {e}")))?;
                    format!("sandlot.local/audit/{}", hex::encode(id))
                }
            };
            let s = NoteSigner::generate(&origin)?;
            let tmp = dir.join(format!("{SIGNING_KEY}.tmp"));
            let _ = std::fs::remove_file(&tmp);
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(|e| AuditError::io("creating the signing key", e))?;
            f.write_all(format!("{}\n", s.to_text()).as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(|e| AuditError::io("writing the signing key", e))?;
            std::fs::rename(&tmp, &path)
                .map_err(|e| AuditError::io("placing the signing key", e))?;
            s
        }
        Err(e) => return Err(AuditError::io("reading the signing key", e)),
    };
    // Always (re)written from the key: the public half cannot drift from it.
    let vpath = dir.join(VERIFIER_KEY);
    let want = format!("{}\n", signer.verifier().to_text());
    if std::fs::read_to_string(&vpath).ok().as_deref() != Some(want.as_str()) {
        write_new(&vpath, want.as_bytes())?;
        let _ = std::fs::set_permissions(&vpath, std::fs::Permissions::from_mode(0o644));
    }
    sync_dir(dir);
    Ok(signer)
}

/// The `YYYY-MM-DD` of an RFC 3339 time.
fn day_of(at: &str) -> &str {
    at.get(..10).unwrap_or(at)
}

/// The day of the first record in segment `path` (`None` when it is empty).
fn first_day(path: &Path) -> Option<String> {
    use std::io::{BufRead, Read};
    let f = File::open(path).ok()?;
    let mut first = Vec::new();
    std::io::BufReader::new(f)
        .take(64 << 10)
        .read_until(b'\n', &mut first)
        .ok()?;
    #[derive(serde::Deserialize)]
    struct At {
        at: String,
    }
    let at: At = serde_json::from_slice(first.trim_ascii_end()).ok()?;
    Some(day_of(&at.at).to_owned())
}

fn corrupt_checkpoint(line: u64, reason: String, size: u64) -> Bad {
    Bad {
        seq: size + 1,
        segment: CHECKPOINTS.into(),
        line,
        reason,
    }
}

/// Reads the log's state at open: the last checkpoint, then the records after it.
fn load_inner(
    dir: &Path,
    signer: &NoteSigner,
    cfg: &Config,
) -> Result<(Inner, Option<serde_json::Value>), AuditError> {
    let verifier = signer.verifier();
    let cp_path = dir.join(CHECKPOINTS);
    let (cps, cp_fail) = read_checkpoints(dir, &verifier, true)?;
    let mut state = State::Ok;
    if let Some(f) = cp_fail {
        let (line, reason) = match f {
            Failure::Checkpoint { line, reason } => (line, reason),
            other => (0, other.to_string()),
        };
        state = State::Corrupt(corrupt_checkpoint(line, reason, 0));
    }
    // A checkpoint line cut short by a crash: drop it (it signed nothing yet durable).
    let cps_file = open_append(&cp_path)?;
    let mut cps_len = cps_file.metadata().map(|m| m.len()).unwrap_or(0);
    let good_len: u64 = std::fs::read(&cp_path)
        .map(|d| {
            d.iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i as u64 + 1)
        })
        .unwrap_or(0);
    if good_len < cps_len && matches!(state, State::Ok) {
        let _ = cps_file.set_len(good_len);
        cps_len = good_len;
    }
    let last = cps.last().cloned();
    // Verify the whole last segment (bounded by the segment size): from the first checkpoint
    // that starts in it, or from the beginning while there is one segment.
    let last_seg = segments(dir)?.last().map_or(1, |s| s.0);
    let from_cp = match cps
        .iter()
        .position(|c| c.meta.segment == last_seg && c.meta.offset == 0)
    {
        Some(i) => Some(i),
        None if last_seg <= 1 => None,
        None => cps.len().checked_sub(1),
    };
    let later: Vec<_> = match from_cp {
        Some(i) => cps[i + 1..].to_vec(),
        None => cps.clone(),
    };
    let (walker, start) = match from_cp.map(|i| &cps[i]) {
        Some(cp) => {
            let stack: Option<Vec<Hash>> = cp
                .meta
                .frontier
                .iter()
                .map(|h| {
                    let mut o = [0u8; 32];
                    hex::decode_to_slice(h, &mut o).ok().map(|()| o)
                })
                .collect();
            let frontier = stack.and_then(|s| Frontier::from_parts(cp.size, s));
            let mut head = [0u8; 32];
            let head_ok = hex::decode_to_slice(&cp.meta.head, &mut head).is_ok();
            match frontier.filter(|f| f.root() == cp.root && head_ok) {
                Some(frontier) => (
                    Walker {
                        next_seq: cp.size + 1,
                        head,
                        frontier,
                        seals: Vec::new(),
                        archived: Vec::new(),
                    },
                    Some((cp.meta.segment, cp.meta.offset)),
                ),
                None => {
                    state = State::Corrupt(corrupt_checkpoint(
                        cp.line,
                        "its resume hints do not match its signed root".into(),
                        cp.size,
                    ));
                    (Walker::new(), None)
                }
            }
        }
        None => (Walker::new(), None),
    };
    if let Some((seg, off)) = start {
        if off > 0 && !dir.join(seg_name(seg)).exists() {
            state = State::Corrupt(Bad {
                seq: walker.next_seq - 1,
                segment: seg_name(seg),
                line: 0,
                reason: "the segment the last checkpoint ends in is missing".into(),
            });
        }
    }
    let mut recovered = None;
    let walked = walk_segments(dir, start, walker, &later, true)?;
    if let Some(stop) = &walked.stop {
        if matches!(state, State::Ok) {
            state = State::Corrupt(stop.bad.clone());
        }
    }
    if let Some((line, reason, first)) = &walked.root_mismatch {
        if matches!(state, State::Ok) {
            state = State::Corrupt(corrupt_checkpoint(*line, reason.clone(), first - 1));
        }
    }
    let segs = segments(dir)?;
    let (seg, seg_path) = match segs.last() {
        Some((n, p)) => (*n, p.clone()),
        None => (1, dir.join(seg_name(1))),
    };
    let file = open_append(&seg_path)?;
    let mut seg_len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if walked.in_flight > 0 && matches!(state, State::Ok) {
        let keep = seg_len - walked.in_flight;
        file.set_len(keep)
            .map_err(|e| AuditError::io("truncating a cut-short record", e))?;
        recovered = Some(serde_json::json!({
            "segment": seg_name(seg),
            "dropped_bytes": walked.in_flight,
            "reason": "a record cut short by a crash",
        }));
        seg_len = keep;
    }
    // No room even now: nothing reserved, and the first admission will say so.
    let (reserve_ok, reserved) = fallocate_keep(&file, seg_len, seg_len + cfg.reserve_bytes)
        .map_or((true, false), |ok| (ok, ok));
    let reserved_to = if reserved {
        seg_len + cfg.reserve_bytes
    } else {
        seg_len
    };
    let cps_reserved_to = if reserve_ok
        && fallocate_keep(&cps_file, cps_len, cps_len + CP_RESERVE).unwrap_or(false)
    {
        cps_len + CP_RESERVE
    } else {
        cps_len
    };
    let w = walked.walker;
    Ok((
        Inner {
            seg,
            file,
            seg_len,
            seg_day: first_day(&seg_path),
            reserved_to,
            cps: cps_file,
            cps_len,
            cps_reserved_to,
            reserve_ok,
            size: w.frontier.size(),
            head: w.head,
            frontier: w.frontier,
            last_cp: last.map(|c| (c.size, c.meta.note)),
            last_cp_at: Instant::now(),
            state,
            short_since: None,
        },
        recovered,
    ))
}

#[cfg(test)]
mod tests;

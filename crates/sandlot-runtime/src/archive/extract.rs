//! Extraction of a tar stream into a staging directory of the workspace, entry by entry, and
//! placing the staging directory (rename, or a checked merge into an existing directory).

use super::*;

/// Extracts `body` into the directory `parts` under the workspace `ws`. Runs with the
/// sandbox's filesystem ids.
pub(super) fn extract(
    ws: &OwnedFd,
    parts: &[String],
    body: BodyReader,
    room: &Room,
) -> Result<ArchiveSummary, Fail> {
    let shown = parts.join("/");
    // The deepest directory of the target's path that exists.
    let mut base = openat2(ws.as_raw_fd(), ".", libc::O_PATH | libc::O_DIRECTORY, 0)
        .map_err(|e| target_error(e, &shown))?;
    let mut existing = 0;
    for p in parts {
        match openat2(base.as_raw_fd(), p, libc::O_PATH | libc::O_DIRECTORY, 0) {
            Ok(fd) => {
                base = fd;
                existing += 1;
            }
            Err(nix::Error::ENOENT) => break,
            Err(e) => return Err(target_error(e, &shown).into()),
        }
    }
    let stage_name = format!("{STAGING_PREFIX}{}", new_id(""));
    let stage_c = cstring(&stage_name);
    // SAFETY: mkdirat relative to a dir fd we own, with a name we made.
    if unsafe { libc::mkdirat(base.as_raw_fd(), stage_c.as_ptr(), 0o700) } != 0 {
        return Err(create_error(nix::Error::last(), &shown));
    }
    let placed = (|| {
        let stage = open_dir_at(base.as_raw_fd(), stage_c.as_bytes())
            .map_err(|e| create_error(e, &shown))?;
        // A missing target: the staging directory stands for its first missing component,
        // and the archive goes into the rest of the path below it.
        let below = parts.get(existing + 1..).unwrap_or(&[]);
        let mut root = stage
            .try_clone()
            .map_err(|e| Fail::File(FileError::Write(e)))?;
        for p in below {
            root = make_dir(root.as_raw_fd(), p).map_err(|e| create_error(e, &shown))?;
        }
        let mut summary = Extraction::new(&root, ws, room).run(body)?;
        summary.path = shown.clone();
        drop(root);
        match parts.get(existing) {
            None => merge_checked(&stage, &base)?,
            Some(first) => {
                let first_c = cstring(first);
                // SAFETY: fchmod on a directory fd we own.
                unsafe { libc::fchmod(stage.as_raw_fd(), 0o755) };
                match rename(
                    base.as_raw_fd(),
                    &stage_c,
                    base.as_raw_fd(),
                    &first_c,
                    libc::RENAME_NOREPLACE,
                ) {
                    Ok(()) => {}
                    // Made meanwhile (by the sandbox, or another extraction): merge into it.
                    Err(nix::Error::EEXIST) => {
                        let into = open_dir_at(base.as_raw_fd(), first.as_bytes())
                            .map_err(|e| target_error(e, &shown))?;
                        merge_checked(&stage, &into)?;
                    }
                    Err(e) => return Err(create_error(e, &shown)),
                }
            }
        }
        Ok(summary)
    })();
    // Whatever is left of the staging directory (all of it after a failure).
    if let Err(e) = remove_tree(base.as_raw_fd(), &stage_c, 0) {
        if e != nix::Error::ENOENT {
            tracing::warn!(error = %e, "removing a staging directory failed");
        }
    }
    placed
}

/// One archive being written below `root`.
pub(super) struct Extraction<'a> {
    pub(super) root: &'a OwnedFd,
    /// The directories along the previous entry's path, open, so that entries of one
    /// directory (the usual order) cost no lookups; at most [`MAX_DEPTH`] fds.
    pub(super) open: Vec<(String, OwnedFd)>,
    /// The workspace, and how much it may still take.
    pub(super) ws: &'a OwnedFd,
    pub(super) room: &'a Room,
    /// File bytes this archive may write: the room at the start (measured again, settled,
    /// once, before an entry would be refused for lack of it).
    pub(super) budget: u64,
    pub(super) settled: bool,
    pub(super) summary: ArchiveSummary,
    pub(super) gauge: Rc<Gauge>,
    pub(super) buf: Vec<u8>,
}

impl<'a> Extraction<'a> {
    pub(super) fn new(root: &'a OwnedFd, ws: &'a OwnedFd, room: &'a Room) -> Self {
        Self {
            root,
            open: Vec::new(),
            ws,
            room,
            budget: room.measure(ws, false),
            settled: false,
            summary: ArchiveSummary::default(),
            gauge: Rc::new(Gauge::default()),
            buf: vec![0; 256 << 10],
        }
    }

    pub(super) fn run(mut self, body: BodyReader) -> Result<ArchiveSummary, Fail> {
        let gauge = self.gauge.clone();
        gauge.allow(MAX_META_BYTES);
        let stream = open_stream(body, &gauge).map_err(|e| Fail::refused("", malformed(&e)))?;
        let mut archive = tar::Archive::new(Metered {
            inner: stream,
            gauge: gauge.clone(),
        });
        let mut entries = archive.entries().map_err(|e| stream_error(&gauge, "", e))?;
        let mut count = 0u64;
        let mut last = String::new();
        loop {
            let mut entry = match entries.next() {
                None => return Ok(self.summary),
                Some(Ok(entry)) => entry,
                Some(Err(e)) => {
                    let near = match last.is_empty() {
                        true => "(the first entry)".to_string(),
                        false => format!("(after {last})"),
                    };
                    return Err(stream_error(&gauge, &near, e));
                }
            };
            let shown = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            count += 1;
            if count > MAX_ENTRIES {
                return Err(Fail::refused(&shown, Refusal::TooManyEntries));
            }
            // Its data and padding, and the headers of the next entry.
            gauge.allow(entry.size().div_ceil(512) * 512 + MAX_META_BYTES);
            self.entry(&mut entry, &shown)?;
            last = shown;
        }
    }

    pub(super) fn entry<R: Read>(
        &mut self,
        entry: &mut tar::Entry<R>,
        shown: &str,
    ) -> Result<(), Fail> {
        use tar::EntryType as T;
        let raw = entry.path_bytes().into_owned();
        let parts = entry_parts(&raw).map_err(|why| Fail::refused(shown, why))?;
        let kind = entry.header().entry_type();
        let dir_like = kind == T::Directory || (kind == T::Regular && raw.ends_with(b"/"));
        if parts.is_empty() {
            // `./`: the target itself, which keeps its mode.
            return match dir_like || kind == T::XGlobalHeader {
                true => Ok(()),
                false => Err(Fail::refused(
                    shown,
                    Refusal::Malformed("an entry other than a directory has an empty name".into()),
                )),
            };
        }
        let mode = entry.header().mode().unwrap_or(0o644) & MODE_MASK;
        match kind {
            _ if dir_like => {
                let fd = self.dir(&parts, shown)?;
                // The owner keeps rwx so the rest of the archive can go in.
                // SAFETY: fchmod on a directory fd we own.
                unsafe { libc::fchmod(fd, mode | 0o700) };
                self.summary.dirs += 1;
                Ok(())
            }
            T::Regular | T::Continuous => {
                if is_pax_sparse(entry) {
                    return Err(Fail::refused(shown, Refusal::Type("sparse file")));
                }
                let mtime = entry.header().mtime().ok();
                self.file(entry, &parts, shown, mode, mtime)
            }
            T::Symlink => self.symlink(entry, &parts, shown),
            T::Link => self.hardlink(entry, &parts, shown),
            // Pax defaults for the whole archive: nothing in them applies here.
            T::XGlobalHeader => Ok(()),
            T::Char => Err(Fail::refused(shown, Refusal::Type("character device"))),
            T::Block => Err(Fail::refused(shown, Refusal::Type("block device"))),
            T::Fifo => Err(Fail::refused(shown, Refusal::Type("FIFO"))),
            T::GNUSparse => Err(Fail::refused(shown, Refusal::Type("sparse file"))),
            other => Err(Fail::refused(shown, Refusal::UnknownType(other.as_byte()))),
        }
    }

    /// The directory `parts` below the root, made as needed (0755, the sandbox's).
    pub(super) fn dir(&mut self, parts: &[String], shown: &str) -> Result<RawFd, Fail> {
        let keep = self
            .open
            .iter()
            .zip(parts)
            .take_while(|((open, _), p)| open == *p)
            .count();
        self.open.truncate(keep);
        for p in &parts[keep..] {
            let parent = self
                .open
                .last()
                .map_or(self.root.as_raw_fd(), |(_, fd)| fd.as_raw_fd());
            let fd = make_dir(parent, p).map_err(|e| create_error(e, shown))?;
            self.open.push((p.clone(), fd));
        }
        Ok(self
            .open
            .last()
            .map_or(self.root.as_raw_fd(), |(_, fd)| fd.as_raw_fd()))
    }

    pub(super) fn file<R: Read>(
        &mut self,
        entry: &mut tar::Entry<R>,
        parts: &[String],
        shown: &str,
        mode: u32,
        mtime: Option<u64>,
    ) -> Result<(), Fail> {
        let size = entry.size();
        if size > self.budget.saturating_sub(self.summary.bytes) && !self.settled {
            // The usage measured may be stale (Btrfs counts as of its last commit): measure
            // again, settled, before refusing. It now counts what this archive wrote.
            self.settled = true;
            self.budget = self
                .room
                .measure(self.ws, true)
                .saturating_add(self.summary.bytes);
        }
        if size > self.budget.saturating_sub(self.summary.bytes) {
            return Err(Fail::Quota);
        }
        let (name, dirs) = parts.split_last().expect("a non-empty name");
        let dir = self.dir(dirs, shown)?;
        let fd = replace(dir, name, |dir, c| {
            openat2(
                dir,
                c.to_bytes(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                0o600,
            )
        })
        .map_err(|e| create_error(e, shown))?;
        let mut file = std::fs::File::from(fd);
        let mut left = size;
        while left > 0 {
            let want = left.min(self.buf.len() as u64) as usize;
            let n = entry
                .read(&mut self.buf[..want])
                .map_err(|e| stream_error(&self.gauge, shown, e))?;
            if n == 0 {
                return Err(Fail::refused(shown, Refusal::Truncated));
            }
            file.write_all(&self.buf[..n])
                .map_err(|e| write_error(e, shown))?;
            left -= n as u64;
        }
        let fd = file.as_raw_fd();
        // SAFETY: fchmod on a file fd we own.
        unsafe { libc::fchmod(fd, mode) };
        if let Some(mtime) = mtime.and_then(|t| libc::time_t::try_from(t).ok()) {
            let times = [
                libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_OMIT,
                },
                libc::timespec {
                    tv_sec: mtime,
                    tv_nsec: 0,
                },
            ];
            // SAFETY: futimens on a file fd we own, with two valid timespecs.
            unsafe { libc::futimens(fd, times.as_ptr()) };
        }
        self.summary.files += 1;
        self.summary.bytes += size;
        Ok(())
    }

    pub(super) fn symlink<R: Read>(
        &mut self,
        entry: &tar::Entry<R>,
        parts: &[String],
        shown: &str,
    ) -> Result<(), Fail> {
        let target = entry.link_name_bytes().unwrap_or_default().into_owned();
        let target_shown = String::from_utf8_lossy(&target).into_owned();
        if target.is_empty() || target.len() > MAX_PATH_BYTES || target.contains(&0) {
            return Err(Fail::refused(
                shown,
                Refusal::Malformed(format!("bad symlink target {target_shown:?}")),
            ));
        }
        if !stays_inside(parts.len() - 1, &target) {
            return Err(Fail::refused(shown, Refusal::SymlinkOutside(target_shown)));
        }
        let (name, dirs) = parts.split_last().expect("a non-empty name");
        let dir = self.dir(dirs, shown)?;
        let target = CString::new(target).expect("checked for NUL above");
        replace(dir, name, |dir, c| {
            // SAFETY: symlinkat relative to a dir fd we own; both strings are valid C strings.
            match unsafe { libc::symlinkat(target.as_ptr(), dir, c.as_ptr()) } {
                0 => Ok(()),
                _ => Err(nix::Error::last()),
            }
        })
        .map_err(|e| create_error(e, shown))?;
        self.summary.symlinks += 1;
        Ok(())
    }

    pub(super) fn hardlink<R: Read>(
        &mut self,
        entry: &tar::Entry<R>,
        parts: &[String],
        shown: &str,
    ) -> Result<(), Fail> {
        let target = entry.link_name_bytes().unwrap_or_default().into_owned();
        let target_shown = String::from_utf8_lossy(&target).into_owned();
        let outside = || Fail::refused(shown, Refusal::HardlinkOutside(target_shown.clone()));
        let missing = || Fail::refused(shown, Refusal::HardlinkMissing(target_shown.clone()));
        let tparts = entry_parts(&target).map_err(|_| outside())?;
        let Some((tname, tdirs)) = tparts.split_last() else {
            return Err(outside());
        };
        // Resolved from the archive's root, never following a symlink: only what this
        // extraction wrote can be linked.
        let tdir = match tdirs.is_empty() {
            true => ".".to_string(),
            false => tdirs.join("/"),
        };
        let src = openat2(
            self.root.as_raw_fd(),
            &tdir,
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        )
        .map_err(|_| missing())?;
        let tname_c = cstring(tname);
        match stat_at(src.as_raw_fd(), &tname_c) {
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG => {}
            _ => return Err(missing()),
        }
        let (name, dirs) = parts.split_last().expect("a non-empty name");
        let dir = self.dir(dirs, shown)?;
        replace(dir, name, |dir, c| {
            // SAFETY: linkat between dir fds we own; flags 0 never follows a symlink.
            match unsafe { libc::linkat(src.as_raw_fd(), tname_c.as_ptr(), dir, c.as_ptr(), 0) } {
                0 => Ok(()),
                _ => Err(nix::Error::last()),
            }
        })
        .map_err(|e| create_error(e, shown))?;
        self.summary.hardlinks += 1;
        Ok(())
    }
}

/// The components of an entry's name, or why it is refused.
pub(super) fn entry_parts(raw: &[u8]) -> Result<Vec<String>, Refusal> {
    if raw.contains(&0) {
        return Err(Refusal::Nul);
    }
    if raw.len() > MAX_PATH_BYTES {
        return Err(Refusal::TooLong);
    }
    let name = std::str::from_utf8(raw).map_err(|_| Refusal::NotUtf8)?;
    if name.starts_with('/') {
        return Err(Refusal::Absolute);
    }
    let mut parts = Vec::new();
    for c in name.split('/') {
        match c {
            "" | "." => continue,
            ".." => return Err(Refusal::DotDot),
            c if c.len() > 255 => return Err(Refusal::TooLong),
            c => parts.push(c.to_string()),
        }
    }
    if parts.len() > MAX_DEPTH {
        return Err(Refusal::TooDeep);
    }
    Ok(parts)
}

/// Whether a symlink `depth` directories below the target, pointing at `target`, stays inside
/// the target when read lexically. (Containment does not rest on it: the host never follows a
/// symlink in a workspace.)
pub(super) fn stays_inside(depth: usize, target: &[u8]) -> bool {
    if target.starts_with(b"/") {
        return false;
    }
    let mut depth = depth as i64;
    for c in target.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => depth += 1,
        }
    }
    true
}

/// Whether pax records describe the entry as a GNU sparse file (formats 0.1 to 1.0).
pub(super) fn is_pax_sparse<R: Read>(entry: &mut tar::Entry<R>) -> bool {
    match entry.pax_extensions() {
        Ok(Some(exts)) => exts
            .filter_map(Result::ok)
            .any(|e| e.key_bytes().starts_with(b"GNU.sparse")),
        _ => false,
    }
}

/// Creates a name in `dir` with `make`; an existing non-directory of that name (an earlier
/// entry, or the sandbox's) is replaced, an existing directory is a clash.
pub(super) fn replace<T>(
    dir: RawFd,
    name: &str,
    make: impl Fn(RawFd, &CStr) -> Result<T, nix::Error>,
) -> Result<T, nix::Error> {
    let c = cstring(name);
    match make(dir, &c) {
        Err(nix::Error::EEXIST) => {
            if stat_at(dir, &c).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR) {
                return Err(nix::Error::EISDIR);
            }
            unlink_at(dir, &c, false)?;
            make(dir, &c)
        }
        r => r,
    }
}

/// A failure to create something for `entry`, as the extraction's failure.
pub(super) fn create_error(e: nix::Error, entry: &str) -> Fail {
    match e {
        nix::Error::ENOSPC | nix::Error::EDQUOT => Fail::Quota,
        nix::Error::ELOOP | nix::Error::ENOTDIR => Fail::refused(entry, Refusal::Through),
        nix::Error::EISDIR => Fail::refused(entry, Refusal::Clash("directory")),
        e => Fail::File(FileError::Os {
            path: entry.to_string(),
            errno: e,
        }),
    }
}

/// A failed write of `entry`'s data.
pub(super) fn write_error(e: io::Error, entry: &str) -> Fail {
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => Fail::Quota,
        Some(libc::EFBIG) => Fail::File(FileError::WriteTooLarge),
        _ => Fail::File(FileError::Os {
            path: entry.to_string(),
            errno: nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        }),
    }
}

/// The target path refused: it passes through a non-directory or a symlink.
pub(super) fn target_error(e: nix::Error, shown: &str) -> FileError {
    match e {
        nix::Error::ENOTDIR => FileError::NotADirectory(shown.to_string()),
        e => map_errno(e, shown),
    }
}

/// A failed read of the tar stream: a limit the gauge tripped, or a malformed archive.
pub(super) fn stream_error(gauge: &Gauge, entry: &str, e: io::Error) -> Fail {
    match gauge.tripped.get() {
        Some(Trip::Headers) => Fail::refused(entry, Refusal::HugeHeaders),
        Some(Trip::Ratio) => Fail::refused(entry, Refusal::Ratio),
        None if e.kind() == io::ErrorKind::UnexpectedEof => {
            Fail::refused(entry, Refusal::Truncated)
        }
        None => Fail::refused(entry, malformed(&e)),
    }
}

pub(super) fn malformed(e: &io::Error) -> Refusal {
    Refusal::Malformed(e.to_string())
}

// Placing the staging directory.

/// Merges `from` into `into` once a dry run found no file/directory clash.
pub(super) fn merge_checked(from: &OwnedFd, into: &OwnedFd) -> Result<(), Fail> {
    merge(from, into, "", 0, false)?;
    merge(from, into, "", 0, true)
}

/// Moves every name of `from` into `into`: a name `into` lacks moves whole, directories on
/// both sides merge, anything else replaces what `into` has (rename is atomic, never
/// following a symlink). With `apply` false, only checks for clashes.
pub(super) fn merge(
    from: &OwnedFd,
    into: &OwnedFd,
    rel: &str,
    depth: usize,
    apply: bool,
) -> Result<(), Fail> {
    if depth > MAX_DEPTH + 1 {
        return Err(Fail::refused(rel, Refusal::TooDeep));
    }
    for name in list_names(from).map_err(|e| create_error(e, rel))? {
        let entry = match rel.is_empty() {
            true => name.to_string_lossy().into_owned(),
            false => format!("{rel}/{}", name.to_string_lossy()),
        };
        let src = stat_at(from.as_raw_fd(), &name).map_err(|e| create_error(e, &entry))?;
        let src_dir = src.st_mode & libc::S_IFMT == libc::S_IFDIR;
        let dst = match stat_at(into.as_raw_fd(), &name) {
            Ok(st) => Some(st.st_mode),
            Err(nix::Error::ENOENT) => None,
            Err(e) => return Err(create_error(e, &entry)),
        };
        let dst_dir = dst.map(|m| m & libc::S_IFMT == libc::S_IFDIR);
        match (src_dir, dst_dir) {
            (true, Some(true)) => {
                let a = open_dir_at(from.as_raw_fd(), name.to_bytes())
                    .map_err(|e| create_error(e, &entry))?;
                let b = open_dir_at(into.as_raw_fd(), name.to_bytes())
                    .map_err(|e| create_error(e, &entry))?;
                merge(&a, &b, &entry, depth + 1, apply)?;
            }
            (true, Some(false)) => {
                let kind = kind_of(dst.unwrap_or(0));
                return Err(Fail::refused(&entry, Refusal::Clash(kind)));
            }
            (false, Some(true)) => {
                return Err(Fail::refused(&entry, Refusal::Clash("directory")));
            }
            (_, None) if apply => rename(
                from.as_raw_fd(),
                &name,
                into.as_raw_fd(),
                &name,
                libc::RENAME_NOREPLACE,
            )
            .map_err(|e| create_error(e, &entry))?,
            (false, Some(false)) if apply => {
                rename(from.as_raw_fd(), &name, into.as_raw_fd(), &name, 0)
                    .map_err(|e| create_error(e, &entry))?
            }
            _ => {}
        }
    }
    Ok(())
}

/// Removes `name` in `dir` and, if it is a directory, everything in it, never following a
/// symlink.
pub(super) fn remove_tree(dir: RawFd, name: &CStr, depth: usize) -> Result<(), nix::Error> {
    let st = stat_at(dir, name)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return unlink_at(dir, name, false);
    }
    if depth > MAX_DEPTH + 8 {
        return Err(nix::Error::ELOOP);
    }
    let sub = open_dir_at(dir, name.to_bytes())?;
    for child in list_names(&sub)? {
        remove_tree(sub.as_raw_fd(), &child, depth + 1)?;
    }
    unlink_at(dir, name, true)
}

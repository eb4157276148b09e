//! Archiving a directory of the workspace as a tar stream, without following symlinks.

use super::*;

/// The directory `parts` of the workspace, open for reading; anything else is refused.
pub(super) fn open_source(ws: &OwnedFd, parts: &[String]) -> Result<OwnedFd, FileError> {
    let shown = parts.join("/");
    let path = match parts.is_empty() {
        true => ".",
        false => shown.as_str(),
    };
    openat2(
        ws.as_raw_fd(),
        path,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOCTTY,
        0,
    )
    .map_err(|e| target_error(e, &shown))
}

/// Writes a tar of `dir` into `out` and returns `out`.
pub(super) fn write_tar<W: Write>(dir: &OwnedFd, out: W) -> io::Result<W> {
    let mut tar = tar::Builder::new(out);
    add_dir(&mut tar, dir, &[], 0)?;
    tar.into_inner()
}

/// Adds what `dir` holds, by name, depth first.
pub(super) fn add_dir<W: Write>(
    tar: &mut tar::Builder<W>,
    dir: &OwnedFd,
    rel: &[u8],
    depth: usize,
) -> io::Result<()> {
    let mut names = list_names(dir).map_err(io::Error::from)?;
    names.sort();
    for name in names {
        if name.to_bytes().starts_with(STAGING_PREFIX.as_bytes()) {
            continue;
        }
        let path = match rel.is_empty() {
            true => name.to_bytes().to_vec(),
            false => [rel, b"/", name.to_bytes()].concat(),
        };
        let path_os = OsStr::from_bytes(&path);
        // Gone since the listing (the sandbox is running): leave it out.
        let Ok(st) = stat_at(dir.as_raw_fd(), &name) else {
            continue;
        };
        let mut header = tar::Header::new_gnu();
        header.set_mode(st.st_mode & 0o777);
        header.set_mtime(st.st_mtime.max(0) as u64);
        header.set_uid(0);
        header.set_gid(0);
        header.set_size(0);
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                if depth >= MAX_ARCHIVE_DEPTH {
                    return Err(io::Error::other(format!(
                        "{}: nested deeper than {MAX_ARCHIVE_DEPTH} levels",
                        path_os.to_string_lossy()
                    )));
                }
                let Ok(sub) = open_dir_at(dir.as_raw_fd(), name.to_bytes()) else {
                    continue;
                };
                header.set_entry_type(tar::EntryType::Directory);
                tar.append_data(&mut header, path_os, io::empty())?;
                add_dir(tar, &sub, &path, depth + 1)?;
            }
            libc::S_IFREG => {
                // O_NONBLOCK: if it became a FIFO meanwhile, opening it must not hang.
                let Ok(fd) = openat2(
                    dir.as_raw_fd(),
                    name.to_bytes(),
                    libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
                    0,
                ) else {
                    continue;
                };
                let Ok(st) = fstat(fd.as_raw_fd()) else {
                    continue;
                };
                if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                    continue;
                }
                let size = st.st_size.max(0) as u64;
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(size);
                let data = Exact {
                    file: std::fs::File::from(fd),
                    left: size,
                };
                tar.append_data(&mut header, path_os, data)?;
            }
            libc::S_IFLNK => {
                let Ok(target) = read_link_at(dir.as_raw_fd(), &name) else {
                    continue;
                };
                header.set_entry_type(tar::EntryType::Symlink);
                tar.append_link(&mut header, path_os, OsStr::from_bytes(&target))?;
            }
            // FIFOs, sockets, devices: nothing to carry.
            _ => {}
        }
    }
    Ok(())
}

/// A file read as exactly `left` bytes: a file that shrank while being read is padded with
/// zeros, one that grew is cut, so the tar stays well-formed.
pub(super) struct Exact {
    pub(super) file: std::fs::File,
    pub(super) left: u64,
}

impl Read for Exact {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = self.left.min(buf.len() as u64) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = match self.file.read(&mut buf[..want])? {
            0 => {
                buf[..want].fill(0);
                want
            }
            n => n,
        };
        self.left -= n as u64;
        Ok(n)
    }
}

/// The write half of a streamed response: chunks of [`CHUNK`] bytes into a bounded channel.
/// A client that went away closes it, which fails the next write with `BrokenPipe`.
pub(super) struct ChannelWriter {
    pub(super) tx: mpsc::Sender<io::Result<Bytes>>,
    pub(super) buf: Vec<u8>,
}

impl ChannelWriter {
    pub(super) fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))
    }

    pub(super) fn flush_all(mut self) -> io::Result<()> {
        self.send()
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

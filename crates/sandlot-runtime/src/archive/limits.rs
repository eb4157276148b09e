//! What one archive may hold, and why an entry is refused: the words of the refusals a client
//! sees, kept apart from the extraction so that the runtime's error type can carry a refusal
//! without reaching into the archive code.

/// Most entries one archive may hold.
pub const MAX_ENTRIES: u64 = 100_000;
/// Most components of an entry's name (directories below the target, plus the name).
pub const MAX_DEPTH: usize = 64;
/// Longest entry name, and longest symlink target, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Most a gzip body may expand: tar bytes per compressed byte (beyond `GZIP_SLACK` in `archive/mod.rs`).
pub const MAX_GZIP_RATIO: u64 = 200;
/// Most bytes of headers (long names, pax records, sparse maps) between two entries.
pub const MAX_META_BYTES: u64 = 1 << 20;
/// Why an archive entry was refused; the message a client sees after the entry's name.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("absolute paths are not accepted")]
    Absolute,
    #[error("'..' is not accepted in a name")]
    DotDot,
    #[error("the name contains a NUL byte")]
    Nul,
    #[error("the name is not UTF-8")]
    NotUtf8,
    #[error(
        "the name is longer than {MAX_PATH_BYTES} bytes, or one of its components longer than \
         255"
    )]
    TooLong,
    #[error("nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("the archive has more than {MAX_ENTRIES} entries")]
    TooManyEntries,
    #[error("{0} entries are not accepted")]
    Type(&'static str),
    #[error("entries of type {:?} are not accepted", char::from(*.0))]
    UnknownType(u8),
    #[error("symlink to {0:?} points outside the target directory")]
    SymlinkOutside(String),
    #[error("hard link to {0:?} points outside the target directory")]
    HardlinkOutside(String),
    #[error("hard link to {0:?}, which is not a regular file extracted earlier from this archive")]
    HardlinkMissing(String),
    #[error("a parent of it is a symlink or not a directory")]
    Through,
    #[error("it is a {0} in the target directory")]
    Clash(&'static str),
    #[error("its headers (long names, pax records) are larger than {MAX_META_BYTES} bytes")]
    HugeHeaders,
    #[error("the gzip stream expands more than {MAX_GZIP_RATIO} times")]
    Ratio,
    #[error("the archive ends inside it")]
    Truncated,
    #[error("{0}")]
    Malformed(String),
}

//! Workspace ids: the sandbox id becomes a directory name and an image file name, so it must be
//! one safe path component. Anything outside `[A-Za-z0-9_-]{1,64}` is refused before it reaches
//! the filesystem; in particular no `.`, so ids never collide with our `.new-*` temporaries.

use crate::error::{Result, WorkspaceError};

/// Longest accepted id, in bytes.
pub const MAX_ID_LEN: usize = 64;

/// Refuses ids that are not a single safe path component.
pub fn validate(id: &str) -> Result<()> {
    let reason = if id.is_empty() {
        Some("empty")
    } else if id.len() > MAX_ID_LEN {
        Some("longer than 64 bytes")
    } else if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        Some("only A-Z, a-z, 0-9, '_' and '-' are allowed")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(WorkspaceError::InvalidId {
            id: id.chars().take(80).collect(),
            reason,
        }),
        None => Ok(()),
    }
}

/// True when `name` (a directory entry) is a workspace id rather than a temporary or stray entry.
pub(crate) fn is_valid(name: &str) -> bool {
    validate(name).is_ok()
}

/// Name under which a workspace is built before it is renamed into place, so a crash mid-create
/// never leaves a half-made workspace under a real id.
pub(crate) fn temp_name(id: &str) -> String {
    format!(".new-{id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_safe_ids() {
        for id in ["a", "sb_123-XYZ", &"x".repeat(64)] {
            validate(id).unwrap();
        }
    }

    #[test]
    fn refuses_unsafe_ids() {
        let long = "x".repeat(65);
        for id in [
            "", "../x", "a/b", ".", "..", ".new-a", "a b", "a\0b", "é", &long,
        ] {
            assert!(
                matches!(validate(id), Err(WorkspaceError::InvalidId { .. })),
                "{id:?} accepted"
            );
        }
    }
}

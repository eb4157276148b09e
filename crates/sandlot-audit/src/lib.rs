//! sandlot's audit log (skeleton: the audit work fills it in).

/// Every way the audit log fails.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

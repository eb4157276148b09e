//! Placeholder: being written.
pub struct Store;

//! Errors as HTTP responses: the one shape and its statuses live in `sandlot-http` (shared with
//! the record); re-exported here so this crate's paths stay `crate::error::...`.

pub use sandlot_http::error::*;

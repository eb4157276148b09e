//! Extractors whose rejections come out in the API's error format: they live in
//! `sandlot-http` (shared with the record); re-exported here so this crate's paths stay
//! `crate::extract::...`.

pub use sandlot_http::extract::*;

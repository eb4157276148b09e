//! Extractors whose rejections come out in the API's error format: a malformed or oversized
//! JSON body, a wrong content type, a bad query string or path parameter all become
//! `invalid_request` (400) or `payload_too_large` (413) with a message that says what to fix.

use crate::error::HttpError;
use crate::ApiConfig;
use axum::extract::{FromRef, FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use futures::StreamExt;
use sandlot_types::ErrorCode;
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// A JSON body, read up to [`ApiConfig::max_json_bytes`] and parsed strictly.
pub struct ApiJson<T>(pub T);

/// Like [`ApiJson`], but an empty body without a content type stands for `T::default()`
/// (`curl -X POST /v1/sandboxes` creates a sandbox with defaults).
pub struct ApiJsonOrDefault<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    Arc<ApiConfig>: FromRef<S>,
    T: DeserializeOwned,
{
    type Rejection = HttpError;

    async fn from_request(req: Request, state: &S) -> Result<Self, HttpError> {
        let cfg = Arc::<ApiConfig>::from_ref(state);
        read_json(req, cfg.max_json_bytes, false)
            .await?
            .map(Self)
            .ok_or_else(missing_body)
    }
}

impl<S, T> FromRequest<S> for ApiJsonOrDefault<T>
where
    S: Send + Sync,
    Arc<ApiConfig>: FromRef<S>,
    T: DeserializeOwned + Default,
{
    type Rejection = HttpError;

    async fn from_request(req: Request, state: &S) -> Result<Self, HttpError> {
        let cfg = Arc::<ApiConfig>::from_ref(state);
        Ok(Self(
            read_json(req, cfg.max_json_bytes, true)
                .await?
                .unwrap_or_default(),
        ))
    }
}

fn missing_body() -> HttpError {
    HttpError::invalid_request("expected a JSON body with Content-Type: application/json")
}

/// Reads and parses a JSON body; `Ok(None)` for an empty body without a content type when
/// `allow_empty`.
async fn read_json<T: DeserializeOwned>(
    req: Request,
    limit: usize,
    allow_empty: bool,
) -> Result<Option<T>, HttpError> {
    let (parts, body) = req.into_parts();
    let has_content_type = parts.headers.contains_key(CONTENT_TYPE);
    if has_content_type && !is_json_content_type(&parts.headers) {
        return Err(HttpError::invalid_request(
            "expected Content-Type: application/json for this request body",
        ));
    }
    if declared_length(&parts.headers).is_some_and(|len| len > limit as u64) {
        discard(body).await;
        return Err(body_too_large(limit));
    }
    let bytes = read_limited(body, limit).await?;
    if !has_content_type {
        if bytes.is_empty() && allow_empty {
            return Ok(None);
        }
        return Err(missing_body());
    }
    if std::str::from_utf8(&bytes).is_err() {
        return Err(HttpError::invalid_request(
            "the request body is not valid UTF-8",
        ));
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| HttpError::invalid_request(format!("invalid JSON body: {e}")))
}

/// `application/json`, with or without parameters, or any `+json` media type.
fn is_json_content_type(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

pub fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn body_too_large(limit: usize) -> HttpError {
    HttpError::new(
        ErrorCode::PayloadTooLarge,
        format!("the request body is larger than the {limit} bytes this server accepts"),
    )
}

/// Collects a body, failing as soon as it grows past `limit` rather than after buffering it.
async fn read_limited(body: axum::body::Body, limit: usize) -> Result<Vec<u8>, HttpError> {
    let mut stream = body.into_data_stream();
    let mut buf = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            HttpError::invalid_request(format!("could not read the request body: {e}"))
        })?;
        if buf.len() + chunk.len() > limit {
            discard_stream(&mut stream).await;
            return Err(body_too_large(limit));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf)
}

/// Most bytes of a refused body read (and thrown away) before the error response goes out: as
/// much as an upload may be (1 GiB), so a client refused mid-upload (say, by its disk quota)
/// still reads why; the time bound below keeps a slow client from holding the server.
const DISCARD_MAX_BYTES: u64 = 1 << 30;
/// Longest time spent reading them.
const DISCARD_MAX_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads and drops the rest of a refused body, within bounds. A client that sends its whole
/// body before reading the response (most HTTP libraries) would otherwise see the connection
/// reset, closed with unread data, instead of the response that says why.
pub async fn discard(body: axum::body::Body) {
    discard_stream(&mut body.into_data_stream()).await;
}

pub async fn discard_stream(stream: &mut axum::body::BodyDataStream) {
    let drain = async {
        let mut seen: u64 = 0;
        while let Some(Ok(chunk)) = stream.next().await {
            seen += chunk.len() as u64;
            if seen > DISCARD_MAX_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(DISCARD_MAX_TIME, drain).await;
}

/// Path parameters; a parameter that cannot be decoded is an `invalid_request`.
pub struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, HttpError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(v)| Self(v))
            .map_err(|e| {
                HttpError::invalid_request(format!("invalid path parameter: {}", e.body_text()))
            })
    }
}

/// A query string; unknown parameters are ignored, malformed ones are an `invalid_request`.
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, HttpError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(v)| Self(v))
            .map_err(|e| {
                HttpError::invalid_request(format!("invalid query string: {}", e.body_text()))
            })
    }
}

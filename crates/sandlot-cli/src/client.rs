//! The HTTP client of the commands that talk to a running server (`sandlot template`,
//! `sandlot snapshots`): JSON in and out, and the server's error body turned into an
//! [`ApiError`] with its stable code.

use anyhow::{anyhow, Context};
use sandlot_types::{ApiError, ErrorBody};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::time::Duration;

pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    pub(crate) fn new(url: &str) -> anyhow::Result<Client> {
        let http = crate::config::http_builder(url)
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(600))
            .build()
            .context("could not build the HTTP client")?;
        Ok(Client {
            http,
            base: url.trim_end_matches('/').to_owned(),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn unreachable(&self) -> String {
        format!("could not reach the server at {}", self.base)
    }

    pub(crate) async fn get_json<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let resp = self
            .http
            .get(self.url(path))
            .send()
            .await
            .with_context(|| self.unreachable())?;
        Ok(api_result(resp).await?.json().await?)
    }

    pub(crate) async fn post_json<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> anyhow::Result<T> {
        let resp = self
            .http
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .with_context(|| self.unreachable())?;
        Ok(api_result(resp).await?.json().await?)
    }

    pub(crate) async fn delete(&self, path: &str) -> anyhow::Result<()> {
        let resp = self
            .http
            .delete(self.url(path))
            .send()
            .await
            .with_context(|| self.unreachable())?;
        api_result(resp).await?;
        Ok(())
    }
}

/// The response, or its error body as an [`ApiError`].
pub(crate) async fn api_result(resp: reqwest::Response) -> anyhow::Result<reqwest::Response> {
    if resp.status().is_success() {
        return Ok(resp);
    }
    let status = resp.status();
    let text = bounded_text(resp, MAX_ERROR_BYTES).await;
    match serde_json::from_str::<ErrorBody>(&text) {
        Ok(body) => Err(ApiError::new(body.error.code, body.error.message).into()),
        Err(_) => Err(anyhow!("the server answered {status}: {}", text.trim())),
    }
}

/// The error an execution stream ended with (its `error` event's data), as an [`ApiError`].
pub(crate) fn stream_error(data: &str) -> anyhow::Error {
    match serde_json::from_str::<ErrorBody>(data) {
        Ok(body) => ApiError::new(body.error.code, body.error.message).into(),
        Err(_) => anyhow!("the execution failed: {data}"),
    }
}

/// Most of an error body read: the server's are a few hundred bytes; a broken or hostile one
/// behind `--url` may send without end.
const MAX_ERROR_BYTES: usize = 64 << 10;

/// The body as text, at most `max` bytes of it (a read error ends it).
async fn bounded_text(mut resp: reqwest::Response, max: usize) -> String {
    let mut buf = Vec::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        buf.extend_from_slice(&chunk);
        if buf.len() >= max {
            buf.truncate(max);
            break;
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

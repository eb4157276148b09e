//! The model side of `sandlot agent`: one chat completions request at a time to an
//! OpenAI-compatible endpoint (a cloud API, Ollama, vLLM, llama.cpp), bounded in time, with a
//! few retries for the answers that say "try again".

use serde_json::{json, Map, Value};
use std::time::{Duration, Instant};

/// How many times a request is sent at most when the endpoint is overloaded or unreachable.
const ATTEMPTS: u32 = 3;

/// Largest answer read from the endpoint. A completion is text and a few tool calls; an
/// endpoint that sends more (broken or hostile) is cut off rather than held in memory.
pub const MAX_REPLY_BYTES: usize = 16 << 20;

/// Why a completion could not be had; each reads as a sentence for the terminal.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("could not reach the model endpoint at {url}: {source}")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the model endpoint did not answer within {0} s (--model-timeout)")]
    Timeout(u64),
    #[error("the model endpoint answered {status}: {body}")]
    Status { status: String, body: String },
    #[error("the model endpoint's answer is not a chat completion: {0}")]
    Malformed(String),
    #[error("the model endpoint's answer is larger than {MAX_REPLY_BYTES} bytes")]
    TooLarge,
}

impl ChatError {
    /// Whether sending the same request again may work.
    fn retryable(&self) -> bool {
        match self {
            ChatError::Unreachable { source, .. } => source.is_connect(),
            ChatError::Status { status, .. } => ["429", "502", "503", "504"]
                .iter()
                .any(|s| status.starts_with(s)),
            ChatError::Timeout(_) | ChatError::Malformed(_) | ChatError::TooLarge => false,
        }
    }
}

/// What the model answered: its message (as the conversation should keep it) and the rest of
/// the choice, for the transcript.
#[derive(Debug, Clone)]
pub struct Reply {
    /// `{"role": "assistant", "content": ..., "tool_calls": [...]}`, cleaned (see [`clean`]).
    pub message: Value,
    pub finish_reason: Option<String>,
    pub usage: Option<Value>,
    pub elapsed: Duration,
}

pub struct ChatClient {
    http: reqwest::Client,
    url: String,
    model: String,
    api_key: Option<String>,
    temperature: Option<f64>,
    timeout_s: u64,
}

impl ChatClient {
    pub fn new(
        base_url: &str,
        model: &str,
        api_key: Option<String>,
        temperature: Option<f64>,
        timeout_s: u64,
    ) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10.min(timeout_s.max(1))))
            .timeout(Duration::from_secs(timeout_s.max(1)))
            .build()?;
        Ok(Self {
            http,
            url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            model: model.to_owned(),
            api_key: api_key.filter(|k| !k.is_empty()),
            temperature,
            timeout_s: timeout_s.max(1),
        })
    }

    /// The request body for `messages` with `tools` declared.
    pub fn body(&self, messages: &[Value], tools: &[Value]) -> Value {
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "tools": tools,
            "tool_choice": "auto",
        });
        if let Some(t) = self.temperature {
            body["temperature"] = json!(t);
        }
        body
    }

    /// One completion, retried with a short backoff when the endpoint is overloaded.
    pub async fn complete(&self, messages: &[Value], tools: &[Value]) -> Result<Reply, ChatError> {
        let body = self.body(messages, tools);
        let start = Instant::now();
        let mut attempt = 1;
        loop {
            match self.once(&body).await {
                Ok((message, finish_reason, usage)) => {
                    return Ok(Reply {
                        message,
                        finish_reason,
                        usage,
                        elapsed: start.elapsed(),
                    })
                }
                Err(e) if e.retryable() && attempt < ATTEMPTS => {
                    tracing::warn!(error = %e, attempt, "retrying the model request");
                    tokio::time::sleep(Duration::from_millis(500 << attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn once(
        &self,
        body: &Value,
    ) -> Result<(Value, Option<String>, Option<Value>), ChatError> {
        let mut req = self.http.post(&self.url).json(body);
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().await.map_err(|e| self.transport(e))?;
        let status = resp.status();
        let text = self.read_bounded(resp).await?;
        if !status.is_success() {
            return Err(ChatError::Status {
                status: status.to_string(),
                body: excerpt(&text, 1000),
            });
        }
        let doc: Value =
            serde_json::from_str(&text).map_err(|_| ChatError::Malformed(excerpt(&text, 500)))?;
        let Some(choice) = doc.get("choices").and_then(|c| c.get(0)) else {
            return Err(ChatError::Malformed(excerpt(&text, 500)));
        };
        let Some(message) = choice.get("message").filter(|m| m.is_object()) else {
            return Err(ChatError::Malformed(excerpt(&text, 500)));
        };
        let finish = choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok((clean(message), finish, doc.get("usage").cloned()))
    }

    /// The answer's body as text, read as it arrives up to [`MAX_REPLY_BYTES`].
    async fn read_bounded(&self, mut resp: reqwest::Response) -> Result<String, ChatError> {
        if resp
            .content_length()
            .is_some_and(|n| n > MAX_REPLY_BYTES as u64)
        {
            return Err(ChatError::TooLarge);
        }
        let mut buf = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.transport(e))? {
            buf.extend_from_slice(&chunk);
            if buf.len() > MAX_REPLY_BYTES {
                return Err(ChatError::TooLarge);
            }
        }
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    fn transport(&self, e: reqwest::Error) -> ChatError {
        if e.is_timeout() {
            ChatError::Timeout(self.timeout_s)
        } else {
            ChatError::Unreachable {
                url: self.url.clone(),
                source: e,
            }
        }
    }
}

/// The assistant message as it goes back into the conversation: role, content and tool calls
/// only (fields some servers add, such as reasoning text, are not accepted by all of them on
/// the way in), each call with a string of arguments, as the API wants them.
pub fn clean(message: &Value) -> Value {
    let mut out = Map::new();
    out.insert("role".into(), json!("assistant"));
    out.insert(
        "content".into(),
        message.get("content").cloned().unwrap_or(Value::Null),
    );
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        if !calls.is_empty() {
            let calls: Vec<Value> = calls
                .iter()
                .map(|c| {
                    let f = c.get("function").cloned().unwrap_or(Value::Null);
                    let args = match f.get("arguments") {
                        Some(Value::String(s)) => Value::String(s.clone()),
                        None | Some(Value::Null) => Value::String(String::new()),
                        Some(other) => Value::String(other.to_string()),
                    };
                    json!({
                        "id": c.get("id").cloned().unwrap_or(Value::Null),
                        "type": "function",
                        "function": {
                            "name": f.get("name").cloned().unwrap_or(json!("")),
                            "arguments": args,
                        }
                    })
                })
                .collect();
            out.insert("tool_calls".into(), Value::Array(calls));
        }
    }
    Value::Object(out)
}

/// The text of a message's content: a string, or the text parts of a list of parts.
pub fn content_text(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// `text` cut to `max` characters for an error message.
fn excerpt(text: &str, max: usize) -> String {
    let text = text.trim();
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_keeps_what_the_conversation_needs() {
        let m = json!({
            "role": "assistant",
            "content": null,
            "reasoning_content": "hmm",
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "run_python", "arguments": {"code": "1"}}}]
        });
        let c = clean(&m);
        assert!(c.get("reasoning_content").is_none());
        assert_eq!(
            c["tool_calls"][0]["function"]["arguments"],
            "{\"code\":\"1\"}"
        );
        let plain = clean(&json!({"content": "done", "tool_calls": []}));
        assert_eq!(plain, json!({"role": "assistant", "content": "done"}));
    }

    #[test]
    fn content_text_reads_parts() {
        let m = json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        assert_eq!(content_text(&m), "ab");
        assert_eq!(content_text(&json!({"content": null})), "");
    }

    #[test]
    fn excerpts_are_bounded() {
        assert_eq!(excerpt("  abc ", 10), "abc");
        assert_eq!(excerpt("ééééé", 2), "éé…");
    }
}

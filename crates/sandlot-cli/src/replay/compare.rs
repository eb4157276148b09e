//! The normalisers a bundle declares and the comparison of a replayed step's outputs with the
//! recorded ones: `identical`, `equivalent` (after the normalisers) or `diverged` (a diff).

use anyhow::anyhow;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// How outputs are made comparable.
#[derive(Debug, Clone, Default)]
pub struct Normalisers {
    pub(super) addresses: bool,
    pub(super) cells: bool,
    pub(super) timestamps: bool,
    pub(super) floats: Option<usize>,
    pub(super) png: Png,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) enum Png {
    #[default]
    Bytes,
    Decoded,
    Dimensions,
}

impl Normalisers {
    pub fn parse(list: &[String]) -> anyhow::Result<Normalisers> {
        if list.is_empty() {
            return Ok(Normalisers {
                addresses: true,
                cells: true,
                ..Default::default()
            });
        }
        let mut n = Normalisers::default();
        for item in list.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            match item {
                "none" => {}
                "addresses" => n.addresses = true,
                "cells" => n.cells = true,
                "timestamps" => n.timestamps = true,
                "png=decoded" | "png" => n.png = Png::Decoded,
                "png=dimensions" => n.png = Png::Dimensions,
                other => match other.strip_prefix("floats=").map(str::parse::<usize>) {
                    Some(Ok(d)) if d <= 17 => n.floats = Some(d),
                    _ => {
                        return Err(anyhow!(
                            "unknown normaliser {other:?}: use addresses, cells, timestamps, \
                             floats=N (0-17), png=decoded, png=dimensions or none"
                        ))
                    }
                },
            }
        }
        Ok(n)
    }

    pub fn names(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.addresses {
            v.push("addresses".to_owned());
        }
        if self.cells {
            v.push("cells".to_owned());
        }
        if self.timestamps {
            v.push("timestamps".to_owned());
        }
        if let Some(d) = self.floats {
            v.push(format!("floats={d}"));
        }
        match self.png {
            Png::Bytes => {}
            Png::Decoded => v.push("png=decoded".to_owned()),
            Png::Dimensions => v.push("png=dimensions".to_owned()),
        }
        v
    }

    pub(super) fn is_empty(&self) -> bool {
        self.names().is_empty()
    }

    pub(super) fn text(&self, s: &str) -> String {
        use std::sync::OnceLock;
        static RE: OnceLock<[regex::Regex; 5]> = OnceLock::new();
        let [addr, cell, iso, epoch, float] = RE.get_or_init(|| {
            [
                regex::Regex::new(r"0x[0-9a-fA-F]{4,16}").expect("regex"),
                regex::Regex::new(r"\b(In|Out)\s*\[\d+\]").expect("regex"),
                regex::Regex::new(
                    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?",
                )
                .expect("regex"),
                regex::Regex::new(r"\b1[5-9]\d{8}(\.\d+)?\b").expect("regex"),
                regex::Regex::new(r"-?\b\d+\.\d+(?:[eE][-+]?\d+)?\b").expect("regex"),
            ]
        });
        let mut s = s.to_owned();
        if self.addresses {
            s = addr.replace_all(&s, "0x…").into_owned();
        }
        if self.cells {
            s = cell.replace_all(&s, "$1[…]").into_owned();
        }
        if self.timestamps {
            s = iso.replace_all(&s, "<timestamp>").into_owned();
            s = epoch.replace_all(&s, "<timestamp>").into_owned();
        }
        if let Some(d) = self.floats {
            s = float
                .replace_all(&s, |c: &regex::Captures<'_>| match c[0].parse::<f64>() {
                    Ok(v) => {
                        let r = format!("{v:.d$}");
                        // -0.000 and 0.000 are the same number.
                        if r.trim_start_matches('-')
                            .bytes()
                            .all(|b| b == b'0' || b == b'.')
                        {
                            r.trim_start_matches('-').to_owned()
                        } else {
                            r
                        }
                    }
                    Err(_) => c[0].to_owned(),
                })
                .into_owned();
        }
        s
    }

    /// A PNG (base64 or bytes) as a line: its bytes' hash, or after `png=` its pixels or size.
    pub(super) fn png(&self, bytes: &[u8]) -> String {
        let exact = format!("<png sha256:{}>", hex::encode(Sha256::digest(bytes)));
        if self.png == Png::Bytes {
            return exact;
        }
        match decode_png(bytes) {
            Some((w, h, pixels)) => match self.png {
                Png::Dimensions => format!("<png {w}x{h}>"),
                _ => format!(
                    "<png {w}x{h} pixels:{}>",
                    hex::encode(Sha256::digest(&pixels))
                ),
            },
            None => exact,
        }
    }
}

pub(super) fn decode_png(bytes: &[u8]) -> Option<(u32, u32, Vec<u8>)> {
    let mut dec = png::Decoder::new(std::io::Cursor::new(bytes));
    dec.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = dec.read_info().ok()?;
    let info = reader.info();
    // Refuse images whose pixels would not fit in a sensible amount of memory.
    if (info.width as u64) * (info.height as u64) > 100_000_000 {
        return None;
    }
    let mut buf = vec![0; reader.output_buffer_size()?];
    let frame = reader.next_frame(&mut buf).ok()?;
    buf.truncate(frame.buffer_size());
    Some((frame.width, frame.height, buf))
}

pub(super) fn b64_decode(s: &str) -> Option<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let clean: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(clean.len() / 4 * 3);
    for chunk in clean.chunks(4) {
        let mut n = 0u32;
        let mut k = 0;
        for &c in chunk {
            if c == b'=' {
                break;
            }
            n = (n << 6) | val(c)?;
            k += 1;
        }
        n <<= 6 * (4 - k);
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..k.max(1)]);
    }
    Some(out)
}

/// A MIME bundle's entries as lines (`image/png` through [`Normalisers::png`]).
pub(super) fn mime_lines(out: &mut Vec<String>, data: &Value, n: &Normalisers) {
    let Some(map) = data.as_object() else {
        return;
    };
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for k in keys {
        let v = &map[k];
        if k == "image/png" {
            let shown = v
                .as_str()
                .and_then(b64_decode)
                .map(|b| n.png(&b))
                .unwrap_or_else(|| "<png unreadable>".into());
            out.push(format!("  {k}: {shown}"));
        } else {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            for line in n.text(&text).lines() {
                out.push(format!("  {k}: {line}"));
            }
        }
    }
}

/// An execution's result as comparable lines. `artifact_png` gives an artifact's bytes (to
/// compare PNG files by pixels) when it can be had.
pub(super) fn render(
    result: &Value,
    n: &Normalisers,
    artifact_png: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> Vec<String> {
    let mut out = vec![format!(
        "end_state: {}",
        result["end_state"].as_str().unwrap_or("?")
    )];
    for stream in ["stdout", "stderr"] {
        let text = result[stream].as_str().unwrap_or("");
        if !text.is_empty() {
            out.push(format!("{stream}:"));
            out.extend(n.text(text).lines().map(|l| format!("  {l}")));
        }
    }
    let mut shown = 0;
    for ev in result["outputs"].as_array().into_iter().flatten() {
        let kind = ev["type"].as_str().unwrap_or("");
        if kind == "display_data" || kind == "result" {
            shown += 1;
            out.push(format!("output {shown}: {kind}"));
            mime_lines(&mut out, &ev["data"], n);
        }
    }
    if let Some(err) = result.get("error").filter(|e| !e.is_null()) {
        out.push(format!(
            "error: {}: {}",
            err["name"].as_str().unwrap_or(""),
            n.text(err["value"].as_str().unwrap_or(""))
        ));
        for line in err["traceback"].as_array().into_iter().flatten() {
            let line = strip_ansi(line.as_str().unwrap_or(""));
            out.extend(n.text(&line).lines().map(|l| format!("  {l}")));
        }
    }
    let mut artifacts: Vec<&Value> = result["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    artifacts.sort_by_key(|a| a["path"].as_str().unwrap_or("").to_owned());
    for a in artifacts {
        let path = a["path"].as_str().unwrap_or("");
        let sha = a["sha256"].as_str().unwrap_or("");
        let is_png = a["mime_type"].as_str() == Some("image/png");
        let shown = match (is_png && n.png != Png::Bytes, sha.is_empty()) {
            (_, true) => format!("<{} bytes, not stored>", a["size"]),
            (true, false) => match artifact_png(sha) {
                Some(bytes) => n.png(&bytes),
                None => format!("sha256:{sha}"),
            },
            (false, false) => format!("sha256:{sha}"),
        };
        out.push(format!("artifact {path}: {shown}"));
    }
    out
}

pub(super) fn strip_ansi(s: &str) -> String {
    use std::sync::OnceLock;
    static RE: OnceLock<regex::Regex> = OnceLock::new();
    RE.get_or_init(|| regex::Regex::new(r"\x1b\[[0-9;]*[A-Za-z]").expect("regex"))
        .replace_all(s, "")
        .into_owned()
}

/// A step's verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Identical,
    Equivalent(Vec<String>),
    Diverged(String),
    NotReplayable(String),
}

impl Verdict {
    pub(super) fn word(&self) -> &'static str {
        match self {
            Verdict::Identical => "identical",
            Verdict::Equivalent(_) => "equivalent",
            Verdict::Diverged(_) => "diverged",
            Verdict::NotReplayable(_) => "not_replayable",
        }
    }

    pub(super) fn ok(&self) -> bool {
        matches!(self, Verdict::Identical | Verdict::Equivalent(_))
    }
}

/// Compares a recorded result with a replayed one.
pub fn compare(
    recorded: &Value,
    replayed: &Value,
    n: &Normalisers,
    artifact_png: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> Verdict {
    let none = Normalisers::default();
    let no_fetch = |_: &str| None;
    if render(recorded, &none, &no_fetch) == render(replayed, &none, &no_fetch) {
        return Verdict::Identical;
    }
    let a = render(recorded, n, artifact_png);
    let b = render(replayed, n, artifact_png);
    if a == b && !n.is_empty() {
        // Which normalisers mattered: those without which the two still differ.
        let mut used = Vec::new();
        for name in n.names() {
            let without: Vec<String> = n.names().into_iter().filter(|x| *x != name).collect();
            let Ok(fewer) = Normalisers::parse(&if without.is_empty() {
                vec!["none".to_owned()]
            } else {
                without
            }) else {
                continue;
            };
            if render(recorded, &fewer, artifact_png) != render(replayed, &fewer, artifact_png) {
                used.push(name);
            }
        }
        return Verdict::Equivalent(used);
    }
    let (a, b) = (a.join("\n") + "\n", b.join("\n") + "\n");
    let diff = similar::TextDiff::from_lines(&a, &b)
        .unified_diff()
        .context_radius(3)
        .header("recorded", "replayed")
        .to_string();
    Verdict::Diverged(diff)
}

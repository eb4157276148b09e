//! The output guardrails: the canary-aware scanner per sandbox, and every way output leaves
//! (streams, background output, results, artifacts, whole files and downloads) scanned, each
//! finding's outcome asked of the [`Governor`] and applied.

use super::*;

impl Runtime {
    /// The scanner with `id`'s canary.
    pub(crate) fn scanner_for(&self, id: &str) -> Option<Arc<Scanner>> {
        let g = self.governance()?;
        if let Some(s) = lock(&g.scanners).get(id) {
            return Some(s.clone());
        }
        let values = self.canary_values(id);
        let scanner = Arc::new(if values.is_empty() {
            g.scanner.clone()
        } else {
            g.scanner
                .with_canaries(&values)
                .unwrap_or_else(|_| g.scanner.clone())
        });
        // Only a live sandbox's is kept (an ended one's would never be removed).
        if self.inner.registry.contains(id) {
            lock(&g.scanners).insert(id.to_owned(), scanner.clone());
        }
        Some(scanner)
    }

    /// The scanner with the canaries of every live sandbox of `tenant` (for what leaves
    /// through no one sandbox: volume files, artifacts).
    pub(crate) fn scanner_for_tenant(&self, tenant: &str) -> Option<Scanner> {
        let g = self.governance()?;
        let ids: Vec<String> = lock(&self.inner.registry.sandboxes)
            .values()
            .filter(|e| lock(&e.info).tenant == tenant)
            .map(|e| e.id.clone())
            .collect();
        let values: Vec<String> = ids.iter().flat_map(|id| self.canary_values(id)).collect();
        Some(if values.is_empty() {
            g.scanner.clone()
        } else {
            g.scanner
                .with_canaries(&values)
                .unwrap_or_else(|_| g.scanner.clone())
        })
    }

    /// Streams `events` through the guard into `sink`: text is held back to whole lines and
    /// released redacted, withheld or not at all as the governor decides. Ends when `events`
    /// closes; returns the worst outcome it applied.
    pub(crate) fn guard_stream(
        &self,
        id: &str,
        exec_id: &str,
        mut events: mpsc::UnboundedReceiver<OutputEvent>,
        sink: mpsc::UnboundedSender<OutputEvent>,
    ) -> Option<tokio::task::JoinHandle<Outcome>> {
        let scanner = self.scanner_for(id)?;
        let rt = self.clone();
        let (id, exec_id) = (id.to_owned(), exec_id.to_owned());
        Some(tokio::spawn(async move {
            let mut out = StreamScanner::new((*scanner).clone());
            let mut err = StreamScanner::new((*scanner).clone());
            let mut worst = Outcome::Pass;
            while let Some(ev) = events.recv().await {
                match ev {
                    OutputEvent::Stdout { text } => {
                        let r = out.push(&text);
                        let t = rt
                            .release_chunk(&id, &exec_id, "stdout", r, &mut worst)
                            .await;
                        if let Some(text) = t {
                            let _ = sink.send(OutputEvent::Stdout { text });
                        }
                    }
                    OutputEvent::Stderr { text } => {
                        let r = err.push(&text);
                        let t = rt
                            .release_chunk(&id, &exec_id, "stderr", r, &mut worst)
                            .await;
                        if let Some(text) = t {
                            let _ = sink.send(OutputEvent::Stderr { text });
                        }
                    }
                    mut other => {
                        let o = rt
                            .guard_event(&id, &exec_id, &scanner, &mut other, false)
                            .await;
                        worst = worst.max(o);
                        if worst < Outcome::Withhold || o == Outcome::Pass {
                            let _ = sink.send(other);
                        }
                    }
                }
            }
            for (stream, s) in [("stdout", &mut out), ("stderr", &mut err)] {
                let r = s.finish();
                if let Some(text) = rt.release_chunk(&id, &exec_id, stream, r, &mut worst).await {
                    let ev = if stream == "stdout" {
                        OutputEvent::Stdout { text }
                    } else {
                        OutputEvent::Stderr { text }
                    };
                    let _ = sink.send(ev);
                }
            }
            worst
        }))
    }

    /// The text of a released stream chunk as it may leave, or `None`.
    pub(super) async fn release_chunk(
        &self,
        id: &str,
        exec_id: &str,
        stream: &str,
        r: sandlot_guard::Released,
        worst: &mut Outcome,
    ) -> Option<String> {
        if r.is_empty() {
            return None;
        }
        if r.findings.is_empty() {
            return (*worst < Outcome::Withhold).then_some(r.text);
        }
        // Streamed findings are decided here (and contain at once); they are recorded with the
        // final result's scan, which sees the same text.
        let o = self
            .decide(id, Some(exec_id), stream, &r.findings, false)
            .await;
        *worst = (*worst).max(o);
        match *worst {
            Outcome::Pass => Some(r.text),
            Outcome::Redact => Some(r.redacted()),
            Outcome::Withhold | Outcome::Contain => None,
        }
    }

    /// Decides the outcome of `findings` (the worst of theirs), containing the sandbox when
    /// it says so.
    pub(super) async fn decide(
        &self,
        id: &str,
        exec_id: Option<&str>,
        stream: &str,
        findings: &[Finding],
        record: bool,
    ) -> Outcome {
        let Some(info) = self.info_of(id) else {
            return Outcome::Pass;
        };
        let worst = self.decide_for(&info, exec_id, stream, findings, record);
        if worst == Outcome::Contain {
            let kinds: Vec<&str> = findings.iter().map(|f| f.rule).collect();
            sandlot_telemetry::metrics().finding_detected(id);
            self.contain(id, &format!("{stream} had {}", kinds.join(", ")))
                .await;
        }
        worst
    }

    /// The worst outcome the governor gives `findings` in `stream` of `info` (no containment).
    pub(super) fn decide_for(
        &self,
        info: &Sandbox,
        exec_id: Option<&str>,
        stream: &str,
        findings: &[Finding],
        record: bool,
    ) -> Outcome {
        let Some(g) = self.governance() else {
            return Outcome::Pass;
        };
        findings
            .iter()
            .map(|f| {
                g.governor.output(&OutputFinding {
                    sandbox: info,
                    execution_id: exec_id,
                    finding: f,
                    stream,
                    record,
                })
            })
            .max()
            .unwrap_or(Outcome::Pass)
    }

    /// Output produced while no execution ran (`GET .../background`), scanned like an
    /// execution's: redacted or withheld as the policy says, and containing on a canary.
    pub async fn guard_background(&self, id: &str, out: &mut sandlot_types::BackgroundOutput) {
        let Some(scanner) = self.scanner_for(id) else {
            return;
        };
        for entry in out.entries.iter_mut() {
            let findings = scanner.scan(&entry.text);
            if findings.is_empty() {
                continue;
            }
            let stream = match entry.stream {
                sandlot_types::StreamName::Stdout => "stdout",
                sandlot_types::StreamName::Stderr => "stderr",
            };
            match self.decide(id, None, stream, &findings, true).await {
                Outcome::Pass => {}
                Outcome::Redact => entry.text = sandlot_guard::redact(&entry.text, &findings),
                Outcome::Withhold | Outcome::Contain => {
                    entry.text = format!("[withheld by policy: {} finding(s)]", findings.len())
                }
            }
        }
    }

    /// Artifacts an execution collected that hold findings stop being downloadable (their
    /// bytes cannot be redacted in a content-addressed store); a canary contains the sandbox.
    pub(crate) async fn guard_artifacts(&self, r: &mut ExecutionResult) {
        let Some(scanner) = self.scanner_for(&r.sandbox_id) else {
            return;
        };
        for a in r.artifacts.iter_mut() {
            if a.url.is_empty() || a.size > MAX_SCANNED_BYTES {
                continue;
            }
            let Ok((size, _, file)) = self.open_artifact(&a.sha256).await else {
                continue;
            };
            let mut bytes = Vec::with_capacity(size as usize);
            use tokio::io::AsyncReadExt;
            if file.take(size).read_to_end(&mut bytes).await.is_err() {
                continue;
            }
            let findings = scanner.scan_bytes(&bytes);
            if findings.is_empty() {
                continue;
            }
            if self
                .decide(&r.sandbox_id, Some(&r.id), "file", &findings, true)
                .await
                != Outcome::Pass
            {
                a.url.clear();
            }
        }
    }

    /// Bytes that leave as a whole that cannot be redacted (a workspace archive): whether they
    /// may leave (`false`: withheld, or the sandbox contained).
    pub async fn guard_whole(&self, id: &str, bytes: &[u8]) -> bool {
        let Some(scanner) = self.scanner_for(id) else {
            return true;
        };
        let findings = scanner.scan_bytes(bytes);
        findings.is_empty() || self.decide(id, None, "file", &findings, true).await == Outcome::Pass
    }

    /// A volume's file about to be downloaded, scanned with the canaries of every live sandbox
    /// of the volume's tenant: its bytes as they may leave, or `None` (withheld).
    pub async fn guard_volume_file(
        &self,
        volume: &str,
        tenant: &str,
        bytes: Vec<u8>,
    ) -> Option<Vec<u8>> {
        let Some(scanner) = self.scanner_for_tenant(tenant) else {
            return Some(bytes);
        };
        let findings = scanner.scan_bytes(&bytes);
        if findings.is_empty() {
            return Some(bytes);
        }
        // The decision's resource is shaped like a sandbox of the tenant; with none live, the
        // shipped default (redact) applies without a decision.
        let Some(mut pseudo) = self.info_of_any(tenant) else {
            return Some(sandlot_guard::redact_bytes(&bytes, &findings));
        };
        pseudo.id = format!("volume:{volume}");
        match self.decide_for(&pseudo, None, "file", &findings, true) {
            Outcome::Pass => Some(bytes),
            Outcome::Redact => Some(sandlot_guard::redact_bytes(&bytes, &findings)),
            // No one sandbox to contain: withheld.
            Outcome::Withhold | Outcome::Contain => None,
        }
    }

    /// Any live sandbox record of `tenant`, as the shape of a decision's resource.
    pub(super) fn info_of_any(&self, tenant: &str) -> Option<Sandbox> {
        lock(&self.inner.registry.sandboxes)
            .values()
            .map(|e| lock(&e.info).clone())
            .find(|i| i.tenant == tenant)
    }

    /// Scans and rewrites one rich event (display data, result, error) in place.
    pub(super) async fn guard_event(
        &self,
        id: &str,
        exec_id: &str,
        scanner: &Scanner,
        ev: &mut OutputEvent,
        record: bool,
    ) -> Outcome {
        let mut worst = Outcome::Pass;
        let mut texts: Vec<&mut String> = Vec::new();
        let stream = match ev {
            OutputEvent::DisplayData { data, .. } | OutputEvent::Result { data, .. } => {
                for (mime, v) in data.iter_mut() {
                    if mime.starts_with("image/") && mime != "image/svg+xml" {
                        continue;
                    }
                    if let serde_json::Value::String(s) = v {
                        texts.push(s);
                    }
                }
                "result"
            }
            OutputEvent::Error(e) => {
                texts.push(&mut e.value);
                texts.extend(e.traceback.iter_mut());
                "stderr"
            }
            OutputEvent::Stdout { text } => {
                texts.push(text);
                "stdout"
            }
            OutputEvent::Stderr { text } => {
                texts.push(text);
                "stderr"
            }
        };
        for t in texts {
            let findings = scanner.scan(t);
            if findings.is_empty() {
                continue;
            }
            let o = self
                .decide(id, Some(exec_id), stream, &findings, record)
                .await;
            worst = worst.max(o);
            match o {
                Outcome::Pass => {}
                Outcome::Redact => *t = sandlot_guard::redact(t, &findings),
                Outcome::Withhold | Outcome::Contain => {
                    *t = format!("[withheld by policy: {} finding(s)]", findings.len())
                }
            }
        }
        worst
    }

    /// Scans a finished execution's result (recording each finding) and applies the
    /// outcomes; a contained execution keeps none of its output.
    pub(crate) async fn guard_result(&self, r: &mut ExecutionResult) -> Outcome {
        let Some(scanner) = self.scanner_for(&r.sandbox_id) else {
            return Outcome::Pass;
        };
        let (id, exec_id) = (r.sandbox_id.clone(), r.id.clone());
        // The result as it was, for a release a person may approve (see `Governor::hold_output`).
        let original = r.clone();
        let mut worst = Outcome::Pass;
        let mut stdout = OutputEvent::Stdout {
            text: std::mem::take(&mut r.stdout),
        };
        worst = worst.max(
            self.guard_event(&id, &exec_id, &scanner, &mut stdout, true)
                .await,
        );
        if let OutputEvent::Stdout { text } = stdout {
            r.stdout = text;
        }
        let mut stderr = OutputEvent::Stderr {
            text: std::mem::take(&mut r.stderr),
        };
        worst = worst.max(
            self.guard_event(&id, &exec_id, &scanner, &mut stderr, true)
                .await,
        );
        if let OutputEvent::Stderr { text } = stderr {
            r.stderr = text;
        }
        if let Some(data) = r.result.take() {
            let mut ev = OutputEvent::Result {
                data,
                metadata: serde_json::Value::Null,
            };
            worst = worst.max(
                self.guard_event(&id, &exec_id, &scanner, &mut ev, true)
                    .await,
            );
            if let OutputEvent::Result { data, .. } = ev {
                r.result = Some(data);
            }
        }
        if let Some(e) = r.error.take() {
            let mut ev = OutputEvent::Error(e);
            worst = worst.max(
                self.guard_event(&id, &exec_id, &scanner, &mut ev, true)
                    .await,
            );
            if let OutputEvent::Error(e) = ev {
                r.error = Some(e);
            }
        }
        for ev in r.outputs.iter_mut() {
            // Already recorded above when they are the same text; the rich ones are new.
            let record = matches!(ev, OutputEvent::DisplayData { .. });
            worst = worst.max(self.guard_event(&id, &exec_id, &scanner, ev, record).await);
        }
        if worst >= Outcome::Withhold {
            if let (Some(g), Some(info)) = (self.governance(), self.info_of(&id)) {
                r.output_held = g
                    .governor
                    .hold_output(&info, &exec_id, worst, &original)
                    .map(|review| sandlot_types::OutputHeld { review });
            }
        }
        if worst == Outcome::Contain {
            let why = "[withheld: the sandbox was contained]".to_string();
            r.stdout = why.clone();
            r.stderr.clear();
            r.result = None;
            r.outputs.clear();
            r.error = Some(sandlot_types::ExecError {
                name: "SandboxContained".into(),
                value: lock_contained(self, &id).unwrap_or(why),
                traceback: vec![],
            });
        }
        worst
    }

    /// Scans a file about to be downloaded: its bytes as they may leave, or `None` (withheld).
    pub async fn guard_file(&self, id: &str, path: &str, bytes: Vec<u8>) -> Option<Vec<u8>> {
        let Some(scanner) = self.scanner_for(id) else {
            return Some(bytes);
        };
        let findings = scanner.scan_bytes(&bytes);
        if findings.is_empty() {
            return Some(bytes);
        }
        let _ = path;
        match self.decide(id, None, "file", &findings, true).await {
            Outcome::Pass => Some(bytes),
            Outcome::Redact => Some(sandlot_guard::redact_bytes(&bytes, &findings)),
            Outcome::Withhold | Outcome::Contain => None,
        }
    }
}

fn lock_contained(rt: &Runtime, id: &str) -> Option<String> {
    rt.info_of(id)
        .and_then(|i| i.contained)
        .map(|why| format!("the sandbox was contained: {why}"))
}

//! Running one command: the launch cell, the FIFOs' tail, and how a command's end reads.

use super::*;
use base64::Engine as _;

/// Standard base64 with padding, as proto3 JSON writes `bytes`.
pub(super) fn base64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// Decodes standard (or URL-safe) base64, padded or not (proto3 JSON readers accept both);
/// `None` for anything else.
pub(super) fn unbase64(s: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
    use base64::engine::DecodePaddingMode;
    const LENIENT: GeneralPurposeConfig = GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true);
    const STANDARD: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::STANDARD, LENIENT);
    const URL_SAFE: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::URL_SAFE, LENIENT);
    STANDARD.decode(s).or_else(|_| URL_SAFE.decode(s)).ok()
}

/// Single-quotes a word for Bash.
pub(super) fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Refuses what cannot be a command: nothing to run, NUL bytes, bad variable names, too much.
pub(super) fn check_config(c: &ProcessConfig) -> Result<(), RpcError> {
    if c.cmd.is_empty() {
        return Err(RpcError::invalid("ProcessConfig.cmd is empty"));
    }
    if c.args.len() > MAX_ARGS || c.envs.len() > MAX_ENVS {
        return Err(RpcError::invalid(format!(
            "at most {MAX_ARGS} arguments and {MAX_ENVS} environment variables"
        )));
    }
    let all = std::iter::once(&c.cmd)
        .chain(&c.args)
        .chain(c.envs.keys())
        .chain(c.envs.values());
    if all.clone().any(|w| w.contains('\0')) || c.cwd.as_deref().is_some_and(|d| d.contains('\0')) {
        return Err(RpcError::invalid("the command contains a NUL byte"));
    }
    for k in c.envs.keys() {
        let ok = !k.is_empty()
            && !k.as_bytes()[0].is_ascii_digit()
            && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            return Err(RpcError::invalid(format!(
                "{k:?} is not a valid environment variable name"
            )));
        }
    }
    Ok(())
}

/// What the wrapper runs (its `$0` is `sandlot-command`, `$1` the cwd, the rest the command):
/// its pid on fd 3, the program with fd 3 closed, its exit status on fd 3.
pub(super) const WRAPPER: &str = r#"echo "p $$" >&3; cd -- "$1" || { echo "x 1" >&3; exit 1; }; shift; "$@" 3>&-; echo "x $?" >&3"#;

/// The launch cell (see the module's doc). The subshell opens the pipes itself (`exec`
/// redirections) before it forks the wrapper, so they are open by the time the cell ends and
/// the host lets go of its keeper ends. Setsid and bash by absolute path: the command's own
/// `PATH` (an env of the request) applies to the command, not to the launch.
pub(super) fn command_cell(c: &ProcessConfig, paths: &CommandPaths) -> String {
    let cwd = crate::filesystem::command_dir(c.cwd.as_deref());
    let stdin = paths.stdin.as_deref().unwrap_or("/dev/null");
    let mut cell = format!(
        "(\nexec 4<{} >{} 2>{} 3>{} || exit 1\n",
        quote(stdin),
        quote(&paths.stdout),
        quote(&paths.stderr),
        quote(&paths.status)
    );
    for (k, v) in &c.envs {
        cell.push_str(&format!("export {}\n", quote(&format!("{k}={v}"))));
    }
    // On a terminal, the new session takes it as its controlling terminal (its stdin), and
    // its programs get the default SIGINT and SIGQUIT (an asynchronous command of a shell
    // without job control starts with them ignored, and a shell cannot undo that), so ^C
    // and ^\ typed into it reach them.
    let (signals, ctty) = if paths.tty.is_some() {
        ("/usr/bin/env --default-signal=INT,QUIT ", "--ctty ")
    } else {
        ("", "")
    };
    cell.push_str(&format!(
        "{signals}/usr/bin/setsid {ctty}/bin/bash -c {} sandlot-command {}",
        quote(WRAPPER),
        quote(&cwd)
    ));
    for w in std::iter::once(&c.cmd).chain(&c.args) {
        cell.push(' ');
        cell.push_str(&quote(w));
    }
    // Stdin through fd 4: without job control an asynchronous command's stdin is /dev/null
    // unless redirected on the command itself.
    cell.push_str(" <&4 4<&- &\n)\n");
    cell
}

/// What the launcher runs (`$0` is `sandlot-launcher`; its stdin is its queue, fd 3 its status
/// channel): its pid on fd 3, then each NUL-terminated cell in a subshell of its own, stdin
/// `/dev/null`, not waited for (a cell whose pipes the host has already let go blocks on
/// opening them and must not hold up the next), until the host closes the queue.
pub(super) const LAUNCHER_LOOP: &str =
    r#"echo "p $$" >&3; exec 3>&-; while IFS= read -r -d '' c; do (eval "$c") </dev/null & done"#;

/// The cell that starts a launcher: detached in a session of its own (as commands are), its
/// output discarded.
pub(super) fn launcher_cell(queue: &str, status: &str) -> String {
    format!(
        "(\nexec 3>{} || exit 1\n/usr/bin/setsid /bin/bash -c {} sandlot-launcher <{} >/dev/null 2>&1 &\n)\n",
        quote(status),
        quote(LAUNCHER_LOOP),
        quote(queue)
    )
}

/// The sandbox's command launcher, started (by one launch execution) when it has none that
/// runs; `None` when one cannot be started (the caller launches by an execution instead).
/// Launchers of sandboxes whose processes are gone are forgotten on the way.
pub(super) async fn launcher(rt: &Runtime, sandbox: &str) -> Option<Arc<Launcher>> {
    let slot = {
        let mut g = LAUNCHERS.lock().unwrap_or_else(|p| p.into_inner());
        let all = g.get_or_insert_with(HashMap::new);
        all.retain(|id, slot| {
            id == sandbox
                || slot
                    .try_lock()
                    .map(|l| l.as_ref().is_some_and(|l| l.alive()))
                    .unwrap_or(true)
        });
        all.entry(sandbox.to_owned()).or_default().clone()
    };
    let mut slot = slot.lock().await;
    if let Some(l) = slot.as_ref().filter(|l| l.alive()) {
        return Some(l.clone());
    }
    *slot = match start_launcher(rt, sandbox).await {
        Ok(l) => Some(Arc::new(l)),
        Err(why) => {
            tracing::debug!(
                sandbox,
                why,
                "no command launcher: commands launch by executions"
            );
            None
        }
    };
    slot.clone()
}

/// Forgets the sandbox's launcher `l` (a launch could not be queued to it: a new one is
/// started next time).
fn forget_launcher(sandbox: &str, l: &Arc<Launcher>) {
    let slot = LAUNCHERS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .and_then(|all| all.get(sandbox).cloned());
    if let Some(slot) = slot {
        if let Ok(mut s) = slot.try_lock() {
            if s.as_ref().is_some_and(|cur| Arc::ptr_eq(cur, l)) {
                *s = None;
            }
        }
    }
}

async fn start_launcher(rt: &Runtime, sandbox: &str) -> Result<Launcher, String> {
    let sb = rt.get_sandbox(sandbox).await.map_err(|e| e.to_string())?;
    if sb.state != sandlot_types::SandboxState::Running {
        return Err(format!("the sandbox is {:?}", sb.state));
    }
    let name = format!("launcher-{}", nonce());
    let mut pipes = rt
        .launcher_pipes(sandbox, &name)
        .await
        .map_err(|e| e.to_string())?;
    let r = launch(
        rt,
        sandbox,
        launcher_cell(&pipes.queue_path, &pipes.status_path),
    )
    .await;
    pipes.launched();
    match r {
        Ok(r) if r.exit_code == Some(0) => {}
        Ok(r) => return Err(format!("its cell ended {:?}", r.end_state)),
        Err(e) => return Err(e.to_string()),
    }
    let mut said = Vec::new();
    let mut buf = [0u8; 64];
    let status = &mut pipes.status;
    let leader = tokio::time::timeout(LAUNCHER_START, async {
        loop {
            match status.read(&mut buf).await {
                Ok(n) if n > 0 => {
                    let room = MAX_STATUS.saturating_sub(said.len()).min(n);
                    said.extend_from_slice(&buf[..room]);
                    if let Some(l) = parse_status(&said).leader {
                        return Some(l);
                    }
                }
                _ => return None,
            }
        }
    })
    .await
    .ok()
    .flatten()
    .ok_or("it did not report its pid")?;
    pipes.adopt(leader).await.map_err(|e| e.to_string())
}

pub(super) type StdinGuard = tokio::sync::OwnedMutexGuard<Option<pipe::Sender>>;

/// Runs a registered command to its end (see the module's doc), feeding its streams.
pub(super) async fn run(
    rt: Runtime,
    sandbox: String,
    proc: Arc<Proc>,
    deadline: Option<tokio::time::Instant>,
    stdin: StdinGuard,
) {
    let end = match launch_and_tail(&rt, &sandbox, &proc, deadline, stdin).await {
        Ok((end, false)) => Event::End(end),
        Ok((end, true)) => match sandbox_lost(&rt, &sandbox).await {
            Some(why) => Event::Failed(RpcError::new(Code::Unavailable, why)),
            None => Event::End(end),
        },
        // No terminal left: the Start fails, with its code, as envd's does when it cannot
        // open one.
        Err(e) if e.code == Code::ResourceExhausted => Event::Failed(e),
        Err(e) => Event::End(End {
            exit_code: -1,
            exited: false,
            status: "error".into(),
            error: Some(e.message),
        }),
    };
    unregister(&sandbox, proc.pid);
    proc.stdin.lock().await.take();
    proc.finish(end);
}

/// After a command's processes ended with their sandbox's: why the stream ends with an error
/// rather than an end event, when the sandbox itself is gone (killed, deleted, past its
/// lifetime) rather than restarted, paused or stopped. Its record may lag its processes by a
/// moment, so it is asked a few times over [`LOST_WAIT`].
pub(super) async fn sandbox_lost(rt: &Runtime, sandbox: &str) -> Option<String> {
    let lost = || {
        format!(
            "the connection to sandbox {sandbox} ended before the stream completed: \
             the sandbox was killed or its lifetime ended"
        )
    };
    let start = tokio::time::Instant::now();
    loop {
        match check_running(rt, sandbox).await {
            Err(_) => return Some(lost()),
            Ok(sb) if sb.state != sandlot_types::SandboxState::Running => return None,
            Ok(_) if start.elapsed() >= LOST_WAIT => return None,
            Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

pub(super) async fn launch_and_tail(
    rt: &Runtime,
    sandbox: &str,
    proc: &Arc<Proc>,
    deadline: Option<tokio::time::Instant>,
    mut stdin_guard: StdinGuard,
) -> Result<(End, bool), RpcError> {
    // Unique per command and server run, so names a sandbox made earlier are not in the way.
    let name = format!("{}-{}", proc.pid, nonce());
    let io = match proc.pty {
        Some((cols, rows)) => CommandIo::Pty { cols, rows },
        None => CommandIo::Pipes {
            stdin: proc.wants_stdin,
        },
    };
    let CommandPipes {
        output,
        status,
        stdin,
        paths,
        control,
    } = rt
        .command_pipes(sandbox, &name, io)
        .await
        .map_err(|e| match e {
            e @ RuntimeError::File(sandlot_runtime::FileError::NoFreePty) => {
                RpcError::new(Code::ResourceExhausted, e.to_string())
            }
            e => e.into(),
        })?;
    let control = Arc::new(control);
    let _ = proc.control.set(control.clone());
    let output = match output {
        CommandOutput::Pipes { stdout, stderr } => [Source::Stdout(stdout), Source::Stderr(stderr)],
        CommandOutput::Pty(master) => {
            let _ = proc.master.set(master.clone());
            [Source::Pty(master), Source::Closed]
        }
    };
    *stdin_guard = stdin;
    let cell = command_cell(&proc.config, &paths);
    // Through the launcher when there is one that runs (starting it if need be), else as an
    // execution. Through the launcher the keepers stay until the command reports its pid (the
    // cell runs a moment later, not before this returns).
    let queued = match launcher(rt, sandbox).await {
        Some(l) => match l.send(&cell, LAUNCHER_SEND).await {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(sandbox, error = %e, "the command launcher took no launch");
                forget_launcher(sandbox, &l);
                false
            }
        },
        None => false,
    };
    // Through the launcher, the command's stdin stays locked (so neither input nor a close
    // lands before the command holds its end) until the command reports, as the keepers do.
    let (launch, stdin_guard) = if queued {
        (None, Some(stdin_guard))
    } else {
        let r = launch(rt, sandbox, cell).await;
        control.launched();
        drop(stdin_guard);
        (Some(r), None)
    };
    let report_by = queued.then(|| tokio::time::Instant::now() + LAUNCHER_REPORT);
    let failed = match launch {
        None => Some(format!(
            "the command did not start within {} s",
            LAUNCHER_REPORT.as_secs()
        )),
        Some(Ok(r)) if r.exit_code == Some(0) => None,
        Some(Ok(r)) => Some(format!(
            "the command could not be started ({:?}, exit code {:?}): {}{}",
            r.end_state,
            r.exit_code,
            r.stderr.trim(),
            r.error
                .map(|e| format!(" {}: {}", e.name, e.value))
                .unwrap_or_default()
        )),
        Some(Err(e)) => Some(format!(
            "the command could not be started: {}",
            RpcError::from(e).message
        )),
    };
    let end = tail(
        proc,
        &control,
        output,
        status,
        deadline,
        report_by.map(|at| (at, stdin_guard)),
        failed,
    )
    .await;
    control.remove_names().await;
    // A sandbox's kill ends its processes one after another: the command's pipes can close
    // before the driver is seen dead. An end that is not a normal exit (no exit, or killed by
    // a signal, 128+N) waits a moment for the others, so a killed sandbox's command is
    // reported as lost, not as killed by a signal.
    let mut gone = control.processes_gone();
    if !gone && (!end.exited || end.exit_code < 0 || end.exit_code > 128) {
        let until = tokio::time::Instant::now() + PROCESSES_GONE_WAIT;
        while !gone && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
            gone = control.processes_gone();
        }
    }
    Ok((end, gone))
}

/// How often a command that has not reported yet checks that its sandbox's processes live.
const GONE_CHECK: Duration = Duration::from_millis(100);
/// How long an abnormal end waits for the sandbox's other processes to be seen gone.
const PROCESSES_GONE_WAIT: Duration = Duration::from_millis(300);

/// One output of a command: a pipe (stdout or stderr) or its terminal.
pub(super) enum Source {
    Stdout(pipe::Receiver),
    Stderr(pipe::Receiver),
    Pty(Arc<PtyMaster>),
    Closed,
}

impl Source {
    /// Reads what is there; `Ok(0)` at the end (a closed source never answers).
    async fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Source::Stdout(p) | Source::Stderr(p) => p.read(buf).await,
            Source::Pty(m) => m.read(buf).await,
            Source::Closed => std::future::pending().await,
        }
    }

    fn is_open(&self) -> bool {
        !matches!(self, Source::Closed)
    }

    /// The event for bytes read from this source.
    fn data(&self, bytes: &[u8]) -> Event {
        let b = base64(bytes);
        Event::Data(match self {
            Source::Stderr(_) => Data::Stderr(b),
            Source::Pty(_) => Data::Pty(b),
            Source::Stdout(_) | Source::Closed => Data::Stdout(b),
        })
    }
}

/// Runs the launch cell as a Bash execution.
pub(super) async fn launch(
    rt: &Runtime,
    sandbox: &str,
    code: String,
) -> Result<sandlot_types::ExecutionResult, RuntimeError> {
    let mut timeout = LAUNCH_TIMEOUT;
    loop {
        let req = ExecuteRequest {
            code: code.clone(),
            language: Language::Bash,
            timeout: Some(timeout),
            stream: false,
            context: None,
            on_failure: Default::default(),
        };
        match rt.execute(sandbox, req, None).await {
            Err(RuntimeError::BadTimeout { max, .. }) if timeout > max && max > 0.0 => {
                timeout = max;
            }
            r => return r,
        }
    }
}

/// A few random hex digits.
pub(super) fn nonce() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    format!("{:012x}", h.finish() & 0xffff_ffff_ffff)
}

/// What the wrapper said on the status channel: its pid, then its exit status.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Status {
    leader: Option<i32>,
    exit: Option<i32>,
}

pub(super) fn parse_status(text: &[u8]) -> Status {
    let mut st = Status::default();
    // Only complete lines count: a number cut short is not the number.
    let complete = match text.iter().rposition(|&b| b == b'\n') {
        Some(at) => &text[..at],
        None => return st,
    };
    for line in String::from_utf8_lossy(complete).lines() {
        match line.split_once(' ') {
            Some(("p", n)) if st.leader.is_none() => {
                st.leader = n.parse().ok().filter(|&p: &i32| p > 1);
            }
            Some(("x", n)) if st.exit.is_none() => st.exit = n.parse().ok(),
            _ => {}
        }
    }
    st
}

/// Reads the command's output into its streams until its wrapper has exited, then builds its
/// end. `failed` says why the launch failed, if it did (or would have, for a command that never
/// reports). With `report_by`, the host's keepers (and the command's stdin lock) are still
/// held: they are let go when the wrapper reports its pid, or at that instant (then the
/// command reads as not started).
pub(super) async fn tail(
    proc: &Proc,
    control: &CommandControl,
    [mut out, mut err]: [Source; 2],
    mut status: pipe::Receiver,
    deadline: Option<tokio::time::Instant>,
    report_by: Option<(tokio::time::Instant, Option<StdinGuard>)>,
    failed: Option<String>,
) -> End {
    let mut obuf = vec![0u8; CHUNK];
    let mut ebuf = vec![0u8; CHUNK];
    let mut sbuf = [0u8; 64];
    let mut said: Vec<u8> = Vec::new();
    let (mut out_open, mut err_open) = (out.is_open(), err.is_open());
    let mut timed_out = false;
    let far = tokio::time::Instant::now() + Duration::from_secs(100 * 365 * 86400);
    let sleep = tokio::time::sleep_until(deadline.unwrap_or(far));
    tokio::pin!(sleep);
    let (report_at, mut stdin_guard) = match report_by {
        Some((at, guard)) => (Some(at), guard),
        None => (None, None),
    };
    let mut keeping = report_at.is_some();
    let report = tokio::time::sleep_until(report_at.unwrap_or(far));
    tokio::pin!(report);
    // While the command has not reported, its sandbox may be killed under it: then nothing
    // will report, and the wait ends when its processes are seen gone, not at `report_by`.
    let mut check = tokio::time::interval(GONE_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            r = out.read(&mut obuf), if out_open => match r {
                Ok(n) if n > 0 => proc.emit(out.data(&obuf[..n])).await,
                _ => out_open = false,
            },
            r = err.read(&mut ebuf), if err_open => match r {
                Ok(n) if n > 0 => proc.emit(err.data(&ebuf[..n])).await,
                _ => err_open = false,
            },
            r = status.read(&mut sbuf) => match r {
                Ok(n) if n > 0 => {
                    let room = MAX_STATUS.saturating_sub(said.len()).min(n);
                    said.extend_from_slice(&sbuf[..room]);
                    let leader = parse_status(&said).leader;
                    if keeping && leader.is_some() {
                        keeping = false;
                        control.launched();
                        drop(stdin_guard.take());
                    }
                    let kill = {
                        let mut st = proc.state();
                        let new = st.leader.is_none() && leader.is_some();
                        st.leader = leader;
                        new.then_some(st.killed).flatten()
                    };
                    if let (Some(sig), Some(leader)) = (kill, leader) {
                        control.signal_group(leader, sig).await;
                    }
                }
                _ => break,
            },
            _ = &mut sleep, if !timed_out => {
                timed_out = true;
                proc.signal(SIGKILL).await;
            }
            _ = &mut report, if keeping => {
                keeping = false;
                control.launched();
                drop(stdin_guard.take());
            }
            _ = check.tick(), if keeping => {
                if control.processes_gone() {
                    keeping = false;
                    control.launched();
                    drop(stdin_guard.take());
                }
            }
        }
    }
    // The wrapper has exited: what the command wrote is in the pipes; take it, waiting a
    // moment for writes in flight, but not for processes it left behind.
    let grace = tokio::time::sleep(DRAIN_GRACE);
    tokio::pin!(grace);
    while out_open || err_open {
        tokio::select! {
            r = out.read(&mut obuf), if out_open => match r {
                Ok(n) if n > 0 => proc.emit(out.data(&obuf[..n])).await,
                _ => out_open = false,
            },
            r = err.read(&mut ebuf), if err_open => match r {
                Ok(n) if n > 0 => proc.emit(err.data(&ebuf[..n])).await,
                _ => err_open = false,
            },
            _ = &mut grace => break,
        }
    }
    let said = parse_status(&said);
    let killed = proc.state().killed;
    end_of(said, killed, timed_out, failed, control.processes_gone())
}

/// The end event of a finished command, in envd's terms (Go's `ProcessState` wording).
pub(super) fn end_of(
    said: Status,
    killed: Option<i32>,
    timed_out: bool,
    failed: Option<String>,
    processes_gone: bool,
) -> End {
    let signalled = |status: &str, error: Option<String>| End {
        exit_code: -1,
        exited: false,
        status: status.into(),
        error,
    };
    if timed_out {
        return signalled(
            "signal: killed",
            Some("the command ran past its timeout and was stopped".into()),
        );
    }
    match (killed, said.exit) {
        (Some(SIGTERM), _) => return signalled("signal: terminated", None),
        (Some(_), _) => return signalled("signal: killed", None),
        (None, Some(code)) => {
            return End {
                exit_code: code,
                exited: true,
                status: format!("exit status {code}"),
                error: None,
            }
        }
        (None, None) => {}
    }
    if said.leader.is_none() {
        return End {
            exit_code: -1,
            exited: false,
            status: "error".into(),
            error: Some(failed.unwrap_or_else(|| "the command could not be started".into())),
        };
    }
    if processes_gone {
        return signalled(
            "signal: killed",
            Some("the sandbox's processes ended (restarted, paused or stopped)".into()),
        );
    }
    signalled("signal: killed", None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (raw, enc) in cases {
            assert_eq!(base64(raw.as_bytes()), enc);
            assert_eq!(unbase64(enc).unwrap(), raw.as_bytes());
            assert_eq!(unbase64(enc.trim_end_matches('=')).unwrap(), raw.as_bytes());
        }
        assert_eq!(unbase64("Z"), None);
        assert_eq!(unbase64("Zm9v!"), None);
    }

    #[test]
    fn quoting_survives_quotes() {
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn the_cell_launches_the_program_detached() {
        let c = ProcessConfig {
            cmd: "/bin/bash".into(),
            args: vec!["-l".into(), "-c".into(), "echo 'hi'; cd /".into()],
            envs: BTreeMap::from([("FOO".into(), "a b".into())]),
            cwd: None,
        };
        let paths = CommandPaths {
            stdout: "/tmp/.e2b-proc/1.out".into(),
            stderr: "/tmp/.e2b-proc/1.err".into(),
            status: "/tmp/.e2b-proc/1.st".into(),
            stdin: None,
            tty: None,
        };
        let cell = command_cell(&c, &paths);
        assert_eq!(
            cell,
            format!(
                "(\nexec 4<'/dev/null' >'/tmp/.e2b-proc/1.out' 2>'/tmp/.e2b-proc/1.err' 3>'/tmp/.e2b-proc/1.st' || exit 1\nexport 'FOO=a b'\n/usr/bin/setsid /bin/bash -c {} sandlot-command '/home/user' '/bin/bash' '-l' '-c' 'echo '\\''hi'\\''; cd /' <&4 4<&- &\n)\n",
                quote(WRAPPER)
            )
        );
    }

    #[test]
    fn a_pty_cell_opens_the_terminal_and_makes_it_the_controlling_one() {
        let c = ProcessConfig {
            cmd: "/bin/bash".into(),
            args: vec!["-i".into()],
            ..Default::default()
        };
        let tty = "/dev/pts/3".to_owned();
        let paths = CommandPaths {
            stdout: tty.clone(),
            stderr: tty.clone(),
            status: "/tmp/.e2b-proc/1.st".into(),
            stdin: Some(tty.clone()),
            tty: Some(tty),
        };
        let cell = command_cell(&c, &paths);
        assert!(cell.starts_with(
            "(\nexec 4<'/dev/pts/3' >'/dev/pts/3' 2>'/dev/pts/3' 3>'/tmp/.e2b-proc/1.st' || exit 1\n"
        ));
        assert!(
            cell.contains(
                "\n/usr/bin/env --default-signal=INT,QUIT /usr/bin/setsid --ctty /bin/bash -c "
            ),
            "{cell}"
        );
        assert!(
            cell.ends_with(" '/bin/bash' '-i' <&4 4<&- &\n)\n"),
            "{cell}"
        );
    }

    #[test]
    fn bad_commands_are_refused() {
        let mut c = ProcessConfig {
            cmd: "ls".into(),
            ..Default::default()
        };
        c.envs.insert("A=B".into(), "x".into());
        assert!(check_config(&c).is_err());
        c.envs.clear();
        c.args.push("a\0b".into());
        assert!(check_config(&c).is_err());
        c.args.clear();
        c.cmd.clear();
        assert!(check_config(&c).is_err());
    }

    #[test]
    fn the_status_channel_is_read_warily() {
        assert_eq!(parse_status(b""), Status::default());
        assert_eq!(parse_status(b"p 12"), Status::default(), "no complete line");
        assert_eq!(
            parse_status(b"p 12\nx 3\n"),
            Status {
                leader: Some(12),
                exit: Some(3)
            }
        );
        assert_eq!(
            parse_status(b"p 1\n").leader,
            None,
            "never the sandbox's init"
        );
        assert_eq!(parse_status(b"p -5\nx 99999999999\n"), Status::default());
        assert_eq!(
            parse_status(b"p 7\np 8\n").leader,
            Some(7),
            "the first says"
        );
    }

    #[test]
    fn ends_read_like_envd_s() {
        let exited = Status {
            leader: Some(5),
            exit: Some(2),
        };
        let e = end_of(exited, None, false, None, false);
        assert_eq!((e.exit_code, e.status.as_str()), (2, "exit status 2"));
        let e = end_of(Status::default(), None, false, Some("no".into()), false);
        assert_eq!(e.error.as_deref(), Some("no"));
        let gone = Status {
            leader: Some(5),
            exit: None,
        };
        let e = end_of(gone, Some(SIGKILL), false, None, false);
        assert_eq!(e.status, "signal: killed");
    }
}

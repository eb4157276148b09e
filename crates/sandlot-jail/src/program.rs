//! The last step of a launcher (the zygote's, a build step's): exec the confined program with
//! exactly the argv and environment it was given, nothing inherited.

use crate::error::JailError;
use std::convert::Infallible;
use std::ffi::CString;

/// Execs `argv[0]` with `argv` and `env` (no `PATH` lookup). Returns only on failure, naming
/// `step`.
pub fn exec(
    argv: &[String],
    env: &[(String, String)],
    step: &'static str,
) -> Result<Infallible, JailError> {
    let to_c = |s: &str| CString::new(s).map_err(|_| JailError::Protocol(format!("NUL in {s:?}")));
    let argv = argv
        .iter()
        .map(|a| to_c(a))
        .collect::<Result<Vec<_>, _>>()?;
    let env = env
        .iter()
        .map(|(k, v)| to_c(&format!("{k}={v}")))
        .collect::<Result<Vec<_>, _>>()?;
    let Some(program) = argv.first() else {
        return Err(JailError::Protocol("empty argv".into()));
    };
    let err = nix::unistd::execve(program, &argv, &env).unwrap_err();
    Err(JailError::Sys { step, source: err })
}

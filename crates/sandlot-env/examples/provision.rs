//! Provisions an environment and prints it as JSON, with the time taken.
//!
//! `cargo run -p sandlot-env --example provision -- <envs_dir> [auto|bar|plain|quiet] [extra...]`

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use sandlot_env::{ensure, EnvSpec, Progress};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(envs_dir) = args.next().map(PathBuf::from) else {
        eprintln!("usage: provision <envs_dir> [auto|bar|plain|quiet] [extra...]");
        return ExitCode::from(2);
    };
    let progress = match args.next().as_deref() {
        None | Some("auto") => Progress::Auto,
        Some("bar") => Progress::Bar,
        Some("plain") => Progress::Plain,
        Some("quiet") => Progress::Quiet,
        Some(other) => {
            eprintln!("unknown progress mode {other:?}");
            return ExitCode::from(2);
        }
    };
    let extras: Vec<String> = args.collect();
    let extras: Vec<&str> = extras.iter().map(String::as_str).collect();
    let spec = match EnvSpec::default_spec().try_with_extras(&extras) {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    match ensure(&envs_dir, &spec, progress, &sandlot_env::Isolation::None) {
        Ok(env) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&env).expect("PythonEnv serializes")
            );
            eprintln!("ensure took {:.3}s", started.elapsed().as_secs_f64());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

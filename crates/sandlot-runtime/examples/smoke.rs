//! Drives the runtime directly, without HTTP: `cargo run -p sandlot-runtime --example smoke --
//! <data-dir> <python-env> [code]`. `SMOKE_N=20` creates (and deletes) that many sandboxes
//! first and prints each creation's time. Useful when debugging the jail.

use sandlot_runtime::{Runtime, RuntimeConfig};
use sandlot_types::{CreateSandbox, ExecuteRequest, Language};
use std::error::Error;
use std::time::Instant;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("__zygote-launch") {
        return Err(sandlot_runtime::zygote_launch_main(&args[2]).into());
    }
    tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()))
        .init();
    let data = std::path::PathBuf::from(&args[1]);
    std::fs::create_dir_all(&data)?;
    let store = sandlot_store::Store::open(&data.join("sandlot.db"))?;
    let rt = Runtime::start(RuntimeConfig::new(data, args[2].clone().into()), store).await?;
    let n: usize = std::env::var("SMOKE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut ids = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let s = rt.create_sandbox(CreateSandbox::default()).await?;
        println!("created {} in {:?}", s.id, t.elapsed());
        ids.push(s.id);
    }
    let id = ids.pop().expect("one sandbox");
    for old in ids {
        let t = Instant::now();
        rt.delete_sandbox(&old).await?;
        println!("deleted in {:?}", t.elapsed());
    }
    let code = args.get(3).cloned().unwrap_or_else(|| "print(1)".into());
    for lang in [Language::Python, Language::Bash] {
        let t = Instant::now();
        let req = ExecuteRequest {
            code: code.clone(),
            language: lang,
            timeout: Some(10.0),
            stream: false,
            context: None,
            on_failure: Default::default(),
        };
        let r = rt.execute(&id, req, None).await?;
        println!(
            "{lang:?} in {:?}: {}",
            t.elapsed(),
            serde_json::to_string_pretty(&r)?
        );
    }
    rt.delete_sandbox(&id).await?;
    rt.shutdown().await;
    Ok(())
}

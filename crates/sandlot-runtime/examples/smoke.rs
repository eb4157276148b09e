//! Drives the runtime directly, without HTTP: `cargo run -p sandlot-runtime --example smoke --
//! <data-dir> <python-env> [code]`. Useful when debugging the jail.

use sandlot_runtime::{Runtime, RuntimeConfig};
use sandlot_types::{CreateSandbox, ExecuteRequest, Language};
use std::time::Instant;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("__zygote-launch") {
        return Err(sandlot_runtime::zygote_launch_main(&args[2]));
    }
    tracing_subscriber::fmt().with_env_filter("info").init();
    let data = std::path::PathBuf::from(&args[1]);
    std::fs::create_dir_all(&data)?;
    let store = sandlot_store::Store::open(&data.join("sandlot.db"))?;
    let rt = Runtime::start(RuntimeConfig::new(data, args[2].clone().into()), store).await?;
    let t = Instant::now();
    let sb = rt
        .create_sandbox(CreateSandbox::default())
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    println!("created {} in {:?}", sb.id, t.elapsed());
    let code = args.get(3).cloned().unwrap_or_else(|| "print(1)".into());
    for lang in [Language::Python, Language::Bash] {
        let t = Instant::now();
        let req = ExecuteRequest {
            code: code.clone(),
            language: lang,
            timeout: Some(10.0),
            stream: false,
        };
        let r = rt
            .execute(&sb.id, req, None)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        println!(
            "{lang:?} in {:?}: {}",
            t.elapsed(),
            serde_json::to_string_pretty(&r)?
        );
    }
    rt.delete_sandbox(&sb.id)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    rt.shutdown().await;
    Ok(())
}

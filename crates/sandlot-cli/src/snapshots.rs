//! `sandlot snapshots ls|rm|verify|gc`: a server's snapshots from the command line. `verify`
//! asks the server to check each snapshot's saved state on disk (its checksum over the whole
//! body, without loading it) and exits 1 when any is corrupt; `gc` deletes snapshots older
//! than a number of days.

use sandlot_client::Client;
use sandlot_types::Snapshot;
use serde::Deserialize;
use std::io::Write;

#[derive(Deserialize)]
struct List {
    snapshots: Vec<Snapshot>,
}

async fn all(client: &Client) -> anyhow::Result<Vec<Snapshot>> {
    Ok(client.get_json::<List>("/v1/snapshots").await?.snapshots)
}

/// `ls`: ID, NAME, SANDBOX, CREATED, SIZE, VARIABLES (or JSON).
pub async fn list(url: &str, json: bool) -> anyhow::Result<u8> {
    let snapshots = all(&crate::client::connect(url)?).await?;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &snapshots)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", table(&snapshots))?;
    }
    Ok(0)
}

/// `rm ID...`: deletes each; exits 1 if any could not be.
pub async fn remove(url: &str, ids: &[String]) -> anyhow::Result<u8> {
    let client = crate::client::connect(url)?;
    let mut code = 0;
    for id in ids {
        match client.delete(&format!("/v1/snapshots/{id}")).await {
            Ok(()) => println!("deleted {id}"),
            Err(e) => {
                eprintln!("{id}: {e}");
                code = 1;
            }
        }
    }
    Ok(code)
}

/// `verify [ID...]`: checks the named snapshots (every one when none is named).
pub async fn verify(url: &str, ids: &[String]) -> anyhow::Result<u8> {
    let client = crate::client::connect(url)?;
    let ids: Vec<String> = if ids.is_empty() {
        all(&client).await?.into_iter().map(|s| s.id).collect()
    } else {
        ids.to_vec()
    };
    let mut code = 0;
    for id in &ids {
        match client
            .get_json::<Snapshot>(&format!("/v1/snapshots/{id}?verify=true"))
            .await
        {
            Ok(_) => println!("ok       {id}"),
            Err(e) => {
                println!("CORRUPT  {id}: {e}");
                code = 1;
            }
        }
    }
    Ok(code)
}

/// `gc --older-than DAYS`: deletes snapshots created more than `days` ago.
pub async fn gc(url: &str, days: u64, dry_run: bool) -> anyhow::Result<u8> {
    let client = crate::client::connect(url)?;
    let cutoff = time::OffsetDateTime::now_utc() - time::Duration::days(days as i64);
    let mut code = 0;
    for s in all(&client).await? {
        let created = time::OffsetDateTime::parse(
            &s.created_at,
            &time::format_description::well_known::Rfc3339,
        );
        if !matches!(created, Ok(t) if t < cutoff) {
            continue;
        }
        if dry_run {
            println!("would delete {} (created {})", s.id, s.created_at);
            continue;
        }
        match client.delete(&format!("/v1/snapshots/{}", s.id)).await {
            Ok(()) => println!("deleted {} (created {})", s.id, s.created_at),
            Err(e) => {
                eprintln!("{}: {e}", s.id);
                code = 1;
            }
        }
    }
    Ok(code)
}

fn table(snapshots: &[Snapshot]) -> String {
    let header = ["ID", "NAME", "SANDBOX", "CREATED", "STATE", "VARIABLES"].map(String::from);
    let rows: Vec<[String; 6]> = snapshots
        .iter()
        .map(|s| {
            [
                s.id.clone(),
                s.name.clone().unwrap_or_else(|| "-".into()),
                s.sandbox_id.clone(),
                s.created_at.clone(),
                human_bytes(s.state_bytes),
                s.variables.to_string(),
            ]
        })
        .collect();
    let mut widths = [0usize; 6];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut s = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = widths
            .iter()
            .zip(row)
            .map(|(w, cell)| format!("{cell:<w$}", w = *w))
            .collect();
        s.push_str(line.join("  ").trim_end());
        s.push('\n');
    }
    s
}

fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

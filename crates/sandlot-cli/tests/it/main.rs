//! The integration tests of the `sandlot` binary, one test binary for all of them: every file
//! here is a module (a test's path is `it::<file>::<test>`), and they share one process, so
//! linking the server-sized binary happens once rather than once per file. `common` is the
//! harness (a real `sandlot serve` per test); anything process-wide a test changes must be
//! scoped to it (no `std::env::set_var`: a server gets its environment through
//! `TestServer::start_with_env`), since tests of all files run side by side.
//!
//! One suite: `cargo test -p sandlot-cli --test it -- <file>::`; one test:
//! `cargo test -p sandlot-cli --test it -- <file>::<test> --exact`.

mod common;

mod api;
mod archive;
mod artifacts;
mod attacks;
mod audit;
mod audit_flood;
mod cli;
mod console;
mod contexts;
mod diff;
mod disk_caps;
mod e2b_api;
mod e2b_files;
mod e2b_life;
mod e2b_pty;
mod e2b_rpc;
mod e2b_snap;
mod e2b_tokens;
mod env_jail;
mod events;
mod fair_shares;
mod governance;
mod holds;
mod host_layout;
mod hygiene;
mod jobs;
mod js;
mod kpis;
mod lifecycle;
mod lineage;
mod mcp;
mod names;
mod observe;
mod paths;
mod ports;
mod protocols;
mod redteam7;
mod redteam8;
mod reviews;
mod rollback;
mod soak;
mod state;
mod templates;
mod tenancy;
mod trusted;
mod uids;
mod volumes;
mod zygote;

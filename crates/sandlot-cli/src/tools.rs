//! `sandlot tools`: the tool declarations for a model (OpenAI, Anthropic, JSON Schema).
//!
//! The names, descriptions and argument schemas are the Python SDK's data file
//! (`sdk/python/src/sandlot/tool_declarations.json`), embedded at build time: the SDK's
//! `sandlot.tools`, this command and `sandlot agent` declare the same tools from one source.

use anyhow::Context;
use clap::{Args, ValueEnum};
use serde::Deserialize;
use serde_json::{json, Value};
use std::io::Write;

/// The SDK's declarations file, verbatim.
const DECLARATIONS: &str = include_str!("../../../sdk/python/src/sandlot/tool_declarations.json");

#[derive(Debug, Args)]
#[command(
    after_help = "The same declarations as the Python SDK's sandlot.tools (run_python, run_bash)."
)]
pub struct ToolsArgs {
    /// The shape the model's API wants
    #[arg(long, value_enum, default_value = "openai")]
    format: Format,
    /// Print only this tool (run_python or run_bash)
    #[arg(long, value_name = "NAME")]
    only: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Chat completions: `{"type": "function", "function": {name, description, parameters}}`
    Openai,
    /// Messages API: `{name, description, input_schema}`
    Anthropic,
    /// Plain `{name, description, parameters}` with the arguments' JSON Schema
    JsonSchema,
}

/// One tool as the declarations file holds it.
#[derive(Debug, Clone, Deserialize)]
pub struct Declaration {
    pub name: String,
    /// `python` or `bash`: what the tool runs.
    pub language: String,
    pub description: String,
    pub parameters: Value,
}

#[derive(Deserialize)]
struct File {
    tools: Vec<Declaration>,
}

/// Every declared tool, in the file's order.
pub fn declarations() -> Vec<Declaration> {
    // The file is part of the build: a malformed one fails the unit tests, not users.
    serde_json::from_str::<File>(DECLARATIONS)
        .expect("tool_declarations.json is valid")
        .tools
}

/// `decl` in the shape `format` names.
pub fn shape(decl: &Declaration, format: Format) -> Value {
    match format {
        Format::Openai => json!({
            "type": "function",
            "function": {
                "name": decl.name,
                "description": decl.description,
                "parameters": decl.parameters,
            }
        }),
        Format::Anthropic => json!({
            "name": decl.name,
            "description": decl.description,
            "input_schema": decl.parameters,
        }),
        Format::JsonSchema => json!({
            "name": decl.name,
            "description": decl.description,
            "parameters": decl.parameters,
        }),
    }
}

pub fn run(args: ToolsArgs) -> anyhow::Result<u8> {
    let decls = declarations();
    let picked: Vec<Value> = decls
        .iter()
        .filter(|d| args.only.as_deref().is_none_or(|n| n == d.name))
        .map(|d| shape(d, args.format))
        .collect();
    if picked.is_empty() {
        let names: Vec<&str> = decls.iter().map(|d| d.name.as_str()).collect();
        eprintln!(
            "sandlot: error: no tool named {:?}; the tools are {}",
            args.only.unwrap_or_default(),
            names.join(", ")
        );
        return Ok(crate::EXIT_USAGE);
    }
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &picked).context("could not write the declarations")?;
    writeln!(out)?;
    out.flush()?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_declares_python_and_bash() {
        let decls = declarations();
        let names: Vec<&str> = decls.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["run_python", "run_bash"]);
        for d in &decls {
            assert!(["python", "bash"].contains(&d.language.as_str()));
            assert_eq!(d.parameters["required"], json!(["code"]));
            assert!(!d.description.is_empty());
        }
    }

    #[test]
    fn shapes() {
        let d = &declarations()[0];
        let o = shape(d, Format::Openai);
        assert_eq!(o["function"]["name"], "run_python");
        assert_eq!(o["function"]["parameters"], d.parameters);
        let a = shape(d, Format::Anthropic);
        assert_eq!(a["input_schema"], d.parameters);
        assert!(a.get("parameters").is_none());
        let j = shape(d, Format::JsonSchema);
        assert_eq!(j["parameters"], d.parameters);
    }
}

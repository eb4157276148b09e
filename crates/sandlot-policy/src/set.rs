//! Compiling a policy text into the set the engine decides with: parse, readable ids from
//! `@id`, strict validation against the schema, and one sub-set per gate.
//!
//! The per-gate split is what keeps decisions fast with many policies: Cedar evaluates every
//! policy of the set it is given, and a policy whose action scope names other actions can never
//! be satisfied at this gate, so it is left out of this gate's set. It is exact because the
//! schema has no action groups (checked when the engine opens), so `action in [..]` is a
//! membership test on the listed actions.

use crate::error::PolicyError;
use crate::gate::Gate;
use crate::index::GateIndex;
use crate::schema::NAMES;
use cedar_policy::{
    ActionConstraint, Effect, Policy, PolicyId, PolicySet, Schema, ValidationMode, Validator,
};
use miette::Diagnostic;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::str::FromStr;

/// The largest policy text accepted (a set of thousands of policies fits).
pub const MAX_POLICY_BYTES: usize = 1 << 20;

/// One policy of the set, as `engine.info()` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyEntry {
    /// The `@id` annotation.
    pub id: String,
    /// The `@reason` annotation, if any.
    pub reason: Option<String>,
    /// "permit" | "forbid".
    pub effect: String,
    /// The policy's source text.
    pub text: String,
}

/// The set in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyInfo {
    /// First 16 hex digits of sha256 over the policy text and the schema text.
    pub version: String,
    pub policies: Vec<PolicyEntry>,
    /// The schema text (`schema.cedarschema`).
    pub schema: String,
}

/// A validated set, split per gate.
pub(crate) struct Compiled {
    pub version: String,
    pub entries: Vec<PolicyEntry>,
    /// Indexed by `Gate::index()`.
    pub per_gate: Vec<GateIndex>,
    /// `@reason` by policy id.
    pub reasons: HashMap<String, String>,
    /// `@review` by policy id: permits that hold the request for a person's approval.
    pub reviews: HashMap<String, String>,
    /// Permits carrying `@on_failure("rollback")`: an allow through one makes the action (an
    /// execution) run with `on_failure: rollback` whatever the caller asked.
    pub rollbacks: HashSet<String>,
}

/// `sha256(policies ‖ 0 ‖ schema)`, first 16 hex digits.
pub(crate) fn version_of(policies: &str, schema: &str) -> String {
    let mut h = Sha256::new();
    h.update(policies.as_bytes());
    h.update([0u8]);
    h.update(schema.as_bytes());
    hex::encode(&h.finalize()[..8])
}

/// Whether `id` is a valid policy id: `[a-z0-9][a-z0-9_.-]{0,63}`.
pub fn valid_policy_id(id: &str) -> bool {
    let b = id.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_.-".contains(&c))
}

/// Deepest bracket nesting accepted in a policy text (checked before parsing).
pub const MAX_NESTING: usize = 64;
/// Most operators (`&&`, `==`, `.`, `in`, ...) in one policy (checked before parsing).
pub const MAX_OPERATORS: usize = 2048;
/// Deepest expression tree accepted in one policy (after parsing).
pub const MAX_EXPR_DEPTH: usize = 128;
/// Stack of the thread that parses and validates: Cedar's parser and validator recurse over
/// the expression tree, and a thread of the async runtime has only 2 MiB. (Virtual memory:
/// only the pages used are committed.)
const COMPILE_STACK: usize = 256 << 20;

/// Parse, name, validate and split `text`.
///
/// Hostile input must not crash the server: the text is bounded in size, bracket nesting and
/// operators per policy before Cedar sees it, parsed and validated on a thread with a large
/// stack, and refused if an expression tree is deeper than [`MAX_EXPR_DEPTH`] (evaluation
/// checks its own stack and errors, but dropping a tree recurses on whatever thread drops it).
pub(crate) fn compile(
    text: &str,
    schema: &Schema,
    schema_text: &str,
) -> Result<Compiled, PolicyError> {
    if text.len() > MAX_POLICY_BYTES {
        return Err(PolicyError::TooLarge {
            size: text.len(),
            max: MAX_POLICY_BYTES,
        });
    }
    check_shape(text)?;
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("policy-compile".into())
            .stack_size(COMPILE_STACK)
            .spawn_scoped(scope, || compile_here(text, schema, schema_text))
            .map_err(|source| PolicyError::Io {
                action: "starting the policy compiler thread",
                path: Default::default(),
                source,
            })?
            .join()
            .unwrap_or_else(|_| {
                Err(PolicyError::Parse(
                    "the policy compiler failed on this text".into(),
                ))
            })
    })
}

/// The lexical bounds: bracket depth and operators per policy, outside strings and comments.
fn check_shape(text: &str) -> Result<(), PolicyError> {
    let b = text.as_bytes();
    let (mut i, mut depth, mut ops, mut policy_start) = (0, 0usize, 0usize, 0usize);
    let refuse = |what: String, at: usize| {
        let (line, col) = line_col(text, at);
        Err(PolicyError::Parse(format!(
            "{what} (line {line}, column {col})"
        )))
    };
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return refuse(format!("brackets nest more than {MAX_NESTING} deep"), i);
                }
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b';' if depth == 0 => {
                ops = 0;
                policy_start = i + 1;
            }
            b'&' | b'|' | b'=' | b'!' | b'<' | b'>' | b'+' | b'-' | b'*' | b'.' => ops += 1,
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                if matches!(
                    &text[start..i],
                    "in" | "like" | "has" | "is" | "if" | "then" | "else"
                ) {
                    ops += 1;
                }
                if ops > MAX_OPERATORS {
                    break;
                }
                continue;
            }
            _ => {}
        }
        if ops > MAX_OPERATORS {
            break;
        }
        i += 1;
    }
    if ops > MAX_OPERATORS {
        let skip = text[policy_start..].len() - text[policy_start..].trim_start().len();
        return refuse(
            format!("a policy has more than {MAX_OPERATORS} operators"),
            policy_start + skip,
        );
    }
    Ok(())
}

/// Depth of a policy's JSON form (EST): about twice its expression tree's.
fn json_depth(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Array(a) => 1 + a.iter().map(json_depth).max().unwrap_or(0),
        serde_json::Value::Object(o) => 1 + o.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

fn compile_here(text: &str, schema: &Schema, schema_text: &str) -> Result<Compiled, PolicyError> {
    let parsed =
        PolicySet::from_str(text).map_err(|e| PolicyError::Parse(describe_all(&e, text)))?;
    if let Some(t) = parsed.templates().next() {
        let line = text.find(&t.to_cedar()).map(|o| line_col(text, o).0);
        return Err(PolicyError::Unsupported(format!(
            "policy templates (?principal / ?resource slots) are not supported{}",
            line.map(|l| format!(": the one at line {l}"))
                .unwrap_or_default()
        )));
    }

    // Parse order: the parser names policies policy0, policy1, ... in the order of the text.
    let mut policies: Vec<&Policy> = parsed.policies().collect();
    policies.sort_by_key(|p| {
        AsRef::<str>::as_ref(p.id())
            .strip_prefix("policy")
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(usize::MAX)
    });

    let mut seen: HashSet<String> = HashSet::new();
    let mut named = Vec::with_capacity(policies.len());
    let mut entries = Vec::with_capacity(policies.len());
    let mut reasons = HashMap::new();
    let mut reviews = HashMap::new();
    let mut rollbacks = HashSet::new();
    // Each policy's text is a slice of `text`, in order: search from the previous one's end
    // (an earlier policy may contain a later one's text).
    let mut cursor = 0;
    for (i, p) in policies.iter().enumerate() {
        let src = p.to_cedar().unwrap_or_default();
        let offset = text
            .get(cursor..)
            .and_then(|rest| rest.find(&src))
            .map(|o| o + cursor);
        if let Some(o) = offset {
            cursor = o + src.len();
        }
        let at = || {
            let line = offset.map(|o| line_col(text, o).0).unwrap_or(0);
            format!("policy #{} (line {line})", i + 1)
        };
        let id = match p.annotation("id") {
            None => {
                return Err(PolicyError::Id(format!(
                    "{} has no @id(\"...\") annotation; every policy needs a unique readable id",
                    at()
                )))
            }
            Some(id) if !valid_policy_id(id) => {
                return Err(PolicyError::Id(format!(
                    "{} has @id({id:?}): an id is 1 to 64 of a-z 0-9 _ . - starting with a letter or digit",
                    at()
                )))
            }
            Some(id) => id.to_string(),
        };
        if !seen.insert(id.clone()) {
            return Err(PolicyError::Id(format!(
                "{} repeats @id({id:?}): policy ids must be unique",
                at()
            )));
        }
        // Two JSON levels per expression node ({"==": {"left": ..}}).
        let depth = p.to_json().map(|j| json_depth(&j) / 2).unwrap_or(0);
        if depth > MAX_EXPR_DEPTH {
            return Err(PolicyError::Parse(format!(
                "{} (@id {id:?}) nests its expression {depth} deep; at most {MAX_EXPR_DEPTH}",
                at()
            )));
        }
        let reason = p.annotation("reason").map(str::to_string);
        if let Some(r) = &reason {
            reasons.insert(id.clone(), r.clone());
        }
        if let Some(r) = p.annotation("review") {
            // On a forbid it would mean nothing (a forbid denies): refused, not ignored.
            if p.effect() == Effect::Forbid {
                return Err(PolicyError::Unsupported(format!(
                    "{} (@id {id:?}) is a forbid with @review; only a permit can hold a request for review",
                    at()
                )));
            }
            let r = if r.trim().is_empty() {
                format!("held for review by policy {id}")
            } else {
                r.to_string()
            };
            reviews.insert(id.clone(), r);
        }
        if let Some(f) = p.annotation("on_failure") {
            // Only a permit can require something of what it lets run, and only rollback is
            // a thing to require: anything else is refused, not ignored.
            if p.effect() == Effect::Forbid || f != "rollback" {
                return Err(PolicyError::Unsupported(format!(
                    "{} (@id {id:?}) has @on_failure({f:?}); only a permit may carry it and only \"rollback\" is known",
                    at()
                )));
            }
            rollbacks.insert(id.clone());
        }
        entries.push(PolicyEntry {
            id: id.clone(),
            reason,
            effect: match p.effect() {
                Effect::Permit => "permit",
                Effect::Forbid => "forbid",
            }
            .to_string(),
            text: src.trim().to_string(),
        });
        named.push(p.new_id(PolicyId::new(id)));
    }

    let set = PolicySet::from_policies(named.iter().cloned())
        .map_err(|e| PolicyError::Id(e.to_string()))?;
    let result = Validator::new(schema.clone()).validate(&set, ValidationMode::Strict);
    if !result.validation_passed() {
        let msgs: Vec<String> = result
            .validation_errors()
            .map(|e| describe(e, text))
            .collect();
        return Err(PolicyError::Validation(msgs.join("\n")));
    }

    let mut per_gate = Vec::with_capacity(Gate::ALL.len());
    for gate in Gate::ALL {
        let action = NAMES.action(gate);
        let applies = named
            .iter()
            .filter(|p| match p.action_constraint() {
                ActionConstraint::Any => true,
                ActionConstraint::Eq(a) => &a == action,
                ActionConstraint::In(v) => v.contains(action),
            })
            .cloned()
            .collect();
        per_gate.push(GateIndex::new(applies).map_err(PolicyError::Id)?);
    }

    Ok(Compiled {
        version: version_of(text, schema_text),
        entries,
        per_gate,
        reasons,
        reviews,
        rollbacks,
    })
}

/// 1-based line and column of a byte offset.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text.as_bytes()[..offset];
    let line = before.iter().filter(|&&c| c == b'\n').count() + 1;
    let col = before.iter().rev().take_while(|&&c| c != b'\n').count() + 1;
    (line, col)
}

/// A diagnostic as one line: its message, where (line, column in `src`), and its help.
pub(crate) fn describe(d: &dyn Diagnostic, src: &str) -> String {
    let mut s = d.to_string();
    if let Some(label) = d.labels().and_then(|mut l| l.next()) {
        let (line, col) = line_col(src, label.offset());
        s.push_str(&format!(" (line {line}, column {col})"));
    }
    if let Some(help) = d.help() {
        s.push_str(&format!("; {help}"));
    }
    s
}

/// A diagnostic and its related ones (the parser reports every error that way), one a line.
pub(crate) fn describe_all(d: &dyn Diagnostic, src: &str) -> String {
    let mut lines = vec![describe(d, src)];
    if let Some(related) = d.related() {
        lines.extend(related.map(|r| describe(r, src)));
    }
    lines.dedup();
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_ids() {
        for ok in ["a", "0", "allow-all-gates", "x.y_z-1", &"a".repeat(64)] {
            assert!(valid_policy_id(ok), "{ok}");
        }
        for bad in [
            "",
            "A",
            "-a",
            ".a",
            "a b",
            "é",
            "policy\n",
            &"a".repeat(65),
            "a/b",
        ] {
            assert!(!valid_policy_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn line_and_column() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("ab", 99), (1, 3));
    }
}

/// Whether every tenant or key the policy `text` names is `tenant` or the key `key_id` (a key
/// of that tenant). Entity references are found in the policy's JSON form, wherever they
/// stand (scope, `in`, `==`, sets); a policy that cannot be read is treated as naming others.
pub(crate) fn names_only(text: &str, tenant: &str, key_id: &str) -> bool {
    let Ok(policy) = cedar_policy::Policy::parse(None, text) else {
        return false;
    };
    let Ok(json) = policy.to_json() else {
        return false;
    };
    let mut ok = true;
    walk_entities(&json, &mut |ty, id| {
        let mine = match ty.rsplit("::").next() {
            Some("Tenant") => id == tenant,
            Some("Key") => id == key_id,
            _ => true,
        };
        ok &= mine;
    });
    ok
}

/// Calls `f(type, id)` for every entity reference in a policy's JSON form.
fn walk_entities(v: &serde_json::Value, f: &mut impl FnMut(&str, &str)) {
    match v {
        serde_json::Value::Object(m) => {
            if let (Some(serde_json::Value::String(ty)), Some(serde_json::Value::String(id))) =
                (m.get("type"), m.get("id"))
            {
                f(ty, id);
            }
            for child in m.values() {
                walk_entities(child, f);
            }
        }
        serde_json::Value::Array(items) => {
            for child in items {
                walk_entities(child, f);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod visibility_tests {
    use super::names_only;

    #[test]
    fn a_tenant_sees_the_policies_that_name_no_other_tenant_or_key() {
        let everyone = r#"permit (principal, action, resource);"#;
        let mine = r#"forbid (principal in Sandlot::Tenant::"alpha", action, resource);"#;
        let theirs = r#"permit (principal in Sandlot::Tenant::"acme", action, resource);"#;
        let in_condition = r#"permit (principal, action, resource)
            when { principal.tenant == Sandlot::Tenant::"acme" };"#;
        let in_a_set = r#"permit (principal, action, resource)
            when { [Sandlot::Tenant::"alpha", Sandlot::Tenant::"acme"].contains(principal.tenant) };"#;
        let a_key = r#"forbid (principal == Sandlot::Key::"key_other", action, resource);"#;
        let own_key = r#"forbid (principal == Sandlot::Key::"key_mine", action, resource);"#;
        assert!(names_only(everyone, "alpha", "key_mine"));
        assert!(names_only(mine, "alpha", "key_mine"));
        assert!(names_only(own_key, "alpha", "key_mine"));
        for other in [theirs, in_condition, in_a_set, a_key] {
            assert!(!names_only(other, "alpha", "key_mine"), "{other}");
        }
        assert!(!names_only("not cedar", "alpha", "key_mine"));
    }
}

//! The shared plumbing on its own: limits, event names, bearer keys, the caller's roles and
//! what an error response shows.

use super::*;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use sandlot_types::{ErrorCode, OutputEvent, Principal, Role};

#[test]
fn json_bodies_get_two_mebibytes_beyond_the_code_limit() {
    let rt = RuntimeConfig::new(Default::default(), Default::default());
    let cfg = ApiConfig::for_runtime(&rt);
    assert_eq!(cfg.max_code_bytes, rt.max_code_bytes);
    assert_eq!(cfg.max_file_bytes, rt.max_file_bytes);
    assert_eq!(cfg.max_json_bytes, rt.max_code_bytes + (2 << 20));
    assert_eq!(ApiConfig::default().max_json_bytes, cfg.max_json_bytes);
}

#[test]
fn output_events_are_named_by_their_type() {
    let stdout: OutputEvent = serde_json::from_value(serde_json::json!(
        {"type": "stdout", "text": "hi"}
    ))
    .unwrap();
    assert_eq!(event_name(&stdout), "stdout");
    let stderr: OutputEvent = serde_json::from_value(serde_json::json!(
        {"type": "stderr", "text": "oh"}
    ))
    .unwrap();
    assert_eq!(event_name(&stderr), "stderr");
    assert_eq!((DONE_EVENT, API_ERROR_EVENT), ("done", "api_error"));
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).unwrap());
    }
    h
}

#[test]
fn the_bearer_key_comes_from_authorization_or_x_api_key() {
    assert_eq!(
        bearer(&headers(&[("authorization", "Bearer sl_k ")])),
        Some("sl_k")
    );
    assert_eq!(
        bearer(&headers(&[("authorization", "bearer sl_k")])),
        Some("sl_k")
    );
    assert_eq!(bearer(&headers(&[("x-api-key", "sl_x")])), Some("sl_x"));
    // Another scheme, or no scheme at all, is no bearer key (and X-Api-Key does not override).
    assert_eq!(bearer(&headers(&[("authorization", "Basic abc")])), None);
    assert_eq!(bearer(&headers(&[("authorization", "sl_k")])), None);
    assert_eq!(
        bearer(&headers(&[
            ("authorization", "Basic abc"),
            ("x-api-key", "sl_x")
        ])),
        None
    );
    assert_eq!(bearer(&HeaderMap::new()), None);
}

fn caller(tenant: &str, role: Role) -> Caller {
    Caller(Principal {
        key_id: "key_1".into(),
        key_prefix: "sl_ab".into(),
        tenant: tenant.into(),
        role,
        plan: "free".into(),
    })
}

#[test]
fn only_the_default_tenant_s_admin_is_the_operator() {
    let op = caller("default", Role::Admin);
    assert!(op.is_operator());
    assert!(op.require_operator().is_ok());
    assert!(op.require_admin().is_ok());
    let admin = caller("acme", Role::Admin);
    assert_eq!(admin.tenant(), "acme");
    assert!(!admin.is_operator());
    assert!(admin.require_admin().is_ok());
    let e = admin.require_operator().unwrap_err().0;
    assert_eq!(e.code, ErrorCode::Forbidden);
    assert_eq!(
        e.message,
        "this operation needs an operator key (an admin key of tenant default)"
    );
    let member = caller("default", Role::Member);
    assert!(!member.is_operator());
    let e = member.require_admin().unwrap_err().0;
    assert_eq!(
        (e.code, e.message.as_str()),
        (ErrorCode::Forbidden, "this operation needs an admin key")
    );
}

#[test]
fn internal_messages_stay_on_the_server() {
    let (status, code, message) = HttpError::internal("/var/lib/sandlot/db locked").client_view();
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(code, "internal");
    assert_eq!(message, "internal server error");
    let (status, code, message) = HttpError::invalid_request("bad field").client_view();
    assert_eq!(
        (status, code, message.as_str()),
        (StatusCode::BAD_REQUEST, "invalid_request", "bad field")
    );
}

#[test]
fn refusals_carry_their_retry_and_auth_headers() {
    let resp = HttpError::new(ErrorCode::Unauthenticated, "no key").into_response();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        resp.headers()["www-authenticate"],
        "Bearer realm=\"sandlot\""
    );
    let resp = HttpError::new(
        ErrorCode::JobQueueFull,
        "10 jobs already wait; retry in 7 s",
    )
    .into_response();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(resp.headers()["retry-after"], "7");
    // A message without a time still says when: in a second.
    let resp = HttpError::new(ErrorCode::JobQueueFull, "full").into_response();
    assert_eq!(resp.headers()["retry-after"], "1");
}

#[test]
fn the_error_body_has_one_shape() {
    assert_eq!(
        error_body("not_found", "no route"),
        serde_json::json!({"error": {"code": "not_found", "message": "no route"}})
    );
    assert_eq!(
        status_of(ErrorCode::PayloadTooLarge),
        StatusCode::PAYLOAD_TOO_LARGE
    );
}

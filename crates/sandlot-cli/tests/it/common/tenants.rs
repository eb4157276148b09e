//! Tenants and their keys, made the one way every suite makes them (they had eight copies of a
//! `tenant_key` with different arguments):
//!
//! ```ignore
//! let key = server.tenant("acme").quotas(json!({ "max_sandboxes": 1 })).role("member").key();
//! let TenantKey { key, id } = server.tenant("beta").role("admin").create();
//! ```
//!
//! Only what a builder is given is sent: no `role` means the server's default role for a new
//! key, no `quotas` or `plan` the server's defaults, so a test states exactly what it relies on.

use super::TestServer;
use serde_json::{json, Value};

/// A tenant about to be created (with [`TestServer::tenant`]), and its first key.
#[must_use = "nothing is created until `key` or `create`"]
pub struct NewTenant<'a> {
    server: &'a TestServer,
    name: String,
    quotas: Option<Value>,
    plan: Option<String>,
    role: Option<String>,
}

/// A key of a tenant made by [`NewTenant::create`]: the secret and its id (`/v1/keys/{id}`).
#[derive(Debug, Clone)]
pub struct TenantKey {
    pub key: String,
    pub id: String,
}

impl TestServer {
    /// A tenant named `name`, created (with the server's admin key) by
    /// [`NewTenant::key`] or [`NewTenant::create`].
    pub fn tenant(&self, name: &str) -> NewTenant<'_> {
        NewTenant {
            server: self,
            name: name.to_owned(),
            quotas: None,
            plan: None,
            role: None,
        }
    }
}

impl NewTenant<'_> {
    /// The tenant's `quotas` object.
    pub fn quotas(mut self, quotas: Value) -> Self {
        self.quotas = Some(quotas);
        self
    }

    /// The tenant's `plan`.
    pub fn plan(mut self, plan: &str) -> Self {
        self.plan = Some(plan.to_owned());
        self
    }

    /// The role of its key (`member`, `admin`, ...).
    pub fn role(mut self, role: &str) -> Self {
        self.role = Some(role.to_owned());
        self
    }

    /// Creates the tenant and one key of it; asserts both 201s.
    #[track_caller]
    pub fn create(self) -> TenantKey {
        let mut tenant = json!({ "name": self.name });
        if let Some(quotas) = self.quotas {
            tenant["quotas"] = quotas;
        }
        if let Some(plan) = self.plan {
            tenant["plan"] = json!(plan);
        }
        self.server.post("/v1/tenants", &tenant).expect(201);
        let mut key = json!({ "tenant": self.name });
        if let Some(role) = self.role {
            key["role"] = json!(role);
        }
        let r = self.server.post("/v1/keys", &key);
        let body = r.expect(201);
        TenantKey {
            key: body["key"].as_str().expect("a key").to_owned(),
            id: body["id"].as_str().expect("a key id").to_owned(),
        }
    }

    /// Creates the tenant and one key of it; returns the key.
    #[track_caller]
    pub fn key(self) -> String {
        self.create().key
    }
}

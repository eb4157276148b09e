//! The one service under every protocol (DESIGN §8). The REST API, E2B's control plane and
//! envd, MCP and the durable jobs runner each authenticate a request their own way, then call
//! one [`Service`] method with the caller and a typed request; it asks the same questions in
//! the same order: who the caller is and what tenant it acts
//! for ([`Governance`]), what the policy says at each gate ([`gates`]), whether a new sandbox
//! may be made and how ([`admission`]), whether the tenant's fair share has room ([`shares`]),
//! and what the request learned for the record ([`Note`]). Every answer's failure is one
//! [`sandlot_types::ApiError`] (a stable code and a message, [`error`]) that each adapter puts
//! in its own shape. Nothing here knows HTTP.

pub mod admission;
pub mod backend;
pub mod epochs;
pub mod error;
pub mod execution;
pub mod gates;
pub mod governance;
pub mod held_output;
pub mod note;
mod pending_output;
pub mod reviews;
pub mod revoke;
mod service;
pub mod shares;
pub mod trusted;

pub use admission::{admit_like, admit_new, Like, Lookups};
pub use backend::Backend;
pub use error::api_error;
pub use execution::{Dropped, ExecutionHandle, Step};
pub use governance::{local_principal, Governance};
pub use note::{Note, NoteData};
pub use reviews::{Gated, ReviewAsk};
pub use revoke::KeyWatch;
pub use service::{OnDrop, Service, Started};

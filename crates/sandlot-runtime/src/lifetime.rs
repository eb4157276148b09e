//! Changing when a live sandbox expires (E2B's `set_timeout`).

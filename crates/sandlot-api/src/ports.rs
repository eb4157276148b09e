//! Reaching an app inside a sandbox from outside: `/v1/sandboxes/{id}/ports/{port}/...`
//! forwards HTTP (and WebSocket upgrades) to a TCP port the sandbox was created to expose.

//! Connections into a sandbox's network namespace, to a TCP port it was created to expose.

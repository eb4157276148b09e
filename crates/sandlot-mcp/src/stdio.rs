//! `sandlot mcp`: the MCP server over stdio for one client (Claude Desktop, an IDE), reaching
//! a running sandlot server through its HTTP API. The process is the session: its sandbox is
//! deleted when stdin closes, after any execution still running is interrupted.

use crate::error::Error;
use crate::remote::Remote;
use crate::server::{McpServer, Transport};
use rmcp::service::ServerInitializeError;
use rmcp::ServiceExt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::sync::CancellationToken;

/// How long, at EOF, calls still running get to end (they are interrupted) before the
/// session's sandbox is deleted anyway.
const DRAIN: Duration = Duration::from_secs(15);

/// Serves MCP on stdin/stdout until the client closes stdin, with the sandlot server at `url`
/// (authenticated with `api_key` when given).
pub async fn serve_stdio(url: &str, api_key: Option<&str>) -> Result<(), Error> {
    let server = McpServer::new(Arc::new(Remote::new(url, api_key)?), None, Transport::Stdio);
    let session = server.session.clone();
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    let stdin = EofWatch {
        inner: stdin,
        eof: session.client_gone.clone(),
    };
    let result = match server.serve((stdin, stdout)).await {
        Ok(running) => {
            let reason = running.waiting().await;
            tracing::debug!(?reason, "MCP stdio session ended");
            Ok(())
        }
        // A client that connects and leaves before its first request (it probed the server,
        // or the user closed it) is an ordinary end, not a failure to report.
        Err(ServerInitializeError::ConnectionClosed(when)) => {
            tracing::debug!(%when, "MCP client left before the session started");
            Ok(())
        }
        Err(e) => Err(Error::Transport(e.to_string())),
    };
    // Calls in flight were cancelled with the session and interrupt their executions.
    session.calls.close();
    if tokio::time::timeout(DRAIN, session.calls.wait())
        .await
        .is_err()
    {
        tracing::warn!("tool calls still running {DRAIN:?} after the client left");
    }
    session.close().await;
    result
}

/// Stdin that cancels `eof` when it ends: the client is gone, and executions it started are
/// interrupted at once (rmcp waits a few seconds for handlers before it cancels them).
struct EofWatch<R> {
    inner: R,
    eof: CancellationToken,
}

impl<R: AsyncRead + Unpin> AsyncRead for EofWatch<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let ended = match &polled {
            Poll::Ready(Ok(())) => buf.filled().len() == before && buf.remaining() > 0,
            Poll::Ready(Err(_)) => true,
            Poll::Pending => false,
        };
        if ended {
            self.eof.cancel();
        }
        polled
    }
}

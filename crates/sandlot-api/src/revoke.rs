//! Revoking a key ends what it opened: a stream (server-sent events, an MCP stream, a long
//! download) ends within moments of the revocation, not when the client lets go.
//!
//! [`govern::authenticate`](crate::govern::authenticate) puts a [`KeyWatch`] in every
//! authenticated request and wraps every response whose length is not known up front (a
//! stream) in [`until_revoked`]; relays that outlive the response (a WebSocket upgraded through
//! the ports proxy) wait on [`KeyWatch::revoked`] themselves. Responses of known length are
//! left as they are: they end on their own, and the hot path pays nothing.

use axum::body::{Body, Bytes};
use axum::response::Response;
use http_body::{Body as _, Frame, SizeHint};
use sandlot_service::KeyWatch;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// `resp`, ending at the key's revocation if it is a stream.
pub fn until_revoked(resp: Response, watch: &KeyWatch) -> Response {
    if resp.body().size_hint().exact().is_some() {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let body = Body::new(UntilRevoked {
        inner: body,
        revoked: Box::pin(watch.revoked()),
    });
    Response::from_parts(parts, body)
}

struct UntilRevoked {
    inner: Body,
    revoked: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl http_body::Body for UntilRevoked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if self.revoked.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

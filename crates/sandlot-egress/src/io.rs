//! The upstream side of a connection: byte counts and activity, for records and idle timeouts.
//!
//! Every byte to and from the outside world goes through one upstream socket per request or
//! tunnel, so counting there gives the event's `bytes_up`/`bytes_down` whatever the client
//! spoke, and the last time any byte moved either way is what the idle timeout measures.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes moved through an upstream socket, and when the last ones did.
#[derive(Debug)]
pub(crate) struct Traffic {
    up: AtomicU64,
    down: AtomicU64,
    /// Milliseconds after `base` of the last byte either way.
    last_ms: AtomicU64,
    base: Instant,
}

impl Traffic {
    pub(crate) fn new() -> Arc<Traffic> {
        Arc::new(Traffic {
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            last_ms: AtomicU64::new(0),
            base: Instant::now(),
        })
    }

    pub(crate) fn up(&self) -> u64 {
        self.up.load(Ordering::Relaxed)
    }

    pub(crate) fn down(&self) -> u64 {
        self.down.load(Ordering::Relaxed)
    }

    fn touch(&self) {
        let ms = self.base.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.base.elapsed().saturating_sub(last)
    }

    /// Resolves once no byte has moved either way for `limit`.
    pub(crate) async fn idle(&self, limit: Duration) {
        loop {
            let idle = self.idle_for();
            if idle >= limit {
                return;
            }
            tokio::time::sleep(limit - idle).await;
        }
    }
}

/// An upstream stream that counts into a [`Traffic`]: reads are `down`, writes are `up`.
pub(crate) struct Counted<S> {
    inner: S,
    traffic: Arc<Traffic>,
}

impl<S> Counted<S> {
    pub(crate) fn new(inner: S, traffic: Arc<Traffic>) -> Counted<S> {
        traffic.touch();
        Counted { inner, traffic }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.traffic.down.fetch_add(n as u64, Ordering::Relaxed);
            self.traffic.touch();
        }
        res
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.count_up(&res);
        res
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.count_up(&res);
        res
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S> Counted<S> {
    fn count_up(&self, res: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = res {
            if *n > 0 {
                self.traffic.up.fetch_add(*n as u64, Ordering::Relaxed);
                self.traffic.touch();
            }
        }
    }
}

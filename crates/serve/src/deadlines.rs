//! Deadlines on what a connection does between its header and its next request: reading a
//! request's body ([`TimedBody`], `--body-read-timeout`) and writing an answer to a client
//! that stopped reading ([`WriteDeadline`], `--write-stall-timeout`). Without them a client
//! that sends a header and then trickles (or stops sending) its body, or that stops reading a
//! large answer (a trajectory download), holds its connection, its task and whatever the
//! handler took (a download slot) for ever.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The connection failed while the body was read.
    #[error("reading the request body: {0}")]
    Read(#[from] hyper::Error),
    /// The whole body did not arrive within the body read timeout.
    #[error("the request body was not received within {} s (--body-read-timeout)", .0.as_secs_f64())]
    TimedOut(Duration),
}

/// A request body that must arrive whole within a deadline counted from when its request's
/// header was read. Past it, the next read fails with [`BodyError::TimedOut`] and
/// [`TimedBody::timed_out`]'s flag is set, so that the server answers 408 and closes the
/// connection (see `server.rs`). A body already complete, or never read, is never timed out.
pub struct TimedBody {
    inner: Incoming,
    /// `(limit, deadline)`; `None`: no limit.
    deadline: Option<(Duration, Instant)>,
    /// The timer of the deadline, made at the first read that waits.
    timer: Option<Pin<Box<Sleep>>>,
    timed_out: Arc<AtomicBool>,
}

impl TimedBody {
    /// `inner`, which must arrive whole within `limit` from now (`None`: no limit).
    pub fn new(inner: Incoming, limit: Option<Duration>) -> TimedBody {
        TimedBody {
            inner,
            deadline: limit.map(|limit| (limit, Instant::now() + limit)),
            timer: None,
            timed_out: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Set once the deadline passed before the body was read whole.
    pub fn timed_out(&self) -> Arc<AtomicBool> {
        self.timed_out.clone()
    }

    fn expire(&mut self, limit: Duration) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.timed_out.store(true, Ordering::SeqCst);
        Poll::Ready(Some(Err(BodyError::TimedOut(limit))))
    }
}

impl Body for TimedBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if this.timed_out.load(Ordering::SeqCst) {
            let limit = this.deadline.map_or(Duration::ZERO, |(limit, _)| limit);
            return Poll::Ready(Some(Err(BodyError::TimedOut(limit))));
        }
        // Checked before the read too: a body that trickles in keeps the read ready, and the
        // deadline counts the whole body, not the gaps between its pieces.
        if let Some((limit, deadline)) = this.deadline
            && Instant::now() >= deadline
            && !this.inner.is_end_stream()
        {
            return this.expire(limit);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(BodyError::Read))),
            Poll::Pending => {
                let Some((limit, deadline)) = this.deadline else {
                    return Poll::Pending;
                };
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => this.expire(limit),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Turns a connection's write deadline off: a WebSocket's sends have their own deadline (the
/// session idle timeout), so an upgraded connection turns it off.
#[derive(Clone)]
pub struct WriteDeadlineSwitch(Arc<AtomicBool>);

impl WriteDeadlineSwitch {
    /// No more write deadline on this connection.
    pub fn turn_off(&self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// A connection whose writes fail with [`io::ErrorKind::TimedOut`] when the peer accepts no
/// byte for `limit`: a write (or flush) that waits that long means the client stopped reading
/// and every buffer between it and the server is full. The error ends the connection, which
/// drops the answer being sent and everything it holds (a download's slot and file). Any byte
/// written starts the count again, so a slow client that keeps reading is not cut off.
pub struct WriteDeadline<T> {
    inner: T,
    limit: Option<Duration>,
    on: Arc<AtomicBool>,
    /// Running while a write waits; cleared by a write that makes progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteDeadline<T> {
    /// `inner`, whose writes may wait at most `limit` each (`None`: for ever).
    pub fn new(inner: T, limit: Option<Duration>) -> WriteDeadline<T> {
        WriteDeadline {
            inner,
            limit,
            on: Arc::new(AtomicBool::new(true)),
            stalled: None,
        }
    }

    /// The switch that turns the deadline off (for an upgraded connection).
    pub fn switch(&self) -> WriteDeadlineSwitch {
        WriteDeadlineSwitch(self.on.clone())
    }

    /// A write that made progress: the stall ends.
    fn progressed<R>(&mut self, ready: R) -> Poll<R> {
        self.stalled = None;
        Poll::Ready(ready)
    }

    /// A write that waits: `Pending` until `limit` has passed since the stall began, then the
    /// error that ends the connection.
    fn waiting<R>(
        &mut self,
        cx: &mut Context<'_>,
        timed_out: impl FnOnce(io::Error) -> R,
    ) -> Poll<R> {
        let Some(limit) = self.limit.filter(|_| self.on.load(Ordering::SeqCst)) else {
            self.stalled = None;
            return Poll::Pending;
        };
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.stalled = None;
                Poll::Ready(timed_out(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the client accepted no byte of the answer for {} s (--write-stall-timeout)",
                        limit.as_secs_f64()
                    ),
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(result) => this.progressed(result),
            Poll::Pending => this.waiting(cx, Err),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(result) => this.progressed(result),
            Poll::Pending => this.waiting(cx, Err),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Ready(result) => this.progressed(result),
            Poll::Pending => this.waiting(cx, Err),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_shutdown(cx) {
            Poll::Ready(result) => this.progressed(result),
            Poll::Pending => this.waiting(cx, Err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that accepts `room` bytes and then waits for ever.
    struct Filling {
        room: usize,
    }

    impl AsyncWrite for Filling {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            if self.room == 0 {
                return Poll::Pending;
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_write_that_waits_past_the_limit_fails() {
        use tokio::io::AsyncWriteExt;
        let limit = Duration::from_millis(200);
        let mut conn = WriteDeadline::new(Filling { room: 10 }, Some(limit));
        conn.write_all(&[0; 10]).await.unwrap();
        let start = Instant::now();
        let err = conn.write_all(&[0; 1]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(
            err.to_string(),
            "the client accepted no byte of the answer for 0.2 s (--write-stall-timeout)"
        );
        let waited = start.elapsed();
        assert!(
            waited >= limit && waited < Duration::from_secs(2),
            "{waited:?}"
        );
    }

    #[tokio::test]
    async fn a_switched_off_deadline_waits_for_ever() {
        use tokio::io::AsyncWriteExt;
        let mut conn = WriteDeadline::new(Filling { room: 0 }, Some(Duration::from_millis(50)));
        conn.switch().turn_off();
        let waited =
            tokio::time::timeout(Duration::from_millis(500), conn.write_all(&[0; 1])).await;
        assert!(waited.is_err(), "the write should still wait: {waited:?}");
    }
}

//! The request body as a blocking reader, and the limits on what it expands to (gzip ratio,
//! header bytes, the quota left).

use super::*;

/// The read half of a streamed request body.
pub(super) struct BodyReader {
    pub(super) rx: mpsc::Receiver<Bytes>,
    pub(super) cur: Bytes,
}

impl Read for BodyReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                Some(chunk) => self.cur = chunk,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        self.cur.advance(n);
        Ok(n)
    }
}

/// The tar stream of a body: gunzipped when it starts with gzip's magic bytes.
pub(super) fn open_stream(mut body: BodyReader, gauge: &Rc<Gauge>) -> io::Result<Box<dyn Read>> {
    let mut head = [0u8; 2];
    let mut got = 0;
    while got < head.len() {
        match body.read(&mut head[got..])? {
            0 => break,
            n => got += n,
        }
    }
    let stream = Read::chain(io::Cursor::new(head[..got].to_vec()), body);
    if head[..got] == [0x1f, 0x8b] {
        let counted = Counted {
            inner: stream,
            gauge: gauge.clone(),
        };
        gauge.gzip.set(true);
        return Ok(Box::new(flate2::read::MultiGzDecoder::new(counted)));
    }
    Ok(Box::new(stream))
}

/// Counts of the body and the tar stream, and which limit tripped.
#[derive(Default)]
pub(super) struct Gauge {
    /// Tar bytes read.
    pub(super) read: Cell<u64>,
    /// How far the tar stream may be read before the next entry is seen.
    pub(super) limit: Cell<u64>,
    pub(super) gzip: Cell<bool>,
    /// Compressed bytes read.
    pub(super) compressed: Cell<u64>,
    pub(super) tripped: Cell<Option<Trip>>,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Trip {
    Headers,
    Ratio,
}

impl Gauge {
    /// Lets the tar stream be read `more` bytes past where it is.
    pub(super) fn allow(&self, more: u64) {
        self.limit.set(self.read.get().saturating_add(more));
    }

    pub(super) fn trip(&self, why: Trip) -> io::Error {
        self.tripped.set(Some(why));
        io::Error::other(format!("archive limit: {why:?}"))
    }
}

/// The compressed body, counted.
pub(super) struct Counted<R> {
    pub(super) inner: R,
    pub(super) gauge: Rc<Gauge>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.gauge
            .compressed
            .set(self.gauge.compressed.get() + n as u64);
        Ok(n)
    }
}

/// The tar stream, counted against the header allowance and the gzip ratio.
pub(super) struct Metered<R> {
    pub(super) inner: R,
    pub(super) gauge: Rc<Gauge>,
}

impl<R: Read> Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let g = &self.gauge;
        let room = g.limit.get().saturating_sub(g.read.get());
        if room == 0 && !buf.is_empty() {
            return Err(g.trip(Trip::Headers));
        }
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        let read = g.read.get() + n as u64;
        g.read.set(read);
        if g.gzip.get()
            && read
                > g.compressed
                    .get()
                    .saturating_mul(MAX_GZIP_RATIO)
                    .saturating_add(GZIP_SLACK)
        {
            return Err(g.trip(Trip::Ratio));
        }
        Ok(n)
    }
}

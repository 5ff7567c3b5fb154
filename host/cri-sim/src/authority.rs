//! Accept clients that send their unix socket's path as the HTTP/2 `:authority`.
//!
//! gRPC C-core (Python, Ruby, C++), grpc-java and others send the socket path
//! (`tmp%2Fcri.sock`, `/run/cri.sock`) as `:authority` when they dial a unix socket.
//! containerd's Go server accepts that; the h2 crate under tonic rejects it as a
//! malformed authority and resets the stream (hyperium/h2#487, still open). The
//! simulator must answer any CRI client containerd answers, so [`AuthorityFix`] sits
//! between the accepted socket and tonic and rewrites such a value, in place, to a valid
//! authority of the same length (`xxxx…`).
//!
//! Same length matters: the literal usually enters the HPACK dynamic table, and both
//! ends must account the entry at the same size or their tables drift apart. Only raw
//! (non-Huffman) values are rewritten — which is how those clients send them; anything
//! else passes through untouched. Everything but HEADERS and CONTINUATION frames is
//! passed through as it arrives.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tonic::transport::server::{Connected, UdsConnectInfo};

const PREFACE_LEN: usize = 24;
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;

/// An accepted connection whose inbound HTTP/2 header blocks get valid authorities.
#[derive(Debug)]
pub struct AuthorityFix {
    inner: UnixStream,
    parser: Parser,
    /// Transformed bytes not yet handed to the reader.
    out: Vec<u8>,
    out_pos: usize,
}

impl AuthorityFix {
    /// Wraps an accepted connection.
    pub fn new(inner: UnixStream) -> Self {
        Self {
            inner,
            parser: Parser::default(),
            out: Vec::new(),
            out_pos: 0,
        }
    }
}

impl Connected for AuthorityFix {
    type ConnectInfo = UdsConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl AsyncRead for AuthorityFix {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.out_pos < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.out_pos);
                buf.put_slice(&this.out[this.out_pos..this.out_pos + n]);
                this.out_pos += n;
                if this.out_pos == this.out.len() {
                    this.out.clear();
                    this.out_pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 16 * 1024];
            let mut rb = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
            if rb.filled().is_empty() {
                // EOF: whatever is still buffered mid-frame is handed on as is.
                this.parser.flush(&mut this.out);
                if this.out.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            this.parser.feed(rb.filled(), &mut this.out);
        }
    }
}

impl AsyncWrite for AuthorityFix {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Where the inbound byte stream is.
#[derive(Debug)]
enum State {
    /// Collecting a frame header.
    Header,
    /// Passing through this many bytes: the client preface, or the payload of a frame
    /// that is not a header block.
    Passthrough(usize),
    /// Collecting a HEADERS or CONTINUATION payload of this length.
    HeaderBlock { len: usize, flags: u8, kind: u8 },
}

#[derive(Debug)]
struct Parser {
    state: State,
    buf: Vec<u8>,
}

impl Default for Parser {
    fn default() -> Self {
        Self {
            state: State::Passthrough(PREFACE_LEN),
            buf: Vec::new(),
        }
    }
}

impl Parser {
    /// Consumes `input`, appending what the server should read to `out`.
    fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) {
        while !input.is_empty() {
            match self.state {
                State::Passthrough(left) => {
                    let n = left.min(input.len());
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    self.state = if n == left {
                        State::Header
                    } else {
                        State::Passthrough(left - n)
                    };
                }
                State::Header => {
                    let n = (FRAME_HEADER_LEN - self.buf.len()).min(input.len());
                    self.buf.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    if self.buf.len() == FRAME_HEADER_LEN {
                        let len = usize::from(self.buf[0]) << 16
                            | usize::from(self.buf[1]) << 8
                            | usize::from(self.buf[2]);
                        let (kind, flags) = (self.buf[3], self.buf[4]);
                        out.extend_from_slice(&self.buf);
                        self.buf.clear();
                        self.state = match kind {
                            HEADERS | CONTINUATION if len > 0 => {
                                State::HeaderBlock { len, flags, kind }
                            }
                            _ if len == 0 => State::Header,
                            _ => State::Passthrough(len),
                        };
                    }
                }
                State::HeaderBlock { len, flags, kind } => {
                    let n = (len - self.buf.len()).min(input.len());
                    self.buf.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    if self.buf.len() == len {
                        let block = header_block_range(&self.buf, flags, kind);
                        if let Some((start, end)) = block {
                            rewrite_authorities(&mut self.buf[start..end]);
                        }
                        out.append(&mut self.buf);
                        self.state = State::Header;
                    }
                }
            }
        }
    }

    /// Hands on a partly collected frame at end of stream.
    fn flush(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.buf);
    }
}

/// The header block fragment inside a HEADERS or CONTINUATION payload (without padding
/// and priority fields), or `None` when the payload is inconsistent.
fn header_block_range(payload: &[u8], flags: u8, kind: u8) -> Option<(usize, usize)> {
    if kind == CONTINUATION {
        return Some((0, payload.len()));
    }
    let mut start = 0;
    let mut end = payload.len();
    if flags & FLAG_PADDED != 0 {
        let pad = usize::from(*payload.first()?);
        start += 1;
        end = end.checked_sub(pad)?;
    }
    if flags & FLAG_PRIORITY != 0 {
        start += 5;
    }
    (start <= end).then_some((start, end))
}

/// Walks an HPACK header block and rewrites every raw literal `:authority` value that is
/// not a valid authority. Stops quietly at anything it cannot follow (a Huffman-coded
/// name, a truncated block): the block is then left as it was from that point.
fn rewrite_authorities(block: &mut [u8]) {
    let mut i = 0;
    while i < block.len() {
        let b = block[i];
        let (prefix, literal) = if b & 0x80 != 0 {
            (7, false) // indexed field
        } else if b & 0x40 != 0 {
            (6, true) // literal with incremental indexing
        } else if b & 0x20 != 0 {
            (5, false) // dynamic table size update
        } else {
            (4, true) // literal without indexing / never indexed
        };
        let Some((index, next)) = decode_int(block, i, prefix) else {
            return;
        };
        i = next;
        if !literal {
            continue;
        }
        let is_authority = if index == 0 {
            let Some((name, next)) = string_at(block, i) else {
                return;
            };
            i = next;
            match name {
                RawString::Plain(start, end) => &block[start..end] == b":authority",
                RawString::Huffman => return,
            }
        } else {
            index == 1 // static table entry 1 is :authority
        };
        let Some((value, next)) = string_at(block, i) else {
            return;
        };
        i = next;
        if let (true, RawString::Plain(start, end)) = (is_authority, value)
            && !valid_authority(&block[start..end])
        {
            block[start..end].fill(b'x');
        }
    }
}

enum RawString {
    Plain(usize, usize),
    Huffman,
}

/// An HPACK string literal at `i`: its raw byte range (or that it is Huffman-coded) and
/// the position after it.
fn string_at(block: &[u8], i: usize) -> Option<(RawString, usize)> {
    let huffman = block.get(i)? & 0x80 != 0;
    let (len, start) = decode_int(block, i, 7)?;
    let end = start.checked_add(len)?;
    if end > block.len() {
        return None;
    }
    Some((
        if huffman {
            RawString::Huffman
        } else {
            RawString::Plain(start, end)
        },
        end,
    ))
}

/// An HPACK integer with an N-bit prefix at `i`: its value and the position after it.
fn decode_int(block: &[u8], i: usize, prefix: u32) -> Option<(usize, usize)> {
    let max = (1usize << prefix) - 1;
    let mut value = usize::from(*block.get(i)?) & max;
    let mut i = i + 1;
    if value < max {
        return Some((value, i));
    }
    let mut shift = 0;
    loop {
        let b = *block.get(i)?;
        i += 1;
        value = value.checked_add(usize::from(b & 0x7f).checked_shl(shift)?)?;
        if b & 0x80 == 0 {
            return Some((value, i));
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
    }
}

/// What h2 accepts: a host (letters, digits, `-._~`, sub-delims) with an optional port.
fn valid_authority(value: &[u8]) -> bool {
    !value.is_empty()
        && value
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:[]@".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What grpcio 1.85 (C-core) sent for a Version call on unix:///tmp/dump.sock.
    const GRPC_CORE_HEADERS: &str = "40053a70617468222f72756e74696d652e76312e52756e74696d65536572766963652f56657273696f6e400a3a617574686f726974790f746d7025324664756d702e736f636b8386";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    #[test]
    fn rewrites_a_socket_path_authority_in_place() {
        let mut block = hex(GRPC_CORE_HEADERS);
        let before = block.clone();
        rewrite_authorities(&mut block);
        assert_eq!(block.len(), before.len());
        let text = String::from_utf8_lossy(&block);
        assert!(text.contains(":authority\u{f}xxxxxxxxxxxxxxx"), "{text}");
        assert!(
            text.contains("/runtime.v1.RuntimeService/Version"),
            "{text}"
        );
    }

    #[test]
    fn leaves_valid_authorities_and_indexed_fields_alone() {
        // :authority via static index 1 with value "cri.local", then indexed :method GET.
        let mut block = vec![0x41, 0x09];
        block.extend_from_slice(b"cri.local");
        block.push(0x82);
        let before = block.clone();
        rewrite_authorities(&mut block);
        assert_eq!(block, before);
        // The same with a path as value is rewritten.
        let mut block = vec![0x41, 0x0a];
        block.extend_from_slice(b"/run/x.sck");
        rewrite_authorities(&mut block);
        assert_eq!(&block[2..], b"xxxxxxxxxx");
    }

    #[test]
    fn frames_are_rewritten_across_arbitrary_read_boundaries() {
        let block = hex(GRPC_CORE_HEADERS);
        let mut stream = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        // An empty SETTINGS frame, a DATA frame, then the HEADERS frame.
        stream.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
        stream.extend_from_slice(&[0, 0, 3, 0x0, 0, 0, 0, 0, 1, b'a', b'b', b'c']);
        let len = block.len();
        stream.extend_from_slice(&[0, 0, len as u8, HEADERS, 0x4, 0, 0, 0, 1]);
        stream.extend_from_slice(&block);
        for chunk in [1, 2, 7, 9, 64, stream.len()] {
            let mut p = Parser::default();
            let mut out = Vec::new();
            for piece in stream.chunks(chunk) {
                p.feed(piece, &mut out);
            }
            assert_eq!(out.len(), stream.len(), "chunk {chunk}");
            assert_eq!(&out[..stream.len() - len], &stream[..stream.len() - len]);
            assert!(
                String::from_utf8_lossy(&out).contains("xxxxxxxxxxxxxxx"),
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn truncated_or_odd_blocks_do_not_panic() {
        for bytes in [
            vec![0x40],
            vec![0x40, 0x7f],
            vec![0x0f, 0xff, 0xff, 0xff, 0xff, 0xff],
            vec![0x41, 0x85, 1],
        ] {
            let mut b = bytes.clone();
            rewrite_authorities(&mut b);
        }
        assert_eq!(header_block_range(&[5, 1, 2], FLAG_PADDED, HEADERS), None);
    }
}

//! systemd's private socket (`/run/systemd/private`) as a zbus peer.
//!
//! Without the system bus, root talks to systemd directly on its private socket: a
//! peer-to-peer D-Bus connection (no `Hello`, no bus daemon). systemd marks every message
//! it sends there with the sender `org.freedesktop.systemd1` — a well-known name, where
//! the D-Bus specification has a bus put the sender's unique name (`:1.42`). zbus
//! accepts only unique names in that field and fails on the first reply (zbus 5 panics
//! in its reader task; the connection then never answers). A peer that is not a bus has
//! no names to route by, so the read half given to zbus here drops the sender field of
//! every message systemd sends before zbus reads it; everything else passes unchanged.

use std::collections::VecDeque;
use std::io;
use std::os::fd::OwnedFd;

use zbus::connection::socket::{ReadHalf, Split, WriteHalf};

/// The header field code of the sender.
const SENDER: u8 = 7;
/// The fixed part of a message header: endianness, type, flags, version, body length,
/// serial, and the length of the header fields array.
const FIXED: usize = 16;
/// The largest message D-Bus allows (128 MiB).
const MAX_MESSAGE: usize = 128 << 20;

/// A connection's halves for zbus over `stream`, whose incoming messages lose their
/// sender field.
pub fn split(stream: tokio::net::UnixStream) -> Split<Box<dyn ReadHalf>, Box<dyn WriteHalf>> {
    let (read, write) = stream.into_split();
    Split::new(
        Box::new(SenderlessRead {
            inner: read,
            raw: Vec::new(),
            out: VecDeque::new(),
            messages: false,
        }),
        Box::new(write),
    )
}

/// The read half: what the peer sends, its messages without a sender field.
#[derive(Debug)]
struct SenderlessRead {
    inner: tokio::net::unix::OwnedReadHalf,
    /// Bytes read and not yet looked at.
    raw: Vec<u8>,
    /// Bytes ready for zbus.
    out: VecDeque<u8>,
    /// Whether the authentication lines are over and messages follow.
    messages: bool,
}

#[async_trait::async_trait]
impl ReadHalf for SenderlessRead {
    async fn recvmsg(&mut self, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
        loop {
            if !self.out.is_empty() {
                let n = buf.len().min(self.out.len());
                for (slot, byte) in buf.iter_mut().zip(self.out.drain(..n)) {
                    *slot = byte;
                }
                return Ok((n, Vec::new()));
            }
            let mut chunk = [0u8; 16 * 1024];
            // No file descriptors are asked for (see `can_pass_unix_fd`), so none come.
            let (n, _fds) = self.inner.recvmsg(&mut chunk).await?;
            if n == 0 {
                if self.raw.is_empty() {
                    return Ok((0, Vec::new()));
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "systemd closed its private socket in the middle of a message",
                ));
            }
            self.raw.extend_from_slice(&chunk[..n]);
            self.process()?;
        }
    }

    async fn peer_credentials(&mut self) -> io::Result<zbus::fdo::ConnectionCredentials> {
        self.inner.peer_credentials().await
    }
}

impl SenderlessRead {
    /// Moves every whole line of the authentication, then every whole message (less its
    /// sender) from `raw` to `out`.
    fn process(&mut self) -> io::Result<()> {
        loop {
            if !self.messages {
                match self.raw.first() {
                    // A message's first byte is its endianness; no authentication
                    // command starts with either.
                    Some(b'l' | b'B') => self.messages = true,
                    Some(_) => {
                        let Some(end) = self.raw.windows(2).position(|w| w == b"\r\n") else {
                            return Ok(());
                        };
                        self.out.extend(self.raw.drain(..end + 2));
                        continue;
                    }
                    None => return Ok(()),
                }
            }
            let Some(len) = message_len(&self.raw)? else {
                return Ok(());
            };
            if self.raw.len() < len {
                return Ok(());
            }
            let message: Vec<u8> = self.raw.drain(..len).collect();
            self.out.extend(without_sender(&message)?);
        }
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("systemd's private socket: {what}"),
    )
}

/// Reads a `u32` at `at` in the message's byte order.
fn u32_at(message: &[u8], at: usize) -> io::Result<u32> {
    let bytes: [u8; 4] = message
        .get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| invalid("a header shorter than it says"))?;
    Ok(match message[0] {
        b'l' => u32::from_le_bytes(bytes),
        _ => u32::from_be_bytes(bytes),
    })
}

/// `n` in the byte order of `message` (its first byte).
fn u32_bytes(message: &[u8], n: u32) -> [u8; 4] {
    match message[0] {
        b'l' => n.to_le_bytes(),
        _ => n.to_be_bytes(),
    }
}

fn align8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// The length of the message that starts `raw`, once its fixed header is there.
fn message_len(raw: &[u8]) -> io::Result<Option<usize>> {
    if raw.len() < FIXED {
        return Ok(None);
    }
    if !matches!(raw[0], b'l' | b'B') {
        return Err(invalid("a message in neither byte order"));
    }
    let body = u32_at(raw, 4)? as usize;
    let fields = u32_at(raw, 12)? as usize;
    let len = align8(FIXED + fields) + body;
    if len > MAX_MESSAGE {
        return Err(invalid("a message larger than D-Bus allows"));
    }
    Ok(Some(len))
}

/// Where the header field that starts at `at` ends (before the next one's padding), for
/// the types header fields have: object paths and strings (`o`, `s`), signatures (`g`)
/// and numbers (`u`).
fn field_end(message: &[u8], at: usize) -> io::Result<usize> {
    let short = || invalid("a header field cut short");
    let signature_len = *message.get(at + 1).ok_or_else(short)? as usize;
    let signature = message
        .get(at + 2..at + 2 + signature_len)
        .ok_or_else(short)?;
    let value = at + 2 + signature_len + 1;
    match signature {
        b"o" | b"s" => {
            let start = value.div_ceil(4) * 4;
            Ok(start + 4 + u32_at(message, start)? as usize + 1)
        }
        b"g" => Ok(value + 1 + *message.get(value).ok_or_else(short)? as usize + 1),
        b"u" => Ok(value.div_ceil(4) * 4 + 4),
        _ => Err(invalid("a header field of a type D-Bus does not define")),
    }
}

/// `message` without its sender field (as it is when it has none). Header fields begin
/// at multiples of 8, so cutting one out moves those after it by a multiple of 8 and
/// keeps their alignment.
fn without_sender(message: &[u8]) -> io::Result<Vec<u8>> {
    let fields_len = u32_at(message, 12)? as usize;
    let fields_end = FIXED + fields_len;
    let body_start = align8(fields_end);
    let mut at = FIXED;
    // Where the field before `at` ends: the header's end when the sender is last.
    let mut previous_end = FIXED;
    while at < fields_end {
        let end = field_end(message, at)?;
        if end > fields_end {
            return Err(invalid("a header field past the header"));
        }
        if message[at] != SENDER {
            previous_end = end;
            at = align8(end);
            continue;
        }
        let mut out = Vec::with_capacity(message.len());
        if end >= fields_end || align8(end) >= fields_end {
            out.extend_from_slice(&message[..previous_end]);
        } else {
            out.extend_from_slice(&message[..at]);
            out.extend_from_slice(&message[align8(end)..fields_end]);
        }
        let len = u32::try_from(out.len() - FIXED).map_err(|_| invalid("a header too long"))?;
        out[12..16].copy_from_slice(&u32_bytes(message, len));
        out.resize(align8(out.len()), 0);
        out.extend_from_slice(&message[body_start..]);
        return Ok(out);
    }
    Ok(message.to_vec())
}

/// `message` with a sender field naming `sender` added after its other fields: what
/// systemd does to every message it sends on its private socket. For tests: the
/// stand-in for systemd sends its messages this way.
#[cfg(test)]
pub(super) fn with_sender(message: &[u8], sender: &str) -> Vec<u8> {
    let fields_len = u32_at(message, 12).expect("a header") as usize;
    let body_start = align8(FIXED + fields_len);
    let mut out = message[..FIXED + fields_len].to_vec();
    out.resize(align8(out.len()), 0);
    let short = |n: usize| u32::try_from(n).expect("short");
    // The field's code and signature, then the string (4-aligned: the field starts at a
    // multiple of 8 and these are 4 bytes).
    out.extend_from_slice(&[SENDER, 1, b's', 0]);
    out.extend_from_slice(&u32_bytes(message, short(sender.len())));
    out.extend_from_slice(sender.as_bytes());
    out.push(0);
    let new_len = out.len() - FIXED;
    out[12..16].copy_from_slice(&u32_bytes(message, short(new_len)));
    out.resize(align8(out.len()), 0);
    out.extend_from_slice(&message[body_start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYSTEMD: &str = "org.freedesktop.systemd1";

    fn reply(sender: Option<&str>) -> Vec<u8> {
        static CALL: std::sync::LazyLock<zbus::Message> = std::sync::LazyLock::new(|| {
            zbus::Message::method_call("/org/freedesktop/systemd1", "StopUnit")
                .expect("call")
                .build(&())
                .expect("call")
        });
        let mut builder = zbus::Message::method_return(&CALL.header()).expect("return");
        if let Some(sender) = sender {
            builder = builder.sender(sender).expect("sender");
        }
        let path =
            zbus::zvariant::ObjectPath::try_from("/org/freedesktop/systemd1/job/7").expect("path");
        let mut bytes = builder.build(&path).expect("reply").data().to_vec();
        // The serial, which each build numbers anew.
        bytes[8..12].copy_from_slice(&[1, 0, 0, 0]);
        bytes
    }

    #[test]
    fn systemds_sender_is_cut_wherever_it_is_and_the_rest_is_kept() {
        let plain = reply(None);
        // After the other fields, as systemd adds it.
        let sent = with_sender(&plain, SYSTEMD);
        assert!(sent.len() > plain.len());
        assert_eq!(message_len(&sent).expect("len"), Some(sent.len()));
        assert_eq!(without_sender(&sent).expect("cut"), plain);
        // Among them: zbus refuses a well-known name, so build the message with a unique
        // name of the same length and write systemd's over it.
        let mut among = reply(Some(":rg.freedesktop.systemd1"));
        let at = among
            .windows(SYSTEMD.len())
            .position(|w| w == b":rg.freedesktop.systemd1")
            .expect("the sender");
        among[at] = b'o';
        let cut = without_sender(&among).expect("cut");
        assert_eq!(cut, plain);
        assert_eq!(message_len(&cut).expect("len"), Some(cut.len()));
    }

    #[test]
    fn a_message_without_a_sender_is_unchanged() {
        let plain = reply(None);
        assert_eq!(without_sender(&plain).expect("kept"), plain);
    }

    #[tokio::test]
    async fn authentication_lines_pass_and_messages_follow_whole() {
        let (a, _b) = tokio::net::UnixStream::pair().expect("pair");
        let (read, _write) = a.into_split();
        let mut r = SenderlessRead {
            inner: read,
            raw: Vec::new(),
            out: VecDeque::new(),
            messages: false,
        };
        let sent = with_sender(&reply(None), SYSTEMD);
        // The last authentication line and half a message: the line goes through, the
        // message waits for the rest.
        r.raw.extend_from_slice(b"OK 0123456789abcdef\r\n");
        r.raw.extend_from_slice(&sent[..20]);
        r.process().expect("process");
        assert_eq!(
            r.out.drain(..).collect::<Vec<_>>(),
            b"OK 0123456789abcdef\r\n"
        );
        r.raw.extend_from_slice(&sent[20..]);
        r.process().expect("process");
        assert_eq!(r.out.drain(..).collect::<Vec<_>>(), reply(None));
    }
}

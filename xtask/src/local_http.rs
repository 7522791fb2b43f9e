//! Plain HTTP to the servers the tests start on 127.0.0.1 (the agent's endpoint) or on a unix
//! socket (dockerd's API): a free port to give one, and a GET of a page.
use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    os::unix::net::UnixStream,
    path::Path,
    time::Duration,
};

use anyhow::{Context as _, Result, bail};

/// A free TCP port on 127.0.0.1.
pub(crate) fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `GET http://127.0.0.1:PORT/PATH`'s body; an error unless the answer is 200.
pub(crate) fn get(port: u16, path: &str) -> Result<String> {
    let s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    exchange(s, path)
}

/// `GET PATH`'s body from the HTTP server on the unix socket `socket`; an error unless the
/// answer is 200.
pub(crate) fn get_unix(socket: &Path, path: &str) -> Result<String> {
    let s = UnixStream::connect(socket).with_context(|| format!("connecting to {}", socket.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    exchange(s, path)
}

fn exchange(mut s: impl Read + Write, path: &str) -> Result<String> {
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").context("an HTTP answer without a body")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!("GET {path}: {}", head.lines().next().unwrap_or(""));
    }
    Ok(body.to_owned())
}

//! Asking the container runtimes what a container id is: its name, image, and the Kubernetes
//! names a kubelet labels it with ([`ContainerInfo`]), over the HTTP APIs they serve on their
//! unix sockets: podman's and Docker's (`GET /containers/ID/json`, the Docker API podman
//! serves too) and CRI-O's (`GET /containers/ID`). A socket that is not there is skipped; one
//! that does not answer in [`TIMEOUT`] is skipped for that id. The agent asks once per new
//! container id, before the container's first figures are labelled; an id no runtime names
//! keeps the names its cgroup path gives.
use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context as _, Result};
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use crate::analysis::containers::ContainerInfo;

/// How long one runtime may take to answer.
const TIMEOUT: Duration = Duration::from_millis(500);

/// The API a runtime's socket serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Api {
    /// Docker's, which podman serves too.
    Docker,
    /// CRI-O's info endpoint.
    Crio,
}

/// The sockets asked, in order, where they exist.
const SOCKETS: &[(Api, &str)] =
    &[(Api::Docker, "/run/podman/podman.sock"), (Api::Docker, "/run/docker.sock"), (Api::Crio, "/run/crio/crio.sock")];

/// The runtimes the agent asks.
pub(crate) struct Runtimes {
    sockets: Vec<(Api, PathBuf)>,
}

impl Runtimes {
    /// The runtimes at their usual sockets.
    pub(crate) fn new() -> Self {
        Self { sockets: SOCKETS.iter().map(|(api, p)| (*api, PathBuf::from(p))).collect() }
    }

    /// What the first runtime that knows `id` (64 hexadecimal digits) says of it.
    pub(crate) async fn ask(&self, id: &str) -> Option<ContainerInfo> {
        if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        for (api, socket) in &self.sockets {
            if !socket.exists() {
                continue;
            }
            let path = match api {
                Api::Docker => format!("/containers/{id}/json"),
                Api::Crio => format!("/containers/{id}"),
            };
            let Ok(Ok((200, body))) = tokio::time::timeout(TIMEOUT, get(socket, &path)).await else { continue };
            let body = String::from_utf8_lossy(&body);
            let info = match api {
                Api::Docker => ContainerInfo::from_docker(&body),
                Api::Crio => ContainerInfo::from_crio(&body),
            };
            if info.is_some() {
                return info;
            }
        }
        None
    }
}

/// `GET path` on the HTTP server at `socket`: the status and the body.
async fn get(socket: &Path, path: &str) -> Result<(u16, Vec<u8>)> {
    let stream = tokio::net::UnixStream::connect(socket).await.with_context(|| format!("connecting to {}", socket.display()))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let conn = tokio::spawn(conn);
    let request = hyper::Request::get(path).header(hyper::header::HOST, "localhost").body(Empty::<Bytes>::new())?;
    let answer = async {
        let response = sender.send_request(request).await?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, body.to_vec()))
    }
    .await;
    conn.abort();
    answer
}

//! Asking the container runtimes what a container id is: its name, image, and the Kubernetes
//! names a kubelet labels it with ([`ContainerInfo`]), over the APIs they serve on their unix
//! sockets: containerd's gRPC API (`containerd.services.containers.v1.Containers/Get`, in each
//! of its namespaces: `k8s.io` for a kubelet's, `default` for `ctr`'s), podman's and Docker's
//! HTTP API (`GET /containers/ID/json`, the Docker API podman serves too) and CRI-O's
//! (`GET /containers/ID`). The sockets are the runtimes' usual ones unless
//! `--container-runtime` names others. A socket that is not there is skipped; one that does
//! not answer in [`TIMEOUT`] is skipped for that id; one the agent may not open is said once.
//! The agent asks once per new container id, before the container's first figures are
//! labelled; an id no runtime names keeps the names its cgroup path gives.
use std::{
    cell::RefCell,
    collections::HashSet,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context as _, Result};
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use crate::analysis::containers::{ContainerInfo, RuntimeApi, RuntimeSocket};

/// How long one runtime may take to answer.
const TIMEOUT: Duration = Duration::from_millis(500);

/// The runtimes the agent asks.
pub(crate) struct Runtimes {
    sockets: Vec<RuntimeSocket>,
    /// Sockets that refused the agent's access, warned about once.
    refused: RefCell<HashSet<PathBuf>>,
}

impl Runtimes {
    /// These runtimes, asked in this order.
    pub(crate) fn new(sockets: Vec<RuntimeSocket>) -> Self {
        Self { sockets, refused: RefCell::default() }
    }

    /// What the first runtime that knows `id` (64 hexadecimal digits) says of it.
    pub(crate) async fn ask(&self, id: &str) -> Option<ContainerInfo> {
        if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        for RuntimeSocket { api, path: socket } in &self.sockets {
            if !socket.exists() {
                continue;
            }
            match tokio::time::timeout(TIMEOUT, ask_one(*api, socket, id)).await {
                Ok(Ok(Some(info))) => return Some(info),
                Ok(Ok(None)) => {}
                Ok(Err(e)) => self.failed(socket, &e),
                Err(_) => log::debug!("{}: no answer in {TIMEOUT:?} about {id}", socket.display()),
            }
        }
        None
    }

    /// A runtime that could not be asked: a socket the agent may not open is said once (the
    /// agent runs as a user without the socket's rights), anything else is for the debug log.
    fn failed(&self, socket: &Path, e: &anyhow::Error) {
        let denied =
            e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied));
        if denied && self.refused.borrow_mut().insert(socket.to_owned()) {
            eprintln!(
                "execprof: warning: {}: permission denied; containers that runtime makes keep the names their cgroup \
                 paths give (run the agent as root, which owns the runtimes' sockets, or give its user the socket's group)",
                socket.display()
            );
        } else {
            log::debug!("asking {}: {e:#}", socket.display());
        }
    }
}

/// What the runtime at `socket` says of `id`; None when it does not know it.
async fn ask_one(api: RuntimeApi, socket: &Path, id: &str) -> Result<Option<ContainerInfo>> {
    let (path, parse): (_, fn(&str) -> Option<ContainerInfo>) = match api {
        RuntimeApi::Containerd => return containerd::get(socket, id).await,
        RuntimeApi::Docker => (format!("/containers/{id}/json"), ContainerInfo::from_docker),
        RuntimeApi::Crio => (format!("/containers/{id}"), ContainerInfo::from_crio),
    };
    let (status, body) = get(socket, &path).await?;
    Ok(if status == 200 { parse(&String::from_utf8_lossy(&body)) } else { None })
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

/// containerd's gRPC API: the two calls the agent makes, their messages declared with the
/// fields it reads (protobuf skips the others), framed as gRPC over HTTP/2 on the socket.
mod containerd {
    use std::{collections::HashMap, path::Path};

    use anyhow::{Context as _, Result, bail};
    use http_body_util::{BodyExt as _, Full};
    use hyper::body::Bytes;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use prost::Message;

    use crate::analysis::containers::ContainerInfo;

    #[derive(Clone, PartialEq, Message)]
    struct ListNamespacesRequest {
        #[prost(string, tag = "1")]
        filter: String,
    }

    #[derive(Clone, PartialEq, Message)]
    struct Namespace {
        #[prost(string, tag = "1")]
        name: String,
    }

    #[derive(Clone, PartialEq, Message)]
    struct ListNamespacesResponse {
        #[prost(message, repeated, tag = "1")]
        namespaces: Vec<Namespace>,
    }

    #[derive(Clone, PartialEq, Message)]
    struct GetContainerRequest {
        #[prost(string, tag = "1")]
        id: String,
    }

    #[derive(Clone, PartialEq, Message)]
    struct Container {
        #[prost(string, tag = "1")]
        id: String,
        #[prost(map = "string, string", tag = "2")]
        labels: HashMap<String, String>,
        #[prost(string, tag = "3")]
        image: String,
    }

    #[derive(Clone, PartialEq, Message)]
    struct GetContainerResponse {
        #[prost(message, optional, tag = "1")]
        container: Option<Container>,
    }

    /// The namespaces dockerd makes its containers and plugins in.
    const DOCKER_NAMESPACES: [&str; 2] = ["moby", "plugins.moby"];

    /// The container `id` in whichever of containerd's namespaces holds it (Docker's
    /// excepted).
    pub(super) async fn get(socket: &Path, id: &str) -> Result<Option<ContainerInfo>> {
        let namespaces: ListNamespacesResponse =
            call(socket, "/containerd.services.namespaces.v1.Namespaces/List", None, &ListNamespacesRequest::default())
                .await?
                .context("containerd listed no namespaces")?;
        // Docker keeps its containers in containerd too, under the same ids, with neither
        // their names nor their images: Docker's own API names them.
        for ns in namespaces.namespaces.iter().filter(|ns| !DOCKER_NAMESPACES.contains(&ns.name.as_str())) {
            let request = GetContainerRequest { id: id.to_owned() };
            let found: Option<GetContainerResponse> =
                call(socket, "/containerd.services.containers.v1.Containers/Get", Some(&ns.name), &request).await?;
            if let Some(c) = found.and_then(|r| r.container) {
                return Ok(Some(ContainerInfo::from_containerd(&c.id, &c.image, &c.labels)));
            }
        }
        Ok(None)
    }

    /// One unary gRPC call: None when the server answers with an error status (NotFound).
    async fn call<Req: Message, Resp: Message + Default>(
        socket: &Path,
        method: &str,
        namespace: Option<&str>,
        request: &Req,
    ) -> Result<Option<Resp>> {
        let stream = tokio::net::UnixStream::connect(socket).await.with_context(|| format!("connecting to {}", socket.display()))?;
        let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await?;
        let conn = tokio::spawn(conn);
        let message = request.encode_to_vec();
        let mut body = Vec::with_capacity(5 + message.len());
        body.push(0);
        body.extend_from_slice(&u32::try_from(message.len())?.to_be_bytes());
        body.extend_from_slice(&message);
        let mut builder = hyper::Request::post(format!("http://localhost{method}"))
            .header(hyper::header::CONTENT_TYPE, "application/grpc")
            .header(hyper::header::TE, "trailers");
        if let Some(ns) = namespace {
            builder = builder.header("containerd-namespace", ns);
        }
        let answer = async {
            let response = sender.send_request(builder.body(Full::new(Bytes::from(body)))?).await?;
            let head_status = response.headers().get("grpc-status").cloned();
            let collected = response.into_body().collect().await?;
            let status = collected.trailers().and_then(|t| t.get("grpc-status").cloned()).or(head_status);
            if status.as_ref().is_none_or(|s| s != "0") {
                return Ok(None);
            }
            let bytes = collected.to_bytes();
            let Some(frame) = bytes.get(5..) else { bail!("{method}: a gRPC answer shorter than its frame header") };
            if bytes[0] != 0 {
                bail!("{method}: a compressed gRPC answer, which was not asked for");
            }
            Ok(Some(Resp::decode(frame)?))
        }
        .await;
        conn.abort();
        answer
    }
}

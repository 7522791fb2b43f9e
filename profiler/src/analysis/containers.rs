//! Containers by name: what a container runtime says of a container id (its name, image, and
//! the Kubernetes pod, namespace and container name a kubelet labels it with), read from the
//! runtimes' answers (pure; the agent asks them: `source::runtimes`), kept per id, bounded.
use std::{collections::HashMap, path::PathBuf};

use serde_json::Value;

/// The API a container runtime serves on its unix socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeApi {
    /// containerd's gRPC API (`Containers/Get` in each namespace).
    Containerd,
    /// CRI-O's info endpoint (`GET /containers/ID`).
    Crio,
    /// Docker's HTTP API (`GET /containers/ID/json`), which podman serves too.
    Docker,
}

/// One runtime the agent asks: the API its socket serves and the socket's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeSocket {
    /// What the socket serves.
    pub api: RuntimeApi,
    /// The socket, as the agent sees it (inside a container: where it is mounted).
    pub path: PathBuf,
}

/// The runtimes' usual sockets, asked in this order where they exist.
const DEFAULT_SOCKETS: &[(RuntimeApi, &str)] = &[
    (RuntimeApi::Containerd, "/run/containerd/containerd.sock"),
    (RuntimeApi::Crio, "/run/crio/crio.sock"),
    (RuntimeApi::Docker, "/run/docker.sock"),
    (RuntimeApi::Docker, "/run/podman/podman.sock"),
];

/// The names `--container-runtime` takes, with the API each serves.
const RUNTIME_NAMES: &[(&str, RuntimeApi)] = &[
    ("containerd", RuntimeApi::Containerd),
    ("crio", RuntimeApi::Crio),
    ("cri-o", RuntimeApi::Crio),
    ("docker", RuntimeApi::Docker),
    ("podman", RuntimeApi::Docker),
];

impl RuntimeSocket {
    /// The runtimes at their usual sockets: containerd, CRI-O, Docker, podman (as root).
    pub fn defaults() -> Vec<Self> {
        DEFAULT_SOCKETS.iter().map(|(api, p)| Self { api: *api, path: PathBuf::from(p) }).collect()
    }

    /// `RUNTIME=SOCKET` (`containerd=/run/k3s/containerd/containerd.sock`): RUNTIME one of
    /// containerd, crio, docker, podman; SOCKET an absolute path.
    pub fn parse(text: &str) -> Result<Self, String> {
        let names = || RUNTIME_NAMES.iter().map(|(n, _)| *n).filter(|n| *n != "cri-o").collect::<Vec<_>>().join(", ");
        let Some((name, path)) = text.split_once('=') else {
            return Err(format!("{text:?} names no socket: give RUNTIME=SOCKET, RUNTIME one of {}", names()));
        };
        let Some((_, api)) = RUNTIME_NAMES.iter().find(|(n, _)| n.eq_ignore_ascii_case(name.trim())) else {
            return Err(format!("{name:?} is not a runtime execprof can ask: give one of {}", names()));
        };
        let path = PathBuf::from(path.trim());
        if !path.is_absolute() {
            return Err(format!("{:?} is not an absolute path: give the socket's whole path", path.display().to_string()));
        }
        Ok(Self { api: *api, path })
    }
}

/// What a runtime says of one container.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContainerInfo {
    /// The container's name: Kubernetes' `io.kubernetes.container.name`, else the runtime's.
    pub name: String,
    /// The image it runs, as the runtime names it (`docker.io/library/busybox:1.36`).
    pub image: String,
    /// The Kubernetes pod's name (`io.kubernetes.pod.name`), else "".
    pub pod: String,
    /// The pod's namespace (`io.kubernetes.pod.namespace`), else "".
    pub namespace: String,
}

/// The CRI labels a kubelet puts on every container it makes.
const KUBE_CONTAINER: &str = "io.kubernetes.container.name";
const KUBE_POD: &str = "io.kubernetes.pod.name";
const KUBE_NAMESPACE: &str = "io.kubernetes.pod.namespace";

impl ContainerInfo {
    /// From a runtime's name, image and labels (the Kubernetes ones win over its name).
    fn new(name: &str, image: &str, label: impl Fn(&str) -> Option<String>) -> Self {
        Self {
            name: label(KUBE_CONTAINER).filter(|n| !n.is_empty()).unwrap_or_else(|| name.trim_start_matches('/').to_owned()),
            image: image.to_owned(),
            pod: label(KUBE_POD).unwrap_or_default(),
            namespace: label(KUBE_NAMESPACE).unwrap_or_default(),
        }
    }

    /// From a JSON object of labels.
    fn with_json_labels(name: &str, image: &str, labels: &Value) -> Self {
        Self::new(name, image, |k| labels.get(k).and_then(Value::as_str).map(str::to_owned))
    }

    /// Docker's and podman's `GET /containers/ID/json` (the Docker API, which podman serves
    /// too): `Name` (`/web-1`), `Config.Image`, `Config.Labels`.
    pub fn from_docker(json: &str) -> Option<Self> {
        let v: Value = serde_json::from_str(json).ok()?;
        let name = v["Name"].as_str()?;
        let image = v["Config"]["Image"].as_str().or_else(|| v["ImageName"].as_str()).unwrap_or("");
        Some(Self::with_json_labels(name, image, &v["Config"]["Labels"]))
    }

    /// CRI-O's `GET /containers/ID` (its info endpoint): `name`, `image`, `labels`.
    pub fn from_crio(json: &str) -> Option<Self> {
        let v: Value = serde_json::from_str(json).ok()?;
        let name = v["name"].as_str()?;
        Some(Self::with_json_labels(name, v["image"].as_str().unwrap_or(""), &v["labels"]))
    }

    /// From containerd's container record: its id, image and labels (a container made by
    /// `ctr` or a kubelet has no other name than its id and the Kubernetes labels).
    pub fn from_containerd(id: &str, image: &str, labels: &HashMap<String, String>) -> Self {
        Self::new(id, image, |k| labels.get(k).cloned())
    }
}

/// What the runtimes said of each container id seen; an id no runtime named is kept as such
/// (asked once). Bounded: past `capacity` ids it starts again.
#[derive(Debug, Default)]
pub struct ContainerDirectory {
    known: HashMap<String, Option<ContainerInfo>>,
    capacity: usize,
}

impl ContainerDirectory {
    /// Holds at most `capacity` ids.
    pub fn new(capacity: usize) -> Self {
        Self { known: HashMap::new(), capacity }
    }

    /// Whether `id` was asked about already.
    pub fn asked(&self, id: &str) -> bool {
        self.known.contains_key(id)
    }

    /// What a runtime said of `id`, if one named it.
    pub fn get(&self, id: &str) -> Option<&ContainerInfo> {
        self.known.get(id).and_then(Option::as_ref)
    }

    /// Records the answer for `id` (None: no runtime named it).
    pub fn insert(&mut self, id: &str, info: Option<ContainerInfo>) {
        if self.known.len() >= self.capacity {
            self.known.clear();
        }
        self.known.insert(id.to_owned(), info);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_and_podman_answers_give_names_and_images() {
        let podman = r#"{"Id":"abc","Name":"web-1","ImageName":"localhost/web:1","Config":{"Image":"localhost/web:1","Labels":null}}"#;
        assert_eq!(
            ContainerInfo::from_docker(podman).unwrap(),
            ContainerInfo { name: "web-1".into(), image: "localhost/web:1".into(), pod: "".into(), namespace: "".into() }
        );
        let docker = r#"{"Name":"/k8s_app_web-7_shop_uid_0","Config":{"Image":"registry/app:2","Labels":{"io.kubernetes.container.name":"app","io.kubernetes.pod.name":"web-7","io.kubernetes.pod.namespace":"shop"}}}"#;
        assert_eq!(
            ContainerInfo::from_docker(docker).unwrap(),
            ContainerInfo { name: "app".into(), image: "registry/app:2".into(), pod: "web-7".into(), namespace: "shop".into() }
        );
        assert_eq!(ContainerInfo::from_docker(r#"{"message":"no such container"}"#), None);
        assert_eq!(ContainerInfo::from_docker("not json"), None);
    }

    #[test]
    fn crio_answers_give_kubernetes_names() {
        let crio = r#"{"name":"k8s_app_web-7_shop_uid_0","image":"registry/app:2","labels":{"io.kubernetes.container.name":"app","io.kubernetes.pod.name":"web-7","io.kubernetes.pod.namespace":"shop"}}"#;
        assert_eq!(
            ContainerInfo::from_crio(crio).unwrap(),
            ContainerInfo { name: "app".into(), image: "registry/app:2".into(), pod: "web-7".into(), namespace: "shop".into() }
        );
    }

    #[test]
    fn containerd_records_give_kubernetes_names_else_the_id() {
        let mut labels = HashMap::new();
        labels.insert(KUBE_CONTAINER.to_owned(), "app".to_owned());
        labels.insert(KUBE_POD.to_owned(), "web-7".to_owned());
        labels.insert(KUBE_NAMESPACE.to_owned(), "shop".to_owned());
        assert_eq!(
            ContainerInfo::from_containerd("c1", "registry/app:2", &labels),
            ContainerInfo { name: "app".into(), image: "registry/app:2".into(), pod: "web-7".into(), namespace: "shop".into() }
        );
        assert_eq!(ContainerInfo::from_containerd("c1", "busybox", &HashMap::new()).name, "c1");
    }

    #[test]
    fn runtime_sockets_are_named_by_runtime_and_path() {
        assert_eq!(
            RuntimeSocket::parse("containerd=/run/k3s/containerd/containerd.sock").unwrap(),
            RuntimeSocket { api: RuntimeApi::Containerd, path: "/run/k3s/containerd/containerd.sock".into() }
        );
        assert_eq!(RuntimeSocket::parse("podman=/run/user/1000/podman/podman.sock").unwrap().api, RuntimeApi::Docker);
        assert_eq!(RuntimeSocket::parse("CRI-O=/var/run/crio/crio.sock").unwrap().api, RuntimeApi::Crio);
        let err = RuntimeSocket::parse("rkt=/run/rkt.sock").unwrap_err();
        assert!(err.contains("containerd, crio, docker, podman"), "{err}");
        assert!(RuntimeSocket::parse("/run/docker.sock").unwrap_err().contains("RUNTIME=SOCKET"));
        assert!(RuntimeSocket::parse("docker=run/docker.sock").unwrap_err().contains("absolute"));
        let defaults = RuntimeSocket::defaults();
        assert_eq!(defaults[0].path, PathBuf::from("/run/containerd/containerd.sock"));
        assert_eq!(defaults.len(), 4);
    }

    #[test]
    fn the_directory_is_bounded_and_remembers_unnamed_ids() {
        let mut d = ContainerDirectory::new(2);
        d.insert("a", None);
        assert!(d.asked("a") && d.get("a").is_none());
        d.insert("b", Some(ContainerInfo { name: "b".into(), ..Default::default() }));
        assert_eq!(d.get("b").unwrap().name, "b");
        d.insert("c", None);
        assert!(!d.asked("a") && d.asked("c"));
    }
}

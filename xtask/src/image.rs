//! `cargo xtask image`: the agent's OCI image, for amd64 and arm64, as one archive
//! `target/image/execprof-VERSION.oci.tar` (an OCI image index over both).
//!
//! Built from scratch, pulling from no registry: each architecture's image holds the portable
//! execprof (stripped), the five glibc files it links (the loader, libc, libm, libpthread,
//! libdl) taken from Debian's `libc6` of that architecture, the agent's configuration file,
//! and the licences of both. Its entrypoint is `/usr/bin/execprof`, its command
//! `agent --config /etc/execprof/agent.toml`; it carries the OCI annotations
//! (`org.opencontainers.image.*`: title, description, version, revision, created, licences,
//! authors) as
//! annotations and labels. buildah (Debian's) makes it, in a store of its own under
//! target/image/ (the vfs driver: no overlay mounts, nothing in the machine's own store).
//!
//! CI checks it ([`ci_checks`]): the index names both platforms; real podman loads the archive
//! into a scratch store and runs the agent from it in a container with the host's pid
//! namespace, read-only, with the DaemonSet's capabilities and host paths; two *other* podman
//! containers (replicas of one scratch image holding the seed's `t`), one made by containerd
//! (`ctr`, as a kubelet places and labels it) and one by Docker's daemon (on that containerd)
//! each make a known number of execs; the agent's endpoint, scraped, counts exactly those under
//! each container's name and the program's path inside the container.
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use crate::{deb, local_http, run, vm::Arch};

/// Where `cargo xtask image` writes.
pub(crate) const OUT_DIR: &str = "target/image";

/// The image's name in the stores, and in the archive's index (`execprof:VERSION`).
const NAME: &str = "localhost/execprof";

/// The archive `cargo xtask image` writes.
pub(crate) fn archive() -> PathBuf {
    Path::new(OUT_DIR).join(format!("execprof-{}.oci.tar", env!("CARGO_PKG_VERSION")))
}

/// A container store of buildah's and podman's own (`--root`, `--runroot`).
struct Store {
    root: PathBuf,
    runroot: PathBuf,
    /// `vfs` to build (no mounts), `overlay` to run containers as runtimes do by default.
    driver: &'static str,
}

impl Store {
    /// The store under target/image/NAME, emptied first when `fresh`.
    fn new(name: &str, driver: &'static str, fresh: bool) -> Result<Store> {
        let dir = std::path::absolute(Path::new(OUT_DIR).join(name))?;
        let store = Store { root: dir.join("root"), runroot: dir.join("run"), driver };
        if fresh && driver == "overlay" {
            // Containers left by a run that was killed hold overlay mounts in the store.
            let _ = store.podman().args(["rm", "--all", "--force"]).output();
            let _ = Command::new("umount").arg("-R").arg(dir.join("root/overlay")).output();
        }
        if fresh && dir.exists() {
            // buildah's and podman's vfs layers may hold read-only directories.
            let _ = Command::new("chmod").args(["-R", "u+w"]).arg(&dir).status();
            std::fs::remove_dir_all(&dir).with_context(|| format!("emptying the container store {}", dir.display()))?;
        }
        Ok(store)
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.arg("--root").arg(&self.root).arg("--runroot").arg(&self.runroot).args(["--storage-driver", self.driver]);
        if program == "podman" {
            // Hybrid cgroup hosts (this kind of machine): systemd's manager and crun refuse
            // them; cgroupfs and runc work everywhere.
            cmd.args(["--cgroup-manager", "cgroupfs", "--runtime", "runc", "--events-backend", "file"]);
        }
        cmd
    }

    fn buildah(&self) -> Command {
        self.command("buildah")
    }

    fn podman(&self) -> Command {
        self.command("podman")
    }
}

/// The Debian multiarch directory of `arch`'s libraries.
fn multiarch(arch: Arch) -> &'static str {
    match arch {
        Arch::X86_64 => "x86_64-linux-gnu",
        Arch::Arm64 => "aarch64-linux-gnu",
    }
}

/// The OCI platform's architecture.
fn oci_arch(arch: Arch) -> &'static str {
    arch.debian()
}

/// What `exe` loads: its program interpreter (`/lib64/ld-linux-x86-64.so.2`) and the
/// libraries it names (`libc.so.6`), from `readelf`.
fn dynamic_needs(exe: &Path) -> Result<(String, Vec<String>)> {
    let text = deb::output(Command::new("readelf").args(["-d", "-l", "-W"]).arg(exe))?;
    let interp = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("[Requesting program interpreter: ")?.strip_suffix(']'))
        .with_context(|| format!("{} has no program interpreter: not the dynamically linked portable build", exe.display()))?;
    let libs = text.lines().filter_map(|l| l.split_once("Shared library: [")?.1.strip_suffix(']')).map(str::to_owned).collect();
    Ok((interp.to_owned(), libs))
}

/// The image's file tree for `arch` under target/image/rootfs-ARCH, from the portable build
/// `exe`.
fn rootfs(arch: Arch, exe: &Path) -> Result<PathBuf> {
    let root = Path::new(OUT_DIR).join(format!("rootfs-{}", arch.debian()));
    if root.exists() {
        std::fs::remove_dir_all(&root)?;
    }
    let bin = root.join("usr/bin/execprof");
    std::fs::create_dir_all(bin.parent().expect("a parent"))?;
    std::fs::copy(exe, &bin).with_context(|| format!("copying {}", exe.display()))?;
    deb::strip(arch, &bin)?;
    let libc6 = crate::vm::fetch_package(&arch.package("libc6"))?.join("root");
    let (interp, libs) = dynamic_needs(exe)?;
    let found = |name: &str| {
        ["lib", "usr/lib"].iter().map(|d| libc6.join(d).join(multiarch(arch)).join(name)).find(|p| p.exists()).with_context(|| {
            format!("{name} (which execprof links) is not in Debian's libc6 for {} under {}", arch.debian(), libc6.display())
        })
    };
    for lib in &libs {
        deb::write(&root.join("lib").join(multiarch(arch)).join(lib), &std::fs::read(found(lib)?)?, 0o755)?;
    }
    let interp_name = Path::new(&interp).file_name().and_then(|n| n.to_str()).context("the interpreter's file name")?;
    deb::write(&root.join(interp.trim_start_matches('/')), &std::fs::read(found(interp_name)?)?, 0o755)?;
    deb::write(&root.join("etc/execprof/agent.toml"), &std::fs::read("packaging/agent.toml")?, 0o644)?;
    deb::write(&root.join("usr/share/doc/execprof/copyright"), deb::copyright_of(arch)?.as_bytes(), 0o644)?;
    deb::write(&root.join("usr/share/doc/libc6/copyright"), &std::fs::read(libc6.join("usr/share/doc/libc6/copyright"))?, 0o644)?;
    // The agent writes nothing; /tmp is there for a volume (the DaemonSet's emptyDir).
    std::fs::create_dir_all(root.join("tmp"))?;
    Ok(root)
}

/// The OCI annotations of the image (`org.opencontainers.image.*`).
fn annotations() -> Result<Vec<(&'static str, String)>> {
    let revision = deb::output(Command::new("git").args(["rev-parse", "HEAD"]))?.trim().to_owned();
    let created = deb::output(Command::new("git").args(["log", "-1", "--format=%cI"]))?.trim().to_owned();
    Ok(vec![
        ("org.opencontainers.image.title", "execprof".to_owned()),
        (
            "org.opencontainers.image.description",
            "execprof's agent: exec attempts counted in the kernel, served as Prometheus metrics".to_owned(),
        ),
        ("org.opencontainers.image.version", env!("CARGO_PKG_VERSION").to_owned()),
        ("org.opencontainers.image.revision", revision),
        ("org.opencontainers.image.created", created),
        ("org.opencontainers.image.licenses", env!("CARGO_PKG_LICENSE").to_owned()),
        ("org.opencontainers.image.authors", deb::MAINTAINER.to_owned()),
    ])
}

/// One architecture's image, committed to `store` as `NAME:VERSION-ARCH`.
fn build_one(store: &Store, arch: Arch, exe: &Path) -> Result<String> {
    let root = rootfs(arch, exe)?;
    let tag = format!("{NAME}:{}-{}", env!("CARGO_PKG_VERSION"), oci_arch(arch));
    let ctr = deb::output(store.buildah().args(["from", "--arch", oci_arch(arch), "--os", "linux", "scratch"]))?.trim().to_owned();
    let built = (|| -> Result<()> {
        deb::output(store.buildah().args(["add", "--chown", "0:0", &ctr]).arg(std::path::absolute(&root)?).arg("/"))?;
        let mut config = store.buildah();
        config.args(["config", "--arch", oci_arch(arch), "--os", "linux"]);
        config.args(["--entrypoint", r#"["/usr/bin/execprof"]"#, "--cmd", "agent --config /etc/execprof/agent.toml"]);
        config.args(["--user", "0:0", "--workingdir", "/", "--port", "9435/tcp", "--env", "PATH=/usr/bin"]);
        config.args(["--created-by", "cargo xtask image"]);
        for (k, v) in annotations()? {
            config.arg("--annotation").arg(format!("{k}={v}")).arg("--label").arg(format!("{k}={v}"));
        }
        run(config.arg(&ctr))?;
        let timestamp = deb::commit_time()?.to_string();
        deb::output(store.buildah().args(["commit", "--quiet", "--format", "oci", "--timestamp", &timestamp, &ctr, &tag])).map(drop)
    })();
    let _ = store.buildah().args(["rm", &ctr]).output();
    built.with_context(|| format!("building the {} image with buildah", oci_arch(arch)))?;
    Ok(tag)
}

/// Builds the image for `arches` from their portable builds and writes [`archive`]: an OCI
/// image index over them.
pub(crate) fn build(arches: &[(Arch, PathBuf)]) -> Result<PathBuf> {
    let store = Store::new("build-store", "vfs", true)?;
    let list = format!("{NAME}:{}", env!("CARGO_PKG_VERSION"));
    deb::output(store.buildah().args(["manifest", "create", &list]))?;
    for (arch, exe) in arches {
        let tag = build_one(&store, *arch, exe)?;
        deb::output(store.buildah().args(["manifest", "add", &list, &tag]))?;
    }
    let out = archive();
    let _ = std::fs::remove_file(&out);
    let dest = format!("oci-archive:{}:execprof:{}", std::path::absolute(&out)?.display(), env!("CARGO_PKG_VERSION"));
    run(store.buildah().args(["manifest", "push", "--quiet", "--all", &list, &dest]))?;
    let size = std::fs::metadata(&out)?.len();
    println!(
        "xtask: {} ({:.1} MB; {})",
        out.display(),
        size as f64 / 1e6,
        arches.iter().map(|(a, _)| oci_arch(*a)).collect::<Vec<_>>().join(", ")
    );
    Ok(out)
}

/// The platforms (`linux/amd64`) the archive's index names.
fn index_platforms(archive: &Path) -> Result<Vec<String>> {
    let index = deb::output(Command::new("tar").arg("-xOf").arg(archive).arg("index.json"))?;
    let index: serde_json::Value = serde_json::from_str(&index).context("the archive's index.json")?;
    // buildah writes an index whose one manifest is the image index of the list.
    let mut platforms = Vec::new();
    let mut pending: Vec<serde_json::Value> = index["manifests"].as_array().cloned().unwrap_or_default();
    while let Some(m) = pending.pop() {
        if let Some(p) = m.get("platform") {
            platforms.push(format!("{}/{}", p["os"].as_str().unwrap_or("?"), p["architecture"].as_str().unwrap_or("?")));
        } else if m["mediaType"] == "application/vnd.oci.image.index.v1+json" {
            let digest = m["digest"].as_str().context("an index entry without a digest")?.replace(':', "/");
            let nested = deb::output(Command::new("tar").arg("-xOf").arg(archive).arg(format!("blobs/{digest}")))?;
            let nested: serde_json::Value = serde_json::from_str(&nested)?;
            pending.extend(nested["manifests"].as_array().cloned().unwrap_or_default());
        }
    }
    platforms.sort();
    Ok(platforms)
}

/// The seed's `t` (Linus's exec benchmark), linked statically for the workload image.
const SEED_T: &str = r#"#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv, char **envp) {
    char buffer[12]; int n;
    if (argc != 2) return 1;
    n = atoi(argv[1]);
    if (n <= 0) return 0;
    snprintf(buffer, sizeof(buffer), "%d", n-1);
    argv[1] = buffer;
    execvpe("t", argv, envp);
    return 3;
}
"#;

/// The workload container's first process: runs `t STEPS` by a PATH search, then waits to be
/// stopped, so the container (and its cgroup) is there when the agent names what it counted.
const HOLD: &str = r#"#include <stdio.h>
#include <unistd.h>
#include <sys/wait.h>
int main(void) {
    int status; pid_t pid = fork();
    if (pid == 0) { char *argv[] = {"t", "STEPS", 0}; execvp("t", argv); _exit(3); }
    if (pid < 0 || waitpid(pid, &status, 0) != pid || status != 0) return 1;
    puts("done"); fflush(stdout);
    for (;;) pause();
}
"#;

/// Steps each workload container's `t` makes; its PATH has two missing directories before
/// `/bin`, so each step is two ENOENT and one success.
const STEPS: u64 = 50;

/// The workload image's name.
const WORKLOAD: &str = "localhost/execprof-test-t:latest";

/// The workload image ([`WORKLOAD`]): `/bin/hold` and `/bin/t`,
/// PATH=/m1:/m2:/bin.
fn workload_image(store: &Store) -> Result<String> {
    let dir = std::path::absolute(Path::new(OUT_DIR).join("workload"))?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("rootfs/bin"))?;
    for (name, source) in [("t", SEED_T.to_owned()), ("hold", HOLD.replace("STEPS", &STEPS.to_string()))] {
        let c = dir.join(format!("{name}.c"));
        std::fs::write(&c, source)?;
        run(Command::new("gcc").args(["-static", "-O2", "-o"]).arg(dir.join("rootfs/bin").join(name)).arg(&c))?;
    }
    let ctr = deb::output(store.buildah().args(["from", "scratch"]))?.trim().to_owned();
    deb::output(store.buildah().args(["add", &ctr]).arg(dir.join("rootfs")).arg("/"))?;
    run(store.buildah().args(["config", "--env", "PATH=/m1:/m2:/bin", "--entrypoint", r#"["/bin/hold"]"#, &ctr]))?;
    deb::output(store.buildah().args(["commit", "--quiet", "--rm", &ctr, WORKLOAD]))?;
    Ok(WORKLOAD.to_owned())
}

/// `execprof_exec_attempts_total`'s samples: labels → value.
fn attempts(metrics: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("execprof_exec_attempts_total{") else { continue };
        let Some((labels, value)) = rest.rsplit_once("} ") else { continue };
        let Ok(value) = value.trim().parse::<f64>() else { continue };
        let mut map = BTreeMap::new();
        for pair in split_labels(labels) {
            if let Some((k, v)) = pair.split_once("=\"") {
                map.insert(k.to_owned(), v.trim_end_matches('"').replace("\\\"", "\"").replace("\\\\", "\\"));
            }
        }
        out.push((map, value));
    }
    out
}

/// `a="x",b="y,z"` → [`a="x"`, `b="y,z"`] (commas inside quotes kept).
fn split_labels(s: &str) -> Vec<&str> {
    let (mut out, mut start, mut quoted, mut escaped) = (Vec::new(), 0, false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

/// The sum of the attempts whose labels include all of `want`.
fn sum_where(samples: &[(BTreeMap<String, String>, f64)], want: &[(&str, &str)]) -> f64 {
    samples.iter().filter(|(l, _)| want.iter().all(|(k, v)| l.get(*k).is_some_and(|x| x == v))).map(|(_, v)| v).sum()
}

/// CI's checks of the image (see the module's documentation), built from the portable builds
/// `x86` and `arm64`.
pub(crate) fn ci_checks(x86: &Path, arm64: &Path) -> Result<()> {
    let archive = build(&[(Arch::X86_64, x86.to_owned()), (Arch::Arm64, arm64.to_owned())])?;
    let platforms = index_platforms(&archive)?;
    if platforms != ["linux/amd64", "linux/arm64"] {
        bail!("{}'s index names {platforms:?}, not linux/amd64 and linux/arm64", archive.display());
    }
    println!("xtask: {}: an OCI index of {}", archive.display(), platforms.join(", "));
    let store = Store::new("test-store", "overlay", true)?;
    let loaded = deb::output(store.podman().arg("load").arg("--input").arg(&archive))?;
    let image =
        loaded.lines().rev().find_map(|l| l.strip_prefix("Loaded image: ")).context("podman load named no image")?.trim().to_owned();
    let inspect = deb::output(store.podman().args(["image", "inspect", &image]))?;
    let inspect: serde_json::Value = serde_json::from_str(&inspect).context("podman image inspect's JSON")?;
    let (config_arch, annotations) = (&inspect[0]["Architecture"], &inspect[0]["Annotations"]);
    if config_arch != "amd64" || annotations["org.opencontainers.image.version"] != env!("CARGO_PKG_VERSION") {
        bail!("podman loaded {image} as {config_arch} with annotations {annotations}: not this machine's amd64 image of this version");
    }
    let workload = workload_image(&store)?;
    let port = local_http::free_port()?;
    let agent = "execprof-test-agent";
    let _ = store.podman().args(["rm", "--force", agent]).output();
    // The DaemonSet's pod, as podman runs it: the host's pid namespace, the unit's three
    // capabilities, a read-only root, the host's BTF, tracefs and cgroup2 mount read-only.
    let cgroup2 = cgroup2_mount()?;
    let mut run_agent = store.podman();
    run_agent.args(["run", "--detach", "--name", agent, "--network", "host", "--pid", "host", "--read-only"]);
    run_agent.args(["--cap-drop", "ALL", "--cap-add", "SYS_ADMIN,SYSLOG,DAC_READ_SEARCH"]);
    run_agent.args(["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]);
    run_agent.args(["--volume", "/sys/kernel/btf:/sys/kernel/btf:ro", "--volume", "/sys/kernel/tracing:/sys/kernel/tracing:ro"]);
    run_agent.arg("--volume").arg(format!("{}:/sys/fs/cgroup:ro", cgroup2.display()));
    // podman's API, which names the containers, where no default looks for it: the agent is
    // told (`--container-runtime`), as for k3s's containerd or a rootless podman.
    let api = ApiService::start(&store)?;
    run_agent.arg("--volume").arg(format!("{}:{PODMAN_SOCKET_IN_AGENT}:ro", api.socket.display()));
    let containerd = Containerd::start()?;
    run_agent.arg("--volume").arg(format!("{}:/run/containerd/containerd.sock:ro", containerd.socket.display()));
    // Docker's daemon, on that containerd: its API where the agent looks for it.
    let dockerd = Dockerd::start(&containerd)?;
    run_agent.arg("--volume").arg(format!("{}:/run/docker.sock:ro", dockerd.socket.display()));
    run_agent.args([&image, "agent", "--listen", &format!("127.0.0.1:{port}"), "--duration", "600"]);
    for runtime in ["containerd=/run/containerd/containerd.sock", "docker=/run/docker.sock", &format!("podman={PODMAN_SOCKET_IN_AGENT}")] {
        run_agent.args(["--container-runtime", runtime]);
    }
    deb::output(&mut run_agent).context("podman running the agent's image")?;
    let result = check_counts(&store, &containerd, &dockerd, agent, port, &workload);
    let logs = store
        .podman()
        .args(["logs", agent])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout));
    let _ = store.podman().args(["rm", "--force", "--time", "5", agent]).output();
    // dockerd first: it stops its containers through containerd.
    drop((api, dockerd, containerd));
    result.with_context(|| format!("the agent's output:\n{}", logs.unwrap_or_default()))
}

/// Where the agent's container has podman's API socket: not podman's usual place.
const PODMAN_SOCKET_IN_AGENT: &str = "/run/execprof-test/podman.sock";

/// `podman system service` on a socket of the test store's, stopped when dropped.
struct ApiService {
    child: std::process::Child,
    socket: PathBuf,
}

impl ApiService {
    fn start(store: &Store) -> Result<ApiService> {
        let socket = store.root.with_file_name("podman.sock");
        let _ = std::fs::remove_file(&socket);
        let child = store
            .podman()
            .args(["system", "service", "--time", "0"])
            .arg(format!("unix://{}", socket.display()))
            .stdout(std::process::Stdio::null())
            .spawn()
            .context("starting podman system service")?;
        let service = ApiService { child, socket };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !service.socket.exists() {
            if Instant::now() > deadline {
                bail!("podman system service made no socket {} in 30 s", service.socket.display());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(service)
    }
}

impl Drop for ApiService {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// The machine's cgroup2 mount (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on hybrid hosts).
fn cgroup2_mount() -> Result<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    mounts
        .lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let point = pre.split_whitespace().nth(4)?;
            (post.split_whitespace().next() == Some("cgroup2")).then(|| PathBuf::from(point))
        })
        .context("this machine has no cgroup2 hierarchy mounted")
}

/// One container the agent must count: the labels its series carry.
struct Expected {
    /// How the messages name it.
    what: String,
    labels: Vec<(&'static str, String)>,
}

/// A pod uid and container id as a kubelet would give them, for the containerd container.
const KUBE_POD_UID: &str = "8a1b2c3d-0000-4e5f-9a8b-0123456789ab";
const KUBE_LABELS: [(&str, &str); 3] =
    [("io.kubernetes.pod.name", "web-7"), ("io.kubernetes.pod.namespace", "shop"), ("io.kubernetes.container.name", "app")];

/// A workload container, and how to read its output (`done` once its `t` finished).
struct Workload<'a> {
    name: String,
    logs: Box<dyn Fn() -> Command + 'a>,
}

/// Waits for the agent to be ready; runs two podman replicas of `workload`, one container of
/// it made by containerd's `ctr` as a kubelet would place and label it, and one made by
/// Docker's daemon; checks the counts the agent serves for each, under the names the runtimes
/// give.
fn check_counts(store: &Store, containerd: &Containerd, dockerd: &Dockerd, agent: &str, port: u16, workload: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while local_http::get(port, "/readyz").is_err() {
        if Instant::now() > deadline {
            bail!("the agent in {agent} was not ready on 127.0.0.1:{port} in 120 s");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let mut expected = Vec::new();
    let mut podman_names = Vec::new();
    let mut workloads = Vec::new();
    for n in 1..=2 {
        let name = format!("execprof-test-t-{n}");
        let _ = store.podman().args(["rm", "--force", "--time", "0", &name]).output();
        let mut run_it = store.podman();
        run_it.args(["run", "--detach", "--name", &name, "--network", "none"]);
        run_it.args(["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", workload]);
        let id = deb::output(&mut run_it)?.trim().to_owned();
        let labels = vec![("container", name.clone()), ("container_id", id), ("image", WORKLOAD.to_owned())];
        expected.push(Expected { what: format!("podman's {name}"), labels });
        let logs_of = name.clone();
        workloads.push(Workload {
            name: name.clone(),
            logs: Box::new(move || {
                let mut cmd = store.podman();
                cmd.args(["logs", &logs_of]);
                cmd
            }),
        });
        podman_names.push(name);
    }
    let kube_id = "c0ffee".repeat(10) + "c0de";
    let ran = containerd.run(store, &kube_id);
    if ran.is_ok() {
        let mut labels = vec![("container_id", kube_id.clone()), ("pod_uid", KUBE_POD_UID.to_owned()), ("image", WORKLOAD.to_owned())];
        labels.extend([("pod", "web-7"), ("namespace", "shop"), ("container", "app")].map(|(k, v)| (k, v.to_owned())));
        expected.push(Expected { what: "containerd's pod web-7".to_owned(), labels });
    }
    let docker_name = "execprof-test-t-docker";
    let ran = ran.and_then(|()| dockerd.run(store, docker_name));
    let result = ran.and_then(|(id, image)| {
        let labels = vec![("container", docker_name.to_owned()), ("container_id", id), ("image", image)];
        expected.push(Expected { what: format!("Docker's {docker_name} ({} storage)", dockerd.driver), labels });
        workloads.push(Workload {
            name: docker_name.to_owned(),
            logs: Box::new(move || {
                let mut cmd = dockerd.docker();
                cmd.args(["logs", docker_name]);
                cmd
            }),
        });
        wait_for_counts(port, &workloads, &expected)
    });
    for name in &podman_names {
        let _ = store.podman().args(["rm", "--force", "--time", "0", name]).output();
    }
    let _ = dockerd.docker().args(["rm", "--force", docker_name]).output();
    containerd.remove(&kube_id);
    result
}

/// Waits for each podman and Docker container's `t` to finish and the agent to serve every
/// expected count.
fn wait_for_counts(port: u16, workloads: &[Workload], expected: &[Expected]) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    for w in workloads {
        while !deb::output(&mut (w.logs)())?.contains("done") {
            if Instant::now() > deadline {
                bail!("{}'s t did not finish in 60 s", w.name);
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    let want_enoent = (2 * STEPS) as f64;
    // containerd's container runs with its output discarded: its counts are waited for.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let metrics = local_http::get(port, "/metrics")?;
        let samples = attempts(&metrics);
        let counts: Vec<(f64, f64)> = expected
            .iter()
            .map(|e| {
                let of = |outcome| {
                    let mut labels: Vec<(&str, &str)> = e.labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    labels.extend([("program", "/bin/t"), ("outcome", outcome)]);
                    sum_where(&samples, &labels)
                };
                (of("enoent"), of("success"))
            })
            .collect();
        if counts.iter().all(|&(enoent, success)| enoent == want_enoent && success == STEPS as f64) {
            for (e, (enoent, success)) in expected.iter().zip(&counts) {
                let labels: Vec<String> = e.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                println!(
                    "xtask: the agent in podman counted {enoent} ENOENT and {success} successes of /bin/t in {} under {} (exact)",
                    e.what,
                    labels.join(", ")
                );
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            let theirs: Vec<String> = metrics
                .lines()
                .filter(|l| l.starts_with("execprof_exec_attempts_total") && l.contains("/bin/t"))
                .map(str::to_owned)
                .collect();
            bail!(
                "the agent counted {counts:?} (ENOENT, successes) of /bin/t for {:?}, not ({want_enoent}, {STEPS}) each under their names; the series of /bin/t:\n{}",
                expected.iter().map(|e| &e.what).collect::<Vec<_>>(),
                theirs.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// containerd from Debian's package, unpacked (never installed: the package starts a system
/// service), run with a root, state, socket and no CRI plugin of the test's own; stopped when
/// dropped.
struct Containerd {
    child: std::process::Child,
    dir: PathBuf,
    socket: PathBuf,
}

impl Containerd {
    fn start() -> Result<Containerd> {
        let dir = std::path::absolute(Path::new(OUT_DIR).join("containerd"))?;
        if dir.exists() {
            // What a killed run left: its mounts first.
            unmount_under(&dir);
            std::fs::remove_dir_all(&dir).with_context(|| format!("emptying {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir)?;
        let socket = dir.join("containerd.sock");
        let config = format!(
            "version = 2\nroot = \"{root}\"\nstate = \"{state}\"\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
             [grpc]\n  address = \"{sock}\"\n[ttrpc]\n  address = \"{sock}.ttrpc\"\n[debug]\n  address = \"\"\n[metrics]\n  address = \"\"\n",
            root = dir.join("root").display(),
            state = dir.join("state").display(),
            sock = socket.display()
        );
        std::fs::write(dir.join("config.toml"), config)?;
        let bin = crate::unpacked::tool("containerd");
        // The shim it starts is found on PATH, beside it.
        let path = format!("{}:{}", bin.parent().unwrap_or(Path::new("/usr/bin")).display(), std::env::var("PATH").unwrap_or_default());
        let log = std::fs::File::create(dir.join("containerd.log"))?;
        let child = Command::new(&bin)
            .arg("--config")
            .arg(dir.join("config.toml"))
            .env("PATH", path)
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let containerd = Containerd { child, dir, socket };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !containerd.socket.exists() {
            if Instant::now() > deadline {
                bail!("containerd made no socket in 30 s (its log: {})", containerd.dir.join("containerd.log").display());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(containerd)
    }

    fn ctr(&self) -> Command {
        let mut cmd = Command::new(crate::unpacked::tool("ctr"));
        cmd.arg("--address").arg(&self.socket);
        cmd
    }

    /// The workload image from podman's store into containerd's, and one container of it,
    /// `id`, in a pod's cgroup and with the labels a kubelet sets.
    fn run(&self, store: &Store, id: &str) -> Result<()> {
        let archive = self.dir.join("workload.tar");
        deb::output(store.podman().args(["save", "--quiet", "--format", "oci-archive", "--output"]).arg(&archive).arg(WORKLOAD))?;
        deb::output(self.ctr().args(["images", "import"]).arg(&archive))?;
        let mut run_it = self.ctr();
        run_it
            .args(["run", "--detach", "--null-io"])
            .arg("--fifo-dir")
            .arg(self.dir.join("fifo"))
            .arg("--runc-root")
            .arg(self.dir.join("runc"));
        run_it.arg("--cgroup").arg(format!("/kubepods/besteffort/pod{KUBE_POD_UID}/{id}"));
        for (k, v) in KUBE_LABELS {
            run_it.arg("--label").arg(format!("{k}={v}"));
        }
        deb::output(run_it.args([WORKLOAD, id])).context("ctr run")?;
        Ok(())
    }

    /// Kills and removes the container `id`, and the pod's cgroups (the kubepods ones too
    /// where nothing else is in them).
    fn remove(&self, id: &str) {
        let _ = self.ctr().args(["task", "kill", "--signal", "SIGKILL", id]).output();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.ctr().args(["task", "delete", id]).output().is_ok_and(|o| !o.status.success()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = self.ctr().args(["containers", "delete", id]).output();
        for point in cgroup_mounts() {
            for dir in [format!("kubepods/besteffort/pod{KUBE_POD_UID}"), "kubepods/besteffort".to_owned(), "kubepods".to_owned()] {
                let _ = std::fs::remove_dir(Path::new(&point).join(dir));
            }
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // containerd 1.6 keeps its shims' sockets and runc's state under /run/containerd
        // whatever its configuration says: the empty directories it left go (a machine's own
        // containerd keeps its, which are not empty).
        for dir in ["/run/containerd/s", "/run/containerd/runc/default", "/run/containerd/runc", "/run/containerd"] {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Docker's daemon from Debian's `docker.io` (20.10), unpacked (never installed: the package
/// starts a system service), run on the test's containerd with a data root, exec root, pid
/// file, socket and (empty) configuration of the test's own, no bridge, no iptables rules and
/// cgroupfs; stopped when dropped, with whatever it left.
struct Dockerd {
    child: std::process::Child,
    dir: PathBuf,
    socket: PathBuf,
    /// The containerd it runs on, whose `moby` namespace holds its containers.
    containerd: PathBuf,
    /// The storage driver that worked: overlay2, else vfs.
    driver: &'static str,
    /// Of [`DOCKERD_MAKES`], those that were not there before it started.
    made: Vec<&'static str>,
}

/// The containerd namespaces dockerd keeps its containers and its plugins in.
const MOBY_NAMESPACES: [&str; 2] = ["moby", "plugins.moby"];

/// What dockerd 20.10 makes outside the directories it is given, whatever its flags: its
/// trust key (and /etc/docker) and the directory where it looks for plugins' sockets. Those
/// that were not there before it are removed when it stops (the directories when empty).
const DOCKERD_MAKES: [&str; 4] = ["/etc/docker/key.json", "/etc/docker", "/run/docker/plugins", "/run/docker"];

impl Dockerd {
    fn start(containerd: &Containerd) -> Result<Dockerd> {
        let dir = std::path::absolute(Path::new(OUT_DIR).join("docker"))?;
        if dir.exists() {
            // What a killed run left: its mounts first.
            unmount_under(&dir);
            let _ = Command::new("chmod").args(["-R", "u+w"]).arg(&dir).status();
            std::fs::remove_dir_all(&dir).with_context(|| format!("emptying {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir.join("client"))?;
        // Its own configuration, so that the machine's /etc/docker/daemon.json is never read.
        std::fs::write(dir.join("daemon.json"), "{}\n")?;
        let bin = crate::unpacked::tool("dockerd");
        let path = format!("{}:{}", bin.parent().unwrap_or(Path::new("/usr/sbin")).display(), std::env::var("PATH").unwrap_or_default());
        let made: Vec<&str> = DOCKERD_MAKES.into_iter().filter(|p| !Path::new(p).exists()).collect();
        let mut last_error = None;
        for driver in ["overlay2", "vfs"] {
            let log_path = dir.join(format!("dockerd-{driver}.log"));
            let log = std::fs::File::create(&log_path)?;
            let child = Command::new(&bin)
                .arg("--config-file")
                .arg(dir.join("daemon.json"))
                .arg("--data-root")
                .arg(dir.join("root"))
                .arg("--exec-root")
                .arg(dir.join("run"))
                .arg("--pidfile")
                .arg(dir.join("dockerd.pid"))
                .arg("--host")
                .arg(format!("unix://{}", dir.join("docker.sock").display()))
                .arg("--containerd")
                .arg(&containerd.socket)
                .args(["--bridge", "none", "--iptables=false", "--ip6tables=false", "--ip-forward=false", "--ip-masq=false"])
                .args(["--userland-proxy=false", "--exec-opt", "native.cgroupdriver=cgroupfs", "--storage-driver", driver])
                .env("PATH", &path)
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .with_context(|| format!("starting {}", bin.display()))?;
            let mut dockerd = Dockerd {
                child,
                socket: dir.join("docker.sock"),
                dir: dir.clone(),
                containerd: containerd.socket.clone(),
                driver,
                made: made.clone(),
            };
            match dockerd.wait_ready(&log_path) {
                Ok(()) => return Ok(dockerd),
                Err(e) => {
                    eprintln!("xtask: dockerd with the {driver} storage driver: {e:#}");
                    // Stopped, and what it left cleared, before the next try.
                    drop(dockerd);
                    let _ = std::fs::remove_dir_all(dir.join("root"));
                    let _ = std::fs::remove_file(dir.join("docker.sock"));
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.expect("a driver was tried"))
    }

    /// Waits for its socket and `GET /_ping`.
    fn wait_ready(&mut self, log: &Path) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("dockerd exited ({status}); its log, {}:\n{}", log.display(), tail(log, 15));
            }
            if self.socket.exists() && local_http::get_unix(&self.socket, "/_ping").is_ok_and(|b| b.contains("OK")) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("dockerd did not answer /_ping on {} in 30 s; its log, {}:\n{}", self.socket.display(), log.display(), tail(log, 15));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Its client, on its socket, with a configuration directory of its own (not ~/.docker).
    fn docker(&self) -> Command {
        let mut cmd = Command::new(crate::unpacked::tool("docker"));
        cmd.env("DOCKER_CONFIG", self.dir.join("client")).arg("--host").arg(format!("unix://{}", self.socket.display()));
        cmd
    }

    /// The workload image from podman's store into dockerd's (`docker load` of a
    /// docker-archive), and one container of it named `name`: its id and the image as Docker
    /// reports it (`Config.Image`).
    fn run(&self, store: &Store, name: &str) -> Result<(String, String)> {
        let archive = self.dir.join("workload.tar");
        deb::output(store.podman().args(["save", "--quiet", "--format", "docker-archive", "--output"]).arg(&archive).arg(WORKLOAD))?;
        deb::output(self.docker().arg("load").arg("--quiet").arg("--input").arg(&archive)).context("docker load")?;
        let _ = self.docker().args(["rm", "--force", name]).output();
        let mut run_it = self.docker();
        run_it.args(["run", "--detach", "--name", name, "--network", "none"]);
        run_it.args(["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", WORKLOAD]);
        let id = deb::output(&mut run_it).context("docker run")?.trim().to_owned();
        let image = deb::output(self.docker().args(["inspect", "--format", "{{.Config.Image}}", &id]))?.trim().to_owned();
        Ok((id, image))
    }

    fn ctr(&self, namespace: &str) -> Command {
        let mut cmd = Command::new(crate::unpacked::tool("ctr"));
        cmd.arg("--address").arg(&self.containerd).args(["--namespace", namespace]);
        cmd
    }

    /// The ids `ctr NOUN ls -q` lists in `namespace`.
    fn ctr_ids(&self, namespace: &str, noun: &str) -> Vec<String> {
        self.ctr(namespace)
            .args([noun, "ls", "-q"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default()
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        if self.child.try_wait().is_ok_and(|s| s.is_none()) {
            // Its containers, while it can remove them; then SIGTERM, and SIGKILL after 20 s.
            let ids = self.docker().args(["ps", "--all", "--quiet"]).output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
            let ids: Vec<String> = ids.unwrap_or_default().split_whitespace().map(str::to_owned).collect();
            if !ids.is_empty() {
                let _ = self.docker().args(["rm", "--force"]).args(&ids).output();
            }
            let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).output();
            let deadline = Instant::now() + Duration::from_secs(20);
            while self.child.try_wait().is_ok_and(|s| s.is_none()) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        // What it left in containerd (a daemon killed with containers running leaves their
        // tasks), then its mounts (overlay2's, the containers' shm, network namespaces).
        for ns in MOBY_NAMESPACES {
            for id in self.ctr_ids(ns, "tasks") {
                let _ = self.ctr(ns).args(["tasks", "kill", "--signal", "SIGKILL", &id]).output();
                let deadline = Instant::now() + Duration::from_secs(10);
                while self.ctr(ns).args(["tasks", "delete", &id]).output().is_ok_and(|o| !o.status.success()) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
            for id in self.ctr_ids(ns, "containers") {
                let _ = self.ctr(ns).args(["containers", "delete", &id]).output();
            }
            let _ = self.ctr("default").args(["namespaces", "remove", ns]).output();
        }
        unmount_under(&self.dir);
        let _ = std::fs::remove_file(&self.socket);
        // The cgroups it made its containers' parent in (`/docker`), where nothing else is in
        // them.
        for point in cgroup_mounts() {
            let _ = std::fs::remove_dir(Path::new(&point).join("docker"));
        }
        for path in &self.made {
            let _ = if path.ends_with(".json") { std::fs::remove_file(path) } else { std::fs::remove_dir(path) };
        }
    }
}

/// The last `n` lines of the file at `path`.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Unmounts everything mounted under `dir`, the deepest first.
fn unmount_under(dir: &Path) {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut points: Vec<&str> =
        mounts.lines().filter_map(|l| l.split_whitespace().nth(1)).filter(|p| Path::new(p).starts_with(dir)).collect();
    points.sort_by(|a, b| b.cmp(a));
    points.dedup();
    for point in points {
        let _ = Command::new("umount").arg(point).output();
    }
}

/// Where the machine's cgroup hierarchies are mounted (v1's and v2's).
fn cgroup_mounts() -> Vec<String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter(|l| l.split_whitespace().nth(2).is_some_and(|t| t.starts_with("cgroup")))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_read_with_their_labels() {
        let text = "# TYPE execprof_exec_attempts_total counter\n\
            execprof_exec_attempts_total{outcome=\"enoent\",program=\"/bin/t\",container=\"a,b\"} 100\n\
            execprof_exec_attempts_total{outcome=\"success\",program=\"/bin/t\",container=\"a,b\"} 50\n\
            execprof_exec_attempts_total{outcome=\"enoent\",program=\"/bin/q\\\"x\",container=\"a,b\"} 3\n\
            execprof_fork_calls_total{container=\"a,b\"} 9\n";
        let samples = attempts(text);
        assert_eq!(samples.len(), 3);
        assert_eq!(sum_where(&samples, &[("container", "a,b"), ("outcome", "enoent")]), 103.0);
        assert_eq!(sum_where(&samples, &[("program", "/bin/t")]), 150.0);
        assert_eq!(sum_where(&samples, &[("program", "/bin/q\"x")]), 3.0);
    }
}

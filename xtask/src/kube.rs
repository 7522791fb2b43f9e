//! The Kubernetes manifests in `deploy/kubernetes/`, checked: every built-in kind validated
//! strictly (unknown fields refused) against the API schemas of each Kubernetes release PyPI's
//! `kubernetes-validate` bundles, offline; and what no schema says, held to the rest of the
//! repository: the DaemonSet's capabilities are the systemd unit's, its host paths are mounted
//! read-only, its image is this version's, and the ServiceMonitor selects the Service's port.
//! (The Prometheus operator's CRD schemas are in no package registry this machine reaches, so
//! the ServiceMonitor is checked here only against the Service it scrapes.)
#[cfg(test)]
mod tests {
    use std::{path::PathBuf, process::Command};

    use serde_json::Value;

    use crate::setup::PYTHON_READERS;

    /// The oldest and the newest Kubernetes release validated against: every one between too.
    const RELEASES: std::ops::RangeInclusive<u32> = 25..=37;

    fn manifest(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes").join(name)
    }

    fn tool(name: &str) -> PathBuf {
        let path = PathBuf::from(PYTHON_READERS).join("bin").join(name);
        assert!(path.exists(), "{} is missing: `cargo xtask setup` installs the tests' Python packages", path.display());
        path
    }

    /// `kubernetes-validate --strict` of `file` against release 1.`minor`: passed, and its words.
    fn validate(file: &std::path::Path, minor: u32) -> (bool, String) {
        let out = Command::new(tool("kubernetes-validate"))
            .args(["--strict", "-k", &format!("1.{minor}.0")])
            .arg(file)
            .output()
            .expect("running kubernetes-validate");
        (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }

    /// The YAML documents of `file`, as JSON (PyYAML, which kubernetes-validate reads with).
    fn documents(file: &str) -> Vec<Value> {
        let out = Command::new(tool("python3"))
            .args(["-c", "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))"])
            .arg(manifest(file))
            .output()
            .expect("running python3");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
        docs.iter().find(|d| d["kind"] == kind).unwrap_or_else(|| panic!("no {kind} in the manifests"))
    }

    #[test]
    #[ignore = "needs the tests' Python packages (cargo xtask setup)"]
    fn every_built_in_kind_validates_strictly_against_every_release() {
        let file = manifest("execprof.yaml");
        let resources = documents("execprof.yaml").len();
        assert_eq!(resources, 5, "Namespace, ServiceAccount, ConfigMap, DaemonSet, Service");
        for minor in RELEASES {
            let (ok, said) = validate(&file, minor);
            assert!(ok, "Kubernetes 1.{minor}: {said}");
            assert_eq!(said.matches(" passed for resource ").count(), resources, "Kubernetes 1.{minor}: {said}");
        }
        // The validator bites: a field the API does not have, in the pod's container, is refused.
        let text = std::fs::read_to_string(&file).unwrap();
        let broken = text.replacen(
            "          imagePullPolicy: IfNotPresent\n",
            "          imagePullPolicy: IfNotPresent\n          hostPID: true\n",
            1,
        );
        assert_ne!(broken, text);
        let copy = std::env::temp_dir().join(format!("execprof-broken-{}.yaml", std::process::id()));
        std::fs::write(&copy, broken).unwrap();
        let (ok, said) = validate(&copy, *RELEASES.end());
        std::fs::remove_file(&copy).unwrap();
        assert!(!ok && said.contains("hostPID"), "{said}");
    }

    #[test]
    #[ignore = "needs the tests' Python packages (cargo xtask setup)"]
    fn the_daemonset_holds_the_units_privileges_and_nothing_else() {
        let docs = documents("execprof.yaml");
        let ds = kind(&docs, "DaemonSet");
        let pod = &ds["spec"]["template"]["spec"];
        assert_eq!(pod["hostPID"], true);
        assert_eq!(pod["automountServiceAccountToken"], false);
        assert!(pod.get("hostNetwork").is_none() && pod.get("hostIPC").is_none(), "{pod}");
        let containers = pod["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 1);
        let c = &containers[0];
        assert_eq!(c["image"], format!("execprof:{}", env!("CARGO_PKG_VERSION")));
        assert_eq!(ds["metadata"]["labels"]["app.kubernetes.io/version"], env!("CARGO_PKG_VERSION"));
        let sc = &c["securityContext"];
        assert_eq!(sc["privileged"], false);
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
        // The unit's AmbientCapabilities, CAP_ prefix off.
        let unit = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../packaging/execprof-agent.service")).unwrap();
        let ambient = unit.lines().find_map(|l| l.strip_prefix("AmbientCapabilities=")).expect("the unit's capabilities");
        let mut want: Vec<&str> = ambient.split_whitespace().map(|c| c.trim_start_matches("CAP_")).collect();
        let mut added: Vec<&str> = sc["capabilities"]["add"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        want.sort();
        added.sort();
        assert_eq!(added, want, "the pod's capabilities are the unit's");
        // Every host path read-only, and each one mounted.
        let volumes = pod["volumes"].as_array().unwrap();
        let mounts = c["volumeMounts"].as_array().unwrap();
        let host_paths: Vec<&Value> = volumes.iter().filter(|v| v.get("hostPath").is_some()).collect();
        assert_eq!(host_paths.len(), 4, "{volumes:?}");
        for v in host_paths {
            let m = mounts.iter().find(|m| m["name"] == v["name"]).unwrap_or_else(|| panic!("{} is not mounted", v["name"]));
            assert_eq!(m["readOnly"], true, "{m}");
        }
        for path in ["/sys/kernel/btf", "/sys/kernel/tracing", "/sys/fs/cgroup", "/run/containerd/containerd.sock"] {
            assert!(volumes.iter().any(|v| v["hostPath"]["path"] == path), "{path} is not mounted");
        }
        // The Service selects the DaemonSet's pods on the container's port, and the
        // ServiceMonitor selects the Service and that port by name.
        let service = kind(&docs, "Service");
        let pod_labels = &ds["spec"]["template"]["metadata"]["labels"];
        for (k, v) in service["spec"]["selector"].as_object().unwrap() {
            assert_eq!(&pod_labels[k], v, "the Service's selector {k}");
        }
        let port = &service["spec"]["ports"][0];
        assert_eq!(port["port"], c["ports"][0]["containerPort"]);
        let monitors = documents("servicemonitor.yaml");
        let monitor = kind(&monitors, "ServiceMonitor");
        for (k, v) in monitor["spec"]["selector"]["matchLabels"].as_object().unwrap() {
            assert_eq!(&service["metadata"]["labels"][k], v, "the ServiceMonitor's selector {k}");
        }
        assert_eq!(monitor["spec"]["endpoints"][0]["port"], port["name"]);
        assert_eq!(monitor["metadata"]["namespace"], service["metadata"]["namespace"]);
    }
}

//! `--web-config FILE`: TLS and basic auth for the endpoint, in the Prometheus exporters'
//! format (the exporter-toolkit's web configuration file):
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt        # PEM, the chain
//!   key_file: server.key         # PEM, PKCS#8, PKCS#1 or SEC1
//!   client_auth_type: RequireAndVerifyClientCert   # optional
//!   client_ca_file: clients.crt  # with it
//!   min_version: TLS13           # optional: TLS12 (the default) or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$...       # bcrypt hashes
//! ```
//!
//! Relative paths are relative to the file's directory. An unknown key is an error, not
//! ignored: a setting that does not apply must not look as if it did.
use std::{
    collections::{BTreeMap, HashSet},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use anyhow::{Context as _, Result, anyhow, bail};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebConfigFile {
    tls_server_config: Option<TlsServerConfig>,
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsServerConfig {
    cert_file: PathBuf,
    key_file: PathBuf,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    min_version: Option<String>,
}

/// The endpoint's TLS and authentication, ready to serve.
#[derive(Clone, Default)]
pub(crate) struct WebConfig {
    /// TLS, when configured.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Basic auth, when configured.
    pub auth: Option<Arc<BasicAuth>>,
}

impl WebConfig {
    /// Reads and checks `path`: every file it names is loaded now, so a mistake is an error
    /// at start, not at the first scrape.
    pub(crate) fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading --web-config {}", path.display()))?;
        let file: WebConfigFile = serde_saphyr::from_str(&text).map_err(|e| anyhow!("--web-config {}: {e}", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let tls = file
            .tls_server_config
            .map(|t| tls_acceptor(&t, dir))
            .transpose()
            .with_context(|| format!("--web-config {}", path.display()))?;
        let auth = match file.basic_auth_users {
            Some(users) if users.is_empty() => bail!("--web-config {}: basic_auth_users lists no user", path.display()),
            Some(users) => {
                for (user, hash) in &users {
                    if user.contains(':') || !hash.starts_with("$2") {
                        bail!(
                            "--web-config {}: basic_auth_users: {user:?} needs a bcrypt hash ($2y$…, e.g. from `htpasswd -nBC 10 USER`) and a name without ':'",
                            path.display()
                        );
                    }
                }
                Some(Arc::new(BasicAuth { users, accepted: Mutex::new(HashSet::new()) }))
            }
            None => None,
        };
        Ok(Self { tls, auth })
    }
}

fn tls_acceptor(t: &TlsServerConfig, dir: &Path) -> Result<tokio_rustls::TlsAcceptor> {
    let at = |p: &Path| if p.is_absolute() { p.to_owned() } else { dir.join(p) };
    let (cert_file, key_file) = (at(&t.cert_file), at(&t.key_file));
    let certs = CertificateDer::pem_file_iter(&cert_file)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| anyhow!("tls_server_config: cert_file {}: {e}", cert_file.display()))?;
    if certs.is_empty() {
        bail!("tls_server_config: cert_file {} holds no PEM certificate", cert_file.display());
    }
    let key = PrivateKeyDer::from_pem_file(&key_file).map_err(|e| anyhow!("tls_server_config: key_file {}: {e}", key_file.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = match t.min_version.as_deref() {
        None | Some("TLS12") => &[&rustls::version::TLS13, &rustls::version::TLS12],
        Some("TLS13") => &[&rustls::version::TLS13],
        Some(v) => bail!("tls_server_config: min_version {v:?}: give TLS12 or TLS13"),
    };
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(versions)?;
    let builder = match (t.client_auth_type.as_deref().unwrap_or("NoClientCert"), &t.client_ca_file) {
        ("NoClientCert", None) => builder.with_no_client_auth(),
        (kind @ ("RequireAndVerifyClientCert" | "VerifyClientCertIfGiven"), Some(ca)) => {
            let ca = at(ca);
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(&ca)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .map_err(|e| anyhow!("tls_server_config: client_ca_file {}: {e}", ca.display()))?
            {
                roots.add(c).map_err(|e| anyhow!("tls_server_config: client_ca_file {}: {e}", ca.display()))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if kind == "VerifyClientCertIfGiven" { verifier.allow_unauthenticated() } else { verifier };
            builder.with_client_cert_verifier(verifier.build()?)
        }
        (kind, ca) => bail!(
            "tls_server_config: client_auth_type {kind:?} with{} client_ca_file: give NoClientCert without one, or RequireAndVerifyClientCert or VerifyClientCertIfGiven with one",
            if ca.is_some() { "" } else { "out" }
        ),
    };
    let mut config =
        builder.with_single_cert(certs, key).map_err(|e| anyhow!("tls_server_config: the key does not fit the certificate: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Users and their bcrypt hashes; `Authorization` values already accepted are remembered
/// (at most [`ACCEPTED_REMEMBERED`]) so a scraper's every request does not cost a bcrypt.
pub(crate) struct BasicAuth {
    users: BTreeMap<String, String>,
    accepted: Mutex<HashSet<String>>,
}

const ACCEPTED_REMEMBERED: usize = 64;

impl BasicAuth {
    /// Whether the `Authorization` header's value names a user with the right password: a
    /// bcrypt verification (tens of ms: run it off the event loop) unless remembered.
    pub(crate) fn check(&self, header: Option<&str>) -> bool {
        let Some(value) = header else { return false };
        if self.accepted.lock().unwrap_or_else(|p| p.into_inner()).contains(value) {
            return true;
        }
        let Some(encoded) = value.strip_prefix("Basic ") else { return false };
        use base64::Engine as _;
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else { return false };
        let Ok(decoded) = String::from_utf8(decoded) else { return false };
        let Some((user, password)) = decoded.split_once(':') else { return false };
        let Some(hash) = self.users.get(user) else {
            return false;
        };
        if !bcrypt::verify(password, hash).unwrap_or(false) {
            return false;
        }
        let mut accepted = self.accepted.lock().unwrap_or_else(|p| p.into_inner());
        if accepted.len() >= ACCEPTED_REMEMBERED {
            accepted.clear();
        }
        accepted.insert(value.to_owned());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn basic_auth_checks_bcrypt_hashes() {
        let dir = tempfile::tempdir().unwrap();
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let cfg = write(dir.path(), "web.yml", &format!("basic_auth_users:\n  prom: '{hash}'\n"));
        let auth = WebConfig::load(&cfg).unwrap().auth.unwrap();
        use base64::Engine as _;
        let header = |s: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(s));
        assert!(auth.check(Some(&header("prom:s3cret"))));
        assert!(auth.check(Some(&header("prom:s3cret"))), "remembered");
        assert!(!auth.check(Some(&header("prom:wrong"))));
        assert!(!auth.check(Some(&header("other:s3cret"))));
        assert!(!auth.check(Some("Bearer x")));
        assert!(!auth.check(None));
    }

    #[test]
    fn mistakes_are_errors_that_name_them() {
        let dir = tempfile::tempdir().unwrap();
        let err = |text: &str| format!("{:#}", WebConfig::load(&write(dir.path(), "w.yml", text)).err().expect("an error"));
        assert!(err("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [x]\n").contains("cipher_suites"));
        assert!(err("basic_auth_users:\n  u: plain\n").contains("bcrypt"));
        assert!(err("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n").contains("missing.crt"));
        assert!(err("http_server_config:\n  http2: true\n").contains("http_server_config"));
        assert!(WebConfig::load(&dir.path().join("absent.yml")).is_err());
    }
}

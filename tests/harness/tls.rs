//! Test certificates, made with the `openssl` command line: a CA, server
//! certificates for 127.0.0.1 (good, expired, for another host), a client
//! certificate, and a second CA that signed none of them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The files of one test PKI, in a temporary directory.
#[derive(Debug)]
pub struct Pki {
    pub dir: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl command (Debian: apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pki {
    pub fn generate() -> Pki {
        static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("redlock-pki-{}-{seq}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.as_path();
        for ca in ["ca", "other-ca"] {
            openssl(
                d,
                &[
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-days",
                    "2",
                    "-keyout",
                    &format!("{ca}.key"),
                    "-out",
                    &format!("{ca}.pem"),
                    "-subj",
                    &format!("/CN={ca}"),
                ],
            );
        }
        std::fs::write(d.join("ip.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
        std::fs::write(d.join("host.ext"), "subjectAltName=DNS:example.com\n").unwrap();
        for (name, ext) in [
            ("server", "ip.ext"),
            ("client", "ip.ext"),
            ("wronghost", "host.ext"),
        ] {
            openssl(
                d,
                &[
                    "req",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-keyout",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.csr"),
                    "-subj",
                    &format!("/CN={name}"),
                ],
            );
            openssl(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{name}.csr"),
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-extfile",
                    ext,
                    "-out",
                    &format!("{name}.pem"),
                ],
            );
        }
        // Expired: valid for one day in 2020 (openssl 3.0's x509 cannot
        // backdate; its `ca` command can).
        std::fs::write(
            d.join("ca.cnf"),
            "[ ca ]\ndefault_ca = d\n[ d ]\ndatabase = index.txt\nnew_certs_dir = .\n\
             serial = serial\ndefault_md = sha256\npolicy = p\n[ p ]\ncommonName = supplied\n",
        )
        .unwrap();
        std::fs::write(d.join("index.txt"), "").unwrap();
        std::fs::write(d.join("serial"), "01\n").unwrap();
        openssl(
            d,
            &[
                "ca",
                "-batch",
                "-config",
                "ca.cnf",
                "-cert",
                "ca.pem",
                "-keyfile",
                "ca.key",
                "-in",
                "server.csr",
                "-out",
                "expired.pem",
                "-startdate",
                "20200101000000Z",
                "-enddate",
                "20200102000000Z",
                "-extfile",
                "ip.ext",
                "-notext",
            ],
        );
        Pki { dir }
    }

    pub fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    pub fn read(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(file)).unwrap()
    }

    /// `redis-server` arguments ([`NodeOptions::tls`](super::NodeOptions))
    /// for a TLS port serving `cert` (with `server.key`, the key all server
    /// certificates share) and requiring client certificates signed by the
    /// CA.
    pub fn server_tls(&self, cert: &str) -> Vec<String> {
        let key = if cert == "wronghost.pem" {
            "wronghost.key"
        } else {
            "server.key"
        };
        vec![
            "--tls-cert-file".into(),
            self.path(cert),
            "--tls-key-file".into(),
            self.path(key),
            "--tls-ca-cert-file".into(),
            self.path("ca.pem"),
            "--tls-auth-clients".into(),
            "yes".into(),
        ]
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

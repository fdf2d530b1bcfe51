//! Real server processes for the object-store tests: an S3-compatible server (`s3s-fs`,
//! from crates.io) and a plain HTTP server with byte ranges and faults
//! (`scripts/http_store_server.py`), each on 127.0.0.1 with a port of its own.
//!
//! Readiness and request counts are read from the servers' own output, causally: a
//! server prints a line before it answers, so once a response (or a sentinel request
//! made after it) has come back, its line is in the output.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};

/// The lines so far, and whether the output ended.
type Seen = Mutex<(Vec<String>, bool)>;

/// Lines a child printed, collected by a thread.
#[derive(Clone, Default)]
pub struct Lines(Arc<(Seen, Condvar)>);

impl Lines {
    fn collect(out: impl std::io::Read + Send + 'static) -> Lines {
        let lines = Lines::default();
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let (m, cv) = &*l.0;
                m.lock().unwrap().0.push(line);
                cv.notify_all();
            }
            let (m, cv) = &*l.0;
            m.lock().unwrap().1 = true;
            cv.notify_all();
        });
        lines
    }

    /// Waits until a line satisfies `f` (or the output ends: `None`), returning it.
    pub fn wait_for(&self, f: impl Fn(&str) -> bool) -> Option<String> {
        let (m, cv) = &*self.0;
        let mut g = m.lock().unwrap();
        loop {
            if let Some(l) = g.0.iter().find(|l| f(l)) {
                return Some(l.clone());
            }
            if g.1 {
                return None;
            }
            g = cv.wait(g).unwrap();
        }
    }

    /// Every line so far.
    pub fn all(&self) -> Vec<String> {
        self.0.0.lock().unwrap().0.clone()
    }
}

/// Where `s3s-fs` is: `$DEVBUF_S3S_FS`, `$PATH`, or `~/.cargo/bin`.
pub fn s3s_fs() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("DEVBUF_S3S_FS") {
        return Some(PathBuf::from(p));
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(h) = std::env::var_os("HOME") {
        dirs.push(Path::new(&h).join(".cargo/bin"));
    }
    dirs.into_iter()
        .map(|d| d.join("s3s-fs"))
        .find(|p| p.is_file())
}

/// Whether the servers must be there (CI sets `DEVBUF_REQUIRE_SERVERS=1`): then a
/// missing server fails the test instead of skipping it.
pub fn skip(test: &str, why: &str) {
    if std::env::var("DEVBUF_REQUIRE_SERVERS").is_ok_and(|v| v == "1") {
        panic!("{test}: {why} (DEVBUF_REQUIRE_SERVERS=1)");
    }
    println!("SKIPPED {test}: {why}");
}

/// A free port on 127.0.0.1 (the OS picks it; s3s-fs takes no port 0).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub const ACCESS_KEY: &str = "AKIADEVBUFTEST";
pub const SECRET_KEY: &str = "devbuf-test-secret-9f8e7d6c";
pub const BUCKET: &str = "bkt";

/// An `s3s-fs` process serving a temporary directory, with one bucket [`BUCKET`].
pub struct S3Server {
    child: Arc<Mutex<Child>>,
    pub port: u16,
    pub root: PathBuf,
    pub lines: Lines,
}

impl S3Server {
    /// Starts one, or `None` (the test printed why it skips) when there is no `s3s-fs`.
    pub fn start(test: &str) -> Option<S3Server> {
        let Some(bin) = s3s_fs() else {
            skip(
                test,
                "no s3s-fs (cargo install s3s-fs@0.14.1 --locked --features binary, or set \
                 DEVBUF_S3S_FS)",
            );
            return None;
        };
        let root = std::env::temp_dir().join(format!("devbuf-s3-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join(BUCKET)).unwrap();
        for _attempt in 0..5 {
            let port = free_port();
            let mut child = Command::new(&bin)
                .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
                .arg(&root)
                .env("RUST_LOG", "s3s=debug,s3s_fs=info")
                .env("NO_COLOR", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
            let lines = Lines::collect(child.stdout.take().unwrap());
            if lines
                .wait_for(|l| l.contains("server is running at"))
                .is_some()
            {
                return Some(S3Server {
                    child: Arc::new(Mutex::new(child)),
                    port,
                    root,
                    lines,
                });
            }
            let _ = child.wait(); // the port was taken meanwhile: try another
        }
        panic!("s3s-fs did not start");
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Options reaching this server with the right credentials.
    pub fn options(&self) -> devbuf::zarr::object_store::ObjectStoreOptions {
        let mut o = devbuf::zarr::object_store::ObjectStoreOptions::default();
        o.config = [
            ("aws_endpoint", self.endpoint().as_str()),
            ("aws_allow_http", "true"),
            ("aws_region", "us-east-1"),
            ("aws_access_key_id", ACCESS_KEY),
            ("aws_secret_access_key", SECRET_KEY),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .to_vec();
        o
    }

    pub fn url(&self, path: &str) -> String {
        format!("s3://{BUCKET}/{path}")
    }

    /// `GetObject` requests the server saw so far, per object key; `sentinel` is a
    /// fresh key that the caller has just requested (its line marks the end).
    pub fn gets(&self, sentinel: &str) -> std::collections::BTreeMap<String, usize> {
        self.lines
            .wait_for(|l| l.contains("resolved route") && l.contains(sentinel))
            .expect("the server's output ended");
        let mut m = std::collections::BTreeMap::new();
        for l in self.lines.all() {
            if l.contains("resolved route")
                && l.contains("GetObject")
                && let Some(k) = key_of(&l)
            {
                *m.entry(k).or_insert(0) += 1;
            }
        }
        m
    }

    /// Stops the server now (as a crash would).
    pub fn kill(&self) {
        kill(&self.child);
    }

    /// A handle that stops the server from anywhere (see [`kill`]).
    pub fn killer(&self) -> Arc<Mutex<Child>> {
        self.child.clone()
    }
}

/// Stops a server process and waits for it.
pub fn kill(child: &Mutex<Child>) {
    let mut c = child.lock().unwrap_or_else(|p| p.into_inner());
    let _ = c.kill();
    let _ = c.wait();
}

/// The object key in an s3s debug line (`... key: "a/b" ...`).
fn key_of(line: &str) -> Option<String> {
    let at = line.find("key: \"")? + 6;
    let end = line[at..].find('"')?;
    Some(line[at..at + end].to_string())
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// `scripts/http_store_server.py` serving `root` read-only, with `faults`
/// (`"/path=MODE"`, see the script).
pub struct HttpServer {
    child: Child,
    pub port: u16,
    pub lines: Lines,
}

impl HttpServer {
    pub fn start(root: &Path, faults: &[&str]) -> HttpServer {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/http_store_server.py");
        let mut cmd = Command::new("python3");
        cmd.arg("-u").arg(script).arg(root).args(["--port", "0"]);
        for f in faults {
            cmd.arg("--fault").arg(f);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting python3 scripts/http_store_server.py");
        let lines = Lines::collect(child.stdout.take().unwrap());
        let first = lines
            .wait_for(|l| l.starts_with("listening on "))
            .expect("the HTTP server did not start");
        let port = first["listening on ".len()..].trim().parse().unwrap();
        HttpServer { child, port, lines }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }

    /// Requests per path so far (the server's own count).
    pub fn stats(&self) -> std::collections::BTreeMap<String, usize> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(
            s,
            "GET /__stats HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let body = &text[text.find("\r\n\r\n").unwrap() + 4..];
        serde_json::from_str(body).unwrap()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

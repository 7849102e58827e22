//! Downloads against a real local HTTP server (tests/support/server.rs): progress,
//! interruption and resume without fetching a byte twice, checksum refusal, and the named
//! errors for 404, connection refused and too little disk space.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/server.rs"]
mod server;

use std::sync::atomic::Ordering;
use std::time::Duration;

use rwkv_models::{download, Event, Options, PullError, Request};
use server::{body, Config, Server};
use sha2::{Digest, Sha256};

const LEN: usize = 1024 * 1024 + 123;

fn sha(bytes: &[u8]) -> String {
    // sha2 directly (the peer), not the crate's streaming path under test.
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn opts() -> Options {
    Options {
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(10),
        progress_every: Duration::from_millis(0),
        ..Options::default()
    }
}

fn serve(ranges: bool, delay_ms: u64, drop_after: Option<u64>) -> (Server, Vec<u8>) {
    let data = body(LEN);
    let s = Server::start(Config {
        body: data.clone(),
        ranges,
        delay: Duration::from_millis(delay_ms),
        drop_first_after: drop_after,
    });
    (s, data)
}

fn request(s: &Server, dir: &std::path::Path, sha: Option<String>) -> Request {
    Request {
        url: s.url.clone(),
        dest: dir.join("model.bin"),
        size: Some(LEN as u64),
        sha256: sha,
    }
}

#[test]
fn downloads_with_progress_and_verifies() {
    let (s, data) = serve(true, 1, None);
    let dir = tempfile::tempdir().unwrap();
    let mut events = Vec::new();
    let out = download(
        &request(&s, dir.path(), Some(sha(&data))),
        &opts(),
        &mut |e| events.push(e.clone()),
    )
    .unwrap();
    assert_eq!(std::fs::read(&out.path).unwrap(), data);
    assert!(out.verified);
    assert_eq!(out.sha256, sha(&data));
    let progress: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Progress(p) => Some(*p),
            _ => None,
        })
        .collect();
    assert!(progress.len() > 3, "progress events: {}", progress.len());
    assert!(progress.windows(2).all(|w| w[0].done <= w[1].done));
    let last = progress.last().unwrap();
    assert_eq!((last.done, last.total), (LEN as u64, Some(LEN as u64)));
    assert!(last.rate > 0.0);
    assert!(!dir.path().join("model.bin.part").exists());
    assert!(!dir.path().join("model.bin.part.json").exists());
    assert_eq!(s.served.load(Ordering::SeqCst), LEN as u64);
}

#[test]
fn connection_dropped_then_resumed_fetches_every_byte_once() {
    let cut = 300_000u64;
    let (s, data) = serve(true, 0, Some(cut));
    let dir = tempfile::tempdir().unwrap();
    let req = request(&s, dir.path(), Some(sha(&data)));
    let err = download(&req, &opts(), &mut |_| {}).unwrap_err();
    assert!(
        matches!(err, PullError::Transfer { done, .. } if done == cut),
        "{err}"
    );
    assert!(!req.dest.exists(), "nothing under the final name");
    assert_eq!(
        std::fs::metadata(dir.path().join("model.bin.part"))
            .unwrap()
            .len(),
        cut
    );

    // A fresh call (as after a restart) continues from the .part.
    let out = download(&req, &opts(), &mut |_| {}).unwrap();
    assert_eq!(out.resumed_from, cut);
    assert_eq!(std::fs::read(&req.dest).unwrap(), data);
    assert_eq!(
        s.served.load(Ordering::SeqCst),
        LEN as u64,
        "each byte served once"
    );
    let ranges = s.ranges_seen.lock().unwrap().clone();
    assert_eq!(ranges, vec![None, Some(format!("bytes={cut}-"))]);
}

#[test]
fn cancelled_download_keeps_part_and_resumes_from_it() {
    let (s, data) = serve(true, 2, None);
    let dir = tempfile::tempdir().unwrap();
    let req = request(&s, dir.path(), Some(sha(&data)));
    let o = opts();
    let flag = o.cancel.clone();
    let err = download(&req, &o, &mut |e| {
        if let Event::Progress(p) = e {
            if p.done >= 200_000 {
                flag.store(true, Ordering::SeqCst);
            }
        }
    })
    .unwrap_err();
    let kept = match err {
        PullError::Cancelled { done, .. } => done,
        e => panic!("expected Cancelled, got {e}"),
    };
    assert!(kept >= 200_000 && kept < LEN as u64);
    assert_eq!(
        std::fs::metadata(dir.path().join("model.bin.part"))
            .unwrap()
            .len(),
        kept
    );
    assert!(!req.dest.exists());

    let out = download(&req, &opts(), &mut |_| {}).unwrap();
    assert_eq!(out.resumed_from, kept);
    assert_eq!(std::fs::read(&req.dest).unwrap(), data);
    // The second response carried only the missing bytes. (The first may have pushed a
    // little more into the socket than the client read before it stopped: not counted.)
    let second = s.per_request.lock().unwrap()[1].load(Ordering::SeqCst);
    assert_eq!(second, LEN as u64 - kept);
    assert_eq!(
        s.ranges_seen.lock().unwrap()[1],
        Some(format!("bytes={kept}-"))
    );
}

#[test]
fn unfinished_downloads_are_listed_after_a_restart_and_can_be_discarded() {
    let cut = 250_000u64;
    let (s, data) = serve(true, 0, Some(cut));
    let dir = tempfile::tempdir().unwrap();
    let req = request(&s, dir.path(), Some(sha(&data)));
    assert!(download(&req, &opts(), &mut |_| {}).is_err());
    // A stray `.part` without its sidecar cannot be resumed: not listed.
    std::fs::write(dir.path().join("stray.gguf.part"), b"xx").unwrap();

    let found = rwkv_models::partials(dir.path()).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    let p = &found[0];
    assert_eq!(p.dest, req.dest);
    assert_eq!(p.done, cut);
    assert_eq!(p.sidecar.url, s.url);
    assert_eq!(p.sidecar.total, Some(LEN as u64));
    // The expected hash travels in the sidecar: a resume after a restart still checks it.
    assert_eq!(p.sidecar.sha256.as_deref(), Some(sha(&data).as_str()));

    rwkv_models::discard(&req.dest).unwrap();
    assert!(!dir.path().join("model.bin.part").exists());
    assert!(!dir.path().join("model.bin.part.json").exists());
    assert!(rwkv_models::partials(dir.path()).unwrap().is_empty());
    // A folder that does not exist holds no partial downloads.
    assert!(rwkv_models::partials(&dir.path().join("none"))
        .unwrap()
        .is_empty());
}

#[test]
fn server_without_range_support_restarts_from_zero() {
    let cut = 100_000u64;
    let (s, data) = serve(false, 0, Some(cut));
    let dir = tempfile::tempdir().unwrap();
    let req = request(&s, dir.path(), Some(sha(&data)));
    assert!(download(&req, &opts(), &mut |_| {}).is_err());
    let mut events = Vec::new();
    let out = download(&req, &opts(), &mut |e| events.push(e.clone())).unwrap();
    assert!(events.iter().any(|e| matches!(e, Event::Restarted { .. })));
    assert_eq!(out.resumed_from, 0);
    assert_eq!(std::fs::read(&req.dest).unwrap(), data);
}

#[test]
fn checksum_mismatch_is_refused_and_the_partial_removed() {
    let (s, _data) = serve(true, 0, None);
    let dir = tempfile::tempdir().unwrap();
    let wrong = "0".repeat(64);
    let req = request(&s, dir.path(), Some(wrong.clone()));
    let err = download(&req, &opts(), &mut |_| {}).unwrap_err();
    match &err {
        PullError::ChecksumMismatch { expected, got, .. } => {
            assert_eq!(expected, &wrong);
            assert_eq!(got.len(), 64);
        }
        e => panic!("expected ChecksumMismatch, got {e}"),
    }
    for f in ["model.bin", "model.bin.part", "model.bin.part.json"] {
        assert!(!dir.path().join(f).exists(), "{f} left behind");
    }
}

#[test]
fn not_found_is_named() {
    let (s, _) = serve(true, 0, None);
    let dir = tempfile::tempdir().unwrap();
    let mut req = request(&s, dir.path(), None);
    req.url = s.url.replace("model.bin", "missing.bin");
    let err = download(&req, &opts(), &mut |_| {}).unwrap_err();
    assert!(
        matches!(&err, PullError::NotFound { url } if url == &req.url),
        "{err}"
    );
    assert!(err.to_string().contains("404"));
}

#[test]
fn connection_refused_is_offline() {
    // A port that was free a moment ago: nothing listens there now.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let req = Request {
        url: format!("http://127.0.0.1:{port}/model.bin"),
        dest: dir.path().join("model.bin"),
        size: None,
        sha256: None,
    };
    let err = download(&req, &opts(), &mut |_| {}).unwrap_err();
    assert!(matches!(err, PullError::Offline { .. }), "{err}");
}

#[test]
fn not_enough_space_fails_before_any_request() {
    let (s, _) = serve(true, 0, None);
    let dir = tempfile::tempdir().unwrap();
    let mut req = request(&s, dir.path(), None);
    req.size = Some(1u64 << 50); // 1 PiB
    let err = download(&req, &opts(), &mut |_| {}).unwrap_err();
    match err {
        PullError::NotEnoughSpace {
            needed, available, ..
        } => {
            assert_eq!(needed, 1u64 << 50);
            assert!(available < needed);
        }
        e => panic!("expected NotEnoughSpace, got {e}"),
    }
    assert_eq!(s.requests(), 0);
}

//! The app's downloads (`downloads.rs`, `model_library.rs`) against real local HTTP servers
//! (`crates/models/tests/support/server.rs`: Range support, throttled, counting bytes):
//! several at once with progress, pause and a restart that finds the `.part` and resumes
//! without fetching a byte twice, cancel leaving nothing, the named errors as the view
//! gets them, and the library listing what arrived. No GPU involved.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../crates/models/tests/support/server.rs"]
mod server;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rwkv_models::Catalog;
use rwkv_studio_lib::downloads::{DownloadState, DownloadStatus, Downloads, Sink};
use rwkv_studio_lib::error::ErrorCode;
use rwkv_studio_lib::model_library::{self, Origin};
use server::{body, Config, Server};
use sha2::{Digest, Sha256};

const LEN: usize = 768 * 1024 + 77;

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn serve(delay_ms: u64) -> (Server, Vec<u8>) {
    let data = body(LEN);
    let s = Server::start(Config {
        body: data.clone(),
        ranges: true,
        delay: Duration::from_millis(delay_ms),
        drop_first_after: None,
    });
    (s, data)
}

/// A user catalog at `path` with one entry per `(name, file, url, sha)`.
fn write_catalog(path: &Path, entries: &[(&str, &str, &str, String)]) {
    let models: Vec<_> = entries
        .iter()
        .map(|(name, file, url, sha)| {
            serde_json::json!({
                "name": name, "family": "RWKV-7 test", "parameters": "0", "encoding": "gguf-q4_k_m",
                "file_name": file, "size_bytes": LEN, "sha256": sha, "urls": [url],
                "license": "Apache-2.0", "ram_bytes": null, "vram_bytes": 1000,
                "description": "test bytes", "source": "https://example.org/test"
            })
        })
        .collect();
    std::fs::write(
        path,
        serde_json::json!({ "version": 1, "models": models }).to_string(),
    )
    .unwrap();
}

/// A sink that keeps every update.
fn recorder() -> (Sink, Arc<Mutex<Vec<DownloadStatus>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    (
        Arc::new(move |s: &DownloadStatus| s2.lock().unwrap().push(s.clone())),
        seen,
    )
}

/// Waits (≤ 30 s) until the last update satisfies `ok`; returns it.
fn wait_for(
    seen: &Mutex<Vec<DownloadStatus>>,
    what: &str,
    ok: impl Fn(&DownloadStatus) -> bool,
) -> DownloadStatus {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(last) = seen.lock().unwrap().last().cloned() {
            if ok(&last) {
                return last;
            }
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn is_done(s: &DownloadStatus) -> bool {
    matches!(s.state, DownloadState::Done { .. })
}

#[test]
fn two_downloads_at_once_report_progress_and_enter_the_library() {
    // 48 chunks of 16 KiB, 10 ms apart: ≈ 0.5 s each, progress every 250 ms.
    let (a, data_a) = serve(10);
    let (b, data_b) = serve(10);
    let dir = tempfile::tempdir().unwrap();
    let user = dir.path().join("catalog.json");
    write_catalog(
        &user,
        &[
            ("model-a", "a.gguf", &a.url, sha(&data_a)),
            ("model-b", "b.gguf", &b.url, sha(&data_b)),
        ],
    );
    let lib = dir.path().join("models");
    let d = Downloads::new(lib.clone(), Some(user));
    let (sink_a, seen_a) = recorder();
    let (sink_b, seen_b) = recorder();
    d.start_entry("model-a", sink_a).unwrap();
    d.start_entry("model-b", sink_b).unwrap();
    // Both run at the same time: each has made progress before either is done.
    let both_running = Instant::now() + Duration::from_secs(30);
    loop {
        let running = |s: &Mutex<Vec<DownloadStatus>>| {
            s.lock()
                .unwrap()
                .iter()
                .any(|u| u.done > 0 && u.state == DownloadState::Running)
        };
        if running(&seen_a) && running(&seen_b) {
            break;
        }
        assert!(Instant::now() < both_running, "both downloads running");
        std::thread::sleep(Duration::from_millis(5));
    }
    let end_a = wait_for(&seen_a, "a done", is_done);
    let end_b = wait_for(&seen_b, "b done", is_done);
    for (end, data, file) in [(&end_a, &data_a, "a.gguf"), (&end_b, &data_b, "b.gguf")] {
        match &end.state {
            DownloadState::Done {
                path,
                sha256,
                verified,
            } => {
                assert!(*verified);
                assert_eq!(sha256, &sha(data));
                assert_eq!(std::fs::read(path).unwrap(), **data);
                assert!(path.ends_with(file));
            }
            s => panic!("{s:?}"),
        }
    }
    let progress = seen_a.lock().unwrap().clone();
    assert!(progress.windows(2).all(|w| w[0].done <= w[1].done));
    assert!(progress.iter().any(|s| s.rate > 0.0 && s.eta_s.is_some()));
    assert_eq!(a.served.load(Ordering::SeqCst), LEN as u64);
    // Finished downloads leave the list; the library lists both, with the catalog's facts.
    assert!(d.list().unwrap().is_empty());
    let cat = d.catalog().unwrap();
    let models = model_library::list(&lib, dir.path(), &cat).unwrap();
    let names: Vec<_> = models.iter().map(|m| m.file_name.as_str()).collect();
    assert_eq!(names, ["a.gguf", "b.gguf"]);
    assert_eq!(models[0].catalog.as_deref(), Some("model-a"));
    assert_eq!(models[0].encoding, "gguf-q4_k_m");
    assert_eq!(
        (models[0].vram_bytes, models[0].vram_estimated),
        (1000, false)
    );
    assert_eq!(models[0].origin, Origin::Downloaded);
    assert!(model_library::contains(
        &lib,
        dir.path(),
        &lib.join("a.gguf")
    ));
}

#[test]
fn paused_download_survives_a_restart_and_resumes_without_refetching() {
    // ≈ 1.2 s in all: the pause lands after the first progress update (250 ms).
    let (s, data) = serve(25);
    let dir = tempfile::tempdir().unwrap();
    let user = dir.path().join("catalog.json");
    write_catalog(&user, &[("m", "m.gguf", &s.url, sha(&data))]);
    let lib = dir.path().join("models");
    {
        let d = Downloads::new(lib.clone(), Some(user.clone()));
        let (sink, seen) = recorder();
        d.start_entry("m", sink).unwrap();
        wait_for(&seen, "100 kB", |u| u.done >= 100_000);
        d.pause("m.gguf").unwrap();
        let last = seen.lock().unwrap().last().cloned().unwrap();
        assert_eq!(last.state, DownloadState::Paused);
        assert!(last.done < LEN as u64);
    } // the app goes away
    let kept = std::fs::metadata(lib.join("m.gguf.part")).unwrap().len();

    // A new start finds the .part and offers it, paused, with its URL and hash.
    let d = Downloads::new(lib.clone(), Some(user));
    let listed = d.list().unwrap();
    assert_eq!(listed.len(), 1);
    let p = &listed[0];
    assert_eq!(
        (p.file_name.as_str(), p.name.as_deref(), p.done, p.total),
        ("m.gguf", Some("m"), kept, Some(LEN as u64))
    );
    assert_eq!(p.state, DownloadState::Paused);
    assert_eq!(p.sha256.as_deref(), Some(sha(&data).as_str()));

    let (sink, seen) = recorder();
    d.resume("m.gguf", sink).unwrap();
    let end = wait_for(&seen, "done", is_done);
    assert!(matches!(
        end.state,
        DownloadState::Done { verified: true, .. }
    ));
    assert_eq!(std::fs::read(lib.join("m.gguf")).unwrap(), data);
    let second = s.per_request.lock().unwrap()[1].load(Ordering::SeqCst);
    assert_eq!(second, LEN as u64 - kept, "only the missing bytes");
    assert_eq!(
        s.ranges_seen.lock().unwrap()[1],
        Some(format!("bytes={kept}-"))
    );
    assert!(!lib.join("m.gguf.part").exists());
    assert!(d.list().unwrap().is_empty());
}

#[test]
fn cancel_leaves_nothing_behind() {
    let (s, data) = serve(25);
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("models");
    let d = Downloads::new(lib.clone(), Some(dir.path().join("none.json")));
    let (sink, seen) = recorder();
    let st = d.start_url(&s.url, Some(sha(&data)), sink).unwrap();
    assert_eq!(st.file_name, "model.bin");
    wait_for(&seen, "100 kB", |u| u.done >= 100_000);
    // A second start of the same file while it runs is refused, named.
    let (sink2, _) = recorder();
    let e = d.start_url(&s.url, None, sink2).unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert!(e.message.contains("model.bin"));
    d.cancel("model.bin").unwrap();
    assert_eq!(
        seen.lock().unwrap().last().unwrap().state,
        DownloadState::Cancelled
    );
    for f in ["model.bin", "model.bin.part", "model.bin.part.json"] {
        assert!(!lib.join(f).exists(), "{f} left behind");
    }
    assert!(d.list().unwrap().is_empty());
    // Only a plain file name of the library folder names a download.
    assert!(d.cancel("../evil").is_err());
}

#[test]
fn failures_arrive_as_named_errors() {
    let (s, _data) = serve(0);
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("models");
    let d = Downloads::new(lib.clone(), Some(dir.path().join("none.json")));

    let failed = |url: &str, sha: Option<String>| {
        let (sink, seen) = recorder();
        d.start_url(url, sha, sink).unwrap();
        let end = wait_for(&seen, "failure", |u| {
            matches!(u.state, DownloadState::Failed { .. })
        });
        match end.state {
            DownloadState::Failed { error, resumable } => (error, resumable),
            s => panic!("{s:?}"),
        }
    };
    // A wrong checksum: refused, the partial file removed, nothing to resume.
    let (e, resumable) = failed(&s.url, Some("0".repeat(64)));
    assert_eq!(e.code, ErrorCode::Checksum);
    assert!(e.message.contains("model.bin"), "{}", e.message);
    assert!(!resumable);
    for f in ["model.bin", "model.bin.part", "model.bin.part.json"] {
        assert!(!lib.join(f).exists(), "{f} left behind");
    }
    // 404, named with its URL.
    let missing = s.url.replace("model.bin", "missing.gguf");
    let (e, _) = failed(&missing, None);
    assert_eq!(e.code, ErrorCode::Download);
    assert_eq!(e.details.as_ref().unwrap()["status"], 404);
    assert!(e.message.contains(&missing));
    // Connection refused: offline.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (e, _) = failed(&format!("http://127.0.0.1:{port}/x.gguf"), None);
    assert_eq!(e.code, ErrorCode::Offline);
    // Refused before any thread starts: not a URL, a bad hash, an unknown catalog name.
    let (sink, _) = recorder();
    let e = d
        .start_url("file:///etc/passwd", None, sink.clone())
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Catalog);
    let e = d
        .start_url(&s.url, Some("xyz".into()), sink.clone())
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Catalog);
    let e = d.start_entry("no-such-model", sink).unwrap_err();
    assert_eq!(e.code, ErrorCode::Catalog);
}

#[test]
fn added_files_are_listed_kept_on_remove_and_downloaded_ones_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("models");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("d.safetensors"), b"12345").unwrap();
    std::fs::write(lib.join("d.safetensors.part"), b"1").unwrap();
    std::fs::write(lib.join("notes.txt"), b"x").unwrap();
    let elsewhere = dir.path().join("mine.gguf");
    std::fs::write(&elsewhere, vec![0u8; 1000]).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    assert!(model_library::add(&data, &dir.path().join("readme.txt")).is_err());
    model_library::add(&data, &elsewhere).unwrap();
    model_library::add(&data, &elsewhere).unwrap();
    let cat = Catalog::default();
    let models = model_library::list(&lib, &data, &cat).unwrap();
    let rows: Vec<_> = models
        .iter()
        .map(|m| (m.file_name.as_str(), m.origin, m.bytes, m.encoding.as_str()))
        .collect();
    assert_eq!(
        rows,
        [
            ("d.safetensors", Origin::Downloaded, 5, "safetensors"),
            ("mine.gguf", Origin::Added, 1000, "gguf"),
        ]
    );
    // No catalog figure: the size-based estimate, said.
    assert_eq!(
        (models[1].vram_bytes, models[1].vram_estimated),
        (1100, true)
    );
    assert!(model_library::contains(&lib, &data, &elsewhere));
    assert!(!model_library::contains(
        &lib,
        &data,
        &dir.path().join("other.gguf")
    ));
    // Removing an added file forgets it; the file stays. A downloaded one is deleted.
    assert!(!model_library::remove(&lib, &data, &elsewhere).unwrap());
    assert!(elsewhere.exists());
    assert!(model_library::remove(&lib, &data, &lib.join("d.safetensors")).unwrap());
    assert!(!lib.join("d.safetensors").exists());
    assert!(model_library::list(&lib, &data, &cat).unwrap().is_empty());
    let e = model_library::remove(&lib, &data, &elsewhere).unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
}

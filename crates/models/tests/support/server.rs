//! A tiny HTTP/1.1 file server for the download tests (std only): serves one file at
//! `/model.bin` with or without Range support, throttled, optionally dropping the first
//! connection after N body bytes, and counts every body byte it writes.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct Config {
    pub body: Vec<u8>,
    pub ranges: bool,
    /// Sleep between two 16 KiB body chunks.
    pub delay: Duration,
    /// Close the first response's connection after this many body bytes.
    pub drop_first_after: Option<u64>,
}

pub struct Server {
    pub url: String,
    /// Body bytes written to sockets, all responses together.
    pub served: Arc<AtomicU64>,
    /// The `Range` header of each request (`None`: no range asked).
    pub ranges_seen: Arc<Mutex<Vec<Option<String>>>>,
    /// Body bytes written by each response, in request order.
    pub per_request: Arc<Mutex<Vec<Arc<AtomicU64>>>>,
}

impl Server {
    pub fn start(cfg: Config) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let served = Arc::new(AtomicU64::new(0));
        let ranges_seen = Arc::new(Mutex::new(Vec::new()));
        let per_request = Arc::new(Mutex::new(Vec::new()));
        let cfg = Arc::new(cfg);
        let drop_once = Arc::new(AtomicU64::new(cfg.drop_first_after.unwrap_or(u64::MAX)));
        let (s, r, pr) = (served.clone(), ranges_seen.clone(), per_request.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (cfg, s, r, d) = (cfg.clone(), s.clone(), r.clone(), drop_once.clone());
                let pr = pr.clone();
                std::thread::spawn(move || {
                    let _ = handle(stream, &cfg, &s, &r, &pr, &d);
                });
            }
        });
        Server {
            url: format!("http://{addr}/model.bin"),
            served,
            ranges_seen,
            per_request,
        }
    }

    pub fn requests(&self) -> usize {
        self.ranges_seen.lock().unwrap().len()
    }
}

fn handle(
    mut stream: TcpStream,
    cfg: &Config,
    served: &AtomicU64,
    ranges_seen: &Mutex<Vec<Option<String>>>,
    per_request: &Mutex<Vec<Arc<AtomicU64>>>,
    drop_once: &AtomicU64,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut range = None;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.trim().eq_ignore_ascii_case("range") {
                range = Some(v.trim().to_string());
            }
        }
    }
    ranges_seen.lock().unwrap().push(range.clone());
    let mine = Arc::new(AtomicU64::new(0));
    per_request.lock().unwrap().push(mine.clone());
    if path != "/model.bin" {
        stream.write_all(
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )?;
        return Ok(());
    }
    let len = cfg.body.len() as u64;
    let start = match (&range, cfg.ranges) {
        (Some(r), true) => r
            .strip_prefix("bytes=")
            .and_then(|r| r.strip_suffix('-'))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0),
        _ => 0,
    };
    let head = if range.is_some() && cfg.ranges {
        format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{}/{len}\r\nContent-Length: {}\r\nETag: \"v1\"\r\nAccept-Ranges: bytes\r\nConnection: close\r\n\r\n",
            len - 1,
            len - start
        )
    } else {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nETag: \"v1\"\r\nConnection: close\r\n\r\n"
        )
    };
    stream.write_all(head.as_bytes())?;
    // The first response may be cut after `drop_once` bytes (then never again).
    let limit = drop_once.swap(u64::MAX, Ordering::SeqCst);
    let mut sent = 0u64;
    for chunk in cfg.body[start as usize..].chunks(16 * 1024) {
        let room = limit.saturating_sub(sent);
        let part = &chunk[..chunk.len().min(room as usize)];
        stream.write_all(part)?;
        served.fetch_add(part.len() as u64, Ordering::SeqCst);
        mine.fetch_add(part.len() as u64, Ordering::SeqCst);
        sent += part.len() as u64;
        if sent >= limit {
            return Ok(()); // drops the connection mid-body
        }
        std::thread::sleep(cfg.delay);
    }
    Ok(())
}

/// Deterministic test bytes (xorshift), `n` long.
pub fn body(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

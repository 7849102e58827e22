//! Ctrl-C in the CLI (issue 26): `rwkv generate` asked for 100,000 tokens is sent SIGINT
//! once text is streaming; it must stop at the next token, print its stats with
//! `stop: Cancelled` and exit with status 130 — within a deadline, so a lost interrupt
//! fails this test in seconds instead of generating for minutes. The child is started
//! with SIGINT ignored (as a backgrounded job of a non-interactive shell inherits it),
//! which the CLI's handler must override. Unix only (signals).
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long the child may take to stop after SIGINT: one decode step of the tiny model
/// is milliseconds on lavapipe; 30 s leaves room for a machine busy with other work.
const STOP_DEADLINE: Duration = Duration::from_secs(30);
/// How long the model may take to load and stream its first text.
const START_DEADLINE: Duration = Duration::from_secs(120);

mod support;

use support::tiny;

/// Kills the child if the test fails before it ends.
struct Reap(Child);
impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sigint(pid: u32) {
    // SAFETY: kill(2) with a valid pid and signal number has no memory effects.
    let r = unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) };
    assert_eq!(r, 0, "kill(SIGINT) failed");
}

#[test]
fn sigint_stops_a_long_generation_with_stats_and_status_130() {
    let mut cmd = support::rwkv_cmd();
    cmd.args(["generate", "--model"])
        .arg(tiny())
        .args([
            "--prompt",
            "Once upon a time",
            "-n",
            "100000",
            "--seed",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: signal(2) is async-signal-safe, as pre_exec requires.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = Reap(cmd.spawn().unwrap());
    let pid = child.0.id();

    // Wait for generated text beyond the echoed prompt (stdout read on a thread so the
    // wait has a deadline).
    let mut stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<usize>();
    let reader = std::thread::spawn(move || {
        let mut total = 0usize;
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            total += n;
            let _ = tx.send(total);
        }
        total
    });
    let prompt_len = "Once upon a time".len();
    let t0 = Instant::now();
    loop {
        match rx.recv_timeout(START_DEADLINE.saturating_sub(t0.elapsed())) {
            Ok(n) if n > prompt_len + 16 => break,
            Ok(_) => {}
            Err(_) => panic!("no generated text within {START_DEADLINE:?}"),
        }
    }

    sigint(pid);
    let t1 = Instant::now();
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            t1.elapsed() < STOP_DEADLINE,
            "rwkv generate still running {STOP_DEADLINE:?} after SIGINT: the interrupt was lost"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let printed = reader.join().unwrap();
    assert_eq!(
        status.code(),
        Some(130),
        "exit status after SIGINT; stderr:\n{err}"
    );
    assert!(
        err.contains("stop: Cancelled"),
        "the stats name the cancellation; stderr:\n{err}"
    );
    // Far fewer than the 100,000 tokens asked for came out.
    assert!(printed < 100_000, "{printed} bytes printed");
}

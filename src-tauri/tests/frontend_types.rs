//! The frontend's copies of the backend's wire enums are generated, not written by hand:
//! `src/lib/wire.gen.ts` holds the `ErrorCode` union (every `AppError.code`, from
//! `error.rs`) and the `StopReason` union (`ReplyStats.stop`, the engine's reasons by their
//! serde names, `store::STOP_REASONS`). This test renders them and fails when the file is
//! not what they render to; `RWKV_WRITE_WIRE_TYPES=1 cargo test -p rwkv-studio --test
//! frontend_types` writes it. It also holds docs/app.md's "Error codes" table to exactly
//! the codes of `ErrorCode`. No GPU involved.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rwkv_studio_lib::error::ErrorCode;
use rwkv_studio_lib::store::{stop_reason, STOP_REASONS};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A doc comment as one line (its lines joined by single spaces).
fn one_line(doc: &str) -> String {
    doc.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What `src/lib/wire.gen.ts` must hold.
fn render() -> String {
    let codes: Vec<String> = ErrorCode::ALL
        .iter()
        .map(|c| c.as_str().to_string())
        .collect();
    let stops: Vec<String> = STOP_REASONS.into_iter().map(stop_reason::name).collect();
    let mut out = String::from(
        "// Generated from the backend's enums by src-tauri/tests/frontend_types.rs: do not edit.\n\
         // Regenerate: RWKV_WRITE_WIRE_TYPES=1 cargo test -p rwkv-studio --test frontend_types\n\
         \n\
         /** `AppError.code`: what went wrong (`ErrorCode` in src-tauri/src/error.rs; docs/app.md). */\n\
         export type ErrorCode =\n",
    );
    for c in ErrorCode::ALL {
        out.push_str(&format!(
            "  /** {} */\n  | '{}'\n",
            one_line(c.doc()),
            c.as_str()
        ));
    }
    out.pop();
    out.push_str(";\n\n/** Every `ErrorCode`, in the backend's order. */\n");
    out.push_str(&format!(
        "export const ERROR_CODES: readonly ErrorCode[] = [{}];\n\n",
        quoted(&codes)
    ));
    out.push_str(
        "/** Why a reply ended: `ReplyStats.stop` (`rwkv_engine::StopReason`, by its serde names). */\n",
    );
    out.push_str(&format!(
        "export type StopReason = {};\n\n",
        stops
            .iter()
            .map(|n| format!("'{n}'"))
            .collect::<Vec<_>>()
            .join(" | ")
    ));
    out.push_str("/** Every `StopReason`, in the engine's order. */\n");
    out.push_str(&format!(
        "export const STOP_REASONS: readonly StopReason[] = [{}];\n",
        quoted(&stops)
    ));
    out
}

#[test]
fn the_frontends_wire_types_are_generated_from_the_backend() {
    let path = repo().join("src/lib/wire.gen.ts");
    let want = render();
    if std::env::var_os("RWKV_WRITE_WIRE_TYPES").is_some() {
        std::fs::write(&path, &want).expect("write src/lib/wire.gen.ts");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is not what the backend's enums render to; regenerate it with \
         RWKV_WRITE_WIRE_TYPES=1 cargo test -p rwkv-studio --test frontend_types\n\
         --- expected ---\n{want}",
        path.display()
    );
}

#[test]
fn docs_list_every_error_code() {
    let doc = std::fs::read_to_string(repo().join("docs/app.md")).expect("docs/app.md");
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Error codes"))
        .expect("docs/app.md has a section `## Error codes`");
    // Table rows `| `code` | … |`.
    let listed: BTreeSet<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .collect();
    let codes: BTreeSet<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(
        listed, codes,
        "docs/app.md's error-code table must list exactly the codes of `ErrorCode`"
    );
}

//! Benchmark reports: the JSON every run writes, and `benchmarks.md` sections grouped by
//! title (same-title runs form a before/after table).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::quality::Quality;

/// A figure with its spread over repeats.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Figure {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// The first sample after the load (the untimed warm-up run, kept apart from the
    /// median): what a user's first prompt after loading a model gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<f64>,
}

impl Figure {
    /// Median, min and max of `v` (empty → zeros).
    pub fn of(v: &[f64]) -> Figure {
        if v.is_empty() {
            return Figure::default();
        }
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        let mid = s.len() / 2;
        let median = if s.len() % 2 == 1 {
            s[mid]
        } else {
            (s[mid - 1] + s[mid]) / 2.0
        };
        Figure {
            median,
            min: s[0],
            max: s[s.len() - 1],
            first: None,
        }
    }

    /// [`Figure::of`] the steady samples `v`, with `first`, the first sample after the
    /// load, beside them.
    pub fn with_first(v: &[f64], first: Option<f64>) -> Figure {
        Figure {
            first,
            ..Figure::of(v)
        }
    }

    /// `[min – max]` and, where recorded, the first sample and how far it is from the
    /// median (%), for the text report.
    pub fn spread(&self) -> String {
        let first = self.first.map_or(String::new(), |f| {
            let off = if self.median != 0.0 {
                100.0 * (f / self.median - 1.0)
            } else {
                0.0
            };
            format!(", first {f:.1} ({off:+.0} %)")
        });
        format!(" [{:.1} – {:.1}{first}]", self.min, self.max)
    }
}

/// Model facts in a report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelFacts {
    pub path: String,
    pub n_layer: usize,
    pub n_embd: usize,
    /// Encodings on the GPU with tensor counts, e.g. `["25×Q4_K", "24×F16"]`.
    pub types: Vec<String>,
    pub file_bytes: u64,
    /// First 16 hex digits of the file's SHA-256, where the run was given it (the same
    /// file as the peers': `rwkv bench --file-sha256`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// One benchmark run. The flat keys are the stable interface every script reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchReport {
    pub title: String,
    pub change: String,
    pub date: String,
    pub model: ModelFacts,
    pub adapter: String,
    pub backend: String,
    pub driver: String,
    /// GPU features the kernels used (`f16 subgroups coopmat …`).
    #[serde(default)]
    pub features: String,
    pub commit: String,
    pub command: String,
    /// Call → GPU-ready, page cache warm (median), ms.
    pub load_ms: f64,
    /// After dropping the file's pages (posix_fadvise DONTNEED), ms; null where not allowed.
    pub load_cold_ms: Option<f64>,
    /// Call → GPU-ready in a fresh process with empty pipeline caches (the driver's and
    /// ours): what a new user's first run pays, ms (`rwkv bench --first-run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_first_run_ms: Option<f64>,
    pub ttft_ms: f64,
    /// Prompt length → median prefill tok/s.
    pub prefill_tok_s: BTreeMap<String, f64>,
    pub decode_tok_s: f64,
    pub doc_state_ms: f64,
    pub fields_ms: f64,
    pub tokenize_us: f64,
    pub gpu_mem_mib: f64,
    pub quality: Option<Quality>,
    /// Spreads: name → figure (load_ms, prefill_<len>, decode_tok_s, …).
    pub figures: BTreeMap<String, Figure>,
    /// Figures of peers run in the same command (`web-rwkv`: {…}).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub peer: BTreeMap<String, serde_json::Value>,
    /// LoRA adapters applied to every measured pass (`name ×scale (rank r)`); empty: the
    /// base model. Quality is always the base's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lora: Vec<String>,
    /// The initial-state file every measured sequence started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_state: Option<String>,
}

impl BenchReport {
    /// One row of the markdown table.
    pub fn md_row(&self) -> String {
        let pre: Vec<String> = self
            .prefill_tok_s
            .iter()
            .map(|(k, v)| format!("{k}: {v:.0}"))
            .collect();
        let q = match &self.quality {
            Some(q) if q.pass => format!("PASS (Δ {:.1e})", q.max_abs),
            Some(q) => format!("**FAIL** (top1 {}, Δ {:.2e})", q.top1, q.max_abs),
            None => "—".into(),
        };
        let peer = self
            .peer
            .get("web-rwkv")
            .map(|p| {
                let pf = p
                    .get("prefill_tok_s")
                    .and_then(|v| v.get("512"))
                    .and_then(|v| v.as_f64());
                let dc = p.get("decode_tok_s").and_then(|v| v.as_f64());
                format!(
                    "prefill512 {} / decode {}",
                    pf.map_or("—".into(), |v| format!("{v:.0}")),
                    dc.map_or("—".into(), |v| format!("{v:.1}"))
                )
            })
            .unwrap_or_else(|| "—".into());
        format!(
            "| {} | {} | {} | {} | {:.0} | {:.1} | {} | {:.1} | {:.1} | {:.1} | {:.0} | {} | {} | `{}` |",
            self.date,
            self.change,
            self.model.path.rsplit('/').next().unwrap_or(&self.model.path),
            self.adapter,
            self.load_ms,
            self.ttft_ms,
            pre.join(", "),
            self.decode_tok_s,
            self.doc_state_ms,
            self.fields_ms,
            self.gpu_mem_mib,
            q,
            peer,
            self.commit
        )
    }

    /// Appends this run to `path`, under `## <title>` (a new section with its table
    /// header if the title is new; else the row joins the title's table).
    pub fn append_markdown(&self, path: &Path) -> std::io::Result<()> {
        let text = std::fs::read_to_string(path).unwrap_or_else(|_| "# Benchmarks\n\nWritten by `rwkv bench`; one section per `--title`, one row per run.\n".into());
        let header = format!("## {}", self.title);
        let table_head = "| date | change | model | adapter | load ms | TTFT ms | prefill tok/s | decode tok/s | doc state ms | fields ms | GPU MiB | quality | web-rwkv (same command) | commit |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|";
        let row = self.md_row();
        let out = if let Some(pos) = text.find(&format!("\n{header}\n")) {
            // Insert after the last table row of this section.
            let start = pos + header.len() + 2;
            let rest = &text[start..];
            let end = rest.find("\n## ").map_or(text.len(), |e| start + e);
            let section = text[start..end].trim_end();
            format!(
                "{}\n{}\n{}\n{}",
                &text[..start].trim_end(),
                section,
                row,
                &text[end..]
            )
        } else {
            format!("{}\n\n{header}\n\n{table_head}\n{row}\n", text.trim_end())
        };
        let mut f = std::fs::File::create(path)?;
        f.write_all(out.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::Figure;

    #[test]
    fn the_first_sample_is_kept_apart_from_the_median() {
        // A slow first run after the load (a cold pipeline) must not move the median,
        // and the report must show it beside the steady figures.
        let f = Figure::with_first(&[100.0, 104.0, 96.0], Some(50.0));
        assert_eq!(
            (f.median, f.min, f.max, f.first),
            (100.0, 96.0, 104.0, Some(50.0))
        );
        assert_eq!(f.spread(), " [96.0 – 104.0, first 50.0 (-50 %)]");
        assert_eq!(Figure::of(&[1.0, 3.0]).spread(), " [1.0 – 3.0]");
        // Older reports (no `first`) still read.
        let old: Figure = serde_json::from_str(r#"{"median":1,"min":1,"max":1}"#).unwrap();
        assert_eq!(old.first, None);
    }
}

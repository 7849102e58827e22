//! SVG charts with `plotters`, the one chart code path of the CLI and the app's dashboard.
//!
//! Sized for where they are seen: [`WIDTH`] SVG pixels wide, about the width of a
//! dashboard panel at the app's default window (1280 × 820: two panels of ≈ 486 px), so
//! the SVG is shown at nearly 1:1 and its text keeps its size: tick labels and axis
//! titles [`TEXT_PX`] px, captions larger. Every axis has a title with its unit; history
//! runs are named by their title.

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use rwkv_engine::profile::ProfileReport;

use crate::report::BenchReport;

const FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");

/// Width of every chart, SVG pixels.
pub const WIDTH: u32 = 500;
/// Font size of tick labels and axis titles as written in the SVG, pixels.
pub const TEXT_PX: f64 = 12.5;
/// Font size of captions in the SVG, pixels.
const CAPTION_PX: f64 = 14.5;
/// Characters of a run title on the x axis (longer titles end in `…`).
const TITLE_CHARS: usize = 12;

/// plotters' SVG backend writes `font-size` = the style's size / 1.24; these are the style
/// sizes that give [`TEXT_PX`] and [`CAPTION_PX`].
fn text_style() -> (&'static str, f64) {
    ("sans-serif", TEXT_PX * 1.24)
}

fn caption_style() -> (&'static str, f64) {
    ("sans-serif", CAPTION_PX * 1.24)
}

fn fonts() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// One figure of a report, for a history panel.
type Metric = Box<dyn Fn(&BenchReport) -> f64>;

type ChartResult = Result<(), Box<dyn std::error::Error>>;

fn render(
    w: u32,
    h: u32,
    draw: impl FnOnce(DrawingArea<SVGBackend, plotters::coord::Shift>) -> ChartResult,
) -> String {
    fonts();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
        if root.fill(&WHITE).is_err() {
            return String::new();
        }
        if let Err(e) = draw(root.clone()) {
            return format!("<svg xmlns='http://www.w3.org/2000/svg'><text x='10' y='20'>chart error: {e}</text></svg>");
        }
        let _ = root.present();
    }
    svg
}

/// A tick value with as many decimals as its size needs (no "250.0").
fn tick(v: f64) -> String {
    if v.abs() >= 10.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A run's name on the x axis: its title (else its change note), shortened.
fn run_name(r: &BenchReport) -> String {
    let name = if r.title.trim().is_empty() {
        r.change.trim()
    } else {
        r.title.trim()
    };
    if name.chars().count() > TITLE_CHARS {
        let mut s: String = name.chars().take(TITLE_CHARS - 1).collect();
        s.push('…');
        s
    } else {
        name.to_string()
    }
}

/// History of runs (in order), one panel each: load → GPU-ready (ms), prefill of the
/// longest prompt (tok/s), decode (tok/s); runs on the x axis by title.
pub fn history_svg(runs: &[BenchReport]) -> String {
    let panel_h = 200;
    render(WIDTH, 3 * panel_h, |root| {
        let panels = root.split_evenly((3, 1));
        let series: [(&str, &str, Metric); 3] = [
            ("Load → GPU-ready", "time (ms)", Box::new(|r| r.load_ms)),
            (
                "Prefill, longest prompt",
                "speed (tok/s)",
                Box::new(|r| r.prefill_tok_s.values().last().copied().unwrap_or(0.0)),
            ),
            ("Decode", "speed (tok/s)", Box::new(|r| r.decode_tok_s)),
        ];
        let n = runs.len().max(1);
        for (panel, (caption, y_desc, f)) in panels.iter().zip(series.iter()) {
            let ys: Vec<f64> = runs.iter().map(f).collect();
            let top = ys.iter().copied().fold(0.0, f64::max).max(1e-9) * 1.2;
            let mut chart = ChartBuilder::on(panel)
                .caption(*caption, caption_style())
                .margin(6)
                .margin_right(14)
                .x_label_area_size(42)
                .y_label_area_size(62)
                // One segment per run: plotters' integer ranges include their end.
                .build_cartesian_2d((0usize..n - 1).into_segmented(), 0f64..top)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(n.min(6))
                .y_labels(4)
                .x_desc("run (title)")
                .y_desc(*y_desc)
                .x_label_formatter(&|v| match v {
                    SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                        runs.get(*i).map_or(String::new(), run_name)
                    }
                    SegmentValue::Last => String::new(),
                })
                .y_label_formatter(&|v| tick(*v))
                .label_style(text_style())
                .axis_desc_style(text_style())
                .draw()?;
            let pts = || {
                ys.iter()
                    .enumerate()
                    .map(|(i, &y)| (SegmentValue::CenterOf(i), y))
            };
            chart.draw_series(LineSeries::new(pts(), BLUE.stroke_width(2)))?;
            chart.draw_series(pts().map(|p| Circle::new(p, 4, BLUE.filled())))?;
        }
        Ok(())
    })
}

/// Per-op GPU time of one pass (top 16 ops), horizontal bars, in µs (ms when the
/// largest op takes 10 ms or more).
pub fn profile_svg(p: &ProfileReport) -> String {
    let ops: Vec<_> = p.by_op.iter().take(16).collect();
    let n = ops.len().max(1);
    let h = 110 + 24 * n as u32;
    let max_us = ops.iter().map(|t| t.ns / 1e3).fold(0.0, f64::max);
    let (unit, per_ns) = if max_us >= 1e4 {
        ("ms", 1e-6)
    } else {
        ("µs", 1e-3)
    };
    render(WIDTH, h, |root| {
        let top = (max_us * 1e3 * per_ns).max(1e-9) * 1.1;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "GPU time per op, {}-token pass: {} {unit} total",
                    p.tokens,
                    tick(p.gpu_ns * per_ns)
                ),
                caption_style(),
            )
            .margin(8)
            .margin_right(18)
            .x_label_area_size(46)
            .y_label_area_size(118)
            .build_cartesian_2d(0f64..top, 0usize..n)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            .x_labels(5)
            .y_label_formatter(&|i| ops.get(*i).map_or(String::new(), |t| t.name.clone()))
            .x_label_formatter(&|v| tick(*v))
            .x_desc(format!("GPU time ({unit})"))
            .label_style(text_style())
            .axis_desc_style(text_style())
            .draw()?;
        chart.draw_series(ops.iter().enumerate().map(|(i, t)| {
            Rectangle::new(
                [(0.0, i), (t.ns * per_ns, i + 1)],
                RGBColor(66, 120, 200).filled(),
            )
        }))?;
        Ok(())
    })
}

/// Prefill tok/s against prompt length for one run.
pub fn prefill_svg(r: &BenchReport) -> String {
    let pts: Vec<(f64, f64)> = r
        .prefill_tok_s
        .iter()
        .filter_map(|(k, v)| k.parse::<f64>().ok().map(|x| (x, *v)))
        .collect();
    render(WIDTH, 300, |root| {
        let xmax = pts.iter().map(|p| p.0).fold(1.0, f64::max) * 1.1;
        let ymax = pts.iter().map(|p| p.1).fold(1e-9, f64::max) * 1.15;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("Prefill speed by prompt length: {}", run_name(r)),
                caption_style(),
            )
            .margin(8)
            .margin_right(18)
            .x_label_area_size(46)
            .y_label_area_size(62)
            .build_cartesian_2d(0f64..xmax, 0f64..ymax)?;
        chart
            .configure_mesh()
            .x_labels(5)
            .y_labels(5)
            .x_desc("prompt length (tokens)")
            .y_desc("speed (tok/s)")
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .label_style(text_style())
            .axis_desc_style(text_style())
            .draw()?;
        chart.draw_series(LineSeries::new(pts.iter().copied(), BLUE.stroke_width(2)))?;
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, BLUE.filled())))?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `font-size="…"` in an SVG.
    fn font_sizes(svg: &str) -> Vec<f64> {
        svg.split("font-size=\"")
            .skip(1)
            .filter_map(|s| s.split('"').next()?.parse().ok())
            .collect()
    }

    /// The content of every `<text>` element, trimmed.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let body = t.split_once('>')?.1;
                Some(body.split("</text>").next()?.trim().to_string())
            })
            .collect()
    }

    fn report(title: &str, load_ms: f64) -> BenchReport {
        let mut r: BenchReport = serde_json::from_value(serde_json::json!({
            "title": title, "change": "", "date": "2026-01-01",
            "model": { "path": "m.gguf", "n_layer": 2, "n_embd": 128, "types": [], "file_bytes": 1 },
            "adapter": "a", "backend": "Vulkan", "driver": "d", "features": "", "commit": "c",
            "command": "", "load_ms": load_ms, "ttft_ms": 1.0, "prefill_tok_s": { "64": 300.0 },
            "decode_tok_s": 20.0, "doc_state_ms": 1.0, "fields_ms": 1.0, "tokenize_us": 1.0,
            "gpu_mem_mib": 1.0, "figures": {}, "peer": {}
        }))
        .unwrap_or_else(|e| panic!("report json: {e}"));
        r.title = title.to_string();
        r
    }

    #[test]
    fn history_names_runs_by_title_with_units_and_readable_text() {
        let runs = [
            report("baseline", 220.0),
            report("a very long title of a change", 180.0),
        ];
        let svg = history_svg(&runs);
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
        assert!(svg.contains(&format!("width=\"{WIDTH}\"")));
        let t = texts(&svg);
        let has = |s: &str| t.iter().any(|x| x == s);
        assert!(has("baseline"), "run titles label the x axis: {t:?}");
        assert!(has("a very long…"), "long titles are shortened: {t:?}");
        for unit in ["time (ms)", "speed (tok/s)", "run (title)"] {
            assert!(has(unit), "axis title {unit:?} missing: {t:?}");
        }
        let sizes = font_sizes(&svg);
        assert!(!sizes.is_empty());
        // Shown at ≥ 460 px wide (the app's default window), 12 SVG px stay ≥ 11 px.
        let min = sizes.iter().copied().fold(f64::MAX, f64::min);
        assert!(min >= 12.0, "smallest text {min} px: {sizes:?}");
    }

    #[test]
    fn profile_names_ops_with_a_unit_and_readable_text() {
        let op = |name: &str, ns: f64| rwkv_engine::profile::Total {
            name: name.into(),
            ns,
            percent: 0.0,
            dispatches: 1,
        };
        let p = ProfileReport {
            tokens: 64,
            method: "timestamps".into(),
            dispatches: Vec::new(),
            by_op: vec![op("ffn.key", 90e6), op("att.receptance", 30e6)],
            by_layer: Vec::new(),
            gpu_ns: 120e6,
            encode_ms: 0.0,
            submit_ms: 0.0,
            wait_ms: 0.0,
        };
        let svg = profile_svg(&p);
        let t = texts(&svg);
        let has = |s: &str| t.iter().any(|x| x == s);
        assert!(has("att.receptance") && has("ffn.key"), "ops named: {t:?}");
        // 90 ms for the largest op: the axis is in ms, the caption totals 120 ms.
        assert!(has("GPU time (ms)"), "axis title with its unit: {t:?}");
        assert!(t.iter().any(|x| x.ends_with("120 ms total")), "{t:?}");
        let min = font_sizes(&svg).into_iter().fold(f64::MAX, f64::min);
        assert!(min >= 12.0, "smallest text {min} px");
    }

    #[test]
    fn tick_labels_drop_needless_decimals() {
        assert_eq!(tick(250.0), "250");
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(2.5), "2.5");
        assert_eq!(tick(5.0), "5");
        assert_eq!(tick(0.126), "0.13");
    }
}

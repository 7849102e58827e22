//! SVG charts with `plotters`, the one chart code path of the CLI and the app's dashboard.

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use rwkv_engine::profile::ProfileReport;

use crate::report::BenchReport;

const FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");

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

/// History of runs (in order): load ms, prefill tok/s (longest prompt), decode tok/s.
pub fn history_svg(runs: &[BenchReport]) -> String {
    render(900, 720, |root| {
        let panels = root.split_evenly((3, 1));
        let series: [(&str, Metric); 3] = [
            ("load → GPU-ready, ms", Box::new(|r| r.load_ms)),
            (
                "prefill, tok/s (longest prompt)",
                Box::new(|r| r.prefill_tok_s.values().last().copied().unwrap_or(0.0)),
            ),
            ("decode, tok/s", Box::new(|r| r.decode_tok_s)),
        ];
        for (panel, (name, f)) in panels.iter().zip(series.iter()) {
            let ys: Vec<f64> = runs.iter().map(f).collect();
            let top = ys.iter().copied().fold(0.0, f64::max).max(1e-9) * 1.15;
            let n = runs.len().max(2);
            let mut chart = ChartBuilder::on(panel)
                .caption(*name, ("sans-serif", 18))
                .margin(8)
                .x_label_area_size(28)
                .y_label_area_size(64)
                .build_cartesian_2d(0usize..n - 1, 0f64..top)?;
            chart
                .configure_mesh()
                .x_desc("run")
                .x_label_formatter(&|i| {
                    runs.get(*i)
                        .map_or(String::new(), |r| r.change.chars().take(14).collect())
                })
                .label_style(("sans-serif", 12))
                .draw()?;
            chart.draw_series(LineSeries::new(
                ys.iter().enumerate().map(|(i, &y)| (i, y)),
                BLUE.stroke_width(2),
            ))?;
            chart.draw_series(
                ys.iter()
                    .enumerate()
                    .map(|(i, &y)| Circle::new((i, y), 4, BLUE.filled())),
            )?;
        }
        Ok(())
    })
}

/// Per-op GPU time of one pass (top 16 ops), horizontal bars in µs.
pub fn profile_svg(p: &ProfileReport) -> String {
    let ops: Vec<_> = p.by_op.iter().take(16).collect();
    let h = 80 + 26 * ops.len() as u32;
    render(900, h, |root| {
        let top = ops.iter().map(|t| t.ns / 1e3).fold(0.0, f64::max).max(1e-9) * 1.1;
        let n = ops.len().max(1);
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "GPU time per op, {} token(s): {:.0} µs total",
                    p.tokens,
                    p.gpu_ns / 1e3
                ),
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(150)
            .build_cartesian_2d(0f64..top, 0usize..n)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            .y_label_formatter(&|i| ops.get(*i).map_or(String::new(), |t| t.name.clone()))
            .x_desc("µs")
            .label_style(("sans-serif", 12))
            .draw()?;
        chart.draw_series(ops.iter().enumerate().map(|(i, t)| {
            Rectangle::new(
                [(0.0, i), (t.ns / 1e3, i + 1)],
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
    render(700, 400, |root| {
        let xmax = pts.iter().map(|p| p.0).fold(1.0, f64::max) * 1.1;
        let ymax = pts.iter().map(|p| p.1).fold(1e-9, f64::max) * 1.15;
        let mut chart = ChartBuilder::on(&root)
            .caption("prefill tok/s by prompt length", ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..xmax, 0f64..ymax)?;
        chart
            .configure_mesh()
            .x_desc("tokens")
            .label_style(("sans-serif", 12))
            .draw()?;
        chart.draw_series(LineSeries::new(pts.iter().copied(), BLUE.stroke_width(2)))?;
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, BLUE.filled())))?;
        Ok(())
    })
}

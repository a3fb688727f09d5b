//! The PNG chart of a run: one small bar chart per metric on a logarithmic axis, one bar per
//! system (same colour in every panel, named in the legend on top). Labels need a TrueType font; DejaVu Sans (Debian's
//! `fonts-dejavu-core`, installed by scripts/install-peers.sh) is looked for in the usual places,
//! or wherever `STRATA_BENCH_FONT` points.

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Registers a font as "sans-serif" once; an error says where it was looked for.
fn font() -> Result<(), String> {
    static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let candidates: Vec<PathBuf> = std::env::var_os("STRATA_BENCH_FONT")
            .map(PathBuf::from)
            .into_iter()
            .chain(FONTS.iter().map(PathBuf::from))
            .collect();
        let bytes = candidates.iter().find_map(|p| std::fs::read(p).ok()).ok_or_else(|| {
            format!(
                "no TrueType font found (looked at {}; install fonts-dejavu-core or set STRATA_BENCH_FONT)",
                candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            )
        })?;
        // The font lives as long as the process: plotters keeps a reference to it.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| "the font file is not a valid font".to_string())
    })
    .clone()
}

/// An axis label: no more digits than the magnitude needs.
fn tick(v: f64) -> String {
    match v.abs() {
        a if a >= 1e6 => format!("{:.1}M", v / 1e6),
        a if a >= 1e4 => format!("{:.0}k", v / 1e3),
        a if a >= 10.0 => format!("{v:.0}"),
        a if a >= 0.1 => format!("{v:.1}"),
        _ => format!("{v:.3}"),
    }
}

fn colour(i: usize) -> RGBColor {
    const C: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    C[i % C.len()]
}

/// Draws `values[metric][system]` (missing cells are left out) into `path`.
pub(crate) fn draw(
    path: &Path,
    title: &str,
    systems: &[String],
    metrics: &[(String, String)],
    values: &[Vec<Option<f64>>],
) -> Result<PathBuf, String> {
    font()?;
    let e = |e: &dyn std::fmt::Display| format!("chart: {e}");
    let across = 4usize;
    let down = metrics.len().div_ceil(across).max(1);
    let (panel_w, panel_h, legend_h) = (360u32, 240u32, 40 + 22 * systems.len().div_ceil(5) as u32);
    let size = (panel_w * across as u32, legend_h + panel_h * down as u32);
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let (top, body) = root.split_vertically(legend_h);
    top.draw_text(&format!("strata-bench {title}"), &("sans-serif", 22).into_font().color(&BLACK), (10, 6))
        .map_err(|x| e(&x))?;
    for (i, s) in systems.iter().enumerate() {
        let (x, y) = (10 + (i % 5) as i32 * 280, 34 + (i / 5) as i32 * 22);
        top.draw(&Rectangle::new([(x, y), (x + 14, y + 14)], colour(i).filled())).map_err(|x| e(&x))?;
        top.draw_text(s, &("sans-serif", 15).into_font().color(&BLACK), (x + 20, y)).map_err(|x| e(&x))?;
    }
    let panels = body.split_evenly((down, across));
    for (((metric, unit), row), area) in metrics.iter().zip(values).zip(panels.iter()) {
        // A logarithmic axis: systems often differ by orders of magnitude.
        let positive = || row.iter().flatten().copied().filter(|v| *v > 0.0);
        let (Some(lo), Some(hi)) = (positive().reduce(f64::min), positive().reduce(f64::max)) else { continue };
        let (floor, ceiling) = (lo / 2.0, hi * 2.0);
        let mut chart = ChartBuilder::on(area)
            .caption(format!("{metric} ({unit}, log)"), ("sans-serif", 14))
            .margin(6)
            .x_label_area_size(4)
            .y_label_area_size(52)
            .build_cartesian_2d(0.0..systems.len() as f64, (floor..ceiling).log_scale())
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .disable_x_axis()
            .y_labels(6)
            .y_label_formatter(&|v| tick(*v))
            .label_style(("sans-serif", 11))
            .draw()
            .map_err(|x| e(&x))?;
        chart
            .draw_series(row.iter().enumerate().filter_map(|(i, v)| {
                v.filter(|v| *v > 0.0)
                    .map(|v| Rectangle::new([(i as f64 + 0.1, floor), (i as f64 + 0.9, v)], colour(i).filled()))
            }))
            .map_err(|x| e(&x))?;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(path.to_path_buf())
}

/// Draws time series (`(name, [(seconds, value)])`, one line each, on a logarithmic value axis)
/// into `path`, with vertical lines at the `marks` (seconds) and the value axis labelled `unit`.
pub(crate) fn lines(
    path: &Path,
    title: &str,
    unit: &str,
    series: &[(String, Vec<(f64, f64)>)],
    marks: &[f64],
) -> Result<PathBuf, String> {
    font()?;
    let e = |e: &dyn std::fmt::Display| format!("chart: {e}");
    let points = || series.iter().flat_map(|(_, p)| p.iter());
    let end = points().map(|p| p.0).fold(1.0, f64::max);
    let positive = || points().map(|p| p.1).filter(|v| *v > 0.0);
    let (lo, hi) = (positive().reduce(f64::min).unwrap_or(1.0), positive().reduce(f64::max).unwrap_or(10.0));
    let (floor, ceiling) = (lo / 2.0, hi * 2.0);
    let root = BitMapBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("strata-bench {title}"), ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..end, (floor..ceiling).log_scale())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc(format!("{unit} (log)"))
        .y_label_formatter(&|v| tick(*v))
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(|x| e(&x))?;
    for &m in marks {
        chart.draw_series([PathElement::new(vec![(m, floor), (m, ceiling)], BLACK.mix(0.4))]).map_err(|x| e(&x))?;
    }
    for (i, (name, p)) in series.iter().enumerate() {
        let style = colour(i).stroke_width(2);
        chart
            .draw_series([PathElement::new(p.iter().copied().filter(|q| q.1 > 0.0).collect::<Vec<_>>(), style)])
            .map_err(|x| e(&x))?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], colour(i).stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(path.to_path_buf())
}

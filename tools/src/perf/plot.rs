//! `rnic perf --plot out.svg`: the figure of every size next to the same-run UDP baseline,
//! drawn with plotters' SVG backend (bandwidth or latency against message size, and the
//! ratio below).

use super::{Figures, Report};
use plotters::prelude::*;
use std::path::Path;

/// Draws `reports` (one per size) into an SVG file at `path`.
pub fn plot(path: &Path, title: &str, reports: &[Report]) -> Result<(), String> {
    if reports.is_empty() {
        return Err("nothing to plot".into());
    }
    let lat = matches!(reports[0].figures, Figures::Lat(_));
    let value = |r: &Report| match &r.figures {
        Figures::Bw { avg_mbps, .. } => *avg_mbps,
        Figures::Lat(l) => l.typical,
    };
    let xs: Vec<f64> = reports.iter().map(|r| r.bytes as f64).collect();
    let ys: Vec<f64> = reports.iter().map(value).collect();
    let bs: Vec<Option<f64>> = reports.iter().map(|r| r.baseline).collect();
    let (xmin, xmax) = (xs.iter().copied().fold(f64::MAX, f64::min), xs.iter().copied().fold(0.0, f64::max));
    let (xmin, xmax) = if xmin < xmax { (xmin, xmax) } else { (xmin / 2.0, xmax * 2.0) };
    let ymax = ys.iter().chain(bs.iter().flatten()).copied().fold(0.0, f64::max).max(1e-9) * 1.15;
    let root = SVGBackend::new(path, (900, 640)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| format!("plot {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (top, bottom) = root.split_vertically(420);
    let unit = if lat { "latency, typical (usec)" } else { "bandwidth (MB/sec)" };
    let mut chart = ChartBuilder::on(&top)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d((xmin..xmax).log_scale(), 0.0..ymax)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc(unit)
        .x_label_formatter(&|x| size_label(*x))
        .draw()
        .map_err(|e| err(&e))?;
    let rnic: Vec<(f64, f64)> = xs.iter().copied().zip(ys.iter().copied()).collect();
    chart
        .draw_series(LineSeries::new(rnic.clone(), BLUE.stroke_width(2)))
        .map_err(|e| err(&e))?
        .label("rnic")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    chart.draw_series(rnic.iter().map(|&p| Circle::new(p, 3, BLUE.filled()))).map_err(|e| err(&e))?;
    let base: Vec<(f64, f64)> =
        xs.iter().copied().zip(bs.iter().copied()).filter_map(|(x, b)| b.map(|b| (x, b))).collect();
    if !base.is_empty() {
        chart
            .draw_series(LineSeries::new(base.clone(), RED.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label("plain UDP, same run")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(2)));
        chart.draw_series(base.iter().map(|&p| Circle::new(p, 3, RED.filled()))).map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(if lat { SeriesLabelPosition::UpperLeft } else { SeriesLabelPosition::LowerRight })
        .draw()
        .map_err(|e| err(&e))?;
    // The ratio with its spread (min..max of the rounds).
    let ratios: Vec<(f64, f64, f64, f64)> = reports
        .iter()
        .filter_map(|r| {
            Some((r.bytes as f64, r.ratio?, r.ratio_min.unwrap_or(r.ratio?), r.ratio_max.unwrap_or(r.ratio?)))
        })
        .collect();
    if !ratios.is_empty() {
        let rmax = ratios.iter().map(|r| r.3).fold(1.0, f64::max) * 1.1;
        let what = if lat { "ratio (rnic / UDP; lower is better)" } else { "ratio (rnic / UDP; higher is better)" };
        let mut rc = ChartBuilder::on(&bottom)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d((xmin..xmax).log_scale(), 0.0..rmax)
            .map_err(|e| err(&e))?;
        rc.configure_mesh()
            .x_desc("message size (bytes)")
            .y_desc(what)
            .x_label_formatter(&|x| size_label(*x))
            .draw()
            .map_err(|e| err(&e))?;
        rc.draw_series(LineSeries::new(ratios.iter().map(|r| (r.0, r.1)), GREEN.stroke_width(2)))
            .map_err(|e| err(&e))?;
        rc.draw_series(ratios.iter().map(|r| PathElement::new(vec![(r.0, r.2), (r.0, r.3)], BLACK)))
            .map_err(|e| err(&e))?;
        rc.draw_series(ratios.iter().map(|r| Circle::new((r.0, r.1), 3, GREEN.filled()))).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// A size axis label: the log scale puts its ticks at powers of ten.
fn size_label(x: f64) -> String {
    let b = x.round();
    if b >= 1e6 && (b / 1e6).fract() == 0.0 {
        format!("{}M", b / 1e6)
    } else if b >= 1e3 && (b / 1e3).fract() == 0.0 {
        format!("{}k", b / 1e3)
    } else {
        format!("{b}")
    }
}

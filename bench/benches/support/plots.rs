//! The bench's curves, drawn as SVG files that BENCHMARKS.md shows.

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

/// One curve: its name and its points.
pub(crate) type Series = (String, Vec<(f64, f64)>);

const COLORS: [RGBColor; 7] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
];

type Failure = Box<dyn std::error::Error>;

/// Draws `series` as lines into the SVG file `path`; with `log_x` the x
/// axis has a log scale (for latency distributions), else each point gets a
/// marker. A failure is returned for the bench to report: a missing plot
/// does not fail the bench.
pub(crate) fn lines(
    path: &str,
    caption: &str,
    axes: (&str, &str),
    series: &[Series],
    log_x: bool,
) -> Result<(), Failure> {
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0.0f64);
    for &(x, y) in series.iter().flat_map(|(_, points)| points.iter()) {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if x0 >= x1 {
        return Err("nothing to draw".into());
    }
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let y = 0.0..y1 * 1.08;
    if log_x {
        draw(&root, caption, axes, series, (x0..x1).log_scale(), y, false)?;
    } else {
        draw(&root, caption, axes, series, x0..x1, y, true)?;
    }
    root.present()?;
    Ok(())
}

fn draw<X>(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    caption: &str,
    (x_desc, y_desc): (&str, &str),
    series: &[Series],
    x: X,
    y: std::ops::Range<f64>,
    markers: bool,
) -> Result<(), Failure>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()?;
    for (i, (name, points)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        if markers {
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;
    Ok(())
}

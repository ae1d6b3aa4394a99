//! The latency distribution plot, as HdrHistogram's plotter draws it: the
//! percentile spectrum, x on a log scale of `1 / (1 - q)` (so 90 %, 99 %,
//! 99.9 % ... are evenly spaced), y the latency on a log scale, one line per
//! server. The same geometry is written as SVG (by hand) and rasterised into
//! an RGB buffer (lines, rectangles, a 5×7 bitmap font) encoded as PNG.

use std::fmt::Write as _;

pub const WIDTH_PIXELS: u32 = 960;
pub const HEIGHT_PIXELS: u32 = 540;
const MARGIN_LEFT: f64 = 90.0;
const MARGIN_RIGHT: f64 = 50.0;
const MARGIN_TOP: f64 = 50.0;
const MARGIN_BOTTOM: f64 = 70.0;
/// Series colours (RGB), in order.
const COLOURS: [[u8; 3]; 4] = [
    [0x1f, 0x77, 0xb4],
    [0xd6, 0x27, 0x28],
    [0x2c, 0xa0, 0x2c],
    [0xff, 0x7f, 0x0e],
];
const SERIES_MAX: usize = COLOURS.len();

#[derive(Clone, Debug)]
pub struct Series {
    pub label: String,
    /// `(quantile, latency µs)`, quantile ascending, the last may be 1.0.
    pub points: Vec<(f64, f64)>,
}

#[derive(Clone, Debug)]
pub struct Chart {
    pub title: String,
    pub series: Vec<Series>,
}

/// Axis ranges and the mapping from data to pixels.
struct Frame {
    decades_max: f64,
    log_micros_min: f64,
    log_micros_max: f64,
}

impl Frame {
    fn new(chart: &Chart) -> Frame {
        let mut decades_max: f64 = 2.0;
        let mut micros_min = f64::MAX;
        let mut micros_max: f64 = 0.0;
        for series in &chart.series {
            for &(quantile, micros) in &series.points {
                if quantile < 1.0 {
                    decades_max = decades_max.max(decades(quantile));
                }
                micros_min = micros_min.min(micros.max(0.1));
                micros_max = micros_max.max(micros);
            }
        }
        if micros_min > micros_max {
            micros_min = 1.0;
            micros_max = 1000.0;
        }
        Frame {
            decades_max: decades_max.ceil(),
            log_micros_min: micros_min.log10().floor(),
            log_micros_max: micros_max.max(micros_min * 10.0).log10().ceil(),
        }
    }

    fn x(&self, quantile: f64) -> f64 {
        let plot_width = f64::from(WIDTH_PIXELS) - MARGIN_LEFT - MARGIN_RIGHT;
        // The maximum (q = 1) is drawn at the right edge.
        let position = if quantile >= 1.0 {
            self.decades_max
        } else {
            decades(quantile).min(self.decades_max)
        };
        MARGIN_LEFT + position / self.decades_max * plot_width
    }

    fn y(&self, micros: f64) -> f64 {
        let plot_height = f64::from(HEIGHT_PIXELS) - MARGIN_TOP - MARGIN_BOTTOM;
        let span = (self.log_micros_max - self.log_micros_min).max(1.0);
        let position = (micros.max(0.1).log10() - self.log_micros_min) / span;
        f64::from(HEIGHT_PIXELS) - MARGIN_BOTTOM - position.clamp(0.0, 1.0) * plot_height
    }

    fn x_ticks(&self) -> Vec<(f64, String)> {
        (0..=self.decades_max as u32)
            .map(|decade| {
                let quantile = 1.0 - 10f64.powi(-(decade as i32));
                let label = match decade {
                    0 => "0%".to_string(),
                    1 => "90%".to_string(),
                    _ => format!("99.{}%", "9".repeat(decade as usize - 2)).replace("99.%", "99%"),
                };
                (self.x(quantile), label)
            })
            .collect()
    }

    fn y_ticks(&self) -> Vec<(f64, String)> {
        (self.log_micros_min as i32..=self.log_micros_max as i32)
            .map(|exponent| {
                let micros = 10f64.powi(exponent);
                let label = if micros >= 1_000_000.0 {
                    format!("{}s", micros / 1e6)
                } else if micros >= 1_000.0 {
                    format!("{}ms", micros / 1e3)
                } else {
                    format!("{micros}us")
                };
                (self.y(micros), label)
            })
            .collect()
    }
}

fn decades(quantile: f64) -> f64 {
    -(1.0 - quantile).max(1e-12).log10()
}

fn colour(index: usize) -> [u8; 3] {
    COLOURS[index % SERIES_MAX]
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The chart as a standalone SVG document.
pub fn svg(chart: &Chart) -> String {
    let frame = Frame::new(chart);
    let (width, height) = (WIDTH_PIXELS, HEIGHT_PIXELS);
    let bottom = f64::from(height) - MARGIN_BOTTOM;
    let right = f64::from(width) - MARGIN_RIGHT;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="28" text-anchor="middle" font-size="16">{}</text>"#,
        f64::from(width) / 2.0,
        escape(&chart.title)
    );
    for (x, label) in frame.x_ticks() {
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{MARGIN_TOP}" x2="{x:.1}" y2="{bottom}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{label}</text>"##,
            bottom + 18.0
        );
    }
    for (y, label) in frame.y_ticks() {
        let _ = writeln!(
            out,
            r##"<line x1="{MARGIN_LEFT}" y1="{y:.1}" x2="{right}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"##,
            MARGIN_LEFT - 8.0,
            y + 4.0
        );
    }
    let _ = writeln!(
        out,
        r#"<rect x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{:.1}" height="{:.1}" fill="none" stroke="black"/>"#,
        right - MARGIN_LEFT,
        bottom - MARGIN_TOP
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">percentile (log scale of 1/(1-q); right edge: max)</text>"#,
        (MARGIN_LEFT + right) / 2.0,
        f64::from(height) - 20.0
    );
    let _ = writeln!(
        out,
        r#"<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">latency</text>"#,
        (MARGIN_TOP + bottom) / 2.0,
        (MARGIN_TOP + bottom) / 2.0
    );
    for (index, series) in chart.series.iter().enumerate() {
        let [r, g, b] = colour(index);
        let points: Vec<String> = series
            .points
            .iter()
            .map(|&(q, micros)| format!("{:.1},{:.1}", frame.x(q), frame.y(micros)))
            .collect();
        let _ = writeln!(
            out,
            r##"<polyline fill="none" stroke="#{r:02x}{g:02x}{b:02x}" stroke-width="2" points="{}"/>"##,
            points.join(" ")
        );
        let legend_y = MARGIN_TOP + 18.0 + 18.0 * index as f64;
        let _ = writeln!(
            out,
            r##"<line x1="{:.1}" y1="{legend_y:.1}" x2="{:.1}" y2="{legend_y:.1}" stroke="#{r:02x}{g:02x}{b:02x}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"##,
            MARGIN_LEFT + 12.0,
            MARGIN_LEFT + 36.0,
            MARGIN_LEFT + 42.0,
            legend_y + 4.0,
            escape(&series.label)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// An RGB image being drawn on.
struct Canvas {
    width: u32,
    height: u32,
    pixels: Vec<u8>,
}

impl Canvas {
    fn new(width: u32, height: u32) -> Canvas {
        Canvas {
            width,
            height,
            pixels: vec![0xff; width as usize * height as usize * 3],
        }
    }

    fn set(&mut self, x: i64, y: i64, rgb: [u8; 3]) {
        if x < 0 || y < 0 || x >= i64::from(self.width) || y >= i64::from(self.height) {
            return;
        }
        let offset = (y as usize * self.width as usize + x as usize) * 3;
        self.pixels[offset..offset + 3].copy_from_slice(&rgb);
    }

    fn fill(&mut self, x: i64, y: i64, width: i64, height: i64, rgb: [u8; 3]) {
        for dy in 0..height {
            for dx in 0..width {
                self.set(x + dx, y + dy, rgb);
            }
        }
    }

    /// A line `thickness` pixels wide (a square brush along Bresenham's path).
    fn line(&mut self, from: (f64, f64), to: (f64, f64), thickness: i64, rgb: [u8; 3]) {
        let (mut x, mut y) = (from.0.round() as i64, from.1.round() as i64);
        let (x1, y1) = (to.0.round() as i64, to.1.round() as i64);
        let (dx, dy) = ((x1 - x).abs(), -(y1 - y).abs());
        let (sx, sy) = (if x < x1 { 1 } else { -1 }, if y < y1 { 1 } else { -1 });
        let mut error = dx + dy;
        let offset = thickness / 2;
        loop {
            self.fill(x - offset, y - offset, thickness, thickness, rgb);
            if x == x1 && y == y1 {
                break;
            }
            let doubled = 2 * error;
            if doubled >= dy {
                error += dy;
                x += sx;
            }
            if doubled <= dx {
                error += dx;
                y += sy;
            }
        }
    }

    /// Text in the 5×7 font at `scale`; `anchor`: 0 left, 1 centre, 2 right.
    fn text(&mut self, x: f64, y: f64, text: &str, scale: i64, anchor: u8, rgb: [u8; 3]) {
        let advance = 6 * scale;
        let width = text.chars().count() as i64 * advance;
        let left = match anchor {
            0 => x as i64,
            1 => x as i64 - width / 2,
            _ => x as i64 - width,
        };
        let top = y as i64 - 7 * scale;
        for (index, character) in text.chars().enumerate() {
            let rows = glyph(character);
            for (row, bits) in rows.iter().enumerate() {
                for column in 0..5 {
                    if bits & (0x10 >> column) != 0 {
                        self.fill(
                            left + index as i64 * advance + column * scale,
                            top + row as i64 * scale,
                            scale,
                            scale,
                            rgb,
                        );
                    }
                }
            }
        }
    }
}

/// The chart rasterised and encoded as PNG.
pub fn png(chart: &Chart) -> Result<Vec<u8>, png::EncodingError> {
    let frame = Frame::new(chart);
    let mut canvas = Canvas::new(WIDTH_PIXELS, HEIGHT_PIXELS);
    let (grey, black) = ([0xdd; 3], [0; 3]);
    let bottom = f64::from(HEIGHT_PIXELS) - MARGIN_BOTTOM;
    let right = f64::from(WIDTH_PIXELS) - MARGIN_RIGHT;
    for (x, label) in frame.x_ticks() {
        canvas.line((x, MARGIN_TOP), (x, bottom), 1, grey);
        canvas.text(x, bottom + 20.0, &label, 2, 1, black);
    }
    for (y, label) in frame.y_ticks() {
        canvas.line((MARGIN_LEFT, y), (right, y), 1, grey);
        canvas.text(MARGIN_LEFT - 8.0, y + 7.0, &label, 2, 2, black);
    }
    for (from, to) in [
        ((MARGIN_LEFT, MARGIN_TOP), (right, MARGIN_TOP)),
        ((right, MARGIN_TOP), (right, bottom)),
        ((right, bottom), (MARGIN_LEFT, bottom)),
        ((MARGIN_LEFT, bottom), (MARGIN_LEFT, MARGIN_TOP)),
    ] {
        canvas.line(from, to, 1, black);
    }
    canvas.text(
        f64::from(WIDTH_PIXELS) / 2.0,
        32.0,
        &chart.title,
        2,
        1,
        black,
    );
    canvas.text(
        (MARGIN_LEFT + right) / 2.0,
        f64::from(HEIGHT_PIXELS) - 14.0,
        "PERCENTILE (RIGHT EDGE: MAX)",
        2,
        1,
        black,
    );
    for (index, series) in chart.series.iter().enumerate() {
        let rgb = colour(index);
        for pair in series.points.windows(2) {
            let from = (frame.x(pair[0].0), frame.y(pair[0].1));
            let to = (frame.x(pair[1].0), frame.y(pair[1].1));
            canvas.line(from, to, 2, rgb);
        }
        let legend_y = MARGIN_TOP + 18.0 + 20.0 * index as f64;
        canvas.line(
            (MARGIN_LEFT + 12.0, legend_y),
            (MARGIN_LEFT + 36.0, legend_y),
            3,
            rgb,
        );
        canvas.text(
            MARGIN_LEFT + 42.0,
            legend_y + 7.0,
            &series.label,
            2,
            0,
            black,
        );
    }
    let mut bytes = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut bytes, canvas.width, canvas.height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header()?;
        writer.write_image_data(&canvas.pixels)?;
        writer.finish()?;
    }
    Ok(bytes)
}

/// The 5×7 font: seven rows, five bits each (bit 4 leftmost). Lower case
/// is drawn as upper case; anything unknown is a box.
fn glyph(character: char) -> [u8; 7] {
    match character.to_ascii_uppercase() {
        '0' => [0x0e, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0e],
        '1' => [0x04, 0x0c, 0x04, 0x04, 0x04, 0x04, 0x0e],
        '2' => [0x0e, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1f],
        '3' => [0x1f, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0e],
        '4' => [0x02, 0x06, 0x0a, 0x12, 0x1f, 0x02, 0x02],
        '5' => [0x1f, 0x10, 0x1e, 0x01, 0x01, 0x11, 0x0e],
        '6' => [0x06, 0x08, 0x10, 0x1e, 0x11, 0x11, 0x0e],
        '7' => [0x1f, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08],
        '8' => [0x0e, 0x11, 0x11, 0x0e, 0x11, 0x11, 0x0e],
        '9' => [0x0e, 0x11, 0x11, 0x0f, 0x01, 0x02, 0x0c],
        'A' => [0x0e, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11],
        'B' => [0x1e, 0x11, 0x11, 0x1e, 0x11, 0x11, 0x1e],
        'C' => [0x0e, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0e],
        'D' => [0x1c, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1c],
        'E' => [0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x1f],
        'F' => [0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x10],
        'G' => [0x0e, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0f],
        'H' => [0x11, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11],
        'I' => [0x0e, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e],
        'J' => [0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0c],
        'K' => [0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11],
        'L' => [0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1f],
        'M' => [0x11, 0x1b, 0x15, 0x15, 0x11, 0x11, 0x11],
        'N' => [0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11],
        'O' => [0x0e, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e],
        'P' => [0x1e, 0x11, 0x11, 0x1e, 0x10, 0x10, 0x10],
        'Q' => [0x0e, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0d],
        'R' => [0x1e, 0x11, 0x11, 0x1e, 0x14, 0x12, 0x11],
        'S' => [0x0f, 0x10, 0x10, 0x0e, 0x01, 0x01, 0x1e],
        'T' => [0x1f, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04],
        'U' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e],
        'V' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x0a, 0x04],
        'W' => [0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0a],
        'X' => [0x11, 0x11, 0x0a, 0x04, 0x0a, 0x11, 0x11],
        'Y' => [0x11, 0x11, 0x11, 0x0a, 0x04, 0x04, 0x04],
        'Z' => [0x1f, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1f],
        ' ' => [0; 7],
        '.' => [0, 0, 0, 0, 0, 0x0c, 0x0c],
        ',' => [0, 0, 0, 0, 0x0c, 0x04, 0x08],
        ':' => [0, 0x0c, 0x0c, 0, 0x0c, 0x0c, 0],
        '-' => [0, 0, 0, 0x1f, 0, 0, 0],
        '_' => [0, 0, 0, 0, 0, 0, 0x1f],
        '%' => [0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03],
        '/' => [0, 0x01, 0x02, 0x04, 0x08, 0x10, 0],
        '(' => [0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02],
        ')' => [0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08],
        '=' => [0, 0, 0x1f, 0, 0x1f, 0, 0],
        '+' => [0, 0x04, 0x04, 0x1f, 0x04, 0x04, 0],
        '>' => [0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08],
        '<' => [0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02],
        '→' => [0, 0x04, 0x02, 0x1f, 0x02, 0x04, 0],
        'µ' => [0, 0x11, 0x11, 0x11, 0x13, 0x1d, 0x10],
        _ => [0x1f, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1f],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> Chart {
        Chart {
            title: "latency <test> & co".into(),
            series: vec![
                Series {
                    label: "tern".into(),
                    points: vec![(0.0, 20.0), (0.9, 30.0), (0.99, 50.0), (1.0, 900.0)],
                },
                Series {
                    label: "nats-server".into(),
                    points: vec![(0.0, 22.0), (0.9, 31.0), (0.999, 80.0), (1.0, 2_000.0)],
                },
            ],
        }
    }

    #[test]
    fn svg_is_a_document_with_one_line_per_series() {
        let text = svg(&chart());
        assert!(text.starts_with("<svg"));
        assert!(text.trim_end().ends_with("</svg>"));
        assert_eq!(text.matches("<polyline").count(), 2);
        assert!(text.contains("latency &lt;test&gt; &amp; co"));
        assert!(text.contains("99.9%"));
    }

    #[test]
    fn axes_map_quantiles_and_latencies_monotonically() {
        let frame = Frame::new(&chart());
        assert!(frame.x(0.0) < frame.x(0.9) && frame.x(0.9) < frame.x(0.999));
        assert!(frame.x(0.999) <= frame.x(1.0));
        assert!(
            frame.y(10.0) > frame.y(100.0),
            "larger latency is higher up"
        );
        assert_eq!(frame.decades_max, 3.0);
    }

    #[test]
    fn png_has_signature_and_lines_are_drawn() {
        let bytes = png(&chart()).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut pixels = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut pixels).unwrap();
        assert_eq!((info.width, info.height), (WIDTH_PIXELS, HEIGHT_PIXELS));
        let series_colour = pixels
            .chunks(3)
            .filter(|pixel| pixel == &COLOURS[0].as_slice())
            .count();
        assert!(series_colour > 100, "{series_colour} pixels of series 0");
    }
}

//! PNG copies of the charts for pasting into a ticket: the SVG rasterised
//! with resvg, and the font database it draws text with.

use std::sync::{Arc, OnceLock};

/// The fonts the PNGs are drawn with: DejaVu Sans, regular and bold,
/// embedded in the binary (the `dejavu` crate; the fonts' own licence is
/// the Bitstream Vera one, with DejaVu's changes in the public domain). No
/// system font is read, so a chart looks the same on every machine and
/// has its labels in a container image that has no fonts at all.
fn font_db() -> Arc<resvg::usvg::fontdb::Database> {
    static DB: OnceLock<Arc<resvg::usvg::fontdb::Database>> = OnceLock::new();
    DB.get_or_init(|| {
        let mut db = resvg::usvg::fontdb::Database::new();
        for face in [dejavu::sans::regular(), dejavu::sans::bold()] {
            db.load_font_source(resvg::usvg::fontdb::Source::Binary(Arc::new(face)));
        }
        db.set_sans_serif_family("DejaVu Sans");
        Arc::new(db)
    })
    .clone()
}

/// Rasterises an SVG chart into a PNG, 1.5 times its size for a sharp
/// picture in a ticket.
pub(crate) fn png(svg: &str) -> Result<Vec<u8>, String> {
    use resvg::{tiny_skia, usvg};
    let opt = usvg::Options {
        fontdb: font_db(),
        font_family: "sans-serif".into(),
        ..Default::default()
    };
    let tree = usvg::Tree::from_str(svg, &opt).map_err(|e| e.to_string())?;
    let scale = 1.5;
    let size = tree.size().to_int_size().scale_by(scale).ok_or("empty")?;
    let mut pixmap =
        tiny_skia::Pixmap::new(size.width(), size.height()).ok_or("cannot allocate")?;
    pixmap.fill(tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(scale, scale),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    /// Counts the pixels of a PNG that are not white.
    fn inked(png: &[u8]) -> usize {
        let pixmap = resvg::tiny_skia::Pixmap::decode_png(png).unwrap();
        pixmap
            .pixels()
            .iter()
            .filter(|p| (p.red(), p.green(), p.blue()) != (255, 255, 255))
            .count()
    }

    /// Text is drawn with the embedded font, in both weights the charts
    /// use, whatever fonts the machine has (a container image has none).
    #[test]
    fn labels_are_drawn_with_the_embedded_font() {
        let doc = |text: &str| {
            format!(
                r#"<svg xmlns="http://www.w3.org/2000/svg" width="200" height="40">
                <text x="4" y="16" font-family="sans-serif" font-size="14">{text}</text>
                <text x="4" y="34" font-family="sans-serif" font-size="14" font-weight="bold">{text}</text>
                </svg>"#
            )
        };
        let blank = super::png(&doc("")).unwrap();
        let label = super::png(&doc("requests/s")).unwrap();
        assert_eq!(inked(&blank), 0);
        assert!(inked(&label) > 200, "{} pixels inked", inked(&label));
        let db = super::font_db();
        let families: Vec<String> = db
            .faces()
            .flat_map(|f| f.families.iter().map(|(n, _)| n.clone()))
            .collect();
        assert_eq!(families, ["DejaVu Sans", "DejaVu Sans"]);
    }
}

//! PNG copies of the charts for pasting into a ticket: the SVG rasterised
//! with resvg, and the font database it draws text with.

use std::sync::{Arc, OnceLock};

/// The fonts the PNGs are drawn with: DejaVu Sans where it is installed
/// (Debian's fonts-dejavu-core), else whatever the system has.
fn font_db() -> Arc<resvg::usvg::fontdb::Database> {
    static DB: OnceLock<Arc<resvg::usvg::fontdb::Database>> = OnceLock::new();
    DB.get_or_init(|| {
        let mut db = resvg::usvg::fontdb::Database::new();
        let dejavu = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
        if db.load_font_file(dejavu).is_err() {
            db.load_system_fonts();
        }
        let family = db
            .faces()
            .find_map(|f| f.families.first().map(|(name, _)| name.clone()));
        if let Some(family) = family {
            db.set_sans_serif_family(family);
        }
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

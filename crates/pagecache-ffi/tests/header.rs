//! `include/pagecache.h` is what cbindgen makes of `src/` (lib.rs and its modules) today:
//! regenerated here and compared byte for byte. `UPDATE_HEADER=1` rewrites
//! it instead.
use std::path::Path;

#[test]
fn the_checked_in_header_matches_the_code() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let header = crate_dir.join("../../include/pagecache.h");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen failed on src/")
        .write(&mut out);
    let fresh = String::from_utf8(out).unwrap();
    if std::env::var_os("UPDATE_HEADER").is_some() {
        std::fs::write(&header, &fresh).unwrap();
        return;
    }
    let old = std::fs::read_to_string(&header).unwrap_or_default();
    assert!(
        old == fresh,
        "include/pagecache.h is stale: run `UPDATE_HEADER=1 cargo test -p pagecache-ffi --test header` \
         and commit the result"
    );
}

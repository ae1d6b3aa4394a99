//! Reading a crate's Rust sources, shared by the style ratchets
//! (`module_graph.rs`, `function_size.rs`).

use std::fs;
use std::path::Path;

/// One Rust file of a crate: its path under `src/` (`/`-separated) and text.
pub struct SourceFile {
    pub relative_path: String,
    pub text: String,
}

/// Every `.rs` file under `directory`, sorted by path.
pub fn read_sources(directory: &Path) -> Vec<SourceFile> {
    let mut files = Vec::new();
    collect_sources(directory, "", &mut files);
    files.sort_by(|left, right| left.relative_path.cmp(&right.relative_path));
    assert!(
        !files.is_empty(),
        "no .rs files under {}",
        directory.display()
    );
    files
}

/// Adds the `.rs` files under `directory` (whose path under `src/` is
/// `prefix`) to `files`, descending into subdirectories.
fn collect_sources(directory: &Path, prefix: &str, files: &mut Vec<SourceFile>) {
    let entries = fs::read_dir(directory)
        .unwrap_or_else(|error| panic!("reading {}: {error}", directory.display()));
    for entry in entries {
        let entry = entry.expect("a directory entry of the source tree");
        let name = entry.file_name().to_string_lossy().into_owned();
        let relative_path = format!("{prefix}{name}");
        let file_type = entry.file_type().expect("the type of a source tree entry");
        if file_type.is_dir() {
            collect_sources(&entry.path(), &format!("{relative_path}/"), files);
        } else if name.ends_with(".rs") {
            let bytes = fs::read(entry.path()).expect("a readable source file");
            let text = String::from_utf8_lossy(&bytes).into_owned();
            files.push(SourceFile {
                relative_path,
                text,
            });
        }
    }
}

//! A ceiling on function length, and the crates' assertion density: both
//! ratchets, for the production code of tern-broker, tern-raft and
//! tern-storage.
//!
//! CONVENTIONS.md ("Functions and comments"): short functions; ("Assertions
//! and errors"): about two assertions per function. No function grows past
//! `FUNCTION_LINES_MAX` lines; the functions longer than that today are listed
//! in `LONGER_FUNCTIONS_ALLOWED` with their length, and may only shrink. The
//! assertions per function of each crate are printed (`--nocapture`) and may
//! only rise: each crate has a floor in `ASSERTIONS_PER_FUNCTION_MIN`.
//!
//! How the sources are read (the same test code is skipped as in
//! `module_graph.rs`):
//!
//! - Every `.rs` file under `broker/src`, `raft/src` and `storage/src`, except
//!   files named `tests.rs` or `*_tests.rs`; in each, everything from the first
//!   `#[cfg(test)] mod NAME {` to the end of the file is skipped. Unlike
//!   `module_graph.rs`, a visibility may come before `mod`: `stream/state.rs`
//!   has a `#[cfg(test)] pub(super) mod tests {`.
//! - Comments (`//`, nested `/* */`), string literals (`"…"`, `b"…"`, raw
//!   `r#"…"#`, `br"…"`) and char literals (`'{'`, `b'}'`, `'\''`) are blanked
//!   out first, newlines kept. A `'` opens a char literal only when a
//!   backslash, or one character and a closing `'`, follow it; otherwise it is
//!   a lifetime or a loop label (`'a`, `'static`, `'outer:`).
//! - A function is `fn NAME` followed, outside `()` and `[]`, by a `{` before
//!   any `;`. Its length is the number of lines from the line of `fn` to the
//!   line of its matching `}`, both included: attributes and doc comments above
//!   it are not counted. `fn f(&self);` (a trait or extern declaration) has no
//!   body and is not a function here; neither is a `fn(u32)` pointer type.
//!   Closures and nested items are part of the function they are written in,
//!   and a nested `fn` is also measured on its own. A `fn` with a written name
//!   in a `macro_rules!` body counts once (`raw_enum!`'s `deserialize`); a
//!   `fn $name` does not. The simulators (`raft/src/sim`, `jetstream/sim`)
//!   and `storage/src/bin` are under `src`, so they are measured too.
//! - A function is identified by its file and name. A file can hold several
//!   functions of one name (`new` or `fmt` in different impls): an entry
//!   allows one of them, a name listed twice allows two, and the entries of a
//!   name are matched to its functions longest to longest. Neither the order
//!   of the functions nor the line they start on matters.
//! - An assertion is `assert!`, `assert_eq!`, `assert_ne!`, `debug_assert!`,
//!   `debug_assert_eq!`, `debug_assert_ne!` or `unreachable!` anywhere in the
//!   production code (a `const` assertion counts too); `.expect(` is not one.
//!   The density is the assertions divided by the functions.

mod source_tree;
use source_tree::read_sources;

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::path::Path;

/// The most lines a function may have, `fn` line and closing brace included.
const FUNCTION_LINES_MAX: usize = 70;

/// The functions longer than `FUNCTION_LINES_MAX` today: (file from the
/// repository root, name, length in lines). A ratchet: split a function and
/// lower or remove its entry; never add one or raise a length. Recorded at
/// the core rebuild: 75 in broker/src, 9 in raft/src, 16 in storage/src.
#[rustfmt::skip]
const LONGER_FUNCTIONS_ALLOWED: &[(&str, &str, usize)] = &[
    ("broker/src/auth/config.rs", "parse_users", 82),
    ("broker/src/auth/config.rs", "resolve", 84),
    ("broker/src/cluster/frame.rs", "decode_body", 181),
    ("broker/src/cluster/routes.rs", "dial_loop", 77),
    ("broker/src/cluster/routes.rs", "handle_frame", 72),
    ("broker/src/cluster/routes.rs", "read_loop", 92),
    ("broker/src/config.rs", "resolve_with", 121),
    ("broker/src/jetstream/api/json.rs", "next_value", 135),
    ("broker/src/jetstream/api/json.rs", "parse_rfc3339", 100),
    ("broker/src/jetstream/cluster.rs", "apply_meta", 175),
    ("broker/src/jetstream/cluster.rs", "meta_request_clustered", 80),
    ("broker/src/jetstream/cluster.rs", "meta_turn", 115),
    ("broker/src/jetstream/cluster.rs", "peer_remove_clustered", 77),
    ("broker/src/jetstream/cluster.rs", "start_meta", 136),
    ("broker/src/jetstream/consumer/config.rs", "check_config", 116),
    ("broker/src/jetstream/consumer/config.rs", "parse_create", 151),
    ("broker/src/jetstream/consumer/config.rs", "set_defaults", 81),
    ("broker/src/jetstream/consumer/delivery.rs", "check_pending", 74),
    ("broker/src/jetstream/consumer/delivery.rs", "decode", 89),
    ("broker/src/jetstream/consumer/store.rs", "decode", 75),
    ("broker/src/jetstream/entry.rs", "decode", 139),
    ("broker/src/jetstream/entry.rs", "encode", 111),
    ("broker/src/jetstream/journal_location.rs", "prepare_device", 87),
    ("broker/src/jetstream/listing.rs", "cluster_list", 91),
    ("broker/src/jetstream/meta/cluster.rs", "decode", 75),
    ("broker/src/jetstream/mod.rs", "dispatch_api", 98),
    ("broker/src/jetstream/mod.rs", "handle_owner_command", 142),
    ("broker/src/jetstream/mod.rs", "handle_request", 87),
    ("broker/src/jetstream/sim/mod.rs", "final_checks", 117),
    ("broker/src/jetstream/sim/mod.rs", "new", 100),
    ("broker/src/jetstream/sim/mod.rs", "one_step", 78),
    ("broker/src/jetstream/store_check.rs", "check_store", 82),
    ("broker/src/jetstream/store_check/journal.rs", "discards_of", 83),
    ("broker/src/jetstream/store_check/journal.rs", "examine", 185),
    ("broker/src/jetstream/store_check/journal.rs", "examine_region", 119),
    ("broker/src/jetstream/store_check/journal.rs", "judge", 106),
    ("broker/src/jetstream/store_check/journal.rs", "repair", 125),
    ("broker/src/jetstream/store_check/layout.rs", "examine", 94),
    ("broker/src/jetstream/store_check/layout.rs", "rebuild", 83),
    ("broker/src/jetstream/store_check/stream.rs", "findings", 112),
    ("broker/src/jetstream/store_check/stream.rs", "plan_raft_rebuild", 94),
    ("broker/src/jetstream/store_check/stream.rs", "rebuild_manifest", 140),
    ("broker/src/jetstream/stream/api.rs", "api", 268),
    ("broker/src/jetstream/stream/config.rs", "check", 177),
    ("broker/src/jetstream/stream/config.rs", "check_mirror_and_sources", 94),
    ("broker/src/jetstream/stream/config.rs", "write_json", 126),
    ("broker/src/jetstream/stream/consumers.rs", "consumer_command", 82),
    ("broker/src/jetstream/stream/deliveries.rs", "deliver_to", 217),
    ("broker/src/jetstream/stream/deliveries.rs", "run_timers", 72),
    ("broker/src/jetstream/stream/leader.rs", "ingest", 154),
    ("broker/src/jetstream/stream/persistence.rs", "load_consumers", 74),
    ("broker/src/jetstream/stream/snapshot.rs", "header", 96),
    ("broker/src/jetstream/stream/snapshot.rs", "record", 98),
    ("broker/src/jetstream/stream/state.rs", "apply", 131),
    ("broker/src/jetstream/stream/task.rs", "follow_applied", 73),
    ("broker/src/jetstream/stream/task.rs", "open", 158),
    ("broker/src/jetstream/stream/transfer.rs", "push", 89),
    ("broker/src/monitor/cluster.rs", "write_replication_metrics", 103),
    ("broker/src/monitor/http.rs", "varz", 75),
    ("broker/src/nats/conn.rs", "handle_subscribe", 74),
    ("broker/src/nats/conn.rs", "read_loop", 86),
    ("broker/src/proto/parser.rs", "parse", 103),
    ("broker/src/reload.rs", "changes", 75),
    ("broker/src/server.rs", "run", 83),
    ("broker/src/server.rs", "shard_main", 92),
    ("broker/src/shard/mod.rs", "report", 71),
    ("broker/src/routing/shard_routing.rs", "route", 114),
    ("raft/src/node.rs", "new", 73),
    ("raft/src/node.rs", "on_snapshot_chunk", 99),
    ("raft/src/node.rs", "step", 126),
    ("raft/src/sim/mod.rs", "handle_ready", 76),
    ("raft/src/sim/trace.rs", "fmt", 104),
    ("raft/src/sim/trace.rs", "fmt", 99),
    ("raft/src/sim/trace.rs", "of", 91),
    ("raft/src/wire.rs", "decode", 132),
    ("raft/src/wire.rs", "encode", 112),
    ("storage/src/bin/journal_writer.rs", "main", 163),
    ("storage/src/block_store/salvage.rs", "salvage", 75),
    ("storage/src/block_store/stream.rs", "append", 90),
    ("storage/src/block_store/stream.rs", "compact_segment", 81),
    ("storage/src/block_store/stream.rs", "load_segment", 90),
    ("storage/src/block_store/stream.rs", "open_as", 104),
    ("storage/src/block_store/stream.rs", "read_with", 99),
    ("storage/src/block_store/stream.rs", "replay", 98),
    ("storage/src/journal.rs", "flush", 128),
    ("storage/src/journal.rs", "open", 105),
    ("storage/src/journal.rs", "read_group", 125),
    ("storage/src/journal_device.rs", "open", 79),
    ("storage/src/recovery.rs", "read_slot", 120),
    ("storage/src/recovery.rs", "rebuild_header", 74),
    ("storage/src/recovery.rs", "recover", 269),
    ("storage/src/recovery.rs", "scan_segment", 91),
];

/// Each crate's floor on assertions per function: the density when it was
/// last recorded, rounded down to two decimals. Only ever raise it.
const ASSERTIONS_PER_FUNCTION_MIN: &[(&str, f64)] =
    &[("broker", 0.08), ("raft", 0.07), ("storage", 0.21)];

/// The macros that count as assertions.
const ASSERTION_MACROS: &[&str] = &[
    "assert",
    "assert_eq",
    "assert_ne",
    "debug_assert",
    "debug_assert_eq",
    "debug_assert_ne",
    "unreachable",
];

/// A crate whose production code is measured.
struct CrateSources {
    name: &'static str,
    /// Its `src` folder, relative to `broker/`.
    directory: &'static str,
    /// How messages name its files: the repository path of its `src` folder.
    display_prefix: &'static str,
}

const CRATES: &[CrateSources] = &[
    CrateSources {
        name: "broker",
        directory: "src",
        display_prefix: "broker/src/",
    },
    CrateSources {
        name: "raft",
        directory: "../raft/src",
        display_prefix: "raft/src/",
    },
    CrateSources {
        name: "storage",
        directory: "../storage/src",
        display_prefix: "storage/src/",
    },
];

#[test]
fn no_function_grows_past_the_ceiling() {
    let mut functions = Vec::new();
    let mut report = Vec::new();
    for sources in CRATES {
        let measure = measure_crate(sources);
        let over = measure
            .functions
            .iter()
            .filter(|measured| measured.lines > FUNCTION_LINES_MAX)
            .count();
        let longest = measure
            .functions
            .iter()
            .max_by_key(|measured| measured.lines);
        report.push(format!(
            "{}: {} functions, {over} over {FUNCTION_LINES_MAX} lines, the longest {}",
            sources.name,
            measure.functions.len(),
            longest.map_or("(none)".to_string(), Measured::describe),
        ));
        functions.extend(measure.functions);
    }
    println!("{}", report.join("\n"));
    let ceiling = Ceiling {
        lines_max: FUNCTION_LINES_MAX,
        allowed: LONGER_FUNCTIONS_ALLOWED,
    };
    let failures = ceiling.failures(&functions);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn assertion_density_is_reported() {
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for sources in CRATES {
        let measure = measure_crate(sources);
        let functions = measure.functions.len();
        assert!(functions > 0, "no functions found in {}", sources.name);
        let density = measure.assertions as f64 / functions as f64;
        report.push(format!(
            "{}: {functions} functions, {} assertions, {density:.2} per function",
            sources.name, measure.assertions,
        ));
        let floor = density_floor(sources.name);
        let recordable = (density * 100.0).floor() / 100.0;
        if density < floor {
            failures.push(format!(
                "{}: {density:.3} assertions per function, below its floor of {floor:.2} in \
                 ASSERTIONS_PER_FUNCTION_MIN: assert the invariants of the new code \
                 (shared/CONVENTIONS.md, \"Assertions and errors\")",
                sources.name,
            ));
        } else if recordable > floor {
            report.push(format!(
                "    its floor in ASSERTIONS_PER_FUNCTION_MIN can rise from {floor:.2} to \
                 {recordable:.2}"
            ));
        }
    }
    println!("{}", report.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The recorded floor of the crate `name`.
fn density_floor(name: &str) -> f64 {
    let recorded = ASSERTIONS_PER_FUNCTION_MIN
        .iter()
        .find(|(crate_name, _)| *crate_name == name);
    recorded
        .unwrap_or_else(|| panic!("{name} has no floor in ASSERTIONS_PER_FUNCTION_MIN"))
        .1
}

// ---------------------------------------------------------------------------
// Reading the sources

/// Whether `relative_path` is a test-only file: `tests.rs` or `*_tests.rs`.
fn is_test_file(relative_path: &str) -> bool {
    let name = relative_path.rsplit('/').next().unwrap_or(relative_path);
    name == "tests.rs" || name.ends_with("_tests.rs")
}

/// A function found in a crate, and the file it is in.
struct Measured {
    /// Its file from the repository root: `broker/src/shard.rs`.
    file: String,
    name: String,
    /// The line of its `fn`, from 1.
    line: usize,
    lines: usize,
}

impl Measured {
    /// `broker/src/shard.rs:12 fn route (80 lines)`, for messages.
    fn describe(&self) -> String {
        format!(
            "{}:{} fn {} ({} lines)",
            self.file, self.line, self.name, self.lines
        )
    }
}

/// What one crate's production code holds.
struct CrateMeasure {
    functions: Vec<Measured>,
    assertions: usize,
}

/// The functions and assertions of the production code of `sources`.
fn measure_crate(sources: &CrateSources) -> CrateMeasure {
    let directory = Path::new(env!("CARGO_MANIFEST_DIR")).join(sources.directory);
    let mut measure = CrateMeasure {
        functions: Vec::new(),
        assertions: 0,
    };
    for file in read_sources(&directory) {
        if is_test_file(&file.relative_path) {
            continue;
        }
        let code = production_code(&file.text);
        measure.assertions += count_assertions(&code);
        for function in find_functions(&code) {
            measure.functions.push(Measured {
                file: format!("{}{}", sources.display_prefix, file.relative_path),
                name: function.name,
                line: function.line,
                lines: function.lines,
            });
        }
    }
    measure
}

// ---------------------------------------------------------------------------
// Blanking comments and literals

/// `text` with its comments and literals blanked (see `code_only`) and
/// without everything from the first `#[cfg(test)] mod NAME {` on.
fn production_code(text: &str) -> String {
    // Each blanked range starts and ends at an ASCII byte or the end, and is
    // replaced by ASCII spaces, so the rest stays UTF-8.
    let mut code = String::from_utf8(code_only(text)).expect("blanking keeps UTF-8");
    if let Some(start) = test_module_start(&code) {
        code.truncate(start);
    }
    code
}

/// The bytes of `text` with every comment, string literal and char literal
/// replaced by spaces, newlines kept so that lines keep their numbers.
fn code_only(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut code = bytes.to_vec();
    let mut index = 0;
    while index < bytes.len() {
        match literal_or_comment_end(bytes, index) {
            Some(end) => {
                for byte in &mut code[index..end] {
                    if *byte != b'\n' {
                        *byte = b' ';
                    }
                }
                index = end;
            }
            None => index += 1,
        }
    }
    code
}

/// If a comment, string literal or char literal starts at `index`, the
/// offset just after it.
fn literal_or_comment_end(bytes: &[u8], index: usize) -> Option<usize> {
    let rest = &bytes[index..];
    if rest.starts_with(b"//") {
        let length = rest.iter().position(|byte| *byte == b'\n');
        return Some(index + length.unwrap_or(rest.len()));
    }
    if rest.starts_with(b"/*") {
        return Some(block_comment_end(bytes, index));
    }
    match rest[0] {
        b'"' => Some(string_end(bytes, index + 1)),
        b'r' if starts_token(bytes, index) => raw_string_end(bytes, index + 1),
        b'b' | b'c' if starts_token(bytes, index) && rest.get(1) == Some(&b'r') => {
            raw_string_end(bytes, index + 2)
        }
        b'\'' => char_literal_end(bytes, index),
        _ => None,
    }
}

/// The end of the `/* */` comment at `start`; comments nest. An unclosed
/// comment runs to the end.
fn block_comment_end(bytes: &[u8], start: usize) -> usize {
    let mut depth = 0;
    let mut index = start;
    while index < bytes.len() {
        if bytes[index..].starts_with(b"/*") {
            depth += 1;
            index += 2;
        } else if bytes[index..].starts_with(b"*/") {
            depth -= 1;
            index += 2;
            if depth == 0 {
                return index;
            }
        } else {
            index += 1;
        }
    }
    bytes.len()
}

/// The end of a string literal whose contents start at `from`.
fn string_end(bytes: &[u8], from: usize) -> usize {
    let mut index = from;
    while index < bytes.len() {
        match bytes[index] {
            b'\\' => index += 2,
            b'"' => return index + 1,
            _ => index += 1,
        }
    }
    bytes.len()
}

/// If `#…#"` starts at `from` (after an `r`), the end of the raw string
/// literal, at the first `"` followed by as many `#`.
fn raw_string_end(bytes: &[u8], from: usize) -> Option<usize> {
    let hashes = bytes[from..]
        .iter()
        .take_while(|byte| **byte == b'#')
        .count();
    if bytes.get(from + hashes) != Some(&b'"') {
        return None;
    }
    let mut closing = vec![b'"'];
    closing.resize(1 + hashes, b'#');
    let contents = from + hashes + 1;
    let end = bytes[contents..]
        .windows(closing.len())
        .position(|window| window == closing.as_slice());
    Some(end.map_or(bytes.len(), |end| contents + end + closing.len()))
}

/// If the `'` at `start` opens a char literal, its end; `None` for a
/// lifetime or a label.
fn char_literal_end(bytes: &[u8], start: usize) -> Option<usize> {
    let first = start + 1;
    if *bytes.get(first)? == b'\\' {
        // The escaped character, then anything (`u{…}`) up to the quote.
        let after_escape = first + 2;
        let quote = bytes
            .get(after_escape..)?
            .iter()
            .position(|b| *b == b'\'')?;
        return Some(after_escape + quote + 1);
    }
    let quote = first + utf8_width(bytes[first]);
    (bytes.get(quote) == Some(&b'\'')).then_some(quote + 1)
}

/// The length of the UTF-8 character whose first byte is `lead`.
fn utf8_width(lead: u8) -> usize {
    match lead {
        0x00..=0x7f => 1,
        0x80..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    }
}

/// Whether no identifier character comes right before `index`.
fn starts_token(bytes: &[u8], index: usize) -> bool {
    index == 0 || !is_identifier_byte(bytes[index - 1])
}

fn is_identifier_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte >= 0x80
}

/// Where the first `#[cfg(test)] mod NAME {` starts, if any.
fn test_module_start(text: &str) -> Option<usize> {
    const ATTRIBUTE: &str = "#[cfg(test)]";
    text.match_indices(ATTRIBUTE)
        .map(|(start, _)| start)
        .find(|start| opens_module(&text[start + ATTRIBUTE.len()..]))
}

/// Whether `rest` starts with `mod NAME {`, after a visibility if any
/// (`pub(super) mod tests {`), whitespace allowed around.
fn opens_module(rest: &str) -> bool {
    let item = without_visibility(rest.trim_start());
    let Some(after_keyword) = item.strip_prefix("mod") else {
        return false;
    };
    let name = after_keyword.trim_start();
    let after_name = name.trim_start_matches(is_word_character);
    let has_space = name.len() < after_keyword.len();
    let has_name = after_name.len() < name.len();
    has_space && has_name && after_name.trim_start().starts_with('{')
}

/// `item` without a leading `pub` or `pub(…)` and the whitespace after it.
fn without_visibility(item: &str) -> &str {
    let Some(after_pub) = item.strip_prefix("pub") else {
        return item;
    };
    let after_pub = after_pub.trim_start();
    let after_scope = match after_pub.strip_prefix('(') {
        Some(scope) => scope.split_once(')').map_or(after_pub, |(_, after)| after),
        None => after_pub,
    };
    after_scope.trim_start()
}

fn is_word_character(character: char) -> bool {
    character.is_alphanumeric() || character == '_'
}

// ---------------------------------------------------------------------------
// Functions and assertions in blanked code

/// A function with a body in one file.
#[derive(Debug, PartialEq)]
struct Function {
    name: String,
    /// The line of its `fn`, from 1.
    line: usize,
    /// From the `fn` line to the line of the closing brace, both included.
    lines: usize,
}

/// Every function with a body in `code` (blanked), in the order of their
/// `fn`s: an enclosing function comes before the ones nested in it.
fn find_functions(code: &str) -> Vec<Function> {
    let bytes = code.as_bytes();
    let newlines: Vec<usize> = code.match_indices('\n').map(|(at, _)| at).collect();
    let line_of = |offset: usize| 1 + newlines.partition_point(|at| *at < offset);
    let mut functions = Vec::new();
    for (start, _) in code.match_indices("fn") {
        if !starts_token(bytes, start) {
            continue;
        }
        let Some((name, after_name)) = function_name(code, start + "fn".len()) else {
            continue;
        };
        let Some(open) = body_start(bytes, after_name) else {
            continue;
        };
        let close = matching_brace(bytes, open);
        functions.push(Function {
            name: name.to_string(),
            line: line_of(start),
            lines: line_of(close) - line_of(start) + 1,
        });
    }
    functions
}

/// The name after the `fn` keyword that ends at `from`, and where the name
/// ends; `None` unless whitespace and an identifier (or `r#identifier`)
/// follow, as in a `fn(u32)` type or `fn $name` in a macro.
fn function_name(code: &str, from: usize) -> Option<(&str, usize)> {
    let after_keyword = &code[from..];
    let name = after_keyword.trim_start();
    if name.len() == after_keyword.len() {
        return None;
    }
    let name_start = from + after_keyword.len() - name.len();
    let identifier = name.strip_prefix("r#").unwrap_or(name);
    if !identifier.starts_with(|c: char| c.is_alphabetic() || c == '_') {
        return None;
    }
    let rest = identifier.trim_start_matches(is_word_character);
    let name_end = code.len() - rest.len();
    Some((&code[name_start..name_end], name_end))
}

/// The `{` that opens the body of a function whose signature continues at
/// `from`: the first `{` outside `()` and `[]`; `None` if a `;` comes first.
fn body_start(bytes: &[u8], from: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (index, byte) in bytes.iter().enumerate().skip(from) {
        match byte {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth = depth.saturating_sub(1),
            b'{' if depth == 0 => return Some(index),
            b';' if depth == 0 => return None,
            _ => {}
        }
    }
    None
}

/// The `}` that closes the `{` at `open`, or the last byte if none does.
fn matching_brace(bytes: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (index, byte) in bytes.iter().enumerate().skip(open) {
        match byte {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return index;
                }
            }
            _ => {}
        }
    }
    bytes.len() - 1
}

/// How many assertion macros (`ASSERTION_MACROS`, then `!`) `code` calls.
fn count_assertions(code: &str) -> usize {
    let bytes = code.as_bytes();
    let mut count = 0;
    let mut index = 0;
    while index < bytes.len() {
        if !is_identifier_byte(bytes[index]) {
            index += 1;
            continue;
        }
        let length = bytes[index..]
            .iter()
            .take_while(|byte| is_identifier_byte(**byte))
            .count();
        let word = &code[index..index + length];
        index += length;
        if bytes.get(index) == Some(&b'!') && ASSERTION_MACROS.contains(&word) {
            count += 1;
        }
    }
    count
}

// ---------------------------------------------------------------------------
// The ratchet

/// The ceiling and the longer functions allowed under it.
struct Ceiling<'allowed> {
    lines_max: usize,
    allowed: &'allowed [(&'allowed str, &'allowed str, usize)],
}

/// The functions of one name in one file, and its entries.
#[derive(Default)]
struct NameGroup<'measured> {
    /// Those over the ceiling, longest first once sorted.
    over: Vec<&'measured Measured>,
    /// The length of the longest within the ceiling, if any.
    within_lines_max: Option<usize>,
    /// The lengths its entries allow, longest first once sorted.
    allowed: Vec<usize>,
}

impl Ceiling<'_> {
    /// One message per function over the ceiling that no entry allows, per
    /// entry exceeded, and per entry that could be lowered or removed.
    fn failures(&self, functions: &[Measured]) -> Vec<String> {
        let mut groups: BTreeMap<(&str, &str), NameGroup> = BTreeMap::new();
        for measured in functions {
            let group = groups.entry((&measured.file, &measured.name)).or_default();
            if measured.lines > self.lines_max {
                group.over.push(measured);
            } else {
                group.within_lines_max = group.within_lines_max.max(Some(measured.lines));
            }
        }
        for &(file, name, lines) in self.allowed {
            groups.entry((file, name)).or_default().allowed.push(lines);
        }
        let mut failures = Vec::new();
        for ((file, name), mut group) in groups {
            group.over.sort_by_key(|measured| Reverse(measured.lines));
            group.allowed.sort_by_key(|lines| Reverse(*lines));
            failures.extend(self.group_failures(file, name, &group));
        }
        failures
    }

    /// The failures of the functions named `name` in `file`.
    fn group_failures(&self, file: &str, name: &str, group: &NameGroup) -> Vec<String> {
        let mut failures = Vec::new();
        for (index, measured) in group.over.iter().enumerate() {
            let place = format!("{}:{}: fn {}", measured.file, measured.line, measured.name);
            let lines = measured.lines;
            match group.allowed.get(index) {
                None => failures.push(format!(
                    "{place} is {lines} lines, over the ceiling of {} (FUNCTION_LINES_MAX): \
                     split it, with control flow in the caller and pure leaves \
                     (shared/CONVENTIONS.md, \"Functions and comments\"). Do not add it to \
                     LONGER_FUNCTIONS_ALLOWED: that list only shrinks.",
                    self.lines_max,
                )),
                Some(&recorded) if lines > recorded => failures.push(format!(
                    "{place} grew from {recorded} to {lines} lines, past its entry in \
                     LONGER_FUNCTIONS_ALLOWED: split it; the ratchet only moves down.",
                )),
                Some(&recorded) if lines < recorded => failures.push(format!(
                    "{place} shrank from {recorded} to {lines} lines: record its new length \
                     in LONGER_FUNCTIONS_ALLOWED, so it cannot grow back:\n    \
                     (\"{file}\", \"{name}\", {lines}),",
                )),
                Some(_) => {}
            }
        }
        for recorded in group.allowed.iter().skip(group.over.len()) {
            let now = match group.within_lines_max {
                Some(lines) => format!("is {lines} lines now, within the ceiling"),
                None => "is gone".to_string(),
            };
            failures.push(format!(
                "{file}: fn {name} {now} (its entry says {recorded}): remove it from the list \
                 LONGER_FUNCTIONS_ALLOWED, so it cannot grow back past the ceiling.",
            ));
        }
        failures
    }
}

// ---------------------------------------------------------------------------
// The scanner's own tests, on small in-memory files

/// (name, length in lines) of each function of `source`, as measured.
fn lengths(source: &str) -> Vec<(String, usize)> {
    let functions = find_functions(&production_code(source));
    let pairs = functions.into_iter().map(|found| (found.name, found.lines));
    pairs.collect()
}

/// `(name, lines)` pairs as owned strings, for comparisons.
fn expected(pairs: &[(&str, usize)]) -> Vec<(String, usize)> {
    let owned = pairs.iter().map(|(name, lines)| (name.to_string(), *lines));
    owned.collect()
}

#[test]
fn a_function_runs_to_its_matching_brace() {
    let source = "fn outer() {\n    if ready {\n        loop {\n        }\n    }\n}\n\n\
                  fn after() {}\n";
    assert_eq!(lengths(source), expected(&[("outer", 6), ("after", 1)]));
    let found = find_functions(&production_code(source));
    assert_eq!((found[0].line, found[1].line), (1, 8));
}

#[test]
fn braces_in_strings_do_not_count() {
    let source = "fn f() {\n    let s = \"}\";\n    let t = \"\\\"}\\\\\";\n    \
                  let u = b\"}\";\n}\nfn g() {}\n";
    assert_eq!(lengths(source), expected(&[("f", 5), ("g", 1)]));
}

#[test]
fn braces_in_raw_strings_do_not_count() {
    let source = "fn f() {\n    let s = r#\"{ \"a\": \"}\" }\"#;\n    let t = br\"}\\\";\n    \
                  let u = r##\"\"# } \"##;\n}\nfn g() {}\n";
    assert_eq!(lengths(source), expected(&[("f", 5), ("g", 1)]));
    // A raw identifier is not a raw string.
    assert_eq!(lengths("fn r#match() {\n}\n"), expected(&[("r#match", 2)]));
}

#[test]
fn braces_in_char_literals_do_not_count() {
    let source = "fn f() {\n    let open = '{';\n    let close = b'}';\n    \
                  let quote = '\\'';\n    let wide = '\\u{7d}';\n}\nfn g() {}\n";
    assert_eq!(lengths(source), expected(&[("f", 6), ("g", 1)]));
}

#[test]
fn lifetimes_and_labels_are_not_char_literals() {
    let source = "impl<'a> Reader<'a> {\n    fn f(&self, x: &'a str) -> &'static str {\n        \
                  'outer: loop {\n            break 'outer;\n        }\n        '}'\n    }\n}\n\
                  fn g<'b>(y: &'b u8) -> char {\n    '{'\n}\n";
    assert_eq!(lengths(source), expected(&[("f", 6), ("g", 3)]));
}

#[test]
fn braces_in_comments_do_not_count() {
    let source = "/// fn fake() {\nfn f() {\n    // }\n    /* { /* nested } */ } */\n    \
                  let x = 1; // {\n}\nfn g() {}\n";
    assert_eq!(lengths(source), expected(&[("f", 5), ("g", 1)]));
}

#[test]
fn a_declaration_without_a_body_is_not_a_function() {
    let source = "trait T {\n    fn f(&self);\n    fn g(&self) -> [u8; 4];\n    \
                  fn h(&self) {\n    }\n}\nextern \"C\" {\n    fn k();\n}\n\
                  fn array() -> [u8; 2] {\n    [0; 2]\n}\n";
    assert_eq!(lengths(source), expected(&[("h", 2), ("array", 3)]));
}

#[test]
fn closures_and_function_types_are_part_of_their_function() {
    let source = "fn f(callback: fn(u32) -> u32) -> u32 {\n    let add = |x: u32| {\n        \
                  x + 1\n    };\n    callback(add(1))\n}\n";
    assert_eq!(lengths(source), expected(&[("f", 6)]));
    // A nested function counts in its parent, and on its own.
    let nested = "fn outer() {\n    fn inner() {\n    }\n    inner();\n}\n";
    assert_eq!(lengths(nested), expected(&[("outer", 5), ("inner", 2)]));
}

#[test]
fn test_modules_are_skipped_to_the_end_of_the_file() {
    let source = "fn f() {}\nconst S: &str = \"#[cfg(test)] mod x {\";\n#[cfg(test)]\n\
                  pub(super) mod tests {\n    fn t() {\n    }\n}\nfn after() {}\n";
    assert_eq!(lengths(source), expected(&[("f", 1)]));
    assert!(is_test_file("jetstream/meta/tests.rs"));
    assert!(is_test_file("journal_tests.rs"));
    assert!(!is_test_file("contests.rs"));
}

#[test]
fn assertion_macros_are_counted_and_expect_is_not() {
    let source =
        "fn f() {\n    assert!(a);\n    assert_eq!(a, b);\n    debug_assert_ne!(a, b);\n    \
                  unreachable!();\n    x.expect(\"assert!(y)\");\n    // assert!(z)\n    \
                  my_assert!(q);\n    let assert = 1;\n}\n#[cfg(test)]\nmod tests {\n    \
                  fn t() { assert!(true); }\n}\n";
    assert_eq!(count_assertions(&production_code(source)), 4);
}

// ---------------------------------------------------------------------------
// The ratchet's own tests: they prove it fails when a function grows

/// A function of `file`, for the ratchet's tests.
fn measured(file: &str, name: &str, lines: usize) -> Measured {
    Measured {
        file: file.to_string(),
        name: name.to_string(),
        line: 10,
        lines,
    }
}

#[test]
fn a_function_over_the_ceiling_must_be_split() {
    let ceiling = Ceiling {
        lines_max: 5,
        allowed: &[("a.rs", "long", 8)],
    };
    let functions = [measured("a.rs", "long", 8), measured("a.rs", "short", 5)];
    assert!(ceiling.failures(&functions).is_empty());

    let functions = [measured("a.rs", "long", 9), measured("a.rs", "short", 6)];
    let failures = ceiling.failures(&functions);
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert!(failures[0].starts_with("a.rs:10: fn long grew from 8 to 9 lines"));
    assert!(failures[1].starts_with("a.rs:10: fn short is 6 lines, over the ceiling of 5"));
    assert!(failures[1].contains("split it"), "{}", failures[1]);
}

#[test]
fn an_entry_that_could_move_down_must_be_updated() {
    let ceiling = Ceiling {
        lines_max: 5,
        allowed: &[
            ("a.rs", "shrank", 9),
            ("a.rs", "fits", 7),
            ("a.rs", "gone", 7),
        ],
    };
    let functions = [measured("a.rs", "shrank", 8), measured("a.rs", "fits", 5)];
    let failures = ceiling.failures(&functions);
    assert_eq!(failures.len(), 3, "{failures:?}");
    assert!(failures[0].starts_with("a.rs: fn fits is 5 lines now, within the ceiling"));
    assert!(
        failures[0].contains("remove it from the list"),
        "{}",
        failures[0]
    );
    assert!(failures[1].starts_with("a.rs: fn gone is gone (its entry says 7)"));
    assert!(failures[2].starts_with("a.rs:10: fn shrank shrank from 9 to 8 lines"));
    assert!(
        failures[2].contains(r#"("a.rs", "shrank", 8),"#),
        "{}",
        failures[2]
    );
}

#[test]
fn functions_of_one_name_are_matched_longest_to_longest() {
    let ceiling = Ceiling {
        lines_max: 5,
        allowed: &[("a.rs", "fmt", 7), ("a.rs", "fmt", 9)],
    };
    let functions = [
        measured("a.rs", "fmt", 7),
        measured("a.rs", "fmt", 9),
        measured("a.rs", "fmt", 3),
    ];
    assert!(ceiling.failures(&functions).is_empty());

    let functions = [measured("a.rs", "fmt", 9), measured("a.rs", "fmt", 4)];
    let failures = ceiling.failures(&functions);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].contains("fn fmt is 4 lines now"),
        "{}",
        failures[0]
    );

    let functions = [measured("a.rs", "fmt", 9), measured("a.rs", "fmt", 8)];
    let failures = ceiling.failures(&functions);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].contains("fn fmt grew from 7 to 8"),
        "{}",
        failures[0]
    );
}

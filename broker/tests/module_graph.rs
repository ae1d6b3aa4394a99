//! No new import cycles between tern-broker's modules, and the cycles left
//! from before the core rebuild may only shrink.
//!
//! CONVENTIONS.md ("Layout"): dependencies point one way, down. This test
//! reads `broker/src/**/*.rs`, builds the graph of `crate::` paths between
//! modules and finds its strongly connected components (Tarjan). It is the
//! Rust twin of `shared/tools/module-cycles.py` and follows the same rules, so
//! the two report the same cycles:
//!
//! - A module is the path of a file's first `depth` components under `src/`:
//!   `foo.rs` and `foo/mod.rs` are `foo`; at depth 2, `foo/bar.rs` and
//!   `foo/bar/baz.rs` are `foo/bar`. `lib.rs` and `main.rs` are the root.
//! - An edge `a -> b` is a `crate::b...` path anywhere in a file of `a`:
//!   `use` lines, `use crate::{b::x, c};` groups and inline paths. Comments
//!   (`//` and `/* */`) are removed first, and so is everything from the first
//!   `#[cfg(test)] mod NAME {` to the end of the file; files named `tests.rs`
//!   or `*_tests.rs` are skipped. Paths through `super::` or `self::` are not
//!   read, as in the Python tool.
//! - An edge between a module and itself, its parent or its child is ignored.
//! - A cycle is a strongly connected component of more than one module.
//!
//! Each depth has a baseline of the cycles allowed (none since the core
//! rebuild), and it is a ratchet:
//! a cycle that is new, or that a module joins, fails with the imports that
//! close it; an allowed cycle that shrank fails until the baseline is updated
//! to what is left, so the baseline only ever moves down.

mod source_tree;
use source_tree::{read_sources, SourceFile};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The cycles between top-level modules (depth 1) allowed: none. The
/// core rebuild broke the last one (`cluster jetstream nats reload routing
/// shard`): connections and routes reach the shard through the traits it
/// implements (`nats::conn::ClientHost`, `cluster::routes::RouteHost`),
/// JetStream through the `ShardServices` it is handed. Kept as a list so
/// the ratchet's machinery stays tested; never add to it.
const ALLOWED_CYCLES: &[&[&str]] = &[];

/// The cycles between second-level modules (depth 2: `jetstream/stream`,
/// `nats/conn`, ...) allowed: none. A cycle inside one top-level module
/// (`auth/`, `routing/`, `jetstream/`) is one node at depth 1, so only
/// this check (and the depth-3 one) sees it.
const ALLOWED_SUBMODULE_CYCLES: &[&[&str]] = &[];

/// How the failure messages name a source file: the repository path.
const SOURCE_DISPLAY_PREFIX: &str = "broker/src/";

/// At most this many places are listed per edge in a failure message.
const REFERENCES_SHOWN_PER_EDGE_MAX: usize = 3;

#[test]
fn top_level_modules_form_no_new_cycle() {
    check_against_baseline(1, ALLOWED_CYCLES, "ALLOWED_CYCLES");
}

#[test]
fn submodules_form_no_new_cycle() {
    check_against_baseline(2, ALLOWED_SUBMODULE_CYCLES, "ALLOWED_SUBMODULE_CYCLES");
}

/// Third-level modules (`jetstream/stream/task`, `jetstream/api/json`, ...):
/// no cycle, none allowed.
#[test]
fn third_level_modules_form_no_cycle() {
    check_against_baseline(3, &[], "(none allowed at depth 3)");
}

/// Builds the crate's graph at `depth` and fails with every ratchet failure.
/// Prints the cycles as the Python tool does (seen with `--nocapture`).
fn check_against_baseline(depth: usize, allowed: &[&[&str]], constant_name: &str) {
    let sources = read_sources(&source_directory());
    let graph = ModuleGraph::build(&sources, depth);
    let cycles = graph.cycles();
    println!("{}", summary(&graph, &cycles));
    let baseline = Baseline {
        allowed,
        constant_name,
    };
    let failures = baseline.failures(&graph, &cycles);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

// ---------------------------------------------------------------------------
// Reading the sources

/// `broker/src`, wherever the repository is checked out.
fn source_directory() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

// ---------------------------------------------------------------------------
// The module graph

/// A place where a module names another: file, line and the path as written.
#[derive(Clone, Debug)]
struct Reference {
    file: String,
    line: u32,
    path: String,
}

/// The import graph between a crate's modules at one depth.
struct ModuleGraph {
    modules: BTreeSet<String>,
    /// `edges[a][b]`: every place where a file of module `a` names module `b`.
    edges: BTreeMap<String, BTreeMap<String, Vec<Reference>>>,
}

impl ModuleGraph {
    /// The graph of `sources` at `depth` (1: top-level modules).
    fn build(sources: &[SourceFile], depth: usize) -> ModuleGraph {
        let sources: Vec<&SourceFile> = sources
            .iter()
            .filter(|source| !is_test_file(&source.relative_path))
            .collect();
        let modules: BTreeSet<String> = sources
            .iter()
            .map(|source| module_of(&source.relative_path, depth))
            .collect();
        let mut edges: BTreeMap<String, BTreeMap<String, Vec<Reference>>> = BTreeMap::new();
        for source in sources {
            let from = module_of(&source.relative_path, depth);
            let stripped = StrippedSource::new(&source.text);
            for named in crate_paths(&stripped.text) {
                let Some(to) = target_module(&named.path, &modules, depth) else {
                    continue;
                };
                if is_same_or_nested(&from, &to) {
                    continue;
                }
                let reference = Reference {
                    file: source.relative_path.clone(),
                    line: stripped.lines[named.offset],
                    path: named.written,
                };
                let places = edges.entry(from.clone()).or_default();
                places.entry(to).or_default().push(reference);
            }
        }
        ModuleGraph { modules, edges }
    }

    /// The modules `module` imports.
    fn successors(&self, module: &str) -> impl Iterator<Item = &String> {
        self.edges
            .get(module)
            .into_iter()
            .flat_map(|targets| targets.keys())
    }

    /// The places where `from` names `to`; empty when it does not.
    fn references(&self, from: &str, to: &str) -> &[Reference] {
        let places = self.edges.get(from).and_then(|targets| targets.get(to));
        places.map_or(&[], Vec::as_slice)
    }

    /// The strongly connected components of more than one module, each
    /// sorted, largest first (ties by name).
    fn cycles(&self) -> Vec<Vec<String>> {
        let mut search = Tarjan::new(self);
        for module in &self.modules {
            if !search.index.contains_key(module.as_str()) {
                search.connect(module);
            }
        }
        let mut cycles = search.components;
        cycles.sort_by(|left, right| right.len().cmp(&left.len()).then(left.cmp(right)));
        cycles
    }
}

/// Whether `relative_path` is a test-only file: `tests.rs` or `*_tests.rs`.
fn is_test_file(relative_path: &str) -> bool {
    let name = relative_path.rsplit('/').next().unwrap_or(relative_path);
    name == "tests.rs" || name.ends_with("_tests.rs")
}

/// The module a file belongs to: its first `depth` path components, without
/// `.rs` and without a final `mod`; `lib.rs` and `main.rs` are `(root)`.
fn module_of(relative_path: &str, depth: usize) -> String {
    let without_extension = relative_path.strip_suffix(".rs").unwrap_or(relative_path);
    let mut parts: Vec<&str> = without_extension.split('/').collect();
    if matches!(parts.last(), Some(&("mod" | "lib" | "main"))) {
        parts.pop();
    }
    if parts.is_empty() {
        return "(root)".to_string();
    }
    parts[..depth.min(parts.len())].join("/")
}

/// The module a path after `crate::` names: its longest prefix of at most
/// `depth` segments that is a module.
fn target_module(path: &str, modules: &BTreeSet<String>, depth: usize) -> Option<String> {
    let segments: Vec<&str> = path.split("::").collect();
    (1..=depth.min(segments.len()))
        .rev()
        .map(|length| segments[..length].join("/"))
        .find(|candidate| modules.contains(candidate))
}

/// Whether an edge between `from` and `to` stays inside one module: they are
/// the same, or one is a parent of the other.
fn is_same_or_nested(from: &str, to: &str) -> bool {
    from == to || from.starts_with(&format!("{to}/")) || to.starts_with(&format!("{from}/"))
}

/// Tarjan's strongly connected components; owns only the search's state.
struct Tarjan<'graph> {
    graph: &'graph ModuleGraph,
    counter: usize,
    index: BTreeMap<&'graph str, usize>,
    low: BTreeMap<&'graph str, usize>,
    stack: Vec<&'graph str>,
    on_stack: BTreeSet<&'graph str>,
    /// The components of more than one module found so far, each sorted.
    components: Vec<Vec<String>>,
}

impl<'graph> Tarjan<'graph> {
    fn new(graph: &'graph ModuleGraph) -> Tarjan<'graph> {
        Tarjan {
            graph,
            counter: 0,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            components: Vec::new(),
        }
    }

    /// Visits `module` and everything reachable from it that is unvisited.
    /// Recursive: the depth is bounded by the number of modules (tens).
    fn connect(&mut self, module: &'graph str) {
        self.index.insert(module, self.counter);
        self.low.insert(module, self.counter);
        self.counter += 1;
        self.stack.push(module);
        self.on_stack.insert(module);
        for successor in self.graph.successors(module) {
            let successor = successor.as_str();
            if !self.index.contains_key(successor) {
                self.connect(successor);
                self.lower(module, self.low[successor]);
            } else if self.on_stack.contains(successor) {
                self.lower(module, self.index[successor]);
            }
        }
        if self.low[module] == self.index[module] {
            self.pop_component(module);
        }
    }

    /// Lowers `module`'s low-link to `candidate` if that is lower.
    fn lower(&mut self, module: &'graph str, candidate: usize) {
        let low = self.low.get_mut(module).expect("a visited module");
        *low = (*low).min(candidate);
    }

    /// Pops the component rooted at `root`, keeping it if it is a cycle.
    fn pop_component(&mut self, root: &'graph str) {
        let mut component = Vec::new();
        loop {
            let module = self.stack.pop().expect("the root is on the stack");
            self.on_stack.remove(module);
            component.push(module.to_string());
            if module == root {
                break;
            }
        }
        if component.len() > 1 {
            component.sort();
            self.components.push(component);
        }
    }
}

/// The Python tool's output for the same graph: a `cycle:` line per cycle,
/// then `modules=N cycles=K largest=L`.
fn summary(graph: &ModuleGraph, cycles: &[Vec<String>]) -> String {
    let mut lines: Vec<String> = cycles
        .iter()
        .map(|cycle| format!("cycle: {}", cycle.join(" ")))
        .collect();
    let largest = cycles.iter().map(Vec::len).max().unwrap_or(0);
    lines.push(format!(
        "modules={} cycles={} largest={largest}",
        graph.modules.len(),
        cycles.len()
    ));
    lines.join("\n")
}

// ---------------------------------------------------------------------------
// Removing comments and test modules

/// A file's text with comments and its test module removed, and for each
/// byte left, the line (from 1) of the original file it came from.
struct StrippedSource {
    text: String,
    lines: Vec<u32>,
}

impl StrippedSource {
    /// Removes `//` comments, then `/* */` comments from what is left, then
    /// everything from the first `#[cfg(test)] mod NAME {` on: the Python
    /// tool's three passes, in its order.
    fn new(text: &str) -> StrippedSource {
        let (bytes, lines) = without_line_comments(text.as_bytes());
        let (bytes, mut lines) = without_block_comments(&bytes, &lines);
        // Each removed range starts and ends at an ASCII byte or the end.
        let mut text = String::from_utf8(bytes).expect("removing comments keeps UTF-8");
        if let Some(start) = test_module_start(&text) {
            text.truncate(start);
            lines.truncate(start);
        }
        StrippedSource { text, lines }
    }
}

/// `bytes` without each `//` and the rest of its line (the newline stays),
/// with the line of every byte kept. Strings are not recognised.
fn without_line_comments(bytes: &[u8]) -> (Vec<u8>, Vec<u32>) {
    let mut kept = Vec::with_capacity(bytes.len());
    let mut kept_lines = Vec::with_capacity(bytes.len());
    let mut line = 1;
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index..].starts_with(b"//") {
            while index < bytes.len() && bytes[index] != b'\n' {
                index += 1;
            }
            continue;
        }
        kept.push(bytes[index]);
        kept_lines.push(line);
        if bytes[index] == b'\n' {
            line += 1;
        }
        index += 1;
    }
    (kept, kept_lines)
}

/// `bytes` without each `/*` up to the first `*/` after it (not nested).
/// An unclosed `/*` and everything after it stays.
fn without_block_comments(bytes: &[u8], lines: &[u32]) -> (Vec<u8>, Vec<u32>) {
    let mut kept = Vec::with_capacity(bytes.len());
    let mut kept_lines = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index..].starts_with(b"/*") {
            let body = &bytes[index + 2..];
            if let Some(end) = body.windows(2).position(|pair| pair == b"*/") {
                index += 2 + end + 2;
                continue;
            }
            kept.extend_from_slice(&bytes[index..]);
            kept_lines.extend_from_slice(&lines[index..]);
            break;
        }
        kept.push(bytes[index]);
        kept_lines.push(lines[index]);
        index += 1;
    }
    (kept, kept_lines)
}

/// Where the first `#[cfg(test)] mod NAME {` starts, if any.
fn test_module_start(text: &str) -> Option<usize> {
    const ATTRIBUTE: &str = "#[cfg(test)]";
    text.match_indices(ATTRIBUTE)
        .map(|(start, _)| start)
        .find(|start| opens_module(&text[start + ATTRIBUTE.len()..]))
}

/// Whether `rest` starts with `mod NAME {`, whitespace allowed around.
fn opens_module(rest: &str) -> bool {
    let Some(after_keyword) = rest.trim_start().strip_prefix("mod") else {
        return false;
    };
    let name = after_keyword.trim_start();
    let after_name = name.trim_start_matches(is_word_character);
    let has_space = name.len() < after_keyword.len();
    let has_name = after_name.len() < name.len();
    has_space && has_name && after_name.trim_start().starts_with('{')
}

fn is_word_character(character: char) -> bool {
    character.is_alphanumeric() || character == '_'
}

// ---------------------------------------------------------------------------
// Finding `crate::` paths

/// A path a text names through `crate::`.
struct CratePath {
    /// The byte offset where it is written.
    offset: usize,
    /// The module path after `crate::` it resolves by: `jetstream::stream`.
    path: String,
    /// How it reads in the source, for messages: `crate::jetstream::Stream`.
    written: String,
}

/// Every path a text names through `crate::`.
fn crate_paths(text: &str) -> Vec<CratePath> {
    let mut paths = inline_crate_paths(text);
    paths.extend(use_group_paths(text));
    paths
}

/// `crate::a::b` paths, inline or on `use` lines: lowercase segments only,
/// so `crate::jetstream::Stream` names `jetstream`.
fn inline_crate_paths(text: &str) -> Vec<CratePath> {
    const PREFIX: &str = "crate::";
    let mut paths = Vec::new();
    let mut search_from = 0;
    while let Some(found) = text[search_from..].find(PREFIX) {
        let start = search_from + found;
        let path_start = start + PREFIX.len();
        let length = if starts_word(text, start) {
            module_path_length(&text[path_start..])
        } else {
            0
        };
        if length == 0 {
            search_from = start + 1;
            continue;
        }
        let written = text[start..]
            .split(|character: char| !(is_word_character(character) || character == ':'))
            .next()
            .unwrap_or(PREFIX)
            .trim_end_matches(':');
        paths.push(CratePath {
            offset: start,
            path: text[path_start..path_start + length].to_string(),
            written: written.to_string(),
        });
        search_from = path_start + length;
    }
    paths
}

/// Whether no word character comes right before `offset`.
fn starts_word(text: &str, offset: usize) -> bool {
    let previous = text[..offset].chars().next_back();
    !previous.is_some_and(is_word_character)
}

/// The length of the `a::b::c` path (lowercase segments) `text` starts with.
fn module_path_length(text: &str) -> usize {
    let mut end = segment_length(text);
    if end == 0 {
        return 0;
    }
    while text[end..].starts_with("::") {
        let next = segment_length(&text[end + 2..]);
        if next == 0 {
            break;
        }
        end += 2 + next;
    }
    end
}

/// The length of the `[a-z_][a-z0-9_]*` segment `text` starts with.
fn segment_length(text: &str) -> usize {
    let bytes = text.as_bytes();
    if !bytes
        .first()
        .is_some_and(|byte| byte.is_ascii_lowercase() || *byte == b'_')
    {
        return 0;
    }
    let rest = bytes[1..]
        .iter()
        .take_while(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || **byte == b'_');
    1 + rest.count()
}

/// The paths of `use crate::{a::x, b};` groups: `a::x` and `b`.
fn use_group_paths(text: &str) -> Vec<CratePath> {
    let mut paths = Vec::new();
    let mut search_from = 0;
    while let Some(found) = text[search_from..].find("use") {
        let start = search_from + found;
        match use_group_at(text, start) {
            Some((group_start, group_end)) => {
                paths.extend(split_use_group(text, group_start, group_end));
                search_from = group_end + "};".len();
            }
            None => search_from = start + 1,
        }
    }
    paths
}

/// If `use crate::{...};` starts at `start`, the byte range between the
/// braces. The group ends at the first `;`, which must follow a `}`.
fn use_group_at(text: &str, start: usize) -> Option<(usize, usize)> {
    let after_keyword = &text[start + "use".len()..];
    let path = after_keyword.trim_start();
    if path.len() == after_keyword.len() || !path.starts_with("crate::{") {
        return None;
    }
    let group_start = text.len() - path.len() + "crate::{".len();
    let semicolon = group_start + text[group_start..].find(';')?;
    text[..semicolon]
        .ends_with('}')
        .then_some((group_start, semicolon - 1))
}

/// The paths of one group: its pieces between top-level commas, trimmed,
/// kept when they start with a letter (`c::{d, e}` stays one piece).
fn split_use_group(text: &str, group_start: usize, group_end: usize) -> Vec<CratePath> {
    let group = &text[group_start..group_end];
    let mut ranges = Vec::new();
    let mut piece_start = 0;
    for (index, byte) in group.bytes().enumerate() {
        if byte == b',' && !inside_braces(&group[index + 1..]) {
            ranges.push(piece_start..index);
            piece_start = index + 1;
        }
    }
    ranges.push(piece_start..group.len());
    let mut paths = Vec::new();
    for range in ranges {
        let piece = &group[range.clone()];
        let trimmed = piece.trim_start();
        let leading = piece.len() - trimmed.len();
        let trimmed = trimmed.trim_end();
        if trimmed.chars().next().is_some_and(char::is_alphabetic) {
            let words: Vec<&str> = trimmed.split_whitespace().collect();
            paths.push(CratePath {
                offset: group_start + range.start + leading,
                path: trimmed.to_string(),
                written: format!("crate::{}", words.join(" ")),
            });
        }
    }
    paths
}

/// Whether a comma followed by `rest` is inside nested braces: a `}` comes
/// before any `{`.
fn inside_braces(rest: &str) -> bool {
    let brace = rest.bytes().find(|byte| *byte == b'{' || *byte == b'}');
    brace == Some(b'}')
}

// ---------------------------------------------------------------------------
// The ratchet

/// The cycles allowed at one depth, and the constant that lists them.
struct Baseline<'allowed> {
    allowed: &'allowed [&'allowed [&'allowed str]],
    constant_name: &'allowed str,
}

impl Baseline<'_> {
    /// One message per difference between `cycles` and the baseline: a cycle
    /// that is new or grew, or an allowed cycle that shrank. Empty if none.
    fn failures(&self, graph: &ModuleGraph, cycles: &[Vec<String>]) -> Vec<String> {
        let allowed = self.allowed_sets();
        let mut failures = Vec::new();
        for cycle in cycles {
            let cycle: BTreeSet<&str> = cycle.iter().map(String::as_str).collect();
            if !allowed.iter().any(|baseline| cycle.is_subset(baseline)) {
                let overlap = best_overlap(&cycle, &allowed);
                failures.push(self.growth_message(graph, &cycle, overlap));
            }
        }
        for baseline in &allowed {
            if let Some(message) = self.shrink_message(baseline, cycles) {
                failures.push(message);
            }
        }
        failures
    }

    /// The allowed cycles as sets of module names.
    fn allowed_sets(&self) -> Vec<BTreeSet<&str>> {
        let sets = self
            .allowed
            .iter()
            .map(|cycle| cycle.iter().copied().collect());
        sets.collect()
    }

    /// The failure for `cycle`, which no allowed cycle contains; `overlap` is
    /// the allowed cycle sharing most modules with it, if any.
    fn growth_message(
        &self,
        graph: &ModuleGraph,
        cycle: &BTreeSet<&str>,
        overlap: Option<&BTreeSet<&str>>,
    ) -> String {
        let empty = BTreeSet::new();
        let baseline = overlap.unwrap_or(&empty);
        let context = match overlap {
            Some(baseline) => format!(
                "it grew from the allowed cycle {} in {}: {} joined",
                names(baseline),
                self.constant_name,
                names(&cycle.difference(baseline).copied().collect()),
            ),
            None => format!("no cycle in {} contains it", self.constant_name),
        };
        format!(
            "new import cycle between modules {}: {context}.\n\
             Dependencies point one way, down (shared/CONVENTIONS.md, \"Layout\").\n\
             These imports close the cycle:\n{}\n\
             To fix it, remove imports among these so the modules depend one way: move what the \
             lower module needs down into it, or hand it in through a trait or a typed \
             channel. Do not add the cycle to {}: that list only shrinks.",
            names(cycle),
            closing_edges(graph, cycle, baseline),
            self.constant_name,
        )
    }

    /// The failure for an allowed cycle that is no longer all there, if so.
    /// A cycle that grew past it, or whose only remains are in a cycle with
    /// new modules, is reported by `growth_message` instead.
    fn shrink_message(&self, baseline: &BTreeSet<&str>, cycles: &[Vec<String>]) -> Option<String> {
        let cycles: Vec<BTreeSet<&str>> = cycles
            .iter()
            .map(|cycle| cycle.iter().map(String::as_str).collect())
            .collect();
        if cycles.iter().any(|cycle| cycle.is_superset(baseline)) {
            return None;
        }
        let remaining: Vec<&BTreeSet<&str>> = cycles
            .iter()
            .filter(|cycle| cycle.is_subset(baseline))
            .collect();
        let overlapping = cycles.iter().any(|cycle| !cycle.is_disjoint(baseline));
        if remaining.is_empty() && overlapping {
            return None;
        }
        let what = if remaining.is_empty() {
            "is gone: remove it from".to_string()
        } else {
            let parts: Vec<String> = remaining.iter().map(|cycle| names(cycle)).collect();
            format!("shrank to {}: replace it in", parts.join(" and "))
        };
        let literals: Vec<String> = remaining.iter().map(|cycle| rust_literal(cycle)).collect();
        Some(format!(
            "the allowed import cycle {} {what} {} (broker/tests/module_graph.rs), so it \
             cannot grow back. Its new entries:\n{}",
            names(baseline),
            self.constant_name,
            if literals.is_empty() {
                "    (none)".to_string()
            } else {
                literals.join("\n")
            },
        ))
    }
}

/// The allowed cycle sharing most modules with `cycle`, if any shares one.
fn best_overlap<'sets, 'names>(
    cycle: &BTreeSet<&'names str>,
    allowed: &'sets [BTreeSet<&'names str>],
) -> Option<&'sets BTreeSet<&'names str>> {
    let shared = |baseline: &BTreeSet<&str>| cycle.intersection(baseline).count();
    let best = allowed.iter().max_by_key(|baseline| shared(baseline))?;
    (shared(best) > 0).then_some(best)
}

/// The edges inside `cycle` that touch a module outside `baseline` (all of
/// them when `baseline` is empty), one line per place they are written.
fn closing_edges(graph: &ModuleGraph, cycle: &BTreeSet<&str>, baseline: &BTreeSet<&str>) -> String {
    let mut lines = Vec::new();
    for from in cycle {
        for to in cycle {
            let references = graph.references(from, to);
            if references.is_empty() || (baseline.contains(from) && baseline.contains(to)) {
                continue;
            }
            for reference in references.iter().take(REFERENCES_SHOWN_PER_EDGE_MAX) {
                lines.push(format!(
                    "    {from} -> {to}: {SOURCE_DISPLAY_PREFIX}{}:{} `{}`",
                    reference.file, reference.line, reference.path
                ));
            }
            let hidden = references
                .len()
                .saturating_sub(REFERENCES_SHOWN_PER_EDGE_MAX);
            if hidden > 0 {
                lines.push(format!("    {from} -> {to}: and {hidden} more"));
            }
        }
    }
    lines.join("\n")
}

/// `["a", "b"]`, for messages.
fn names(modules: &BTreeSet<&str>) -> String {
    let quoted: Vec<String> = modules.iter().map(|name| format!("{name:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// `    &["a", "b"],`, an entry to paste into a baseline.
fn rust_literal(modules: &BTreeSet<&str>) -> String {
    format!("    &{},", names(modules))
}

// ---------------------------------------------------------------------------
// The checker's own tests, on small in-memory crates: they prove it would fail
// if a cycle appeared.

/// An in-memory crate from `(path under src/, text)` pairs.
fn sources(files: &[(&str, &str)]) -> Vec<SourceFile> {
    let files = files.iter().map(|(relative_path, text)| SourceFile {
        relative_path: relative_path.to_string(),
        text: text.to_string(),
    });
    files.collect()
}

/// The modules `module` imports, by name.
fn successor_names(graph: &ModuleGraph, module: &str) -> Vec<String> {
    graph.successors(module).cloned().collect()
}

#[test]
fn two_modules_importing_each_other_form_a_cycle() {
    let crate_sources = sources(&[
        ("lib.rs", "pub mod a;\npub mod b;\n"),
        ("a.rs", "use crate::b::Thing;\npub fn f() {}\n"),
        (
            "b/mod.rs",
            "pub struct Thing;\n\nfn g() {\n    crate::a::f();\n}\n",
        ),
    ]);
    let graph = ModuleGraph::build(&crate_sources, 1);
    assert_eq!(graph.cycles(), vec![vec!["a".to_string(), "b".to_string()]]);
    assert_eq!(graph.references("b", "a")[0].line, 4);

    let none_allowed = Baseline {
        allowed: &[],
        constant_name: "ALLOWED",
    };
    let failures = none_allowed.failures(&graph, &graph.cycles());
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].contains(r#"new import cycle between modules ["a", "b"]"#));
    assert!(failures[0].contains("a -> b: broker/src/a.rs:1 `crate::b::Thing`"));
    assert!(failures[0].contains("remove imports"), "{}", failures[0]);
    assert!(failures[0].contains("b -> a: broker/src/b/mod.rs:4 `crate::a::f`"));

    let allowed = Baseline {
        allowed: &[&["a", "b"]],
        constant_name: "ALLOWED",
    };
    assert!(allowed.failures(&graph, &graph.cycles()).is_empty());
}

#[test]
fn comments_and_test_modules_are_not_imports() {
    let crate_sources = sources(&[
        ("a.rs", "use crate::b::Thing;\n"),
        (
            "b.rs",
            "// use crate::a::x;\nfn f() {} /* crate::a::y\n crate::a::z */\n\
             #[cfg(test)]\nmod tests {\n    use crate::a::x;\n}\nfn after() { crate::a::x(); }\n",
        ),
        ("b/tests.rs", "use crate::a::x;\n"),
        ("b/parser_tests.rs", "use crate::a::x;\n"),
        ("c_tests.rs", "use crate::a::x;\n"),
    ]);
    let graph = ModuleGraph::build(&crate_sources, 1);
    assert!(graph.cycles().is_empty());
    assert!(successor_names(&graph, "b").is_empty());
    assert_eq!(successor_names(&graph, "a"), ["b"]);
    // A skipped test file is not a module either.
    assert!(!graph.modules.contains("c_tests"));
}

#[test]
fn use_groups_produce_edges_to_each_module() {
    let crate_sources = sources(&[
        (
            "a.rs",
            "use crate::{\n    b::Thing,\n    c,\n    d::{e, f::{G, H}},\n    Top,\n};\n",
        ),
        ("b.rs", ""),
        ("c.rs", ""),
        ("d/mod.rs", ""),
        ("e.rs", "use crate::b::{X, Y};\n"),
    ]);
    let graph = ModuleGraph::build(&crate_sources, 1);
    assert_eq!(successor_names(&graph, "a"), ["b", "c", "d"]);
    let to_c = graph.references("a", "c");
    assert_eq!((to_c[0].line, to_c[0].path.as_str()), (3, "crate::c"));
    // A path group after a module is an ordinary `crate::b` path.
    assert_eq!(graph.references("e", "b")[0].path, "crate::b");
}

#[test]
fn edges_between_a_module_and_its_parent_or_child_are_ignored() {
    let crate_sources = sources(&[
        (
            "jetstream/mod.rs",
            "use crate::jetstream::stream::Stream;\n",
        ),
        ("jetstream/stream/mod.rs", "use crate::jetstream::Api;\n"),
        (
            "jetstream/stream/leader.rs",
            "use crate::jetstream::stream::Stream;\n",
        ),
    ]);
    for depth in [1, 2, 3] {
        let graph = ModuleGraph::build(&crate_sources, depth);
        assert!(graph.cycles().is_empty(), "depth {depth}");
        assert!(
            graph.edges.is_empty(),
            "depth {depth}: {:?}",
            graph.edges.keys()
        );
    }
}

#[test]
fn sibling_submodules_importing_each_other_form_a_cycle_at_depth_two() {
    let crate_sources = sources(&[
        ("jetstream/mod.rs", ""),
        (
            "jetstream/stream/mod.rs",
            "use crate::jetstream::consumer::Ack;\n",
        ),
        (
            "jetstream/consumer.rs",
            "fn f(s: crate::jetstream::stream::Stream) {}\n",
        ),
    ]);
    assert!(ModuleGraph::build(&crate_sources, 1).cycles().is_empty());
    let cycles = ModuleGraph::build(&crate_sources, 2).cycles();
    assert_eq!(cycles, [["jetstream/consumer", "jetstream/stream"]]);
}

#[test]
fn a_module_joining_an_allowed_cycle_fails_with_the_imports_that_close_it() {
    let crate_sources = sources(&[
        ("a.rs", "use crate::b::x;\n"),
        ("b.rs", "use crate::a::y;\nuse crate::c::z;\n"),
        ("c.rs", "\nuse crate::a::w;\n"),
    ]);
    let graph = ModuleGraph::build(&crate_sources, 1);
    let baseline = Baseline {
        allowed: &[&["a", "b"]],
        constant_name: "ALLOWED_CYCLES",
    };
    let failures = baseline.failures(&graph, &graph.cycles());
    assert_eq!(failures.len(), 1, "{failures:?}");
    let message = &failures[0];
    assert!(
        message.contains(r#"grew from the allowed cycle ["a", "b"]"#),
        "{message}"
    );
    assert!(
        message.contains("b -> c: broker/src/b.rs:2 `crate::c::z`"),
        "{message}"
    );
    assert!(
        message.contains("c -> a: broker/src/c.rs:2 `crate::a::w`"),
        "{message}"
    );
    assert!(!message.contains("a -> b"), "{message}");
}

#[test]
fn an_allowed_cycle_that_shrank_fails_until_the_baseline_is_updated() {
    let crate_sources = sources(&[
        ("a.rs", "use crate::b::x;\n"),
        ("b.rs", "use crate::a::y;\n"),
        ("c.rs", "use crate::a::w;\n"),
    ]);
    let graph = ModuleGraph::build(&crate_sources, 1);
    let baseline = Baseline {
        allowed: &[&["a", "b", "c"], &["d", "e"]],
        constant_name: "ALLOWED_CYCLES",
    };
    let failures = baseline.failures(&graph, &graph.cycles());
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert!(failures[0].contains(r#"["a", "b", "c"] shrank to ["a", "b"]"#));
    assert!(failures[0].contains(r#"    &["a", "b"],"#));
    assert!(failures[1].contains(r#"["d", "e"] is gone: remove it from ALLOWED_CYCLES"#));

    // `c` left the allowed cycle and `a` joined: reported once, as grown.
    let swapped = Baseline {
        allowed: &[&["b", "c"]],
        constant_name: "ALLOWED_CYCLES",
    };
    let failures = swapped.failures(&graph, &graph.cycles());
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].contains(r#"["a"] joined"#), "{}", failures[0]);
}

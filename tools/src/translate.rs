//! `--translate COMMAND` (`stream get`, `sub`, `req`): a message body
//! run through a command before it is printed, as the `nats` CLI does it.
//! `{{Subject}}` and `{{Stream}}` in the command line are replaced (Go
//! template calls, spaces inside the braces allowed), the line is split
//! into words as a POSIX shell would (quotes, backslashes; no expansion,
//! no pipes), and the body goes to the command's stdin; what it writes
//! (stdout, then stderr, as Go's `CombinedOutput`) is what is printed.

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use crate::error::CliError;

/// A command's output read at most.
pub const OUTPUT_BYTES_MAX: u64 = 64 << 20;

/// Why a `--translate` command line is refused before it runs.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TranslateError {
    #[error("the command line is empty")]
    Empty,
    #[error("a quote is not closed")]
    OpenQuote,
    #[error("unknown template field {{{{{0}}}}} (Subject and Stream are known)")]
    UnknownField(String),
}

/// The command line with `{{Subject}}` and `{{Stream}}` replaced.
pub fn render(template: &str, subject: &str, stream: &str) -> Result<String, TranslateError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        match after[..end].trim() {
            "Subject" => out.push_str(subject),
            "Stream" => out.push_str(stream),
            other => return Err(TranslateError::UnknownField(other.to_string())),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Words of a command line as a POSIX shell splits them (no expansion).
pub fn split_words(line: &str) -> Result<Vec<String>, TranslateError> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut characters = line.chars();
    while let Some(character) = characters.next() {
        match character {
            ' ' | '\t' | '\n' => {
                if let Some(done) = word.take() {
                    words.push(done);
                }
            }
            '\'' => {
                let current = word.get_or_insert_with(String::new);
                loop {
                    match characters.next() {
                        Some('\'') => break,
                        Some(inner) => current.push(inner),
                        None => return Err(TranslateError::OpenQuote),
                    }
                }
            }
            '"' => {
                let current = word.get_or_insert_with(String::new);
                loop {
                    match characters.next() {
                        Some('"') => break,
                        Some('\\') => match characters.next() {
                            Some(escaped @ ('"' | '\\' | '$' | '`')) => current.push(escaped),
                            Some(other) => {
                                current.push('\\');
                                current.push(other);
                            }
                            None => return Err(TranslateError::OpenQuote),
                        },
                        Some(inner) => current.push(inner),
                        None => return Err(TranslateError::OpenQuote),
                    }
                }
            }
            '\\' => {
                if let Some(escaped) = characters.next() {
                    word.get_or_insert_with(String::new).push(escaped);
                }
            }
            other => word.get_or_insert_with(String::new).push(other),
        }
    }
    if let Some(done) = word {
        words.push(done);
    }
    if words.is_empty() {
        return Err(TranslateError::Empty);
    }
    Ok(words)
}

/// Runs `template` (rendered for `subject` and `stream`) with `body` on
/// its stdin; its stdout then its stderr.
pub fn translate(
    template: &str,
    body: &[u8],
    subject: &str,
    stream: &str,
) -> Result<Vec<u8>, CliError> {
    let refused = |reason: String| CliError::Failed {
        action: format!("--translate {template}"),
        reason,
    };
    let line = render(template, subject, stream).map_err(|error| refused(error.to_string()))?;
    let words = split_words(&line).map_err(|error| refused(error.to_string()))?;
    let mut child = Command::new(&words[0])
        .args(&words[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| refused(format!("cannot run {}: {error}", words[0])))?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let body = body.to_vec();
    // The body is written from its own thread so a command that writes
    // before it has read everything cannot dead-lock against us.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let errors = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = (&mut stderr).take(OUTPUT_BYTES_MAX).read_to_end(&mut text);
        text
    });
    let mut output = Vec::new();
    let _ = (&mut stdout)
        .take(OUTPUT_BYTES_MAX)
        .read_to_end(&mut output);
    let _ = writer.join();
    output.extend(errors.join().unwrap_or_default());
    child
        .wait()
        .map_err(|error| refused(format!("waiting for {}: {error}", words[0])))?;
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_fields() {
        assert_eq!(
            render("jq . --arg s {{Subject}} {{ Stream }}", "a.b", "S").unwrap(),
            "jq . --arg s a.b S"
        );
        assert_eq!(
            render("x {{Other}}", "a", "S"),
            Err(TranslateError::UnknownField("Other".into()))
        );
    }

    #[test]
    fn words_as_a_shell_splits_them() {
        assert_eq!(
            split_words(r#"jq -r '.a b' "x \"y\"" z\ w"#).unwrap(),
            ["jq", "-r", ".a b", "x \"y\"", "z w"]
        );
        assert_eq!(split_words("  "), Err(TranslateError::Empty));
        assert_eq!(split_words("a 'b"), Err(TranslateError::OpenQuote));
    }

    #[test]
    fn a_body_through_a_command() {
        let output = translate("tr a-z A-Z", b"order {{x}}", "s", "S").unwrap();
        assert_eq!(output, b"ORDER {{X}}");
        let output = translate("echo {{Subject}}", b"", "orders.new", "S").unwrap();
        assert_eq!(output, b"orders.new\n");
        assert!(translate("/nonexistent/tool", b"", "s", "S").is_err());
    }
}

//! Reading C++ source files as text (whatever their bytes: `read_source`), and a lossless C++ lexer
//! (every character lands in one token: spaces, comments and preprocessor lines included), for rewriting
//! kernel sources: back-translation of Metal to CUDA, and the compact form of a kernel's source that MLX
//! is handed.

use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Ident,
    Number,
    Punct,
    Str,
    Space,
    Comment,
    Preproc,
}

#[derive(Debug, Clone)]
pub struct Tok {
    pub kind: Kind,
    pub text: String,
    pub line: usize,
    /// Offset of the first character, in characters.
    pub pos: usize,
}

/// Where the logical line from `i` ends (at its newline, not taken): backslash-newline pairs continue it.
fn logical_line_end(b: &[char], mut i: usize, line: &mut usize) -> usize {
    while i < b.len() && b[i] != '\n' {
        if b[i] == '\\' && b.get(i + 1) == Some(&'\n') {
            i += 1;
            *line += 1;
        }
        i += 1;
    }
    i
}

/// The delimiter of a raw string `R"delim(` starting at `i`: at most 16 characters, none a space, a
/// backslash or a parenthesis (C++'s rule), so an `R"` that opens none is read as an ordinary literal.
fn raw_string_delimiter(b: &[char], i: usize) -> Option<String> {
    if b[i] != 'R' || b.get(i + 1) != Some(&'"') {
        return None;
    }
    let open: String = b[i + 2..]
        .iter()
        .take(17)
        .take_while(|&&x| x != '(')
        .collect();
    let valid = open.len() <= 16
        && b.get(i + 2 + open.len()) == Some(&'(')
        && !open.contains(|x: char| x.is_whitespace() || x == '\\' || x == ')');
    valid.then_some(open)
}

/// Every character of `src` in exactly one token, in order (concatenating the texts gives `src` back).
pub fn lex(src: &str) -> Vec<Tok> {
    let b: Vec<char> = src.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    let mut line = 1;
    let mut line_start = true;
    while i < b.len() {
        let start = i;
        let start_line = line;
        let c = b[i];
        let kind;
        if c == '\n' || c.is_whitespace() {
            while i < b.len() && b[i].is_whitespace() {
                if b[i] == '\n' {
                    line += 1;
                    line_start = true;
                }
                i += 1;
            }
            kind = Kind::Space;
        } else if c == '#' && line_start {
            i = logical_line_end(&b, i, &mut line);
            kind = Kind::Preproc;
        } else if c == '/' && b.get(i + 1) == Some(&'/') {
            i = logical_line_end(&b, i, &mut line); // a backslash makes the next line comment too
            kind = Kind::Comment;
        } else if c == '/' && b.get(i + 1) == Some(&'*') {
            i += 2;
            while i < b.len() && !(b[i] == '*' && b.get(i + 1) == Some(&'/')) {
                if b[i] == '\n' {
                    line += 1;
                }
                i += 1;
            }
            i = (i + 2).min(b.len());
            kind = Kind::Comment;
        } else if let Some(open) = raw_string_delimiter(&b, i) {
            // a raw string R"delim( ... )delim", newlines and all
            let close: Vec<char> = format!("){open}\"").chars().collect();
            i += 2 + open.len();
            while i < b.len() && !b[i..].starts_with(&close) {
                if b[i] == '\n' {
                    line += 1;
                }
                i += 1;
            }
            i = (i + close.len()).min(b.len());
            kind = Kind::Str;
        } else if c == '"' || c == '\'' {
            // a literal ends at its quote; an unterminated one at the end of its line (the newline is not
            // its). A backslash-newline inside continues it on the next line (`asm("...\n \` over lines).
            i += 1;
            while i < b.len() && b[i] != c && b[i] != '\n' {
                if b[i] == '\\' && i + 1 < b.len() {
                    if b[i + 1] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            if i < b.len() && b[i] == c {
                i += 1;
            }
            kind = Kind::Str;
        } else if c.is_ascii_alphabetic() || c == '_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            kind = Kind::Ident;
        } else if c.is_ascii_digit()
            || (c == '.' && b.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            while i < b.len() {
                let d = b[i];
                let hex = b.get(start + 1).is_some_and(|x| *x == 'x' || *x == 'X');
                let exp_sign = (d == '+' || d == '-')
                    && if hex {
                        matches!(b[i - 1], 'p' | 'P')
                    } else {
                        matches!(b[i - 1], 'e' | 'E')
                    };
                let separator = d == '\'' && b.get(i + 1).is_some_and(|x| x.is_ascii_hexdigit());
                if d.is_ascii_alphanumeric() || d == '.' || d == '_' || exp_sign || separator {
                    i += 1;
                } else {
                    break;
                }
            }
            kind = Kind::Number;
        } else {
            let two: String = b[i..(i + 2).min(b.len())].iter().collect();
            i += if ["::", "->", "[["].contains(&two.as_str()) {
                2
            } else {
                1
            };
            kind = Kind::Punct;
        }
        if kind != Kind::Space && kind != Kind::Comment {
            line_start = false;
        }
        toks.push(Tok {
            kind,
            text: b[start..i].iter().collect(),
            line: start_line,
            pos: start,
        });
    }
    toks
}

/// The source as MLX is handed it: comments dropped, each line's indentation and trailing blanks trimmed,
/// every newline kept, so a compiler's line numbers still point into the file. MLX copies and hashes a
/// custom kernel's whole source at every call (about 0.2 µs per KB on the H200,
/// bench/results/h200-mlx-call-overhead-20261130.json), so a well-commented body, or a Metal header, costs
/// each call microseconds for nothing (on CUDA the worker hands MLX a header as a file it includes,
/// python/ksearch_worker/header_file.py, which costs a call nothing whatever its size).
pub fn compact(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let at_line_start = |out: &String| out.is_empty() || out.ends_with('\n');
    let newlines = |out: &mut String, n: usize| {
        if n > 0 {
            out.truncate(out.trim_end_matches([' ', '\t']).len());
            out.extend(std::iter::repeat_n('\n', n));
        }
    };
    for t in lex(src) {
        match t.kind {
            Kind::Space | Kind::Comment => {
                let n = t.text.matches('\n').count();
                if n > 0 {
                    newlines(&mut out, n);
                } else if !at_line_start(&out) && !out.ends_with(' ') {
                    out.push(' '); // a comment between two tokens still separates them
                }
            }
            _ => out.push_str(&t.text),
        }
    }
    if !src.ends_with('\n') {
        out.truncate(out.trim_end().len());
    }
    out
}

/// A source file as text: UTF-8, or else read as Latin-1 (every byte a character), so a stray byte in a
/// comment does not refuse the file. Identifiers and code are ASCII either way.
pub fn read_source(file: &Path) -> std::io::Result<String> {
    Ok(decode_source(&std::fs::read(file)?))
}

/// A source's bytes as text: UTF-8, else Latin-1 (every byte a character, so no file is refused for a
/// byte in a comment).
pub fn decode_source(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_string(),
        Err(_) => bytes.iter().map(|&b| b as char).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexing_loses_nothing() {
        let src = "#define X 1 // x\nint a = b/*c*/+ 'd' - \"e//f\"; // g\n\t  float  h;\n";
        assert_eq!(
            lex(src).iter().map(|t| t.text.as_str()).collect::<String>(),
            src
        );
    }

    #[test]
    fn compact_drops_comments_and_indentation_and_keeps_lines() {
        let src = "// header\n#include <mma.h>\nnamespace k {  // why\n  /* two\n     lines */ int a =  b/*x*/c;\n    auto s = \"//kept\";\n}\n";
        let got = compact(src);
        assert_eq!(
            got,
            "\n#include <mma.h>\nnamespace k {\n\nint a = b c;\nauto s = \"//kept\";\n}\n"
        );
        assert_eq!(
            got.lines().count(),
            src.lines().count(),
            "line numbers still point into the file"
        );
        assert_eq!(compact("int x; // no newline at the end"), "int x;");
    }

    /// The tokens a compiler sees (no spaces, no comments), with their lines.
    fn code(src: &str) -> Vec<(String, usize)> {
        lex(src)
            .into_iter()
            .filter(|t| !matches!(t.kind, Kind::Space | Kind::Comment))
            .map(|t| (t.text, t.line))
            .collect()
    }

    #[test]
    fn compacting_every_shipped_kernel_file_keeps_its_code_and_lines() {
        let mut files = 0;
        let mut stack = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tasks")];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                let ext = p.extension().and_then(|x| x.to_str()).unwrap_or("");
                if p.is_dir() {
                    stack.push(p);
                } else if ["cu", "cuh", "metal", "h"].contains(&ext) {
                    let src = std::fs::read_to_string(&p).unwrap();
                    assert_eq!(code(&compact(&src)), code(&src), "{}", p.display());
                    files += 1;
                }
            }
        }
        assert!(files >= 20, "found only {files} kernel files under tasks/");
    }

    #[test]
    fn continued_comments_raw_strings_and_digit_separators_are_single_tokens() {
        // A backslash at the end of a // comment makes the next line comment too.
        assert_eq!(compact("a; // c \\\nb;\nc;\n"), "a;\n\nc;\n");
        // A raw string keeps its lines, spaces and slashes.
        let raw = "s = R\"x(one  // two\n   /* three */)x\";\n";
        assert_eq!(compact(raw), raw);
        // A digit separator is no character literal; an unterminated literal ends at its line.
        assert_eq!(
            compact("int n = 1'024; // k\n#define Y 1\n"),
            "int n = 1'024;\n#define Y 1\n"
        );
        let toks = lex("'a\nb");
        assert_eq!((toks[0].text.as_str(), toks[2].line), ("'a", 2));
        // A backslash-newline continues a literal; the token after it is on the line after.
        let toks = lex("s = \"a\\\nb\"; c");
        assert_eq!(toks[4].text, "\"a\\\nb\"");
        assert_eq!(
            (toks[7].text.as_str(), toks[7].line, toks[7].pos),
            ("c", 2, 12)
        );
        // An `R"` that opens no raw string is an ordinary literal (a blanked one, or a typo).
        let toks = lex("R\"  \" x");
        assert_eq!(
            (toks[0].text.as_str(), toks[1].text.as_str()),
            ("R", "\"  \"")
        );
        for src in [raw, "a; // c \\\nb;\n", "x = 'q\n"] {
            assert_eq!(
                lex(src).iter().map(|t| t.text.as_str()).collect::<String>(),
                src
            );
        }
    }
}

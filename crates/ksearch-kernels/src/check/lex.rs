//! A small C++ lexer for the rules: comments, string literals and preprocessor lines are blanked out
//! (line numbers kept), the rest becomes tokens with their line.

#[derive(Debug, Clone, PartialEq)]
pub struct Tok {
    pub text: String,
    pub line: usize,
    /// Offset in characters (the cleaned text keeps every character where it was).
    pub pos: usize,
}

impl Tok {
    pub fn is(&self, s: &str) -> bool {
        self.text == s
    }
    pub fn is_ident(&self) -> bool {
        self.text
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
    }
}

/// The source with comments, string and character literals replaced by spaces, and a list of
/// preprocessor lines `(line, text)`; newlines stay where they were.
pub fn clean(src: &str) -> (String, Vec<(usize, String)>) {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut pp = Vec::new();
    let (mut i, mut line, mut at_line_start) = (0, 1, true);
    while i < b.len() {
        let c = b[i];
        if c == '\n' {
            out.push('\n');
            line += 1;
            at_line_start = true;
            i += 1;
            continue;
        }
        if at_line_start && c == '#' {
            // A directive, with its continuation lines.
            let start_line = line;
            let mut text = String::new();
            while i < b.len() && b[i] != '\n' {
                if b[i] == '\\' && b.get(i + 1) == Some(&'\n') {
                    out.push(' ');
                    out.push('\n');
                    line += 1;
                    i += 2;
                    continue;
                }
                text.push(b[i]);
                out.push(' ');
                i += 1;
            }
            pp.push((start_line, text));
            continue;
        }
        if !c.is_whitespace() {
            at_line_start = false;
        }
        if c == '/' && b.get(i + 1) == Some(&'/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
            continue;
        }
        if c == '/' && b.get(i + 1) == Some(&'*') {
            out.push_str("  ");
            i += 2;
            while i < b.len() && !(b[i] == '*' && b.get(i + 1) == Some(&'/')) {
                if b[i] == '\n' {
                    out.push('\n');
                    line += 1;
                } else {
                    out.push(' ');
                }
                i += 1;
            }
            if i < b.len() {
                out.push_str("  ");
                i += 2;
            }
            continue;
        }
        if c == '"' || c == '\'' {
            // Keep the quotes (so `printf("...")` still reads as a call), blank the contents.
            out.push(c);
            i += 1;
            while i < b.len() && b[i] != c && b[i] != '\n' {
                if b[i] == '\\' && b.get(i + 1) == Some(&'\n') {
                    // A line continued inside the literal (`asm("...\n \` over lines): the line count
                    // goes on.
                    out.push_str(" \n");
                    line += 1;
                    i += 2;
                    continue;
                }
                if b[i] == '\\' && i + 1 < b.len() {
                    out.push(' ');
                    i += 1;
                }
                out.push(' ');
                i += 1;
            }
            if i < b.len() && b[i] == c {
                out.push(c);
                i += 1;
            }
            continue;
        }
        out.push(c);
        i += 1;
    }
    (out, pp)
}

const PUNCT3: [&str; 3] = ["<<=", ">>=", "..."];
const PUNCT2: [&str; 19] = [
    "<=", ">=", "==", "!=", "&&", "||", "++", "--", "->", "::", "<<", ">>", "+=", "-=", "*=", "/=",
    "%=", "&=", "|=",
];

/// Tokens of cleaned text (see [`clean`]).
pub fn tokens(clean: &str) -> Vec<Tok> {
    let b: Vec<char> = clean.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < b.len() {
        let c = b[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            out.push(Tok {
                text: b[s..i].iter().collect(),
                line,
                pos: s,
            });
        } else if c.is_ascii_digit()
            || (c == '.' && b.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            let s = i;
            // A sign belongs to the number only after an exponent letter: e/E in a decimal literal,
            // p/P in a hexadecimal one (in `0x1E+1` the E is a digit and + an operator).
            let hex = c == '0' && matches!(b.get(i + 1), Some('x' | 'X'));
            while i < b.len()
                && (b[i].is_ascii_alphanumeric()
                    || b[i] == '.'
                    || b[i] == '_'
                    || ((b[i] == '+' || b[i] == '-')
                        && if hex {
                            matches!(b[i - 1], 'p' | 'P')
                        } else {
                            matches!(b[i - 1], 'e' | 'E')
                        }))
            {
                i += 1;
            }
            out.push(Tok {
                text: b[s..i].iter().collect(),
                line,
                pos: s,
            });
        } else {
            let rest: String = b[i..(i + 3).min(b.len())].iter().collect();
            let p = PUNCT3
                .iter()
                .chain(PUNCT2.iter())
                .find(|p| rest.starts_with(**p))
                .map(|p| p.to_string())
                .unwrap_or_else(|| c.to_string());
            out.push(Tok {
                text: p.clone(),
                line,
                pos: i,
            });
            i += p.chars().count();
        }
    }
    out
}

/// Index of the token closing the bracket opened at `open` (`(`, `[` or `{`), or the last token.
pub fn matching(toks: &[Tok], open: usize) -> usize {
    let (o, c) = match toks[open].text.as_str() {
        "(" => ("(", ")"),
        "[" => ("[", "]"),
        _ => ("{", "}"),
    };
    let mut depth = 0usize;
    for (j, t) in toks.iter().enumerate().skip(open) {
        if t.is(o) {
            depth += 1;
        } else if t.is(c) {
            depth -= 1;
            if depth == 0 {
                return j;
            }
        }
    }
    toks.len().saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_strings_and_directives_are_blanked_with_lines_kept() {
        let src = "a // double\n/* x\n y */ b \"double\" c\n#pragma once\nd";
        let (c, pp) = clean(src);
        assert_eq!(c.lines().count(), 5);
        assert!(!c.contains("double"));
        assert_eq!(pp, vec![(4, "#pragma once".to_string())]);
        let t = tokens(&c);
        let names: Vec<_> = t.iter().map(|t| (t.text.as_str(), t.line)).collect();
        assert_eq!(
            names,
            [("a", 1), ("b", 3), ("\"", 3), ("\"", 3), ("c", 3), ("d", 5)]
        );
    }

    #[test]
    fn a_string_continued_over_lines_keeps_the_line_count() {
        let src = "asm(\"\\n \\\n  add \\n \\\n  \");\n#else\nx";
        let (c, pp) = clean(src);
        assert_eq!(c.lines().count(), src.lines().count());
        assert_eq!(pp, vec![(4, "#else".to_string())]);
    }

    #[test]
    fn multi_character_punctuators_and_numbers() {
        let t = tokens("x<<=1.5e-3f; a->b <= c");
        let s: Vec<_> = t.iter().map(|t| t.text.as_str()).collect();
        assert_eq!(s, ["x", "<<=", "1.5e-3f", ";", "a", "->", "b", "<=", "c"]);
        // In a hexadecimal literal E is a digit: the sign after it is an operator; after p it is not.
        let t = tokens("0x1E+1 0x1p-3");
        let s: Vec<_> = t.iter().map(|t| t.text.as_str()).collect();
        assert_eq!(s, ["0x1E", "+", "1", "0x1p-3"]);
    }
}

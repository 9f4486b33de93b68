//! The checker's view of C++, over the one lossless lexer ([`ksearch_model::cpplex`]): the source with
//! comments, literal contents and preprocessor lines blanked (every character keeps its place, so lines
//! and offsets still point into the file), and the code's tokens with C++'s multi-character operators
//! joined and attribute brackets `[[` kept apart (bracket matching counts them one by one).

use ksearch_model::cpplex::{self, Kind};

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

/// Every character but a newline as a space.
fn blank(text: &str, out: &mut String) {
    out.extend(text.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
}

/// A file as the rules read it, from one lexing pass: its code tokens (no spaces, comments or directives;
/// a literal's contents blanked, a raw string dropped), its preprocessor lines `(line, text)` (continuations
/// joined), and the cleaned text the tokens' offsets point into (comments, literal contents and directives
/// blanked, every newline where it was).
#[derive(Debug)]
pub struct View {
    pub clean: String,
    pub toks: Vec<Tok>,
    pub directives: Vec<(usize, String)>,
}

pub fn view(src: &str) -> View {
    let mut clean = String::with_capacity(src.len());
    let mut directives = Vec::new();
    let mut code = Vec::new();
    for mut t in cpplex::lex(src) {
        match t.kind {
            Kind::Space => clean.push_str(&t.text),
            Kind::Comment => blank(&t.text, &mut clean),
            Kind::Preproc => {
                directives.push((t.line, t.text.replace("\\\n", "")));
                blank(&t.text, &mut clean);
            }
            Kind::Str => {
                t.text = blanked_literal(&t.text);
                clean.push_str(&t.text);
                if t.text.contains(['"', '\'']) {
                    code.push(t); // a raw string is blanked whole: no token
                }
            }
            _ => {
                clean.push_str(&t.text);
                code.push(t);
            }
        }
    }
    View {
        clean,
        toks: joined(&code, 0, 0),
        directives,
    }
}

/// The preprocessor lines of `src`, `(line, text)`, continuations joined.
pub fn directives(src: &str) -> Vec<(usize, String)> {
    cpplex::lex(src)
        .into_iter()
        .filter(|t| t.kind == Kind::Preproc)
        .map(|t| (t.line, t.text.replace("\\\n", "")))
        .collect()
}

/// A literal as the rules see it: `"..."` or `'.'` keeps its quotes (so `printf("...")` still reads as a
/// call) and a backslash that continues it on the next line, its contents blanked; a raw string
/// `R"d(...)d"`, whose lines need no backslash, is blanked whole.
fn blanked_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let open = text.find(['"', '\'']).map_or(0, |q| q + 1);
    let (head, rest) = text.split_at(open);
    if head.len() != 1 {
        blank(text, &mut out);
        return out;
    }
    let quote = head.chars().next();
    let (inner, close) = match rest.chars().last() {
        Some(c) if Some(c) == quote => rest.split_at(rest.len() - 1),
        _ => (rest, ""),
    };
    out.push_str(head);
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        let continues = c == '\\' && chars.peek() == Some(&'\n');
        out.push(if c == '\n' || continues { c } else { ' ' });
    }
    out.push_str(close);
    out
}

const PUNCT3: [&str; 3] = ["<<=", ">>=", "..."];
const PUNCT2: [&str; 19] = [
    "<=", ">=", "==", "!=", "&&", "||", "++", "--", "->", "::", "<<", ">>", "+=", "-=", "*=", "/=",
    "%=", "&=", "|=",
];

/// The code tokens of a text as written (one directive's, or the shim): no spaces or comments, a
/// directive's `#` and its words as tokens, operators joined by longest match; literals keep their text.
pub fn tokens(text: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    raw_tokens(text, 0, 0, &mut out);
    out
}

fn raw_tokens(text: &str, line0: usize, pos0: usize, out: &mut Vec<Tok>) {
    let mut code = Vec::new();
    for t in cpplex::lex(text) {
        match t.kind {
            Kind::Space | Kind::Comment => {}
            Kind::Preproc => {
                out.extend(joined(&code, line0, pos0));
                code.clear();
                let (line, pos) = (line0 + t.line, pos0 + t.pos);
                out.push(Tok {
                    text: "#".into(),
                    line,
                    pos,
                });
                raw_tokens(&t.text[1..], line - 1, pos + 1, out);
            }
            _ => code.push(t),
        }
    }
    out.extend(joined(&code, line0, pos0));
}

/// Code tokens (lexer tokens, spaces and comments left out) as the rules' tokens: each run of touching
/// punctuation split by longest match, lines and offsets moved by `line0` and `pos0`.
fn joined(code: &[cpplex::Tok], line0: usize, pos0: usize) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let t = &code[i];
        let (line, pos) = (line0 + t.line, pos0 + t.pos);
        if t.kind != Kind::Punct {
            out.push(Tok {
                text: t.text.clone(),
                line,
                pos,
            });
            i += 1;
            continue;
        }
        let mut run = String::new();
        while i < code.len()
            && code[i].kind == Kind::Punct
            && code[i].pos == t.pos + run.chars().count()
        {
            run.push_str(&code[i].text);
            i += 1;
        }
        let (mut k, mut at) = (0, pos);
        while k < run.len() {
            let rest = &run[k..];
            let first = rest.chars().next().map_or(1, char::len_utf8);
            let p = PUNCT3
                .iter()
                .chain(PUNCT2.iter())
                .find(|p| rest.starts_with(**p))
                .map_or(&rest[..first], |p| *p);
            out.push(Tok {
                text: p.to_string(),
                line,
                pos: at,
            });
            k += p.len();
            at += p.chars().count();
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
        let View {
            clean: c,
            toks: t,
            directives: pp,
        } = view(src);
        assert_eq!(c.lines().count(), 5);
        assert!(!c.contains("double"));
        assert_eq!(pp, vec![(4, "#pragma once".to_string())]);
        let names: Vec<_> = t.iter().map(|t| (t.text.as_str(), t.line)).collect();
        assert_eq!(
            names,
            [("a", 1), ("b", 3), ("\"      \"", 3), ("c", 3), ("d", 5)]
        );
    }

    #[test]
    fn the_view_keeps_offsets_and_reads_what_the_lexer_reads() {
        // Raw strings, digit separators and a directive after a comment, as a compiler reads them.
        let src =
            "s = R\"x(a \"b\" // c\n)x\"; int n = 1'024;\n/* c */ #define K 4\nf[[buffer(0)]]";
        let View {
            clean: c,
            toks: t,
            directives: pp,
        } = view(src);
        assert_eq!(c.chars().count(), src.chars().count());
        assert_eq!(pp, vec![(3, "#define K 4".to_string())]);
        let chars: Vec<char> = src.chars().collect();
        for tok in t
            .iter()
            .filter(|t| t.is_ident() || t.text.starts_with(|c: char| c.is_ascii_digit()))
        {
            let at: String = chars[tok.pos..tok.pos + tok.text.chars().count()]
                .iter()
                .collect();
            assert_eq!(at, tok.text, "offsets point into the source");
        }
        let words: Vec<_> = t.iter().map(|t| t.text.as_str()).collect();
        assert_eq!(
            &words[..4],
            ["s", "=", ";", "int"],
            "a raw string is blanked whole"
        );
        assert!(
            words.contains(&"1'024") && !words.contains(&"b") && !words.contains(&"K"),
            "{words:?}"
        );
        // A literal continued over lines stays one literal, and the code after it is code.
        let cont: Vec<_> = view("asm(\"a \\\n b\"); x")
            .toks
            .into_iter()
            .map(|t| (t.text, t.line))
            .collect();
        assert_eq!(
            cont[3..],
            [(")".into(), 2), (";".into(), 2), ("x".into(), 2)]
        );
        let tail: Vec<_> = words[words.len() - 9..].to_vec();
        assert_eq!(tail, ["f", "[", "[", "buffer", "(", "0", ")", "]", "]"]);
        // A directive's own text reads as `#` and its words.
        let d: Vec<_> = tokens("#define X(a) a")
            .into_iter()
            .map(|t| t.text)
            .collect();
        assert_eq!(d, ["#", "define", "X", "(", "a", ")", "a"]);
    }

    #[test]
    fn a_string_continued_over_lines_keeps_the_line_count() {
        let src = "asm(\"\\n \\\n  add \\n \\\n  \");\n#else\nx";
        let View {
            clean: c,
            directives: pp,
            ..
        } = view(src);
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

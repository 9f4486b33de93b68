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

/// The source with comments, string and character literals replaced by spaces, and a list of
/// preprocessor lines `(line, text)` (continuations joined); newlines stay where they were. A literal keeps
/// its quotes (so `printf("...")` still reads as a call).
pub fn clean(src: &str) -> (String, Vec<(usize, String)>) {
    let mut out = String::with_capacity(src.len());
    let mut pp = Vec::new();
    for t in cpplex::lex(src) {
        match t.kind {
            Kind::Comment => blank(&t.text, &mut out),
            Kind::Preproc => {
                pp.push((t.line, t.text.replace("\\\n", "")));
                blank(&t.text, &mut out);
            }
            Kind::Str => {
                // `"..."` or `'.'`: the quotes stay, and a backslash that continues the literal on the
                // next line, so the cleaned text reads as the same literal. A raw string `R"d(...)d"`,
                // whose lines need no backslash, is blanked whole.
                let open = t.text.find(['"', '\'']).map_or(0, |q| q + 1);
                let (head, rest) = t.text.split_at(open);
                if head.len() != 1 {
                    blank(&t.text, &mut out);
                    continue;
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
            }
            _ => out.push_str(&t.text),
        }
    }
    (out, pp)
}

const PUNCT3: [&str; 3] = ["<<=", ">>=", "..."];
const PUNCT2: [&str; 19] = [
    "<=", ">=", "==", "!=", "&&", "||", "++", "--", "->", "::", "<<", ">>", "+=", "-=", "*=", "/=",
    "%=", "&=", "|=",
];

/// The code tokens of a text (cleaned, or one directive's): no spaces or comments, a directive's `#` and
/// its words as tokens, operators joined by longest match.
pub fn tokens(text: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    code_tokens(text, 0, 0, &mut out);
    out
}

fn code_tokens(text: &str, line0: usize, pos0: usize, out: &mut Vec<Tok>) {
    let toks = cpplex::lex(text);
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        let (line, pos) = (line0 + t.line, pos0 + t.pos);
        match t.kind {
            Kind::Space | Kind::Comment => {}
            Kind::Preproc => {
                out.push(Tok {
                    text: "#".into(),
                    line,
                    pos,
                });
                code_tokens(&t.text[1..], line - 1, pos + 1, out);
            }
            Kind::Punct => {
                // The run of punctuation that touches, split by longest match.
                let mut run = String::new();
                let mut j = i;
                while j < toks.len()
                    && toks[j].kind == Kind::Punct
                    && toks[j].pos == t.pos + run.chars().count()
                {
                    run.push_str(&toks[j].text);
                    j += 1;
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
                i = j;
                continue;
            }
            _ => out.push(Tok {
                text: t.text.clone(),
                line,
                pos,
            }),
        }
        i += 1;
    }
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
            [("a", 1), ("b", 3), ("\"      \"", 3), ("c", 3), ("d", 5)]
        );
    }

    #[test]
    fn the_view_keeps_offsets_and_reads_what_the_lexer_reads() {
        // Raw strings, digit separators and a directive after a comment, as a compiler reads them.
        let src =
            "s = R\"x(a \"b\" // c\n)x\"; int n = 1'024;\n/* c */ #define K 4\nf[[buffer(0)]]";
        let (c, pp) = clean(src);
        assert_eq!(c.chars().count(), src.chars().count());
        assert_eq!(pp, vec![(3, "#define K 4".to_string())]);
        let t = tokens(&c);
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
        let (cont, _) = clean("asm(\"a \\\n b\"); x");
        let cont: Vec<_> = tokens(&cont)
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

//! Parsing LLM replies: the first JSON object (world-model edits), fenced code blocks, and a candidate
//! (plan.toml + kernel files, `docs/formats.md` §2) answered in the format [`render_candidate`] shows.
//!
//! LLM output is messy: prose around JSON, fences of any length, file names in the info string or on
//! the line above, replies cut off mid-file. Every [`ReplyError`] says what was wrong and what was
//! expected, so its Display can go back to the LLM verbatim.

use crate::candidate::{Candidate, Plan};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

/// Why a reply could not be used; the message is written for the LLM that sent the reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("no JSON object found: the reply contains no `{{`; answer with one JSON object")]
    NoJson,
    #[error(
        "the JSON object starting at line {line}, column {col} never closes: the reply was cut off; answer again with a shorter, complete JSON object"
    )]
    JsonCutOff { line: usize, col: usize },
    #[error(
        "the `{{` at line {line}, column {col} never closes and no complete JSON object follows it; answer with one complete JSON object"
    )]
    JsonUnclosed { line: usize, col: usize },
    #[error("the JSON object at line {line}, column {col} is not valid JSON: {message}")]
    JsonInvalid {
        line: usize,
        col: usize,
        message: String,
    },
    #[error("no fenced code block found: answer with {expected}")]
    NoCodeBlock { expected: String },
    #[error(
        "the reply was cut off: the {block} starting at line {line} never closes; answer again with {expected}"
    )]
    Truncated {
        block: String,
        line: usize,
        expected: String,
    },
    #[error(
        "the reply gives {name} {count} times with different contents (blocks at lines {lines}): give each file once, in full"
    )]
    Duplicate {
        name: String,
        count: usize,
        lines: String,
    },
    #[error(
        "plan.toml (the {block} at line {line}) does not parse; give the complete file, not only the changed part. The error's lines count from the block's first line:\n{message}"
    )]
    PlanToml {
        block: String,
        line: usize,
        message: String,
    },
    #[error(
        "{count} ```toml blocks parse as a launch plan (lines {lines}): give one, named plan.toml (a `### plan.toml` line above it)"
    )]
    AmbiguousPlan { count: usize, lines: String },
    #[error(
        "the {block} at line {line} is named {name}, which plan.toml does not name (its files: {files}): name the block after the file it replaces, or add {name} to plan.toml"
    )]
    UnknownFile {
        block: String,
        line: usize,
        name: String,
        files: String,
    },
    #[error(
        "the reply has {count} code block(s) without a file name (lines {lines}) and none named after a kernel file of the plan ({files}): name each block after the file it replaces, e.g. with a `### {first}` line above it"
    )]
    Unnamed {
        count: usize,
        lines: String,
        files: String,
        first: String,
    },
    #[error(
        "the reply has no kernel file and no plan.toml (found {found}): answer with {expected}"
    )]
    NothingUsable { found: String, expected: String },
    #[error(
        "the reply has no plan.toml block: there is no base candidate yet, so the answer must give the whole plan.toml and every kernel file it names"
    )]
    NoPlanWithoutBase,
    #[error(
        "plan.toml names {name} (kernel `{kernel}`), which the reply does not give and the parent does not have: add a ```{lang} block named {name}"
    )]
    MissingFile {
        name: String,
        kernel: String,
        lang: String,
    },
    /// `reason` is the rule's own message ([`crate::names::check_file_name`]): what is wrong, what is allowed.
    #[error("plan.toml: kernel `{kernel}`: {reason}")]
    BadFileName {
        kernel: String,
        name: String,
        reason: String,
    },
    #[error("plan.toml is invalid: {message}")]
    Invalid { message: String },
    #[error(
        "the reply repeats the parent unchanged: change the kernel or plan.toml (another tunable default counts as a change)"
    )]
    Unchanged,
}

// ---------------------------------------------------------------------------------------------
// JSON

/// The first balanced `{...}` of `text` that parses as JSON.
///
/// Balanced objects that do not parse are skipped (prose like `{x}` before the real answer), but a
/// `{` whose rest of the text is a valid JSON prefix means the reply was cut off: that is an error
/// rather than a silently returned inner fragment.
pub fn first_json_object(text: &str) -> Result<Value, ReplyError> {
    find_object(text, 0, &mut Search::new(text)).map(|(_, v)| v)
}

/// Every JSON object of `text` in order, each the first that parses after the previous one's end.
pub fn json_objects(text: &str) -> impl Iterator<Item = Value> + '_ {
    let mut search = Search::new(text);
    let mut pos = Some(0);
    std::iter::from_fn(move || {
        let (end, v) = find_object(text, pos?, &mut search).ok()?;
        pos = Some(end);
        Some(v)
    })
}

/// State shared by the searches of one text.
struct Search {
    /// End of the object starting at a byte offset (`None`: it never closes), filled by [`scan`].
    ends: HashMap<usize, Option<usize>>,
    /// Bytes left to scan and parse. Replies that no LLM writes (`{"\"{` repeated) would
    /// otherwise take quadratic time; real replies use a small fraction of it.
    budget: usize,
}

impl Search {
    fn new(text: &str) -> Search {
        Search {
            ends: HashMap::new(),
            budget: 16 * text.len() + (1 << 20),
        }
    }

    fn spend(&mut self, bytes: usize) {
        self.budget = self.budget.saturating_sub(bytes);
    }
}

fn find_object(text: &str, from: usize, search: &mut Search) -> Result<(usize, Value), ReplyError> {
    let bytes = text.as_bytes();
    let mut invalid: Option<(usize, serde_json::Error)> = None;
    let mut unclosed: Option<usize> = None;
    for s in (from..bytes.len()).filter(|&i| bytes[i] == b'{') {
        if search.budget == 0 {
            break;
        }
        if !search.ends.contains_key(&s) {
            let scanned = scan(bytes, s, &mut search.ends);
            search.spend(scanned);
        }
        match search.ends.get(&s).copied().flatten() {
            Some(e) => match serde_json::from_str::<Value>(&text[s..=e]) {
                Ok(v) => return Ok((e + 1, v)),
                Err(err) => {
                    search.spend(error_offset(&text[s..], &err));
                    invalid.get_or_insert((s, err));
                }
            },
            None => {
                if let Err(err) = serde_json::from_str::<Value>(&text[s..]) {
                    if err.is_eof() {
                        let (line, col) = line_col(text, s);
                        return Err(ReplyError::JsonCutOff { line, col });
                    }
                    search.spend(error_offset(&text[s..], &err));
                }
                unclosed.get_or_insert(s);
            }
        }
    }
    if let Some((s, err)) = invalid {
        let (line, col) = line_col(text, s);
        return Err(ReplyError::JsonInvalid {
            line,
            col,
            message: json_message(text, s, &err),
        });
    }
    if let Some(s) = unclosed {
        let (line, col) = line_col(text, s);
        return Err(ReplyError::JsonUnclosed { line, col });
    }
    Err(ReplyError::NoJson)
}

/// Matches braces from the `{` at `s`, outside JSON strings, recording the end of `s` and of every
/// `{` met outside a string on the way: a fresh scan from those would see the same characters in the
/// same string state, so one pass resolves them all. Returns the number of bytes scanned.
fn scan(bytes: &[u8], s: usize, ends: &mut HashMap<usize, Option<usize>>) -> usize {
    let mut stack = vec![s];
    let (mut in_str, mut esc) = (false, false);
    for (i, &b) in bytes.iter().enumerate().skip(s + 1) {
        if in_str {
            if esc {
                esc = false;
            } else if b == b'\\' {
                esc = true;
            } else if b == b'"' {
                in_str = false;
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' => stack.push(i),
            b'}' => {
                if let Some(o) = stack.pop() {
                    ends.insert(o, Some(i));
                }
                if stack.is_empty() {
                    return i + 1 - s;
                }
            }
            _ => {}
        }
    }
    for o in stack {
        ends.insert(o, None);
    }
    bytes.len() - s
}

/// Byte offset in `slice` of a serde_json error (line and column count from 1; column in bytes).
fn error_offset(slice: &str, err: &serde_json::Error) -> usize {
    let mut off = 0;
    for _ in 1..err.line() {
        off = slice[off..].find('\n').map_or(slice.len(), |k| off + k + 1);
    }
    (off + err.column().saturating_sub(1)).min(slice.len())
}

/// serde_json's message with its position made absolute in the reply.
fn json_message(text: &str, s: usize, err: &serde_json::Error) -> String {
    let full = err.to_string();
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    let msg = full.strip_suffix(&suffix).unwrap_or(&full);
    if err.line() == 0 {
        return msg.to_string();
    }
    let mut off = error_offset(&text[s..], err);
    while !text.is_char_boundary(s + off) {
        off -= 1;
    }
    let (line, col) = line_col(text, s + off);
    format!("{msg} at line {line}, column {col}")
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(text: &str, byte: usize) -> (usize, usize) {
    let before = &text[..byte];
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |k| k + 1);
    (line, before[start..].chars().count() + 1)
}

// ---------------------------------------------------------------------------------------------
// Code blocks

/// A fenced code block of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeBlock {
    /// First word of the info string, lower-cased ("" when none).
    pub lang: String,
    /// File name from the info string, else from the nearest non-empty line above the fence.
    pub name: Option<String>,
    /// The text between the fences, raw, including the line break of its last line.
    pub body: String,
    /// 1-based line of the opening fence.
    pub line: usize,
    /// The fence never closes (the LLM was cut off): the body is the rest of the text.
    pub truncated: bool,
}

struct Line<'a> {
    start: usize,
    /// Without the line break (`\n` or `\r\n`).
    text: &'a str,
    next: usize,
}

fn split_lines(text: &str) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let (end, next) = match text[start..].find('\n') {
            Some(k) => (start + k, start + k + 1),
            None => (text.len(), text.len()),
        };
        let t = &text[start..end];
        out.push(Line {
            start,
            text: t.strip_suffix('\r').unwrap_or(t),
            next,
        });
        start = next;
    }
    out
}

struct Fence<'a> {
    ch: char,
    len: usize,
    info: &'a str,
}

/// An opening fence: 3+ backticks or tildes after any indentation (LLMs indent fences in lists).
/// As in CommonMark, a backtick fence's info string has no backtick (so "```x```" is inline code).
fn opening_fence(line: &str) -> Option<Fence<'_>> {
    let t = line.trim_start_matches([' ', '\t']);
    let ch = t.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let len = t.len() - t.trim_start_matches(ch).len();
    let info = t[len..].trim();
    (len >= 3 && !(ch == '`' && info.contains('`'))).then_some(Fence { ch, len, info })
}

fn closes(line: &str, f: &Fence) -> bool {
    let t = line.trim_start_matches([' ', '\t']);
    let rest = t.trim_start_matches(f.ch);
    t.len() - rest.len() >= f.len && rest.trim().is_empty()
}

/// The change a reply says it makes, for later prompts: its `Change:` line if it has one, else its prose
/// outside code blocks (file-name lines dropped), on one line, at most 400 characters.
pub fn described_change(text: &str) -> String {
    const MAX: usize = 400;
    let lines = split_lines(text);
    // The lines outside code blocks, without the file-name line above each fence.
    let mut fence: Option<Fence> = None;
    let mut kept: Vec<usize> = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        match &fence {
            Some(f) => {
                if closes(l.text, f) {
                    fence = None;
                }
            }
            None => {
                if let Some(f) = opening_fence(l.text) {
                    fence = Some(f);
                    if i > 0 && kept.last() == Some(&(i - 1)) {
                        kept.pop();
                    }
                } else if !l.text.trim().is_empty() {
                    kept.push(i);
                }
            }
        }
    }
    let prose: Vec<&str> = kept.iter().map(|&i| lines[i].text.trim()).collect();
    let tagged = prose.iter().find_map(|l| {
        let t = l.trim_start_matches(['*', '#', '-', ' ']);
        let head = t.get(..7)?;
        head.eq_ignore_ascii_case("change:")
            .then(|| t[7..].trim_start_matches(['*', ' ']).trim().to_string())
    });
    let text = tagged
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| prose.join(" "));
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.len() > MAX {
        format!("{}…", &one_line[..one_line.floor_char_boundary(MAX)])
    } else {
        one_line
    }
}

/// Every fenced block of `text`, in order; an unclosed last fence takes the rest and is `truncated`.
pub fn code_blocks(text: &str) -> Vec<CodeBlock> {
    let lines = split_lines(text);
    let mut out = Vec::new();
    let mut above: Option<&str> = None;
    let mut i = 0;
    while i < lines.len() {
        let Some(f) = opening_fence(lines[i].text) else {
            if !lines[i].text.trim().is_empty() {
                above = Some(lines[i].text);
            }
            i += 1;
            continue;
        };
        let close = (i + 1..lines.len()).find(|&j| closes(lines[j].text, &f));
        let (end, next) = match close {
            Some(j) => (lines[j].start, j + 1),
            None => (text.len(), lines.len()),
        };
        let (lang, mut name) = parse_info(f.info);
        if name.is_none() {
            name = above
                .and_then(name_from_line)
                .filter(|n| lang_fits_file(&lang, n));
        }
        out.push(CodeBlock {
            lang,
            name,
            body: text[lines[i].next..end].to_string(),
            line: i + 1,
            truncated: close.is_none(),
        });
        // The closing fence is the nearest line above the next block: it names nothing.
        above = None;
        i = next;
    }
    out
}

/// Language and file name from an info string: "c matmul.c", "c:matmul.c", "matmul.c",
/// `cuda title="k.cu"`, "toml {file=plan.toml}".
fn parse_info(info: &str) -> (String, Option<String>) {
    let mut lang = String::new();
    let mut name = None;
    for (idx, tok) in info_tokens(info).iter().enumerate() {
        let tok = tok.as_str();
        if let Some((k, v)) = tok.split_once('=') {
            let k = k
                .trim_matches(|c: char| "{}".contains(c))
                .to_ascii_lowercase();
            let v = unquote(v.trim_end_matches('}'));
            if ["title", "file", "filename", "name", "path"].contains(&k.as_str())
                && name.is_none()
                && loose_file_name(v)
            {
                name = Some(v.to_string());
            }
            continue;
        }
        if idx == 0 {
            if let Some((l, n)) = tok.split_once(':') {
                lang = l.to_ascii_lowercase();
                if loose_file_name(n) {
                    name = Some(n.to_string());
                }
            } else if loose_file_name(tok) && lang_of_ext(ext(tok)).is_some() {
                lang = lang_of_ext(ext(tok)).unwrap_or_default().to_string();
                name = Some(tok.to_string());
            } else {
                lang = tok.to_ascii_lowercase();
            }
        } else if name.is_none() {
            let t = clean(tok);
            if loose_file_name(t) {
                name = Some(t.to_string());
            }
        }
    }
    (lang, name)
}

/// Whitespace-separated words; quotes group words (`title="my kernel.cu"`).
fn info_tokens(info: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    for c in info.chars() {
        match quote {
            Some(q) => {
                cur.push(c);
                if c == q {
                    quote = None;
                }
            }
            None if c.is_whitespace() => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            None => {
                if c == '"' || c == '\'' {
                    quote = Some(c);
                }
                cur.push(c);
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn unquote(s: &str) -> &str {
    s.trim_matches(|c| c == '"' || c == '\'' || c == '`')
}

/// A token without the punctuation prose and markdown put around file names.
fn clean(s: &str) -> &str {
    s.trim_matches(|c: char| "()[]{}<>,;:\"'`*_".contains(c))
        .trim_end_matches('.')
}

fn basename(name: &str) -> &str {
    name.rsplit(['/', '\\']).next().unwrap_or(name)
}

fn ext(name: &str) -> &str {
    basename(name).rsplit_once('.').map_or("", |(_, e)| e)
}

/// "stem.ext", maybe with a directory: ext starts with a letter, stem is not empty.
fn loose_file_name(s: &str) -> bool {
    let base = basename(s);
    let Some((stem, ext)) = base.rsplit_once('.') else {
        return false;
    };
    !stem.is_empty()
        && !base.starts_with('.')
        && (1..=10).contains(&ext.len())
        && ext.starts_with(|c: char| c.is_ascii_alphabetic())
        && ext.chars().all(|c| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_alphanumeric() || "_-+./".contains(c))
}

/// The block language of a file extension; `None` for extensions that are not code we expect.
fn lang_of_ext(ext: &str) -> Option<&'static str> {
    Some(match ext.to_ascii_lowercase().as_str() {
        "c" | "h" => "c",
        "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" => "cpp",
        "cu" | "cuh" => "cuda",
        "metal" => "metal",
        "m" | "mm" => "objc",
        "toml" => "toml",
        "json" => "json",
        "py" => "python",
        _ => return None,
    })
}

/// One spelling per language, so "c++" and "cpp", "cu" and "cuda" compare equal.
fn canonical_lang(lang: &str) -> &str {
    match lang {
        "c" | "h" => "c",
        "cpp" | "c++" | "cxx" | "cc" | "hpp" => "cpp",
        "cuda" | "cu" | "cuh" => "cuda",
        "metal" | "msl" => "metal",
        "objc" | "objective-c" | "objectivec" | "objective-c++" | "m" | "mm" => "objc",
        "py" | "python" | "python3" => "python",
        other => other,
    }
}

/// Kernel languages: any of them may hold any kernel file (a .metal file is often fenced ```cpp).
fn c_family(lang: &str) -> bool {
    matches!(
        canonical_lang(lang),
        "c" | "cpp" | "cuda" | "metal" | "objc"
    )
}

/// Whether a name found on the line above may label a block of this language: prose mentioning
/// plan.toml right above a ```c block must not make the C code the plan.
fn lang_fits_file(lang: &str, name: &str) -> bool {
    let Some(file_lang) = lang_of_ext(ext(name)) else {
        return true;
    };
    lang.is_empty() || canonical_lang(lang) == file_lang || (c_family(lang) && c_family(file_lang))
}

/// A file name on the line above a fence. Either the whole line is one ("### matmul.c",
/// "File: `plan.toml`", "**softmax.c**"), or the line marks exactly one file name in backticks or
/// bold ("Here is the updated `scan.c`"), or it ends with a colon and mentions exactly one file with a
/// known extension ("The new matmul.c:"). A name merely mentioned in prose names nothing.
fn name_from_line(line: &str) -> Option<String> {
    let mut s = line.trim().trim_start_matches('#').trim();
    for label in ["file name:", "filename:", "file:", "path:"] {
        if s.len() >= label.len()
            && s.is_char_boundary(label.len())
            && s[..label.len()].eq_ignore_ascii_case(label)
        {
            s = s[label.len()..].trim();
        }
    }
    s = s.trim_end_matches(':').trim();
    while let Some(inner) = ["**", "__", "*", "_"]
        .iter()
        .find_map(|w| s.strip_prefix(w).and_then(|r| r.strip_suffix(w)))
    {
        s = inner.trim().trim_end_matches(':').trim();
    }
    if let Some(r) = s.strip_prefix('`').and_then(|r| r.strip_suffix('`'))
        && !r.trim().is_empty()
        && !r.contains('`')
    {
        return Some(r.trim().to_string());
    }
    if loose_file_name(s) {
        return Some(s.to_string());
    }
    let marked = line
        .split('`')
        .skip(1)
        .step_by(2)
        .chain(line.split("**").skip(1).step_by(2))
        .map(clean)
        .filter(|t| loose_file_name(t));
    let mut found: Vec<&str> = if line.trim_end().ends_with(':') {
        let words = line
            .split(|c: char| !(c.is_alphanumeric() || "_-+./".contains(c)))
            .map(|t| t.trim_end_matches('.'))
            .filter(|t| loose_file_name(t) && lang_of_ext(ext(t)).is_some());
        marked.chain(words).collect()
    } else {
        marked.collect()
    };
    found.sort_unstable();
    found.dedup();
    match found.as_slice() {
        [one] => Some(one.to_string()),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Candidates

/// A candidate taken from a reply, with notes on what was guessed or ignored.
#[derive(Debug, Clone)]
pub struct ReplyCandidate {
    pub candidate: Candidate,
    pub warnings: Vec<String>,
}

/// Kernel files of a plan in plan order (source, then header), each with its kernel's name.
fn plan_files(plan: &Plan) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for k in &plan.kernel {
        for f in std::iter::once(&k.source).chain(k.header.as_ref()) {
            if !out.iter().any(|(n, _)| n == f) {
                out.push((f.clone(), k.name.clone()));
            }
        }
    }
    out
}

fn plan_sources(plan: &Plan) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for k in &plan.kernel {
        if !out.contains(&k.source.as_str()) {
            out.push(&k.source);
        }
    }
    out
}

/// The block language of a file, from its extension ("" when unknown).
pub fn lang_for_file(name: &str) -> &'static str {
    lang_of_ext(ext(name)).unwrap_or("")
}

/// What a reply should contain, for error messages.
fn expected(plan: &Plan) -> String {
    let sources = plan_sources(plan);
    let files = match sources.as_slice() {
        [one] => format!(
            "the full kernel file in a ```{} block named {one}",
            lang_for_file(one)
        ),
        many => format!(
            "the full kernel files in fenced blocks named after them ({})",
            many.iter()
                .map(|n| format!("```{} {n}", lang_for_file(n)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    format!("{files} (and plan.toml in a ```toml block if the launch plan changes)")
}

fn describe(b: &CodeBlock) -> String {
    match &b.name {
        Some(n) => format!("```{} block ({n})", b.lang),
        None => format!("```{} block", b.lang),
    }
}

fn join_lines<'a>(blocks: impl IntoIterator<Item = &'a CodeBlock>) -> String {
    blocks
        .into_iter()
        .map(|b| b.line.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Same text but for line endings and trailing whitespace: then the parent's bytes are kept, so an
/// LLM that drops a final newline does not make a new candidate (or break `render`'s round trip).
fn same_text(a: &str, b: &str) -> bool {
    a.replace("\r\n", "\n").trim_end() == b.replace("\r\n", "\n").trim_end()
}

fn is_toml(b: &CodeBlock) -> bool {
    b.lang == "toml"
}

fn parse_plan(b: &CodeBlock) -> Result<Plan, ReplyError> {
    toml::from_str(&b.body).map_err(|e| ReplyError::PlanToml {
        block: describe(b),
        line: b.line,
        message: e.to_string().trim_end().to_string(),
    })
}

/// Blocks giving the same file must agree; returns the first.
fn single<'a>(name: &str, blocks: &[&'a CodeBlock]) -> Result<&'a CodeBlock, ReplyError> {
    if blocks.iter().any(|b| b.body != blocks[0].body) {
        return Err(ReplyError::Duplicate {
            name: name.to_string(),
            count: blocks.len(),
            lines: join_lines(blocks.iter().copied()),
        });
    }
    Ok(blocks[0])
}

/// The candidate a reply describes, relative to `parent`: a plan.toml block replaces the plan, blocks
/// named after the plan's kernel files replace them, every other file of the plan is the parent's.
pub fn candidate_from_reply(text: &str, parent: &Candidate) -> Result<ReplyCandidate, ReplyError> {
    let blocks = code_blocks(text);
    if blocks.is_empty() {
        return Err(ReplyError::NoCodeBlock {
            expected: expected(&parent.plan),
        });
    }
    if let Some(b) = blocks.iter().find(|b| b.truncated) {
        return Err(ReplyError::Truncated {
            block: describe(b),
            line: b.line,
            expected: expected(&parent.plan),
        });
    }
    let mut r = Reading {
        blocks: &blocks,
        used: vec![false; blocks.len()],
        warnings: Vec::new(),
    };
    let (plan, plan_given) = r.plan(parent)?;
    // With no base candidate (a run started from the specification) nothing can be taken from the parent.
    if parent.plan.kernel.is_empty() && !plan_given {
        return Err(ReplyError::NoPlanWithoutBase);
    }
    check_file_names(&plan)?;
    let mut files = plan_files(&plan);
    if plan.target == crate::target::Target::Cuda {
        // Whole CUDA files include the candidate's own headers by name: the parent's, and any the reply gives,
        // are the candidate's files too (those no kernel includes are dropped below).
        let named = blocks
            .iter()
            .filter_map(|b| b.name.as_deref().map(basename))
            .filter(|n| *n != "plan.toml" && crate::names::is_file_name(n))
            .map(str::to_string);
        for n in parent.files.keys().cloned().chain(named) {
            if !files.iter().any(|(f, _)| *f == n) {
                files.push((n, String::new()));
            }
        }
    }
    let file_list = files
        .iter()
        .map(|(n, _)| n.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let mut given = r.named_files(&files, &file_list)?;
    if given.is_empty() {
        r.unnamed_source(&plan, &mut given, file_list)?;
    }
    if given.is_empty() && !plan_given {
        return Err(ReplyError::NothingUsable {
            found: blocks
                .iter()
                .map(|b| format!("{} at line {}", describe(b), b.line))
                .collect::<Vec<_>>()
                .join(", "),
            expected: expected(&plan),
        });
    }
    r.warn_unused();
    let mut out = assemble(&files, given, parent)?;
    if plan.target == crate::target::Target::Cuda {
        for dropped in keep_included(&plan, &mut out) {
            r.warnings.push(format!(
                "dropped {dropped}: no kernel file of the plan includes it"
            ));
        }
    }
    let candidate = Candidate { plan, files: out };
    candidate
        .validate()
        .map_err(|message| ReplyError::Invalid { message })?;
    if candidate.hash() == parent.hash() {
        return Err(ReplyError::Unchanged);
    }
    Ok(ReplyCandidate {
        candidate,
        warnings: r.warnings,
    })
}

/// A reply's code blocks being read: which are taken, and what the reader should be told.
struct Reading<'b> {
    blocks: &'b [CodeBlock],
    used: Vec<bool>,
    warnings: Vec<String>,
}

impl<'b> Reading<'b> {
    fn index(&self, b: &CodeBlock) -> usize {
        self.blocks
            .iter()
            .position(|x| std::ptr::eq(x, b))
            .unwrap_or(0)
    }

    /// The plan: a block named plan.toml, else the only toml block that parses as a plan, else the
    /// parent's; and whether the reply gave one.
    fn plan(&mut self, parent: &Candidate) -> Result<(Plan, bool), ReplyError> {
        let blocks = self.blocks;
        let named: Vec<&CodeBlock> = blocks
            .iter()
            .filter(|b| b.name.as_deref().map(basename) == Some("plan.toml"))
            .collect();
        if !named.is_empty() {
            let b = single("plan.toml", &named)?;
            for n in &named {
                let i = self.index(n);
                self.used[i] = true;
            }
            return Ok((parse_plan(b)?, true));
        }
        // A bare ``` block holding a whole plan is the plan, not C code.
        let tomls: Vec<&CodeBlock> = blocks
            .iter()
            .filter(|b| {
                b.name.is_none()
                    && (is_toml(b)
                        || (b.lang.is_empty() && toml::from_str::<Plan>(&b.body).is_ok()))
            })
            .collect();
        let parsed: Vec<(&CodeBlock, Result<Plan, ReplyError>)> =
            tomls.iter().map(|b| (*b, parse_plan(b))).collect();
        let ok: Vec<(&CodeBlock, &Plan)> = parsed
            .iter()
            .filter_map(|(b, p)| Some((*b, p.as_ref().ok()?)))
            .collect();
        Ok(match (parsed.first(), ok.as_slice()) {
            (None, _) => (parent.plan.clone(), false),
            (Some((_, Err(e))), []) => return Err(e.clone()),
            (_, [(b, p)]) => {
                let i = self.index(b);
                self.used[i] = true;
                if parsed.len() > 1 {
                    self.warnings.push(format!(
                        "took the ```toml block at line {} as plan.toml: the other toml blocks do not parse as a plan",
                        b.line
                    ));
                }
                ((*p).clone(), true)
            }
            _ => {
                return Err(ReplyError::AmbiguousPlan {
                    count: ok.len(),
                    lines: join_lines(ok.iter().map(|(b, _)| *b)),
                });
            }
        })
    }

    /// Named blocks: the plan's files by name, else an error for kernel code the plan would not compile.
    fn named_files(
        &mut self,
        files: &[(String, String)],
        file_list: &str,
    ) -> Result<BTreeMap<String, String>, ReplyError> {
        let blocks = self.blocks;
        let mut by_file: BTreeMap<&str, Vec<&CodeBlock>> = BTreeMap::new();
        for (i, b) in blocks.iter().enumerate() {
            let Some(name) = b.name.as_deref() else {
                continue;
            };
            let base = basename(name);
            if base == "plan.toml" {
                continue;
            }
            if let Some((f, _)) = files.iter().find(|(f, _)| f == base) {
                by_file.entry(f).or_default().push(b);
                self.used[i] = true;
            } else if c_family(&b.lang) || lang_of_ext(ext(base)).is_some_and(c_family) {
                return Err(ReplyError::UnknownFile {
                    block: describe(b),
                    line: b.line,
                    name: name.to_string(),
                    files: file_list.to_string(),
                });
            }
        }
        let mut given: BTreeMap<String, String> = BTreeMap::new();
        for (f, bs) in &by_file {
            given.insert(f.to_string(), single(f, bs)?.body.clone());
        }
        Ok(given)
    }

    /// Unnamed kernel code: the plan's only source, when nothing names a kernel file.
    fn unnamed_source(
        &mut self,
        plan: &Plan,
        given: &mut BTreeMap<String, String>,
        file_list: String,
    ) -> Result<(), ReplyError> {
        let blocks = self.blocks;
        let used = &self.used;
        let unnamed: Vec<usize> = (0..blocks.len())
            .filter(|&i| {
                let b = &blocks[i];
                b.name.is_none() && !used[i] && (b.lang.is_empty() || c_family(&b.lang))
            })
            .collect();
        let sources = plan_sources(plan);
        if !unnamed.is_empty() {
            // A full file next to snippets: the one block that defines an entry symbol of the source.
            let defining: Vec<usize> = match sources.as_slice() {
                [src] if unnamed.len() > 1 => unnamed
                    .iter()
                    .copied()
                    .filter(|&i| {
                        plan.kernel.iter().any(|k| {
                            k.source == *src && blocks[i].body.contains(&format!("{}(", k.name))
                        })
                    })
                    .collect(),
                _ => unnamed.clone(),
            };
            if let ([i], [src]) = (defining.as_slice(), sources.as_slice()) {
                let b = &blocks[*i];
                self.warnings.push(format!(
                    "the {} at line {} has no file name; taken as {src}, the plan's only source",
                    describe(b),
                    b.line
                ));
                given.insert(src.to_string(), b.body.clone());
                self.used[*i] = true;
            } else {
                return Err(ReplyError::Unnamed {
                    count: unnamed.len(),
                    lines: join_lines(unnamed.iter().map(|&i| &blocks[i])),
                    files: file_list,
                    first: sources.first().unwrap_or(&"kernel.c").to_string(),
                });
            }
        }
        Ok(())
    }

    fn warn_unused(&mut self) {
        for (b, _) in self.blocks.iter().zip(&self.used).filter(|(_, u)| !**u) {
            self.warnings.push(format!(
                "ignored the {} at line {}: it is not plan.toml or a kernel file of the plan",
                describe(b),
                b.line
            ));
        }
    }
}

/// Keeps the plan's kernel files and the files they include by name, transitively (as `Candidate::load` finds
/// a cuda candidate's headers); returns the names of the others, removed.
fn keep_included(plan: &Plan, files: &mut BTreeMap<String, String>) -> Vec<String> {
    let roots: Vec<(String, String)> = plan_files(plan)
        .into_iter()
        .filter_map(|(n, _)| files.get(&n).map(|t| (n, t.clone())))
        .collect();
    let kept = crate::names::include_closure(roots, |n| {
        Ok::<_, std::convert::Infallible>(files.get(n).cloned())
    })
    .unwrap_or_else(|never| match never {});
    let dropped: Vec<String> = files
        .keys()
        .filter(|k| !kept.contains_key(*k))
        .cloned()
        .collect();
    *files = kept;
    dropped
}

/// Every kernel file the plan names passes the one file-name rule.
fn check_file_names(plan: &Plan) -> Result<(), ReplyError> {
    for k in &plan.kernel {
        for f in std::iter::once(&k.source).chain(k.header.as_ref()) {
            if let Err(reason) = crate::names::check_file_name(f) {
                return Err(ReplyError::BadFileName {
                    kernel: k.name.clone(),
                    name: f.clone(),
                    reason,
                });
            }
        }
    }
    Ok(())
}

/// The candidate's files: each given one (the parent's bytes where only line ends or trailing space
/// differ), else the parent's.
fn assemble(
    files: &[(String, String)],
    mut given: BTreeMap<String, String>,
    parent: &Candidate,
) -> Result<BTreeMap<String, String>, ReplyError> {
    let mut out = BTreeMap::new();
    for (f, kernel) in files {
        let content = match (given.remove(f), parent.files.get(f)) {
            (Some(new), Some(old)) if same_text(&new, old) => old.clone(),
            (Some(new), _) => new,
            (None, Some(old)) => old.clone(),
            (None, None) => {
                return Err(ReplyError::MissingFile {
                    name: f.clone(),
                    kernel: kernel.clone(),
                    lang: lang_for_file(f).to_string(),
                });
            }
        };
        out.insert(f.clone(), content);
    }
    Ok(out)
}

/// A candidate as an LLM sees it, and the format it is asked to answer in: plan.toml, then each
/// kernel file, each under a `### name` heading in a fence longer than any backtick run inside.
pub fn render_candidate(c: &Candidate) -> String {
    let plan = toml::to_string(&c.plan)
        .unwrap_or_else(|e| format!("# plan.toml could not be written: {e}\n"));
    let mut out = String::new();
    push_block(&mut out, "plan.toml", "toml", &plan);
    let mut names: Vec<String> = plan_files(&c.plan).into_iter().map(|(n, _)| n).collect();
    names.extend(
        c.files
            .keys()
            .filter(|k| !names.contains(k))
            .cloned()
            .collect::<Vec<_>>(),
    );
    for name in names {
        if let Some(body) = c.files.get(&name) {
            out.push('\n');
            push_block(&mut out, &name, lang_for_file(&name), body);
        }
    }
    out
}

fn push_block(out: &mut String, name: &str, lang: &str, body: &str) {
    let mut run = 0;
    let mut longest = 0;
    for ch in body.chars() {
        run = if ch == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat((longest + 1).max(3));
    let heading = if loose_file_name(name) {
        name.to_string()
    } else {
        format!("`{name}`")
    };
    out.push_str(&format!("### {heading}\n{fence}{lang}\n{body}"));
    if !body.is_empty() && !body.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&fence);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_described_change_is_the_change_line_else_the_prose_outside_code() {
        let tagged = "Some thoughts first.\n**Change:** tile N by 64 so B stays in L2.\n\n### k.c\n```c\nint x;\n```\n";
        assert_eq!(described_change(tagged), "tile N by 64 so B stays in L2.");
        let prose =
            "I unrolled the k loop\nby four.\n\n### k.c\n```c\nChange: not this\n```\nDone.";
        assert_eq!(
            described_change(prose),
            "I unrolled the k loop by four. Done."
        );
        assert_eq!(described_change("```c\nint x;\n```"), "");
        assert!(described_change(&"word ".repeat(200)).chars().count() <= 401);
    }

    /// A cuda candidate's own headers (found by its kernels' includes) travel with it through replies: kept
    /// from the parent when the reply leaves them out, replaced when it gives them, new ones kept where a
    /// kernel includes them, the others dropped with a warning.
    #[test]
    fn a_cuda_candidates_headers_travel_with_it() {
        let seed = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tasks/gqa-paged-decode/seeds/cuda/expert");
        let parent = Candidate::load(&seed).unwrap();
        assert!(parent.files.contains_key("paged.cuh"));
        let split = &parent.files["split.cu"];
        // Only the kernel file changes: the header comes from the parent.
        let reply = format!("Change: a comment\n\n### split.cu\n```cuda\n// faster\n{split}```\n");
        let c = candidate_from_reply(&reply, &parent).unwrap().candidate;
        assert_eq!(c.files["paged.cuh"], parent.files["paged.cuh"]);
        assert!(c.files["split.cu"].starts_with("// faster"));
        // Only the header changes: it is the candidate's.
        let header = format!("// tuned\n{}", parent.files["paged.cuh"]);
        let reply = format!("Change: the header\n\n### paged.cuh\n```cuda\n{header}```\n");
        let c = candidate_from_reply(&reply, &parent).unwrap().candidate;
        assert!(c.files["paged.cuh"].starts_with("// tuned"));
        assert_ne!(c.hash(), parent.hash());
        // A new header the kernel includes is kept; one nothing includes is dropped, with a warning.
        let with_new = split.replace(
            "#include \"paged.cuh\"",
            "#include \"paged.cuh\"\n#include \"tile.cuh\"",
        );
        let reply = format!(
            "Change: a tile header\n\n### split.cu\n```cuda\n{with_new}```\n\n### tile.cuh\n```cuda\n#define TILE 4\n```\n\n### stray.cuh\n```cuda\n#define STRAY 1\n```\n"
        );
        let r = candidate_from_reply(&reply, &parent).unwrap();
        assert_eq!(r.candidate.files["tile.cuh"].trim(), "#define TILE 4");
        assert!(!r.candidate.files.contains_key("stray.cuh"));
        assert!(
            r.warnings.iter().any(|w| w.contains("dropped stray.cuh")),
            "{:?}",
            r.warnings
        );
    }

    fn parent() -> Candidate {
        let plan: Plan = toml::from_str(
            r#"
name = "naive"
target = "cpu"

[[kernel]]
name = "matmul"
source = "matmul.c"

[[launch]]
kernel = "matmul"
inputs = ["A", "B"]
outputs = ["C"]
scalars = ["M", "N", "K"]

[tunable.BM]
values = [16, 32, 64]
default = 16
"#,
        )
        .unwrap();
        Candidate {
            plan,
            files: [("matmul.c".to_string(), "void matmul(void) {}\n".to_string())].into(),
        }
    }

    const NEW_C: &str = "void matmul(void) { /* faster */ }\n";

    // --- JSON

    #[test]
    fn json_with_prose_and_fences() {
        let t = "Sure! Here is the edit:\n```json\n{\"ops\": [{\"op\": \"update_node\", \"node_id\": \"n1\"}]}\n```\nDone.";
        let v = first_json_object(t).unwrap();
        assert_eq!(v["ops"][0]["node_id"], "n1");
    }

    #[test]
    fn json_braces_and_escaped_quotes_in_strings() {
        let t = r#"x {"code": "int f() { return \"}\"; }", "n": {"a": [1, {"b": 2}]}} y"#;
        let v = first_json_object(t).unwrap();
        assert_eq!(v["code"], "int f() { return \"}\"; }");
        assert_eq!(v["n"]["a"][1]["b"], 2);
        let t = r#"{"s": "back\\slash \\"}"#;
        assert_eq!(first_json_object(t).unwrap()["s"], "back\\slash \\");
    }

    #[test]
    fn json_skips_invalid_object_before_valid_one() {
        let t = "Format: {op: ..., node_id: ...}\nAnswer: {\"op\": \"delete_node\"}";
        assert_eq!(first_json_object(t).unwrap(), json!({"op": "delete_node"}));
        let all: Vec<Value> = json_objects("{\"a\":1} text {bad} {\"b\":2}").collect();
        assert_eq!(all, vec![json!({"a": 1}), json!({"b": 2})]);
    }

    #[test]
    fn json_errors_are_precise() {
        assert_eq!(
            first_json_object("no braces here").unwrap_err(),
            ReplyError::NoJson
        );
        let e = first_json_object("line one\n  {\"ops\": [{\"op\": \"x\"},").unwrap_err();
        assert_eq!(e, ReplyError::JsonCutOff { line: 2, col: 3 });
        assert!(e.to_string().contains("cut off"));
        let e = first_json_object("set {x and y").unwrap_err();
        assert_eq!(e, ReplyError::JsonUnclosed { line: 1, col: 5 });
        let e = first_json_object("a\n{\"a\": 1,\n \"b\": }").unwrap_err();
        match &e {
            ReplyError::JsonInvalid { line, col, message } => {
                assert_eq!((*line, *col), (2, 1));
                assert!(
                    message.starts_with("expected value at line 3, column"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn json_does_not_return_a_fragment_of_a_cut_off_object() {
        let t = "{\"ops\": [{\"op\": \"update_node\"}, {\"op\": \"add_";
        assert!(matches!(
            first_json_object(t),
            Err(ReplyError::JsonCutOff { line: 1, col: 1 })
        ));
    }

    #[test]
    fn json_unicode_and_crlf() {
        let t = "résumé → ok\r\n{\"név\": \"ünïcødé 🚀\", \"x\": {\"y\": 1}}\r\n";
        assert_eq!(first_json_object(t).unwrap()["név"], "ünïcødé 🚀");
        let e = first_json_object("é\r\n  é {\"a\": tru}").unwrap_err();
        assert!(
            matches!(
                e,
                ReplyError::JsonInvalid {
                    line: 2,
                    col: 5,
                    ..
                }
            ),
            "{e:?}"
        );
    }

    #[test]
    fn pathological_json_input_stays_fast() {
        let start = std::time::Instant::now();
        let texts = [
            "{".repeat(100_000),
            format!("{{\"{}", "{".repeat(100_000)),
            "{\"a\":".repeat(20_000),
            format!("{{\"{}\", x}}", "{ ".repeat(50_000)),
            "{\"\\\"{".repeat(30_000),
        ];
        for t in &texts {
            assert!(first_json_object(t).is_err());
        }
        assert!(start.elapsed().as_secs() < 10, "{:?}", start.elapsed());
    }

    // --- code blocks

    #[test]
    fn names_from_info_string() {
        let t = "```c matmul.c\na\n```\n```toml plan.toml\nb\n```\n```cuda title=\"k.cu\"\nc\n```\n```c:x.c\nd\n```\n```y.metal\ne\n```\n";
        let b = code_blocks(t);
        let got: Vec<(&str, Option<&str>, &str)> = b
            .iter()
            .map(|b| (b.lang.as_str(), b.name.as_deref(), b.body.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("c", Some("matmul.c"), "a\n"),
                ("toml", Some("plan.toml"), "b\n"),
                ("cuda", Some("k.cu"), "c\n"),
                ("c", Some("x.c"), "d\n"),
                ("metal", Some("y.metal"), "e\n"),
            ]
        );
        assert_eq!(b[1].line, 4);
    }

    #[test]
    fn names_from_line_above() {
        let t = "### matmul.c\n```c\na\n```\nFile: `plan.toml`\n\n```toml\nb\n```\n**softmax.c**\n```c\nc\n```\nHere is the updated `scan.c`:\n```c\nd\n```\n```c\ne\n```\n";
        let blocks = code_blocks(t);
        let names: Vec<Option<&str>> = blocks.iter().map(|b| b.name.as_deref()).collect();
        assert_eq!(
            names,
            vec![
                Some("matmul.c"),
                Some("plan.toml"),
                Some("softmax.c"),
                Some("scan.c"),
                None
            ]
        );
    }

    #[test]
    fn prose_names_must_be_marked_and_fit_the_language() {
        let t = "I keep plan.toml as it was; the new kernel:\n```c\nx\n```\nUnlike a.c, b.c is:\n```c\ny\n```\nA header common.h is not needed.\n```c\nz\n```\nThe new matmul.c:\n```\nw\n```\n";
        let names: Vec<Option<String>> = code_blocks(t).into_iter().map(|b| b.name).collect();
        assert_eq!(names, vec![None, None, None, Some("matmul.c".into())]);
    }

    #[test]
    fn tildes_and_long_fences() {
        let t = "~~~c\n```\nstill body\n```\n~~~\n````markdown\n```c\nx\n```\n````\n";
        let b = code_blocks(t);
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].body, "```\nstill body\n```\n");
        assert_eq!(b[1].lang, "markdown");
        assert_eq!(b[1].body, "```c\nx\n```\n");
        assert!(b.iter().all(|b| !b.truncated));
        // A closing fence must be at least as long as the opening one.
        let b = code_blocks("````c\n```\n`````\n");
        assert_eq!(b[0].body, "```\n");
    }

    #[test]
    fn truncated_block_takes_the_rest() {
        let b = code_blocks("text\n```c matmul.c\nint x;\nint y");
        assert_eq!(b.len(), 1);
        assert!(b[0].truncated);
        assert_eq!(b[0].body, "int x;\nint y");
    }

    #[test]
    fn crlf_and_unicode() {
        let t = "### k.c\r\n```c\r\nint ü = 1; // 🚀\r\n```\r\n";
        let b = code_blocks(t);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].name.as_deref(), Some("k.c"));
        assert_eq!(b[0].body, "int ü = 1; // 🚀\r\n");
        assert!(!b[0].truncated);
    }

    #[test]
    fn inline_triple_backticks_are_not_fences() {
        assert!(code_blocks("use ```x``` inline\n```c```\n").is_empty());
    }

    // --- candidates

    #[test]
    fn kernel_only_reply_keeps_the_plan() {
        let t = format!("Tiling helps.\n\n### matmul.c\n```c\n{NEW_C}```\n");
        let r = candidate_from_reply(&t, &parent()).unwrap();
        assert_eq!(r.candidate.files["matmul.c"], NEW_C);
        assert_eq!(r.candidate.plan, parent().plan);
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    }

    #[test]
    fn crlf_reply() {
        let t = format!(
            "### matmul.c\r\n```c\r\n{}```\r\n",
            NEW_C.replace('\n', "\r\n")
        );
        let r = candidate_from_reply(&t, &parent()).unwrap();
        assert_eq!(r.candidate.files["matmul.c"], NEW_C.replace('\n', "\r\n"));
    }

    #[test]
    fn plan_only_reply_keeps_the_files() {
        let mut c = parent();
        c.plan.tunable.get_mut("BM").unwrap().default = 32;
        let plan = toml::to_string(&c.plan).unwrap();
        let r = candidate_from_reply(&format!("```toml\n{plan}```"), &parent()).unwrap();
        assert_eq!(r.candidate.hash(), c.hash());
    }

    #[test]
    fn bare_blocks_holding_a_plan_are_the_plan() {
        let mut c = parent();
        c.plan.tunable.get_mut("BM").unwrap().default = 64;
        let plan = toml::to_string(&c.plan).unwrap();
        let r =
            candidate_from_reply(&format!("```\n{plan}```\n```\n{NEW_C}```\n"), &parent()).unwrap();
        assert_eq!(r.candidate.params()["BM"], 64);
        assert_eq!(r.candidate.files["matmul.c"], NEW_C);
    }

    #[test]
    fn unnamed_single_block_is_the_only_source() {
        let r = candidate_from_reply(&format!("```cpp\n{NEW_C}```"), &parent()).unwrap();
        assert_eq!(r.candidate.files["matmul.c"], NEW_C);
        assert_eq!(r.warnings.len(), 1);
        assert!(r.warnings[0].contains("taken as matmul.c"));
        let e = candidate_from_reply("```c\nx\n```\n```c\ny\n```\n", &parent()).unwrap_err();
        assert!(matches!(e, ReplyError::Unnamed { count: 2, .. }), "{e}");
        // Next to snippets, the block that defines the entry symbol is the file.
        let t = format!("```c\n{NEW_C}```\nThe key line:\n```c\nC[i] += a;\n```\n");
        let r = candidate_from_reply(&t, &parent()).unwrap();
        assert_eq!(r.candidate.files["matmul.c"], NEW_C);
        assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
    }

    #[test]
    fn no_block_error_says_what_to_send() {
        let e = candidate_from_reply("I would tile the loops.", &parent()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no fenced code block found: answer with the full kernel file in a ```c block named matmul.c (and plan.toml in a ```toml block if the launch plan changes)"
        );
    }

    #[test]
    fn cut_off_reply_is_an_error() {
        let e = candidate_from_reply("### matmul.c\n```c\nvoid matmul(", &parent()).unwrap_err();
        assert!(e.to_string().starts_with("the reply was cut off"), "{e}");
    }

    #[test]
    fn unchanged_reply_is_an_error() {
        let e = candidate_from_reply(&render_candidate(&parent()), &parent()).unwrap_err();
        assert_eq!(e, ReplyError::Unchanged);
        // A dropped final newline is no change either.
        let e = candidate_from_reply("### matmul.c\n```c\nvoid matmul(void) {}\n```", &parent());
        assert_eq!(e.unwrap_err(), ReplyError::Unchanged);
    }

    #[test]
    fn unknown_and_missing_files() {
        let e = candidate_from_reply("### matmul_v2.c\n```c\nx\n```\n", &parent()).unwrap_err();
        assert!(matches!(e, ReplyError::UnknownFile { .. }), "{e}");
        assert!(e.to_string().contains("its files: matmul.c"));
        let mut c = parent();
        c.plan.kernel[0].source = "new.c".into();
        let plan = toml::to_string(&c.plan).unwrap();
        let e = candidate_from_reply(&format!("### plan.toml\n```toml\n{plan}```\n"), &parent())
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "plan.toml names new.c (kernel `matmul`), which the reply does not give and the parent does not have: add a ```c block named new.c"
        );
        let ok = format!("### plan.toml\n```toml\n{plan}```\n### new.c\n```c\n{NEW_C}```\n");
        let r = candidate_from_reply(&ok, &parent()).unwrap();
        assert_eq!(r.candidate.files.keys().collect::<Vec<_>>(), ["new.c"]);
    }

    #[test]
    fn bad_plans_are_reported() {
        let e =
            candidate_from_reply("### plan.toml\n```toml\nname = \n```\n", &parent()).unwrap_err();
        assert!(matches!(e, ReplyError::PlanToml { line: 2, .. }), "{e}");
        let mut c = parent();
        c.plan.tunable.get_mut("BM").unwrap().default = 7;
        let plan = toml::to_string(&c.plan).unwrap();
        let e = candidate_from_reply(&format!("```toml\n{plan}```"), &parent()).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("plan.toml is invalid: field `tunable.BM.default`"),
            "{e}"
        );
        c.plan.kernel[0].source = "../x.c".into();
        let plan = toml::to_string(&c.plan).unwrap();
        let e = candidate_from_reply(&format!("```toml\n{plan}```"), &parent()).unwrap_err();
        assert!(matches!(e, ReplyError::BadFileName { .. }), "{e}");
    }

    #[test]
    fn a_plan_naming_an_option_or_response_file_is_refused() {
        for (bad, why) in [("@opts.h", "`@`"), ("-include", "starts with `-`")] {
            // Even with a block of that name, so only the name can be the reason.
            let mut c = parent();
            c.plan.kernel[0].source = bad.into();
            let plan = toml::to_string(&c.plan).unwrap();
            let t = format!("### plan.toml\n```toml\n{plan}```\n### {bad}\n```c\n{NEW_C}```\n");
            let e = candidate_from_reply(&t, &parent()).unwrap_err();
            assert!(
                matches!(&e, ReplyError::BadFileName { kernel, name, .. } if kernel == "matmul" && name == bad),
                "{e}"
            );
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!(
                    "plan.toml: kernel `matmul`: `{bad}` is not a plain file name"
                )) && msg.contains(why)
                    && msg.contains(crate::names::FILE_NAME_RULE),
                "{msg}"
            );
        }
        // A header name is held to the same rule.
        let mut c = parent();
        c.plan.kernel[0].header = Some("@x.h".into());
        let plan = toml::to_string(&c.plan).unwrap();
        let e = candidate_from_reply(&format!("```toml\n{plan}```"), &parent()).unwrap_err();
        assert!(matches!(e, ReplyError::BadFileName { .. }), "{e}");
    }

    #[test]
    fn with_no_base_candidate_the_reply_must_give_the_plan() {
        let mut empty = parent();
        empty.plan.kernel.clear();
        empty.plan.launch.clear();
        empty.files.clear();
        let code_only = format!("### matmul.c\n```c\n{NEW_C}```\n");
        let e = candidate_from_reply(&code_only, &empty).unwrap_err();
        assert!(matches!(e, ReplyError::NoPlanWithoutBase), "{e}");
        let plan = toml::to_string(&parent().plan).unwrap();
        let whole = format!("### plan.toml\n```toml\n{plan}```\n{code_only}");
        let r = candidate_from_reply(&whole, &empty).unwrap();
        assert_eq!(r.candidate.files["matmul.c"], NEW_C);
    }

    #[test]
    fn duplicates_must_agree() {
        let t = "### matmul.c\n```c\na\n```\n### matmul.c\n```c\nb\n```\n";
        let e = candidate_from_reply(t, &parent()).unwrap_err();
        assert!(e.to_string().contains("matmul.c 2 times"), "{e}");
    }

    #[test]
    fn other_blocks_are_ignored_with_a_warning() {
        let t = format!(
            "```python\nprint(1)\n```\n### matmul.c\n```c\n{NEW_C}```\nthe key line:\n```c\nx += 1;\n```\n"
        );
        let r = candidate_from_reply(&t, &parent()).unwrap();
        assert_eq!(r.candidate.files["matmul.c"], NEW_C);
        assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
        let e = candidate_from_reply("```python\nprint(1)\n```\n", &parent()).unwrap_err();
        assert!(matches!(e, ReplyError::NothingUsable { .. }), "{e}");
    }

    #[test]
    fn render_round_trips() {
        let mut c = parent()
            .with_params(&[("BM".to_string(), 64)].into())
            .unwrap();
        c.files.insert(
            "matmul.c".into(),
            "// ```` fences ``` inside\n```\n~~~\nvoid matmul(void) {}\r\n".into(),
        );
        c.plan.description = "quotes \" and ``` and\nnewlines ü".into();
        let text = render_candidate(&c);
        // The description holds ```, so the plan's fence is longer.
        assert!(text.starts_with("### plan.toml\n````toml\n"), "{text}");
        assert!(render_candidate(&parent()).starts_with("### plan.toml\n```toml\nname = "));
        let r = candidate_from_reply(&text, &parent()).unwrap();
        assert_eq!(r.candidate.hash(), c.hash());
        assert!(r.warnings.is_empty());
    }

    #[test]
    fn rendered_langs_follow_extensions() {
        assert_eq!(lang_for_file("a.c"), "c");
        assert_eq!(lang_for_file("a.h"), "c");
        assert_eq!(lang_for_file("a.cu"), "cuda");
        assert_eq!(lang_for_file("a.metal"), "metal");
    }
}

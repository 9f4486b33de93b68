//! The rules: what a Mac rejects (or runs wrongly) that the C++ compile cannot see. Each finding has a
//! code documented in `docs/check.md`.

use super::lex::{Tok, matching};
use super::{Finding, Severity};
use std::collections::{BTreeMap, BTreeSet, HashMap};

const CUDA_LEFTOVERS: &str = include_str!("cuda_leftovers.txt");

fn cuda_table() -> &'static HashMap<String, String> {
    static T: std::sync::OnceLock<HashMap<String, String>> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        CUDA_LEFTOVERS
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .filter_map(|l| l.split_once('|'))
            .map(|(a, b)| (a.trim().to_string(), b.trim().to_string()))
            .collect()
    })
}

pub fn finding(code: &str, sev: Severity, file: &str, line: usize, message: String) -> Finding {
    Finding {
        code: code.to_string(),
        severity: sev,
        file: file.to_string(),
        line,
        message,
    }
}

fn err(code: &str, file: &str, line: usize, message: String) -> Finding {
    finding(code, Severity::Error, file, line, message)
}

const SPACES: [&str; 4] = ["device", "constant", "threadgroup", "thread"];
const KEYWORDS: [&str; 16] = [
    "return", "if", "else", "for", "while", "do", "switch", "case", "default", "break", "continue",
    "goto", "delete", "throw", "new", "sizeof",
];

/// Rules that read one file on its own: CUDA leftovers, `double`, C/C++ library use, unsupported C++,
/// includes, initialised threadgroup variables.
pub fn text_rules(
    file: &str,
    toks: &[Tok],
    directives: &[(usize, String)],
    out: &mut Vec<Finding>,
) {
    let cuda = cuda_table();
    let mut seen = BTreeSet::new();
    for (i, t) in toks.iter().enumerate() {
        let next = |k: usize| toks.get(i + k).map(|t| t.text.as_str()).unwrap_or("");
        let prev = if i > 0 { toks[i - 1].text.as_str() } else { "" };
        if prev == "." || prev == "->" {
            continue; // a member, not a free name
        }
        if let Some(fix) = cuda.get(&t.text) {
            if seen.insert((t.text.clone(), t.line)) {
                out.push(err(
                    "M010",
                    file,
                    t.line,
                    format!("`{}` is CUDA, not Metal; write {fix}", t.text),
                ));
            }
            continue;
        }
        match t.text.as_str() {
            "double" => out.push(err(
                "M011",
                file,
                t.line,
                "`double` does not exist on Apple GPUs; use float (accumulate in float, or in two floats for extra precision)".into(),
            )),
            "printf" | "fprintf" | "puts" | "malloc" | "free" | "cout" | "cerr" | "exit" | "abort"
                if next(1) == "(" || next(1) == "<<" =>
            {
                out.push(err(
                    "M012",
                    file,
                    t.line,
                    format!(
                        "`{}` is not available in a Metal kernel (no C library, no printf); write debug values to an extra output instead",
                        t.text
                    ),
                ))
            }
            "std" if next(1) == "::" => out.push(err(
                "M012",
                file,
                t.line,
                format!(
                    "`std::{}`: Metal has no C++ standard library; use the metal:: function (metal::{0}) or write it yourself",
                    next(2)
                ),
            )),
            "throw" | "try" | "catch" | "virtual" | "dynamic_cast" | "typeid" | "goto"
            | "thread_local" | "asm" | "__asm__" => out.push(err(
                "M014",
                file,
                t.line,
                format!("`{}` is not supported by the Metal Shading Language", t.text),
            )),
            "new" | "delete"
                if !matches!(prev, "operator")
                    && (next(1) != "(" || t.text == "delete")
                    && next(1) != ";"
                    && next(1) != ")" =>
            {
                out.push(err(
                    "M014",
                    file,
                    t.line,
                    format!(
                        "`{}`: Metal has no dynamic memory; use threadgroup arrays or the plan's [[buffer]]s",
                        t.text
                    ),
                ))
            }
            "threadgroup" => {
                // `threadgroup T name[...] = ...;` (not a pointer): Metal cannot initialise threadgroup memory.
                let end = (i..toks.len())
                    .find(|&j| toks[j].is(";"))
                    .unwrap_or(toks.len());
                let stmt = &toks[i..end];
                // A pointer or a reference (`threadgroup float (&a)[4] = s.a;`) binds memory declared elsewhere.
                let pointer = stmt
                    .iter()
                    .take_while(|t| !t.is("="))
                    .any(|t| t.is("*") || t.is("&"));
                // A declaration names a type next (`threadgroup T x...`); a member function qualified by
                // its object's space (`T() threadgroup : v(0) {}`) does not.
                let is_decl = (i == 0 || matches!(prev, ";" | "{" | "}" | ")" | "]"))
                    && toks.get(i + 1).is_some_and(|n| n.is_ident());
                if is_decl && !pointer && stmt.iter().any(|t| t.is("=")) {
                    out.push(err(
                        "M022",
                        file,
                        t.line,
                        "a threadgroup variable cannot have an initializer; declare it, then have the threads fill it and call threadgroup_barrier(mem_flags::mem_threadgroup)".into(),
                    ));
                }
            }
            _ => {}
        }
    }
    for (line, d) in directives {
        let d = d.trim_start_matches('#').trim_start();
        if let Some(inc) = d.strip_prefix("include") {
            let inc = inc.trim();
            let name = inc.trim_matches(|c| c == '<' || c == '>' || c == '"');
            if !(name.starts_with("metal_") || name == "simd/simd.h") {
                out.push(err(
                    "M013",
                    file,
                    *line,
                    format!(
                        "#include {inc}: only Metal's own headers (<metal_stdlib>, ...) exist when MLX compiles a kernel; put helpers in the candidate's header file"
                    ),
                ));
            }
        }
    }
}

/// A function defined at program scope.
#[derive(Debug, Clone)]
pub struct Function {
    pub name: String,
    pub line: usize,
    pub kernel: bool,
    /// The word before the name (the return type's last word).
    pub returns: String,
    /// Parameter tokens, split at top-level commas.
    pub params: Vec<Vec<Tok>>,
    /// Token range of the body, without its braces.
    pub body: (usize, usize),
}

/// Program-scope structure of a header or a full source: functions, and program-scope variables that are
/// not in the `constant` address space (M024).
///
/// `constant_macros` are object-like macros that spell the address space (`#define MLX_MTL_CONST static
/// constant constexpr const`): a variable declared with one is in it.
pub fn program_scope(
    file: &str,
    toks: &[Tok],
    constant_macros: &[String],
    out: &mut Vec<Finding>,
) -> Vec<Function> {
    let mut fns = Vec::new();
    let mut stmt: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        if t.is("{") {
            let first = stmt.first().map(|&s| toks[s].text.as_str()).unwrap_or("");
            if first == "namespace" || (first == "extern" && stmt.len() <= 2) {
                stmt.clear();
                i += 1;
                continue;
            }
            let close = matching(toks, i);
            let paren = parameter_list(toks, &stmt);
            let is_fn = paren.is_some()
                && !matches!(first, "struct" | "class" | "enum" | "union")
                && stmt.last().is_some_and(|&s| !toks[s].is("="));
            if let (true, Some(p)) = (is_fn, paren) {
                let pidx = stmt[p];
                let name_idx = if pidx > 0 { pidx - 1 } else { pidx };
                let pclose = matching(toks, pidx);
                let mut params = vec![Vec::new()];
                let mut depth = 0i32;
                for tk in &toks[pidx + 1..pclose] {
                    match tk.text.as_str() {
                        "(" | "[" | "<" => depth += 1,
                        ")" | "]" | ">" => depth -= 1,
                        "," if depth == 0 => {
                            params.push(Vec::new());
                            continue;
                        }
                        _ => {}
                    }
                    params.last_mut().expect("one list").push(tk.clone());
                }
                params.retain(|p| !p.is_empty());
                let kernel = stmt.iter().any(|&s| toks[s].is("kernel"));
                fns.push(Function {
                    name: toks[name_idx].text.clone(),
                    line: toks[name_idx].line,
                    kernel,
                    returns: if name_idx > 0 {
                        toks[name_idx - 1].text.clone()
                    } else {
                        String::new()
                    },
                    params,
                    body: (i + 1, close),
                });
                stmt.clear();
                i = close + 1;
                continue;
            }
            // A struct body or an initializer: part of the statement.
            stmt.extend(i..=close);
            i = close + 1;
            continue;
        }
        if t.is("}") {
            stmt.clear(); // the end of a namespace
            i += 1;
            continue;
        }
        if t.is(";") {
            program_variable(file, toks, &stmt, constant_macros, out);
            stmt.clear();
            i += 1;
            continue;
        }
        stmt.push(i);
        i += 1;
    }
    fns
}

/// Where a declaration's parameter list opens: its first `(` outside a leading `template <...>` header and
/// outside `[[...]]` attributes (`template <void (*f)(float)> kernel void k(...)`, `[[host_name("k")]]`).
fn parameter_list(toks: &[Tok], stmt: &[usize]) -> Option<usize> {
    let mut k = 0;
    while k < stmt.len() {
        let t = &toks[stmt[k]];
        if t.is("template") && stmt.get(k + 1).is_some_and(|&s| toks[s].is("<")) {
            // Skip to the `>` that closes the header (brackets inside parentheses do not count).
            let (mut angle, mut paren) = (0i32, 0i32);
            k += 1;
            while k < stmt.len() {
                match toks[stmt[k]].text.as_str() {
                    "(" => paren += 1,
                    ")" => paren -= 1,
                    "<" if paren == 0 => angle += 1,
                    ">" if paren == 0 => angle -= 1,
                    ">>" if paren == 0 => angle -= 2,
                    _ => {}
                }
                k += 1;
                if angle <= 0 {
                    break;
                }
            }
            continue;
        }
        if t.is("[") && stmt.get(k + 1).is_some_and(|&s| toks[s].is("[")) {
            let mut depth = 0i32;
            while k < stmt.len() {
                match toks[stmt[k]].text.as_str() {
                    "[" => depth += 1,
                    "]" => depth -= 1,
                    _ => {}
                }
                k += 1;
                if depth == 0 {
                    break;
                }
            }
            continue;
        }
        if t.is("(") {
            return Some(k);
        }
        k += 1;
    }
    None
}

/// The object-like macros among `#define`s whose text says `constant` or `constexpr`.
pub fn constant_macros(directives: &[(usize, String)]) -> Vec<String> {
    directives
        .iter()
        .filter_map(|(_, d)| {
            let toks = crate::check::lex::tokens(d.trim_start().strip_prefix('#')?);
            let name = toks
                .get(1)
                .filter(|_| toks.first().is_some_and(|t| t.is("define")))?;
            // A function-like macro's parenthesis follows its name with no space.
            let function_like = toks
                .get(2)
                .is_some_and(|t| t.is("(") && t.pos == name.pos + name.text.len());
            (!function_like
                && toks[2..]
                    .iter()
                    .any(|t| t.is("constant") || t.is("constexpr")))
            .then(|| name.text.clone())
        })
        .collect()
}

fn program_variable(
    file: &str,
    toks: &[Tok],
    stmt: &[usize],
    constant_macros: &[String],
    out: &mut Vec<Finding>,
) {
    let words: Vec<&str> = stmt.iter().map(|&s| toks[s].text.as_str()).collect();
    let Some(first) = words.first() else { return };
    let skip = [
        "typedef",
        "using",
        "template",
        "struct",
        "class",
        "enum",
        "union",
        "namespace",
        "static_assert",
        "extern",
        "friend",
    ];
    if skip.contains(first)
        || words.contains(&"constant")
        || words.contains(&"constexpr")
        || words.iter().any(|w| constant_macros.iter().any(|m| m == w))
        || words.contains(&"(") && !words.contains(&"=")
        || words.len() < 2
    {
        return;
    }
    // `T name;`, `T name = ...;`, `T name[N] = {...};`
    let eq = words.iter().position(|w| *w == "=").unwrap_or(words.len());
    let head = &words[..eq];
    let name_pos = head.iter().position(|w| *w == "[").unwrap_or(head.len());
    if name_pos >= 2 && toks[stmt[name_pos - 1]].is_ident() {
        out.push(err(
            "M024",
            file,
            toks[stmt[0]].line,
            format!(
                "program-scope variable `{}` must be in the constant address space: write `constant {}`",
                words[name_pos - 1],
                words[..eq].join(" ")
            ),
        ));
    }
}

/// Names of program-scope variables in the `constant` address space (tables in a header).
pub fn constant_names(toks: &[Tok]) -> Vec<String> {
    let mut out = Vec::new();
    let (mut depth, mut paren) = (0i32, 0i32);
    let mut i = 0;
    while i < toks.len() {
        match toks[i].text.as_str() {
            "{" => depth += 1,
            "}" => depth -= 1,
            "(" => paren += 1,
            ")" => paren -= 1,
            // A `constant` inside parentheses qualifies a parameter, not a program-scope variable.
            "constant" if depth == 0 && paren == 0 => {
                let end = (i..toks.len())
                    .find(|&k| toks[k].is(";"))
                    .unwrap_or(toks.len());
                let stmt = &toks[i..end];
                let upto = stmt
                    .iter()
                    .position(|t| t.is("[") || t.is("=") || t.is("{") || t.is("("))
                    .unwrap_or(stmt.len());
                // Not a function (`constant` also qualifies pointer parameters and return types).
                if !stmt.get(upto).is_some_and(|t| t.is("("))
                    && let Some(n) = stmt[..upto].iter().rev().find(|t| t.is_ident())
                {
                    out.push(n.text.clone());
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Recursion among the functions of a file (Metal has no call stack for it).
pub fn recursion(file: &str, toks: &[Tok], fns: &[Function], out: &mut Vec<Finding>) {
    // An overloaded name may call another overload; only names defined once are followed, and a function
    // named as one of Metal's library (MLX's `simd_shuffle_down` for a struct) overloads it.
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for f in fns {
        *count.entry(f.name.as_str()).or_default() += 1;
    }
    let library = super::compile::library_functions();
    let names: BTreeSet<&str> = count
        .iter()
        .filter(|(k, n)| **n == 1 && !library.contains(**k))
        .map(|(k, _)| *k)
        .collect();
    let mut calls: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for f in fns {
        let body = &toks[f.body.0..f.body.1];
        for (j, t) in body.iter().enumerate() {
            // `X::f(`, `a.f(`: a member (of a struct the scan does not enter), not the function `f`.
            let member = j > 0 && ["::", ".", "->"].contains(&body[j - 1].text.as_str());
            if names.contains(t.text.as_str())
                && !member
                && body.get(j + 1).is_some_and(|n| n.is("("))
            {
                calls
                    .entry(f.name.as_str())
                    .or_default()
                    .insert(t.text.as_str());
            }
        }
    }
    for f in fns.iter().filter(|f| names.contains(f.name.as_str())) {
        // Depth-first search from f's callees back to f.
        let mut stack: Vec<&str> = calls
            .get(f.name.as_str())
            .map(|c| c.iter().copied().collect())
            .unwrap_or_default();
        let mut seen = BTreeSet::new();
        while let Some(n) = stack.pop() {
            if n == f.name {
                out.push(err(
                    "M015",
                    file,
                    f.line,
                    format!(
                        "`{}` calls itself (directly or through other functions); Metal does not allow recursion: use a loop with an explicit stack in registers or threadgroup memory",
                        f.name
                    ),
                ));
                break;
            }
            if seen.insert(n) {
                stack.extend(calls.get(n).into_iter().flatten().copied());
            }
        }
    }
}

/// Threadgroup variables declared inside a function that is not a kernel (M023).
pub fn threadgroup_outside_kernel(
    file: &str,
    toks: &[Tok],
    fns: &[Function],
    out: &mut Vec<Finding>,
) {
    for f in fns.iter().filter(|f| !f.kernel) {
        let body = &toks[f.body.0..f.body.1];
        for (j, t) in body.iter().enumerate() {
            if !t.is("threadgroup")
                || (j > 0 && !matches!(body[j - 1].text.as_str(), ";" | "{" | "}"))
            {
                continue;
            }
            let end = (j..body.len())
                .find(|&k| body[k].is(";"))
                .unwrap_or(body.len());
            if !body[j..end].iter().any(|t| t.is("*") || t.is("&")) {
                out.push(err(
                    "M023",
                    file,
                    t.line,
                    format!(
                        "threadgroup memory declared in `{}`, which is not the kernel: declare it in the kernel body and pass a `threadgroup T*` to the function",
                        f.name
                    ),
                ));
            }
        }
    }
}

/// Threadgroup variables of a kernel body: (index of the closing `;`, name, line) of each array or scalar
/// declaration, for the size probes.
pub fn threadgroup_decls(toks: &[Tok]) -> Vec<(usize, String, usize)> {
    let mut out = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        if !t.is("threadgroup")
            || (i > 0 && !matches!(toks[i - 1].text.as_str(), ";" | "{" | "}" | ")"))
        {
            continue;
        }
        let Some(end) = (i..toks.len()).find(|&k| toks[k].is(";")) else {
            continue;
        };
        let stmt = &toks[i..end];
        if stmt.iter().any(|t| t.is("(") || t.is("=")) {
            continue; // a pointer with an initializer, or not a declaration
        }
        // Declarators: split at top-level commas; each one's name is its first identifier after the type.
        let mut depth = 0i32;
        let mut parts: Vec<Vec<&Tok>> = vec![Vec::new()];
        for tk in &stmt[1..] {
            match tk.text.as_str() {
                "[" | "<" => depth += 1,
                "]" | ">" => depth -= 1,
                "," if depth == 0 => {
                    parts.push(Vec::new());
                    continue;
                }
                _ => {}
            }
            parts.last_mut().expect("one").push(tk);
        }
        for (k, p) in parts.iter().enumerate() {
            // In the first part the name is the identifier just before `[` (or the last one).
            let upto = p.iter().position(|t| t.is("[")).unwrap_or(p.len());
            // A pointer (`threadgroup float* p`) holds no threadgroup memory of its own; a `*` inside the
            // extent (`As[128 * 128]`) is arithmetic.
            if p[..upto].iter().any(|t| t.is("*")) {
                continue;
            }
            let name = if k == 0 {
                p[..upto].iter().rev().find(|t| t.is_ident())
            } else {
                p[..upto].iter().find(|t| t.is_ident())
            };
            if let Some(n) = name {
                out.push((end, n.text.clone(), n.line));
            }
        }
    }
    out
}

/// The first token of `r` outside any parentheses or brackets that `stop` accepts.
fn top_level(r: &[Tok], stop: impl Fn(&Tok) -> bool) -> Option<usize> {
    let mut depth = 0i32;
    r.iter().position(|t| {
        match t.text.as_str() {
            "(" | "[" => depth += 1,
            ")" | "]" => depth -= 1,
            _ => {}
        }
        depth == 0 && stop(t)
    })
}

/// `min(a, n - 1)` (or `metal::min`, either argument order, in parentheses or not): `n`, the name the
/// value stays below.
fn min_below(r: &[Tok]) -> Option<String> {
    let mut r = r;
    while r.len() > 2 && r[0].is("(") && matching(r, 0) == r.len() - 1 {
        r = &r[1..r.len() - 1];
    }
    let r = match r {
        [ns, colons, rest @ ..] if ns.is("metal") && colons.is("::") => rest,
        _ => r,
    };
    let [f, open, args @ .., close] = r else {
        return None;
    };
    if !f.is("min") || !open.is("(") || !close.is(")") || matching(r, 1) != r.len() - 1 {
        return None;
    }
    let comma = top_level(args, |t| t.is(","))?;
    [&args[..comma], &args[comma + 1..]]
        .into_iter()
        .find_map(|a| match a {
            [n, minus, one] if n.is_ident() && minus.is("-") && one.is("1") => Some(n.text.clone()),
            _ => None,
        })
}

/// An index (`[ n + j ]`, tokens joined by spaces) that is `n`, or `n` plus terms with no subtraction: `n`,
/// the name it is at or above (indices are taken as non-negative).
fn at_or_above(idx: &str) -> Option<String> {
    let words: Vec<&str> = idx.split(' ').collect();
    let [open, n, rest @ .., close] = words.as_slice() else {
        return None;
    };
    let ident = n
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && n.chars().all(|c| c.is_alphanumeric() || c == '_');
    let tail_adds = match rest {
        [] => true,
        [plus, tail @ ..] => {
            *plus == "+" && !tail.is_empty() && !tail.iter().any(|w| *w == "-" || *w == "--")
        }
    };
    (*open == "[" && *close == "]" && ident && tail_adds).then(|| n.to_string())
}

/// The tokens of `r` that name variables: not a member after `.` or `->` (`tgpig.x` reads `tgpig`, never
/// a local called `x`).
fn names(r: &[Tok]) -> impl Iterator<Item = &Tok> {
    r.iter()
        .enumerate()
        .filter(|(k, _)| *k == 0 || !(r[k - 1].is(".") || r[k - 1].is("->")))
        .map(|(_, t)| t)
}

/// Control flow that differs between threads: the line of its condition, and whether it may differ
/// between threads of one simdgroup (false: whole simdgroups take the same branch).
type Div = Option<(usize, bool)>;

/// What the flow analysis of one kernel body knows.
pub struct Flow<'a> {
    pub file: &'a str,
    pub toks: &'a [Tok],
    /// Names whose value differs between threads of a threadgroup.
    pub varying: BTreeSet<String>,
    /// Of those, the names whose value may differ between threads of one simdgroup (the rest, such as
    /// `simdgroup_index_in_threadgroup` and what is computed from it, are the same across a simdgroup,
    /// so a `simdgroup_barrier` under them is reached by the whole simdgroup).
    pub within_simdgroup: BTreeSet<String>,
    /// Thread-dependent names whose value is a uniform amount plus another name's (`start + tid`): name ->
    /// that name (see `offset_of`).
    offsets: HashMap<String, String>,
    /// The statement being read is a `for` loop's init clause.
    in_for_init: bool,
    /// Names with a known address space (kernel parameters, threadgroup arrays, qualified pointers).
    pub spaces: HashMap<String, String>,
    /// Names MLX injects or declares, with why (M050).
    pub reserved: Vec<(String, String)>,
    /// Helper functions: name -> address space of each parameter (None: not a pointer).
    pub helpers: HashMap<String, Vec<Option<String>>>,
    pub findings: Vec<Finding>,
    /// Whether a comparison involves a thread-dependent value (a bounds guard).
    pub guarded: bool,
    /// A guard must compare with something other than thread indices, counts and literals (a size): how a
    /// helper's comparisons are read, where `lane < 16` or `tid < blockDim / 32` picks threads, not data.
    pub sizes_only: bool,
    final_pass: bool,
    divergent_return: Div,
    /// Threadgroup elements written at thread-dependent indices since the last barrier: name -> (index,
    /// line, the name the index stays below when it is known to: see `below`).
    tg_written: HashMap<String, Vec<(String, usize, Option<String>)>>,
    /// Names whose value is known to be less than another name's (`i = min(x, n - 1)`): name -> that name.
    below: HashMap<String, String>,
    /// Names declared as pointers (their address space is in `spaces`).
    pointers: BTreeSet<String>,
    /// Names declared as plain values (not pointers, not arrays): in `off + p`, an offset, not the memory.
    scalars: BTreeSet<String>,
    /// Names holding thread counts (made of attributes and literals only): no size of the data (`sizes_only`).
    counts: BTreeSet<String>,
    /// The declaration being read is `auto` (its address space is not written down).
    decl_auto: bool,
}

impl<'a> Flow<'a> {
    pub fn new(file: &'a str, toks: &'a [Tok]) -> Flow<'a> {
        Flow {
            file,
            toks,
            varying: BTreeSet::new(),
            within_simdgroup: BTreeSet::new(),
            offsets: HashMap::new(),
            in_for_init: false,
            spaces: HashMap::new(),
            reserved: Vec::new(),
            helpers: HashMap::new(),
            findings: Vec::new(),
            guarded: false,
            sizes_only: false,
            final_pass: false,
            divergent_return: None,
            tg_written: HashMap::new(),
            below: HashMap::new(),
            pointers: BTreeSet::new(),
            scalars: BTreeSet::new(),
            counts: BTreeSet::new(),
            decl_auto: false,
        }
    }

    /// Runs the analysis over `toks[start..end]` until the set of varying names is stable, then once
    /// more recording findings.
    pub fn run(&mut self, start: usize, end: usize) {
        for _ in 0..8 {
            let before = (self.varying.clone(), self.within_simdgroup.clone());
            self.divergent_return = None;
            self.block(start, end, None);
            if (&self.varying, &self.within_simdgroup) == (&before.0, &before.1) {
                break;
            }
        }
        self.final_pass = true;
        self.divergent_return = None;
        self.tg_written.clear();
        self.block(start, end, None);
    }

    /// `name` holds the value of the thread attribute `attr` (one of signature::VARYING).
    pub fn seed(&mut self, name: &str, attr: &str) {
        self.varying.insert(name.to_string());
        if attr != "simdgroup_index_in_threadgroup" {
            self.within_simdgroup.insert(name.to_string());
        }
    }

    fn varies(&self, r: &[Tok]) -> bool {
        names(r).any(|t| self.varying.contains(&t.text))
    }

    fn varies_within_simdgroup(&self, r: &[Tok]) -> bool {
        names(r).any(|t| self.within_simdgroup.contains(&t.text))
    }

    /// The divergence inside a statement whose condition is `head`, nested in `div`: the stricter wins.
    fn diverge(&self, div: Div, head: &[Tok], line: usize) -> Div {
        match div {
            Some((_, true)) => div,
            _ if self.varies_within_simdgroup(head) => Some((line, true)),
            Some(_) => div,
            None => self.varies(head).then_some((line, false)),
        }
    }

    fn compares_varying(&self, r: &[Tok]) -> bool {
        self.varies(r)
            && r.iter().enumerate().any(|(k, t)| {
                matches!(t.text.as_str(), "<" | ">" | "<=" | ">=")
                    && !(k > 0 && (r[k - 1].text.ends_with("_cast") || r[k - 1].is("template")))
            })
            && (!self.sizes_only
                || names(r).any(|t| {
                    t.is_ident()
                        && !self.varying.contains(&t.text)
                        && !self.counts.contains(&t.text)
                        && !super::signature::ATTRIBUTES.iter().any(|(a, _)| t.is(a))
                        && !is_keyword_or_type(&t.text)
                }))
    }

    fn block(&mut self, mut i: usize, end: usize, div: Div) {
        while i < end {
            i = self.stmt(i, end, div);
        }
    }

    /// Parses one statement at `i`; returns the index after it.
    fn stmt(&mut self, i: usize, end: usize, div: Div) -> usize {
        let toks = self.toks;
        let t = &toks[i];
        match t.text.as_str() {
            "{" => {
                let c = matching(toks, i).min(end);
                self.block(i + 1, c, div);
                c + 1
            }
            "if" | "while" | "for" | "switch" if toks.get(i + 1).is_some_and(|n| n.is("(")) => {
                let c = matching(toks, i + 1).min(end);
                let head = &toks[i + 2..c];
                if t.is("for") {
                    // The init clause may make the loop variable thread-dependent.
                    if let Some(semi) = head.iter().position(|t| t.is(";")) {
                        self.in_for_init = true;
                        self.assign(&toks[i + 2..i + 2 + semi]);
                        self.in_for_init = false;
                    }
                }
                if self.compares_varying(head) {
                    self.guarded = true;
                }
                // The loop's body: a block, or one statement.
                let body_end = if toks.get(c + 1).is_some_and(|n| n.is("{")) {
                    matching(toks, c + 1).min(end)
                } else {
                    (c + 1..end).find(|&k| toks[k].is(";")).unwrap_or(end)
                };
                let d = if t.is("for") && self.uniform_trip(head, &toks[(c + 1).min(end)..body_end])
                {
                    div
                } else {
                    self.diverge(div, head, t.line)
                };
                let mut j = self.stmt(c + 1, end, d);
                if t.is("if") && j < end && toks[j].is("else") {
                    j = self.stmt(j + 1, end, d);
                }
                j
            }
            "do" => {
                let j = self.stmt(i + 1, end, div);
                // `while (cond);`
                let mut k = j;
                if k < end && toks[k].is("while") && toks.get(k + 1).is_some_and(|n| n.is("(")) {
                    k = matching(toks, k + 1) + 1;
                }
                if k < end && toks[k].is(";") {
                    k += 1;
                }
                k
            }
            "else" => self.stmt(i + 1, end, div),
            "case" | "default" => {
                let mut k = i;
                while k < end && !toks[k].is(":") {
                    k += 1;
                }
                k + 1
            }
            ";" => i + 1,
            _ => {
                // A simple statement, up to `;` at depth 0.
                let mut depth = 0i32;
                let mut k = i;
                while k < end {
                    match toks[k].text.as_str() {
                        "(" | "[" | "{" => depth += 1,
                        ")" | "]" | "}" => depth -= 1,
                        ";" if depth <= 0 => break,
                        _ => {}
                    }
                    k += 1;
                }
                self.simple(i, k, div);
                k + 1
            }
        }
    }

    fn simple(&mut self, s: usize, e: usize, div: Div) {
        let toks = self.toks;
        let r = &toks[s..e];
        if r.is_empty() {
            return;
        }
        if r[0].is("return") {
            if let Some((_, within)) = div
                && self.divergent_return.is_none_or(|(_, w)| within && !w)
            {
                self.divergent_return = Some((r[0].line, within));
            }
            return;
        }
        if r.iter().any(|t| t.is("?")) && self.compares_varying(r)
            || r.iter().enumerate().any(|(k, t)| {
                matches!(t.text.as_str(), "min" | "clamp")
                    && r.get(k + 1).is_some_and(|n| n.is("("))
                    && self.varies(&r[k..])
            })
        {
            self.guarded = true;
        }
        self.assign(r);
        if !self.final_pass {
            return;
        }
        for t in r {
            if t.is("threadgroup_barrier") || t.is("simdgroup_barrier") {
                // A simdgroup barrier needs only its own simdgroup to arrive.
                let counts =
                    |d: Div| d.filter(|(_, within)| *within || t.is("threadgroup_barrier"));
                if let Some((line, _)) = counts(div) {
                    self.findings.push(err(
                        "M030",
                        self.file,
                        t.line,
                        format!(
                            "{} inside control flow that depends on the thread (the condition on line {line}): threads that skip it never arrive and the threadgroup hangs or reads stale memory; keep every barrier where all threads reach it and guard only the work",
                            t.text
                        ),
                    ));
                } else if let Some((line, _)) = counts(self.divergent_return) {
                    self.findings.push(err(
                        "M031",
                        self.file,
                        t.line,
                        format!(
                            "{} after a thread-dependent `return` (line {line}): the threads that returned never arrive; replace the early return by a flag that guards the work",
                            t.text
                        ),
                    ));
                }
            }
        }
        self.declarations(r);
        if r.len() > 2
            && r[1].is("=")
            && self.pointers.contains(&r[0].text)
            && let Some(dst) = self.spaces.get(&r[0].text).cloned()
            && let Some((src, root, line)) = self.expr_space(&r[2..])
            && src != dst
        {
            self.findings.push(err(
                "M040",
                self.file,
                line,
                format!(
                    "`{}` points into {dst} memory but is assigned `{root}`, which is {src} memory: Metal pointers cannot change address space",
                    r[0].text
                ),
            ));
        }
        self.calls(r);
        self.races(r);
        self.constant_writes(r);
        if r.iter()
            .any(|t| t.is("threadgroup_barrier") || t.is("simdgroup_barrier"))
        {
            self.tg_written.clear();
        }
    }

    /// Stores into constant memory (M041): the shim lets them compile, Metal does not.
    fn constant_writes(&mut self, r: &[Tok]) {
        for (k, t) in r.iter().enumerate() {
            if self.spaces.get(&t.text).is_none_or(|s| s != "constant")
                || (k > 0 && (r[k - 1].is(".") || r[k - 1].is("->")))
            {
                continue;
            }
            let mut end = k;
            while r.get(end + 1).is_some_and(|n| n.is("[")) {
                end = matching(r, end + 1);
            }
            let next = r.get(end + 1).map(|t| t.text.as_str()).unwrap_or("");
            let assign = matches!(
                next,
                "=" | "+="
                    | "-="
                    | "*="
                    | "/="
                    | "%="
                    | "&="
                    | "|="
                    | "^="
                    | "<<="
                    | ">>="
                    | "++"
                    | "--"
            );
            // `T name = ...` and `const constant T* name = ...` declare; `*name = ...` stores.
            let declared =
                k > 0 && r[k - 1].is_ident() && !KEYWORDS.contains(&r[k - 1].text.as_str())
                    || k > 1
                        && r[k - 1].is("*")
                        && (r[k - 2].is_ident() || r[k - 2].is(">") || r[k - 2].is("*"))
                        && !KEYWORDS.contains(&r[k - 2].text.as_str());
            if assign && !declared && (end > k || (k > 0 && r[k - 1].is("*"))) {
                self.findings.push(err(
                    "M041",
                    self.file,
                    t.line,
                    format!(
                        "`{}` is in the constant address space, which is read-only: write results to a device buffer (an output)",
                        t.text
                    ),
                ));
            }
        }
    }

    /// A threadgroup element read after other threads wrote other elements, with no barrier between
    /// (M032): the read may see the old value.
    fn races(&mut self, r: &[Tok]) {
        let mut reads = Vec::new();
        let mut writes = Vec::new();
        let mut k = 0;
        while k < r.len() {
            let t = &r[k];
            let tg = self.spaces.get(&t.text).is_some_and(|s| s == "threadgroup");
            let member = k > 0 && (r[k - 1].is(".") || r[k - 1].is("->"));
            // `T name = ...` and `const constant T* name = ...` declare; `*name = ...` stores.
            let declared =
                k > 0 && r[k - 1].is_ident() && !KEYWORDS.contains(&r[k - 1].text.as_str())
                    || k > 1
                        && r[k - 1].is("*")
                        && (r[k - 2].is_ident() || r[k - 2].is(">") || r[k - 2].is("*"))
                        && !KEYWORDS.contains(&r[k - 2].text.as_str());
            if !tg || member || declared || !r.get(k + 1).is_some_and(|n| n.is("[")) {
                k += 1;
                continue;
            }
            let mut end = matching(r, k + 1);
            while r.get(end + 1).is_some_and(|n| n.is("[")) {
                end = matching(r, end + 1);
            }
            let idx_toks = &r[k + 1..=end];
            let idx: Vec<&str> = idx_toks.iter().map(|t| t.text.as_str()).collect();
            let idx = idx.join(" ");
            let next = r.get(end + 1).map(|t| t.text.as_str()).unwrap_or("");
            let assign = matches!(
                next,
                "=" | "+=" | "-=" | "*=" | "/=" | "%=" | "&=" | "|=" | "^=" | "<<=" | ">>="
            );
            if assign {
                let bound = self.index_below(&idx_toks[1..idx_toks.len() - 1]);
                writes.push((
                    t.text.clone(),
                    idx.clone(),
                    self.varies(idx_toks),
                    t.line,
                    bound,
                ));
            }
            if !assign || next != "=" {
                reads.push((t.text.clone(), idx, t.line));
            }
            k = end + 1;
        }
        for (name, idx, line) in reads {
            let Some(ws) = self.tg_written.get(&name) else {
                continue;
            };
            if ws.iter().any(|(w, _, _)| *w == idx) {
                continue;
            }
            // A write kept below `n` (`s[min(t, n - 1)]`) and a read at `n` or above (`s[n + j]`) touch
            // different elements.
            let from = at_or_above(&idx);
            let overlapping = ws
                .iter()
                .find(|(_, _, bound)| from.is_none() || *bound != from);
            if let Some((w, wline, _)) = overlapping {
                self.findings.push(err(
                    "M032",
                    self.file,
                    line,
                    format!(
                        "`{name}{idx}` is read after the threads wrote `{name}{w}` (line {wline}) with no threadgroup_barrier in between: it may read another thread's element before it is written; put threadgroup_barrier(mem_flags::mem_threadgroup) between the write and the read",
                        idx = idx.replace(' ', ""),
                        w = w.replace(' ', "")
                    ),
                ));
                self.tg_written.remove(&name);
            }
        }
        for (name, idx, varying, line, bound) in writes {
            if varying {
                self.tg_written
                    .entry(name)
                    .or_default()
                    .push((idx, line, bound));
            }
        }
    }

    /// The name an index expression is known to stay below: a name bounded by `below`, or `min(a, n - 1)`
    /// written in place (`metal::min`, either argument order).
    fn index_below(&self, r: &[Tok]) -> Option<String> {
        if let [name] = r
            && let Some(b) = self.below.get(&name.text)
        {
            return Some(b.clone());
        }
        min_below(r)
    }

    /// `a = expr` (also compound) and declarations: the target varies when the value does.
    fn assign(&mut self, r: &[Tok]) {
        let mut depth = 0i32;
        let mut part_start = 0;
        let mut parts = Vec::new();
        for (k, t) in r.iter().enumerate() {
            match t.text.as_str() {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => depth -= 1,
                "," if depth == 0 => {
                    parts.push(&r[part_start..k]);
                    part_start = k + 1;
                }
                _ => {}
            }
        }
        parts.push(&r[part_start..]);
        for p in parts {
            let eq = top_level(p, |t| {
                matches!(
                    t.text.as_str(),
                    "=" | "+=" | "-=" | "*=" | "/=" | "%=" | "&=" | "|=" | "^=" | "<<=" | ">>="
                )
            });
            let Some(eq) = eq else { continue };
            let lhs = &p[..eq];
            let target = match lhs.iter().position(|t| t.is("[")) {
                Some(b) if b > 0 => Some(&lhs[b - 1]),
                _ => lhs.iter().rev().find(|t| t.is_ident()),
            };
            // Names whose value is made of thread attributes, literals and such names only (a tree
            // reduction's stride `s = threads_per_threadgroup.x / 2`, `WARPS = 8`): thread counts, not sizes.
            if let Some(target) = target {
                let counted = names(&p[eq + 1..]).filter(|t| t.is_ident()).all(|t| {
                    self.counts.contains(&t.text)
                        || super::signature::ATTRIBUTES.iter().any(|(a, _)| t.is(a))
                        || is_keyword_or_type(&t.text)
                });
                let fresh = p[eq].is("=");
                if counted && (fresh || self.counts.contains(&target.text)) {
                    self.counts.insert(target.text.clone());
                } else {
                    self.counts.remove(&target.text);
                }
            }
            if let Some(target) = target
                && self.varies(&p[eq + 1..])
            {
                self.varying.insert(target.text.clone());
                if self.varies_within_simdgroup(&p[eq + 1..]) {
                    self.within_simdgroup.insert(target.text.clone());
                }
            } else if let Some(target) = target
                && self.in_for_init
                && p[eq].is("=")
                && lhs.len() >= 2
                && lhs[lhs.len() - 2].is_ident()
                && !lhs.iter().any(|t| t.is("["))
            {
                // A loop variable declared with a uniform value (`for (int i = 0; ...)`) is a new
                // variable: an earlier loop's `i` that depended on the thread says nothing about it.
                self.varying.remove(&target.text);
                self.within_simdgroup.remove(&target.text);
            }
            // What the target is offset by: kept through `+= uniform`, set by `=`, lost otherwise; and
            // what it stays below, set by `= min(a, n - 1)`, lost by any other assignment.
            if let Some(target) = target
                && lhs.len() <= 3
                && !lhs.iter().any(|t| t.is("["))
            {
                match p[eq].is("=").then(|| min_below(&p[eq + 1..])).flatten() {
                    Some(b) => {
                        self.below.insert(target.text.clone(), b);
                    }
                    None => {
                        self.below.remove(&target.text);
                    }
                }
                let rhs = &p[eq + 1..];
                let keeps = p[eq].is("+=") && !self.varies(rhs);
                if !keeps {
                    match p[eq].is("=").then(|| self.offset_of(rhs)).flatten() {
                        Some(o) => {
                            self.offsets.insert(target.text.clone(), o);
                        }
                        None => {
                            self.offsets.remove(&target.text);
                        }
                    }
                }
            }
        }
    }

    /// `uniform + x` (terms added at the top level, one of them the thread-dependent name `x`, or a name
    /// itself offset by `x`): the name of `x`. Two values offset by the same `x` differ by a uniform amount.
    fn offset_of(&self, r: &[Tok]) -> Option<String> {
        let mut depth = 0i32;
        let mut terms = vec![Vec::new()];
        for t in r {
            match t.text.as_str() {
                "(" | "[" => depth += 1,
                ")" | "]" => depth -= 1,
                "+" if depth == 0 => {
                    terms.push(Vec::new());
                    continue;
                }
                "-" | "?" | "," if depth == 0 => return None,
                _ => {}
            }
            terms.last_mut().expect("one term").push(t);
        }
        let mut found = None;
        for term in &terms {
            let varies = term.iter().enumerate().any(|(k, t)| {
                self.varying.contains(&t.text)
                    && !(k > 0 && (term[k - 1].is(".") || term[k - 1].is("->")))
            });
            if !varies {
                continue;
            }
            // The name alone, or after a cast (`(int) tid`); anything else (`2 * tid`) is not an offset.
            let name = match term.as_slice() {
                [n] => *n,
                [open, .., close, n] if open.is("(") && close.is(")") => *n,
                _ => return None,
            };
            if !name.is_ident() || found.is_some() {
                return None;
            }
            found = Some(
                self.offsets
                    .get(&name.text)
                    .cloned()
                    .unwrap_or_else(|| name.text.clone()),
            );
        }
        found
    }

    /// A `for` head whose trip count is the same for every thread although its variable is not: it starts
    /// and stops at values offset by the same thread-dependent name and steps by a uniform amount
    /// (`for (t = start + tid; t < end + tid; t += C)`).
    fn uniform_trip(&self, head: &[Tok], body: &[Tok]) -> bool {
        let parts: Vec<&[Tok]> = head.split(|t| t.is(";")).collect();
        let [init, cond, step] = parts[..] else {
            return false;
        };
        let Some(var) = init
            .iter()
            .position(|t| t.is("="))
            .and_then(|e| init[..e].last())
        else {
            return false;
        };
        let Some(op) = cond
            .iter()
            .position(|t| matches!(t.text.as_str(), "<" | "<=" | ">" | ">=" | "!="))
        else {
            return false;
        };
        let (a, b) = (&cond[..op], &cond[op + 1..]);
        let side = |x: &[Tok]| -> Option<String> {
            match x {
                [n] if n.text == var.text => self.offsets.get(&n.text).cloned(),
                _ => self.offset_of(x),
            }
        };
        let same = matches!((side(a), side(b)), (Some(x), Some(y)) if x == y);
        let steps = match step {
            [v, op] | [op, v] if v.text == var.text && (op.is("++") || op.is("--")) => true,
            [v, op, rest @ ..] if v.text == var.text && (op.is("+=") || op.is("-=")) => {
                !self.varies(rest)
            }
            _ => false,
        };
        // The body may not leave early nor move the variable or the bound itself.
        let bounds: Vec<&str> = names(cond)
            .filter(|t| t.is_ident())
            .map(|t| t.text.as_str())
            .collect();
        let untouched = !body.iter().enumerate().any(|(k, t)| {
            matches!(t.text.as_str(), "break" | "continue" | "return" | "goto")
                || bounds.contains(&t.text.as_str())
                    && (body.get(k + 1).is_some_and(|n| {
                        matches!(
                            n.text.as_str(),
                            "=" | "+="
                                | "-="
                                | "*="
                                | "/="
                                | "++"
                                | "--"
                                | "<<="
                                | ">>="
                                | "&="
                                | "|="
                        )
                    }) || k > 0 && (body[k - 1].is("++") || body[k - 1].is("--")))
        });
        same && steps && untouched
    }

    /// Declarations in a statement: address spaces of pointers (M040) and names MLX reserves (M050).
    fn declarations(&mut self, r: &[Tok]) {
        if KEYWORDS.contains(&r[0].text.as_str()) || !r[0].is_ident() {
            return;
        }
        // Type words, then the first declarator: `[const] [space] T [*|&] name ...`.
        self.decl_auto = r.iter().take_while(|t| !t.is("=")).any(|t| t.is("auto"));
        let mut k = 0;
        let mut space: Option<String> = None;
        let mut pointer = false;
        let mut words = 0;
        while k < r.len() {
            let t = &r[k];
            if SPACES.contains(&t.text.as_str()) {
                space = Some(t.text.clone());
            } else if t.is("<") {
                // template arguments of the type
                let mut depth = 0;
                while k < r.len() {
                    if r[k].is("<") {
                        depth += 1;
                    } else if r[k].is(">") {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    } else if r[k].is(">>") {
                        depth -= 2;
                        if depth <= 0 {
                            break;
                        }
                    }
                    k += 1;
                }
            } else if t.is("*") {
                pointer = true;
            } else if t.is("&") || t.is("::") || t.is("const") || t.is("volatile") {
            } else if t.is_ident() {
                words += 1;
                let after = r.get(k + 1).map(|t| t.text.as_str()).unwrap_or(";");
                if words >= 2
                    && matches!(after, "=" | ";" | "[" | "," | "{" | "(")
                    && !r[k - 1].is("::")
                {
                    self.declared(&r[k], space.as_deref(), pointer, &r[k + 1..]);
                    // Further declarators of the same statement.
                    let mut depth = 0i32;
                    for (j, tk) in r.iter().enumerate().skip(k + 1) {
                        match tk.text.as_str() {
                            "(" | "[" | "{" => depth += 1,
                            ")" | "]" | "}" => depth -= 1,
                            "," if depth == 0 => {
                                let mut m = j + 1;
                                let mut ptr = pointer;
                                while m < r.len() && (r[m].is("*") || r[m].is("&")) {
                                    ptr = true;
                                    m += 1;
                                }
                                if let Some(n) = r.get(m).filter(|t| t.is_ident()) {
                                    self.declared(n, space.as_deref(), ptr, &r[m + 1..]);
                                }
                            }
                            _ => {}
                        }
                    }
                    return;
                }
            } else {
                return; // not a declaration
            }
            k += 1;
        }
    }

    fn declared(&mut self, name: &Tok, space: Option<&str>, pointer: bool, rest: &[Tok]) {
        if let Some((_, why)) = self.reserved.iter().find(|(n, _)| *n == name.text) {
            self.findings.push(err(
                "M050",
                self.file,
                name.line,
                format!("`{}` clashes with {why}; rename the variable", name.text),
            ));
        }
        if let Some(sp) = space {
            self.spaces.insert(name.text.clone(), sp.to_string());
        } else if !pointer && !self.decl_auto {
            // A plain local lives in the thread address space.
            self.spaces.insert(name.text.clone(), "thread".into());
        }
        if !pointer && !self.decl_auto && !rest.first().is_some_and(|t| t.is("[")) {
            self.scalars.insert(name.text.clone());
        } else {
            self.scalars.remove(&name.text);
        }
        if !pointer {
            return;
        }
        self.pointers.insert(name.text.clone());
        // The initializer's address space against the declared one.
        if !rest.first().is_some_and(|t| t.is("=")) {
            return;
        }
        let init = &rest[1..];
        let end = top_level(init, |t| t.is(",")).unwrap_or(init.len());
        let declared = space.unwrap_or("thread");
        if let Some((src, root, line)) = self.expr_space(&init[..end])
            && src != declared
        {
            self.findings.push(err(
                "M040",
                self.file,
                line,
                format!(
                    "pointer `{}` is declared in the {declared} address space but `{root}` is {src} memory; write `{src} T* {}` (Metal pointers carry their address space, and none converts to another)",
                    name.text, name.text
                ),
            ));
        }
        if space.is_none() {
            self.spaces.insert(name.text.clone(), "thread".into());
        }
    }

    /// The address space an expression points into, when it is visible: (space, root name, line).
    /// A cast to another address space is itself reported.
    fn expr_space(&mut self, e: &[Tok]) -> Option<(String, String, usize)> {
        let mut k = 0;
        while k < e.len() && (e[k].is("&") || e[k].is("(") && !self.is_cast(e, k)) {
            k += 1;
        }
        if k < e.len() && e[k].is("(") && self.is_cast(e, k) {
            let close = matching(e, k);
            let cast = &e[k + 1..close];
            let cast_space = cast
                .iter()
                .find(|t| SPACES.contains(&t.text.as_str()))
                .map(|t| t.text.clone())
                .unwrap_or_else(|| "thread".into());
            if let Some((src, root, line)) = self.expr_space(&e[close + 1..])
                && src != cast_space
            {
                self.findings.push(err(
                    "M040",
                    self.file,
                    line,
                    format!(
                        "cast of `{root}` ({src} memory) to a {cast_space} pointer: Metal cannot convert between address spaces"
                    ),
                ));
            }
            return Some((cast_space, "the cast".into(), e[k].line));
        }
        if k < e.len() && e[k].text.ends_with("_cast") && e.get(k + 1).is_some_and(|t| t.is("<")) {
            let gt = (k + 1..e.len()).find(|&j| e[j].is(">"))?;
            let cast_space = e[k + 2..gt]
                .iter()
                .find(|t| SPACES.contains(&t.text.as_str()))
                .map(|t| t.text.clone())
                .unwrap_or_else(|| "thread".into());
            return Some((cast_space, "the cast".into(), e[k].line));
        }
        let t = e.get(k)?;
        // A choice, a call, a member or a dereference: the root name does not tell the address space.
        if e.iter().any(|x| x.is("?"))
            || e.get(k + 1)
                .is_some_and(|n| n.is("(") || n.is(".") || n.is("->"))
            || (k > 0 && e[k - 1].is("*"))
        {
            return None;
        }
        if (self.scalars.contains(&t.text) || t.text.starts_with(|c: char| c.is_ascii_digit()))
            && !(k > 0 && e[k - 1].is("&"))
        {
            // A value, not memory (`off + p`, `i - 1 + p`): the sum's other operand says where it points.
            let next = top_level(&e[k..], |x| x.is("+") || x.is("-"))?;
            return self.expr_space(&e[k + next + 1..]);
        }
        let sp = self.spaces.get(&t.text)?;
        Some((sp.clone(), t.text.clone(), t.line))
    }

    fn is_cast(&self, e: &[Tok], k: usize) -> bool {
        let close = matching(e, k);
        close > k + 1
            && e[close - 1].is("*")
            && e[k + 1..close - 1]
                .iter()
                .all(|t| t.is_ident() || t.is("::") || t.is("<") || t.is(">"))
    }

    /// Calls of header helpers with a pointer into another address space than the parameter's.
    fn calls(&mut self, r: &[Tok]) {
        for (k, t) in r.iter().enumerate() {
            let Some(params) = self.helpers.get(&t.text).cloned() else {
                continue;
            };
            if !r.get(k + 1).is_some_and(|n| n.is("(")) || (k > 0 && r[k - 1].is(".")) {
                continue;
            }
            let close = matching(r, k + 1);
            let args = split_top(&r[k + 2..close]);
            for (a, p) in args.iter().zip(&params) {
                let Some(p) = p else { continue };
                if let Some((src, root, line)) = self.expr_space(a)
                    && src != *p
                {
                    self.findings.push(err(
                        "M040",
                        self.file,
                        line,
                        format!(
                            "`{}` takes a {p} pointer but `{root}` is {src} memory; give the parameter the `{src}` address space (or a template over it)",
                            t.text
                        ),
                    ));
                }
            }
        }
    }
}

/// The pointer parameters of the helpers (not kernels) of a file, by name. Overloaded names are left out:
/// which overload a call picks is the compiler's business.
pub fn helper_map(fns: &[Function]) -> HashMap<String, Vec<Option<String>>> {
    let mut count: HashMap<&str, usize> = HashMap::new();
    for f in fns {
        *count.entry(f.name.as_str()).or_default() += 1;
    }
    fns.iter()
        .filter(|f| !f.kernel && count[f.name.as_str()] == 1)
        .map(|f| (f.name.clone(), param_spaces(f)))
        .collect()
}

/// Whether the kernel body `toks` guards through a helper of the header (`htoks`, `fns`): it calls one
/// with a thread-dependent argument (a name in `varying`) and the helper, or a helper it calls in turn,
/// compares a value derived from that argument (or from a thread attribute it takes under MLX's name) with
/// something. A translated kernel is often one call of a helper holding the whole body.
pub fn guards_in_helpers(
    toks: &[Tok],
    varying: &BTreeSet<String>,
    htoks: &[Tok],
    fns: &[Function],
) -> bool {
    guarding_call(toks, varying, htoks, fns, 4)
}

fn guarding_call(
    toks: &[Tok],
    varying: &BTreeSet<String>,
    htoks: &[Tok],
    fns: &[Function],
    depth: usize,
) -> bool {
    if depth == 0 {
        return false;
    }
    let helpers: HashMap<&str, &Function> = fns
        .iter()
        .filter(|f| !f.kernel)
        .map(|f| (f.name.as_str(), f))
        .collect();
    for (i, t) in toks.iter().enumerate() {
        let Some(f) = helpers.get(t.text.as_str()) else {
            continue;
        };
        if i > 0 && (toks[i - 1].is(".") || toks[i - 1].is("->")) {
            continue;
        }
        let Some(open) = call_open(toks, i + 1) else {
            continue;
        };
        let close = matching(toks, open);
        let args = split_top(&toks[open + 1..close.min(toks.len())]);
        let seeded: Vec<usize> = args
            .iter()
            .enumerate()
            .filter(|(_, a)| names(a).any(|t| varying.contains(&t.text)))
            .map(|(k, _)| k)
            .collect();
        if helper_guards(f, &seeded, htoks, fns, depth) {
            return true;
        }
    }
    false
}

/// The `(` of a call whose name ends before `k`: directly, or after template arguments `<...>`.
fn call_open(toks: &[Tok], k: usize) -> Option<usize> {
    let t = toks.get(k)?;
    if t.is("(") {
        return Some(k);
    }
    if !t.is("<") {
        return None;
    }
    let mut depth = 0i32;
    for (j, t) in toks.iter().enumerate().skip(k) {
        match t.text.as_str() {
            "<" => depth += 1,
            ">" => depth -= 1,
            ">>" => depth -= 2,
            ";" | "{" | "}" => return None,
            _ => {}
        }
        if depth <= 0 {
            return toks.get(j + 1).filter(|n| n.is("(")).map(|_| j + 1);
        }
    }
    None
}

fn is_keyword_or_type(w: &str) -> bool {
    matches!(
        w,
        "int"
            | "uint"
            | "short"
            | "ushort"
            | "char"
            | "uchar"
            | "long"
            | "ulong"
            | "float"
            | "half"
            | "bool"
            | "size_t"
            | "int32_t"
            | "uint32_t"
            | "int64_t"
            | "uint64_t"
            | "const"
            | "constexpr"
            | "auto"
            | "for"
            | "if"
            | "while"
            | "static_cast"
            | "true"
            | "false"
            | "min"
            | "max"
            | "metal"
    )
}

/// Tokens split at top-level commas.
fn split_top(r: &[Tok]) -> Vec<&[Tok]> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (k, t) in r.iter().enumerate() {
        match t.text.as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => depth -= 1,
            "," if depth == 0 => {
                out.push(&r[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    if start < r.len() {
        out.push(&r[start..]);
    }
    out
}

/// Whether helper `f` guards when its parameters `seeded` hold thread-dependent values (its parameters
/// named after thread attributes do anyway): compares such a value with a size (a name that is neither
/// thread-dependent nor a thread attribute), not only with thread counts or literals.
fn helper_guards(
    f: &Function,
    seeded: &[usize],
    htoks: &[Tok],
    fns: &[Function],
    depth: usize,
) -> bool {
    let mut flow = Flow::new("", htoks);
    flow.sizes_only = true;
    for (k, p) in f.params.iter().enumerate() {
        let Some(name) = p
            .iter()
            .take_while(|t| !t.is("=") && !t.is("["))
            .filter(|t| t.is_ident())
            .last()
        else {
            continue;
        };
        let attr = super::signature::VARYING
            .iter()
            .find(|a| name.is(a))
            .copied();
        if let Some(a) = attr {
            flow.seed(&name.text, a);
        } else if seeded.contains(&k) {
            flow.seed(&name.text, "thread_position_in_grid");
        }
    }
    if flow.varying.is_empty() {
        return false;
    }
    flow.run(f.body.0, f.body.1);
    flow.guarded
        || guarding_call(
            &htoks[f.body.0..f.body.1],
            &flow.varying,
            htoks,
            fns,
            depth - 1,
        )
}

/// Address space of each parameter of a helper (None: not a pointer).
pub fn param_spaces(f: &Function) -> Vec<Option<String>> {
    f.params
        .iter()
        .map(|p| {
            let pointer = p.iter().any(|t| t.is("*"));
            pointer.then(|| {
                p.iter()
                    .find(|t| SPACES.contains(&t.text.as_str()))
                    .map(|t| t.text.clone())
                    .unwrap_or_else(|| "thread".into())
            })
        })
        .collect()
}

/// The signature of a kernel in a complete source: a void function whose pointer arguments carry an
/// address space, whose buffer indices are distinct, and whose thread attributes have integer types.
/// Long by design: one check per rule of Metal's kernel signatures, each with its own code and message.
#[expect(
    clippy::too_many_lines,
    reason = "one check per rule of Metal's kernel signatures, each with its code"
)]
pub fn kernel_signature(file: &str, f: &Function, out: &mut Vec<Finding>) {
    if f.returns != "void" {
        out.push(err(
            "M027",
            file,
            f.line,
            format!(
                "kernel `{}` must return void (write results to a device buffer)",
                f.name
            ),
        ));
    }
    let mut buffers: BTreeMap<String, usize> = BTreeMap::new();
    let mut attrs: BTreeMap<String, usize> = BTreeMap::new();
    for p in &f.params {
        let Some(open) = p.windows(2).position(|w| w[0].is("[") && w[1].is("[")) else {
            if p.iter().any(|t| t.is("*"))
                && !p.iter().any(|t| SPACES[..3].contains(&t.text.as_str()))
            {
                let line = p[0].line;
                out.push(err(
                    "M040",
                    file,
                    line,
                    format!(
                        "kernel argument `{}` is a pointer without an address space: write `device` (or `constant`) before its type",
                        p.iter().rev().find(|t| t.is_ident()).map(|t| t.text.as_str()).unwrap_or("?")
                    ),
                ));
            }
            continue;
        };
        let decl = &p[..open];
        let name = decl
            .iter()
            .rev()
            .find(|t| t.is_ident())
            .map(|t| t.text.clone())
            .unwrap_or_default();
        let attr = p.get(open + 2).map(|t| t.text.as_str()).unwrap_or("");
        let line = p[0].line;
        if attr == "buffer" {
            if decl.iter().any(|t| t.is("*"))
                && !decl.iter().any(|t| SPACES[..3].contains(&t.text.as_str()))
            {
                out.push(err(
                    "M040",
                    file,
                    line,
                    format!("kernel argument `{name}` is a pointer without an address space: write `device` (or `constant`) before its type"),
                ));
            }
            let index: String = p[open + 4..]
                .iter()
                .take_while(|t| !t.is(")"))
                .map(|t| t.text.as_str())
                .collect();
            if let Some(prev) = buffers.insert(index.clone(), line) {
                out.push(err(
                    "M026",
                    file,
                    line,
                    format!("buffer index {index} is used twice (also on line {prev}): every buffer argument needs its own index"),
                ));
            }
        } else if let Some((_, ty)) = super::signature::ATTRIBUTES
            .iter()
            .find(|(a, _)| *a == attr)
        {
            let allowed: &[&str] = if *ty == "uint3" {
                &["uint", "uint2", "uint3", "ushort", "ushort2", "ushort3"]
            } else {
                &["uint", "ushort"]
            };
            let tyw: Vec<&str> = decl
                .iter()
                .filter(|t| t.is_ident() && !t.is("const"))
                .map(|t| t.text.as_str())
                .collect();
            let given = if tyw.len() >= 2 {
                tyw[tyw.len() - 2]
            } else {
                ""
            };
            if !allowed.contains(&given) {
                out.push(err(
                    "M028",
                    file,
                    line,
                    format!(
                        "`{name}` has type `{given}` but [[{attr}]] must be one of {}: Metal rejects other types for this attribute",
                        allowed.join(", ")
                    ),
                ));
            }
            if let Some(prev) = attrs.insert(attr.to_string(), line) {
                out.push(err(
                    "M026",
                    file,
                    line,
                    format!("[[{attr}]] is given twice (also on line {prev}): each attribute can be bound once"),
                ));
            }
        } else if ![
            "threadgroup",
            "texture",
            "sampler",
            "stage_in",
            "payload",
            "function_constant",
        ]
        .contains(&attr)
        {
            out.push(err(
                "M028",
                file,
                line,
                format!(
                    "`{name}` has the attribute [[{attr}]], which is not a Metal kernel argument attribute (buffer(n), threadgroup(n), or a thread attribute such as thread_position_in_grid)"
                ),
            ));
        }
    }
}

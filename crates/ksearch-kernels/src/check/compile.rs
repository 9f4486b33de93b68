//! Compiling a Metal translation unit with the system C++ compiler against the shim
//! (`metal/shim/`), and reading its messages back as (file, line, message).

use super::CheckError;
use ksearch_model::cpplex::{self, Kind};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

const SHIM: &str = include_str!("../../../../metal/shim/metal_shim.h");
const PRELUDE: &str = include_str!("../../../../metal/shim/mlx_prelude.h");
/// Metal library headers a source may include; each stands for the whole shim.
const STUBS: [&str; 16] = [
    "metal_stdlib",
    "metal_math",
    "metal_simdgroup",
    "metal_simdgroup_matrix",
    "metal_atomic",
    "metal_compute",
    "metal_integer",
    "metal_common",
    "metal_geometric",
    "metal_relational",
    "metal_types",
    "metal_type_traits",
    "metal_numeric",
    "metal_pack",
    "metal_matrix",
    "metal_limits",
];

/// One compiler error, located in a file of the candidate (or `<signature>` / `<instantiation>`).
#[derive(Debug, Clone, PartialEq)]
pub struct Diag {
    pub file: String,
    pub line: usize,
    pub message: String,
    /// For a redefinition: where the first definition is (from the compiler's note).
    pub previous: Option<(String, usize)>,
}

/// What a compile found: errors, and the bytes of every threadgroup variable probed (file, line, bytes,
/// instantiation: a template kernel's declarations are reported once per instantiation, each counted apart).
#[derive(Debug, Default)]
pub struct Outcome {
    pub errors: Vec<Diag>,
    pub threadgroup: Vec<(String, usize, u64, usize)>,
    /// Errors that only the shim makes (`bfloat_promoted`), left out of `errors`.
    pub excused: usize,
}

/// The compiler that checks a source, and whether it is Clang (Apple's Metal compiler is Clang-based,
/// so Clang accepts what Metal does where g++ cannot: class-scope explicit specializations, `[0 ... N]`
/// designators).
pub struct Cxx {
    pub command: String,
    pub clang: bool,
}

/// The functions the shim declares, Metal's library (`simd_shuffle_down`, `exp`, ...): a kernel's own
/// function of one of these names overloads it. The names the shim's declaring macros take (`KS_F1(exp)`,
/// `KS_S2(shuffle_down)` as `simd_shuffle_down`) and its `simd_`/`quad_` functions; a few more than Metal
/// has (`quad_` forms of every `KS_S` name) only spare such a function the recursion rule.
pub fn library_functions() -> &'static std::collections::BTreeSet<String> {
    static NAMES: std::sync::OnceLock<std::collections::BTreeSet<String>> =
        std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let toks = super::lex::view(SHIM).toks;
        let mut names = std::collections::BTreeSet::new();
        for w in toks.windows(3) {
            // The simd and quad functions the shim declares outright (`simd_shuffle_and_fill_down(`); not
            // every `name(` of it, which would take in `length`, `select`, `size`, ...
            if w[0].is_ident()
                && w[1].is("(")
                && (w[0].text.starts_with("simd_") || w[0].text.starts_with("quad_"))
            {
                names.insert(w[0].text.clone());
            }
            if w[0].text.starts_with("KS_") && w[1].is("(") && w[2].is_ident() {
                // KS_S1/KS_S2 paste `simd_` and `quad_` in front of their name.
                for prefix in ["", "simd_", "quad_"] {
                    names.insert(format!("{prefix}{}", w[2].text));
                }
            }
        }
        names
    })
}

/// The compiler: `KSEARCH_CXX`, else `CXX`, else the first of `clang++`, `clang++-N` (the newest of
/// Debian's versioned names), `c++`, `g++` that runs.
pub fn compiler() -> Result<&'static Cxx, CheckError> {
    static FOUND: OnceLock<Option<Cxx>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let from_env = ["KSEARCH_CXX", "CXX"]
            .iter()
            .filter_map(|v| std::env::var(v).ok())
            .filter(|v| !v.trim().is_empty());
        let versioned = (10..=30).rev().map(|v| format!("clang++-{v}"));
        from_env
            .chain(std::iter::once("clang++".to_string()))
            .chain(versioned)
            .chain(["c++", "g++"].map(String::from))
            .find_map(|c| {
                let out = Command::new(&c).arg("--version").output().ok()?;
                out.status.success().then(|| Cxx {
                    clang: String::from_utf8_lossy(&out.stdout).contains("clang"),
                    command: c,
                })
            })
    });
    found.as_ref().ok_or(CheckError::NoCompiler)
}

fn scratch_dir() -> Result<PathBuf, CheckError> {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "ksearch-check-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let io = |e: std::io::Error| CheckError::Io {
        file: dir.clone(),
        err: e,
    };
    std::fs::create_dir_all(dir.join("simd")).map_err(io)?;
    std::fs::write(dir.join("metal_shim.h"), SHIM).map_err(io)?;
    std::fs::write(dir.join("mlx_prelude.h"), PRELUDE).map_err(io)?;
    for s in STUBS {
        std::fs::write(dir.join(s), "#include \"metal_shim.h\"\n").map_err(io)?;
    }
    std::fs::write(dir.join("simd/simd.h"), "#include \"../metal_shim.h\"\n").map_err(io)?;
    Ok(dir)
}

struct Cleanup(PathBuf);
impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compiles `unit` (syntax and types only). `user_files` are the names its `#line` directives use for the
/// candidate's files: an error inside the shim is reported where the candidate's code led to it.
pub fn compile(unit: &str, user_files: &[&str]) -> Result<Outcome, CheckError> {
    compile_with(unit, user_files, &[], &[], &[])
}

/// [`compile`] with local headers: `headers` (path in the scratch folder, text) are written there, `dirs`
/// (scratch folders) made, and `roots` (scratch folders) searched for includes in order; errors in a
/// header are reported in it.
pub fn compile_with(
    unit: &str,
    user_files: &[&str],
    headers: &[(&str, &str)],
    dirs: &[String],
    roots: &[String],
) -> Result<Outcome, CheckError> {
    let cxx = compiler()?;
    let dir = scratch_dir()?;
    // KSEARCH_CHECK_KEEP=1 keeps the scratch folder (the unit as compiled, the shim) for work on the shim.
    let keep = std::env::var_os("KSEARCH_CHECK_KEEP").is_some_and(|v| v == "1");
    let _cleanup = (!keep).then(|| Cleanup(dir.clone()));
    if keep {
        eprintln!("ksearch check: scratch folder kept: {}", dir.display());
    }
    let src = dir.join("unit.cpp");
    let unit = shim_dialect(unit);
    std::fs::write(&src, unit).map_err(|e| CheckError::Io {
        file: src.clone(),
        err: e,
    })?;
    for d in dirs {
        let path = dir.join(d);
        std::fs::create_dir_all(&path).map_err(|e| CheckError::Io { file: path, err: e })?;
    }
    for (at, text) in headers {
        let path = dir.join(at);
        let io = |e: std::io::Error| CheckError::Io {
            file: path.clone(),
            err: e,
        };
        std::fs::create_dir_all(path.parent().unwrap_or(&dir)).map_err(io)?;
        std::fs::write(&path, shim_dialect(text)).map_err(io)?;
    }
    let mut users: Vec<&str> = user_files.to_vec();
    users.extend(headers.iter().map(|(at, _)| *at));
    let user_files = &users[..];
    // The compiler reads the candidate's includes: it runs confined to the scratch folder and the system's
    // headers (crates/ksearch-kernels/src/jail.rs), naming its files relative to the folder.
    let mut cmd = Command::new(&cxx.command);
    let jail = crate::jail::confine(&mut cmd, &dir);
    let dialect: &[&str] = if cxx.clang {
        &[
            "-fno-caret-diagnostics",
            "-ferror-limit=0",
            "-Wno-unknown-attributes",
            "-Wno-ignored-attributes",
            // GNU extensions Metal's Clang accepts as such.
            "-Wno-c99-designator",
            "-Wno-gnu-designator",
            "-Wno-c99-extensions",
            "-Wno-unused-value",
            // Metal's `1.0h` literals, declared by the shim without the underscore C++ reserves.
            "-Wno-user-defined-literals",
            "-Wno-reserved-user-defined-literal",
            // `half` is a 16-bit float type on AArch64 (Apple's CPUs) and the shim includes no system
            // header, so the target costs nothing.
            "--target=aarch64-linux-gnu",
        ]
    } else {
        &["-fno-diagnostics-show-caret", "-Wno-attributes"]
    };
    let out = cmd
        .args([
            "-fsyntax-only",
            "-std=c++17",
            "-fno-elide-type",
            "-fdiagnostics-color=never",
            "-Wno-unknown-pragmas",
            "-Wno-pedantic",
            // Metal has no variable-length arrays; both compilers accept them as an extension.
            "-Werror=vla",
            "-I",
            ".",
        ])
        .args(dialect)
        .args(roots.iter().flat_map(|r| ["-I", r.as_str()]))
        .arg("unit.cpp")
        .output()
        .map_err(|e| CheckError::Io {
            file: PathBuf::from(&cxx.command),
            err: e,
        })?;
    drop(jail);
    let text = String::from_utf8_lossy(&out.stderr);
    let outcome = parse(&text, user_files, &dir);
    if !out.status.success()
        && outcome.errors.is_empty()
        && outcome.threadgroup.is_empty()
        && outcome.excused == 0
    {
        // The compiler failed without a diagnostic on the candidate's code and without the probes' own
        // messages (which end every unit that declares threadgroup memory): say so, never "no findings".
        return Err(CheckError::CompilerFailed(
            text.lines().take(5).collect::<Vec<_>>().join("\n"),
        ));
    }
    Ok(outcome)
}

/// Splits `file:line:col: rest` (or `file:line: rest`).
fn location(l: &str) -> Option<(&str, usize, &str)> {
    let mut search = 0;
    while let Some(p) = l[search..].find(':') {
        let at = search + p;
        let rest = &l[at + 1..];
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if !digits.is_empty() && rest[digits.len()..].starts_with(':') {
            let mut tail = &rest[digits.len() + 1..];
            let col: String = tail.chars().take_while(|c| c.is_ascii_digit()).collect();
            if !col.is_empty() && tail[col.len()..].starts_with(':') {
                tail = &tail[col.len() + 1..];
            }
            return Some((&l[..at], digits.parse().ok()?, tail.trim_start()));
        }
        search = at + 1;
    }
    None
}

fn parse(text: &str, user_files: &[&str], dir: &Path) -> Outcome {
    let mut out = Outcome::default();
    let mut last_user: Option<(String, usize)> = None;
    let dir = dir.to_string_lossy().to_string();
    // Which function or instantiation the probes belong to: g++ names it before its errors ("In
    // instantiation of", "In function"), clang after them (a note "in instantiation of ... requested here").
    let mut instance = 0usize;
    let mut unnamed_from = 0usize;
    for l in text.lines() {
        if [
            ": In instantiation of ",
            ": In function ",
            ": In member function ",
        ]
        .iter()
        .any(|c| l.contains(c))
        {
            instance += 1; // g++ names each function or instantiation once, before its errors
        } else if l.contains("note: in instantiation of") {
            instance += 1;
            for p in &mut out.threadgroup[unnamed_from..] {
                p.3 = instance;
            }
            unnamed_from = out.threadgroup.len();
        }
        let Some((file, line, rest)) = location(l) else {
            continue;
        };
        // A header named through `..` or `.` (`inc1/a/../b.h`) is the header it leads to.
        let tidy = tidy_path(file);
        let file = tidy.as_str();
        let user = user_files.contains(&file);
        let msg = rest
            .strip_prefix("fatal error:")
            .or_else(|| rest.strip_prefix("error:"));
        if let Some(msg) = msg {
            let msg = metal_names(&msg.trim().replace(&dir, "").replace("metal::", ""));
            if bfloat_promoted(&msg) {
                out.excused += 1;
                continue;
            }
            if let Some(p) = probe(&msg) {
                if user {
                    out.threadgroup.push((file.to_string(), p.0, p.1, instance));
                } else if let Some((f, _)) = &last_user {
                    out.threadgroup.push((f.clone(), p.0, p.1, instance));
                }
                continue;
            }
            let (file, line) = if user || file == "<signature>" || file == "<instantiation>" {
                (file.to_string(), line)
            } else if let Some((f, ln)) = &last_user {
                (f.clone(), *ln)
            } else {
                ("<shim>".to_string(), line)
            };
            let d = Diag {
                file,
                line,
                message: msg,
                previous: None,
            };
            if !out.errors.contains(&d) {
                out.errors.push(d);
            }
        } else if user {
            // g++: "previously defined here", "previous declaration ‘f()’"; clang: "previous definition is
            // here".
            if [
                "previously defined here",
                "previously declared here",
                "previous definition",
                "previous declaration",
            ]
            .iter()
            .any(|n| rest.contains(n))
            {
                if let Some(last) = out.errors.last_mut()
                    && (last.message.starts_with("redefinition of")
                        || last.message.ends_with("cannot be redeclared")
                        || last.message.contains("cannot be overloaded with"))
                    && last.previous.is_none()
                {
                    last.previous = Some((file.to_string(), line));
                }
                continue;
            }
            last_user = Some((file.to_string(), line));
        }
    }
    // Messages about the shim's own machinery (`ks_*`) next to a plainer error on the same line add nothing.
    let plain: Vec<(String, usize)> = out
        .errors
        .iter()
        .filter(|d| !internal(&d.message))
        .map(|d| (d.file.clone(), d.line))
        .collect();
    out.errors
        .retain(|d| !internal(&d.message) || !plain.contains(&(d.file.clone(), d.line)));
    out
}

/// `a/./b/../c` as `a/c` (the path is left as it is when it climbs above its start), by the same rule
/// that found the header (`includes::normal`).
fn tidy_path(p: &str) -> String {
    if !p.contains("./") {
        return p.to_string();
    }
    super::includes::normal(std::path::Path::new(p))
        .map_or_else(|| p.to_string(), |n| n.display().to_string())
}

/// What only the shim's `bfloat` makes an error. It is a class (so that a `half` argument prefers a `float`
/// overload to a `bfloat` one, as in Metal), which converts implicitly to and from the other scalars: so
/// `c ? b : 0.5f` has a conversion either way, which C++ calls ambiguous where Metal's usual arithmetic
/// conversions give a float. (The narrowing test is for a compiler whose bfloat computes in float.)
fn bfloat_promoted(m: &str) -> bool {
    m.contains("cannot be narrowed from type 'float' to 'bfloat'")
        || m.starts_with("conditional expression is ambiguous;")
            && m.contains("bfloat'")
            && m.ends_with("and vice versa")
}

/// A message about the shim's machinery rather than the kernel (SFINAE helpers, `ks_*` traits).
fn internal(m: &str) -> bool {
    m.contains("ks_") || m.contains("enable_if<")
}

/// The shim's type names written as Metal writes them (`vec<float, 4>` is `float4`).
fn metal_names(msg: &str) -> String {
    let scalars = [
        ("unsigned int", "uint"),
        ("unsigned char", "uchar"),
        ("unsigned short", "ushort"),
        ("long unsigned int", "ulong"),
        ("long int", "long"),
        ("short int", "short"),
        ("_Float16", "half"),
        ("bfloat", "bfloat"),
        ("float", "float"),
        ("int", "int"),
        ("bool", "bool"),
        ("char", "char"),
        ("short", "short"),
        ("long", "long"),
    ];
    let mut s = msg.to_string();
    for (packed, pre) in [("packed_vec<", "packed_"), ("vec<", "")] {
        for (c, m) in scalars {
            for n in 2..=4 {
                for sep in [",", ", "] {
                    s = s.replace(&format!("{packed}{c}{sep}{n}>"), &format!("{pre}{m}{n}"));
                }
            }
        }
    }
    let s = s.replace("_Float16", "half");
    drop_same_aka(&s)
}

/// `‘float4’ {aka ‘float4’}` (after renaming) says the same thing twice: keep the first.
fn drop_same_aka(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find(" {aka ‘") {
        let before = &rest[..at];
        let after = &rest[at + " {aka ‘".len()..];
        let Some(end) = after.find("’}") else { break };
        let aka = &after[..end];
        let same = before.ends_with(&format!("‘{aka}’"));
        out.push_str(before);
        if !same {
            out.push_str(&rest[at..at + " {aka ‘".len() + end + "’}".len()]);
        }
        rest = &after[end + "’}".len()..];
    }
    out.push_str(rest);
    out
}

/// `ks_tg_probe<LINE, BYTES>` in a message: the size of one threadgroup variable.
fn probe(msg: &str) -> Option<(usize, u64)> {
    let at = msg.find("ks_tg_probe<")? + "ks_tg_probe<".len();
    let inner: String = msg[at..].chars().take_while(|c| *c != '>').collect();
    let mut parts = inner.split(',').map(|p| {
        p.trim()
            .trim_end_matches(|c: char| c.is_ascii_alphabetic())
            .parse::<u64>()
    });
    let line = parts.next()?.ok()?;
    let bytes = parts.next()?.ok()?;
    Some((line as usize, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_and_probes_are_parsed() {
        assert_eq!(
            location("scan.metal:33:51: error: bad"),
            Some(("scan.metal", 33, "error: bad"))
        );
        assert_eq!(
            location("scan.metal:143:84:   required from here"),
            Some(("scan.metal", 143, "required from here"))
        );
        assert_eq!(
            probe("no type named 'bytes' in 'struct ks_tg_probe<12, 8192>'"),
            Some((12, 8192))
        );
        assert_eq!(probe("ks_tg_probe<3ul, 64ul>"), Some((3, 64)));
    }

    #[test]
    fn header_paths_through_dots_are_the_header() {
        assert_eq!(tidy_path("inc1/a/../b.h"), "inc1/b.h");
        assert_eq!(tidy_path("inc0/./x.h"), "inc0/x.h");
        assert_eq!(tidy_path("../x.h"), "../x.h");
        assert_eq!(tidy_path("k.metal"), "k.metal");
    }

    #[test]
    fn shim_type_names_read_as_metal() {
        assert_eq!(
            metal_names("from ‘vec<float,3>’ to ‘vec<unsigned int, 4>’ or ‘_Float16’"),
            "from ‘float3’ to ‘uint4’ or ‘half’"
        );
        assert_eq!(
            metal_names("‘uint3’ {aka ‘vec<unsigned int,3>’} and ‘x’ {aka ‘int’}"),
            "‘uint3’ and ‘x’ {aka ‘int’}"
        );
    }

    #[test]
    fn shim_errors_are_placed_where_the_user_code_led() {
        let log = "k.metal: In function 'void f()':\nk.metal:4:3:   required from here\n/x/metal_shim.h:10:5: error: static assertion failed: 8x8\n";
        let o = parse(log, &["k.metal"], Path::new("/x/"));
        assert_eq!(o.errors.len(), 1);
        assert_eq!(
            (o.errors[0].file.as_str(), o.errors[0].line),
            ("k.metal", 4)
        );
    }
}

/// The two spots where Metal's address-space words, defined away by the shim, would leave C++ that does
/// not mean what the Metal meant (lines are kept):
/// - `[[threadgroup(0)]]` (a threadgroup buffer's index) would become `[[(0)]]`: its name is changed to one
///   the compiler ignores as an unknown attribute;
/// - a program-scope `constant uint TILE = 64;` would become a mutable global, unusable as an array size:
///   it becomes `static const`, which is what it is.
pub fn shim_dialect(unit: &str) -> String {
    let unit = unit
        .replace("[[threadgroup(", "[[threadgroup_index(")
        .replace("[[ threadgroup(", "[[ threadgroup_index(");
    let unit = instantiation_names_blanked(&unit);
    let unit = function_constants_defined(&unit);
    let unit = super::spaces::variants_dropped(&unit);
    let unit = member_spaces_blanked(&unit);
    let unit = const_beside_constant_blanked(&unit);
    program_scope_constants_made_static(&unit)
}

/// A program-scope `constant T name` (not `constant const`/`constexpr`, already constant) becomes
/// `static const T name`; inside a function or struct, `constant` stays an address space.
fn program_scope_constants_made_static(unit: &str) -> String {
    let toks = cpplex::lex(unit);
    let mut out = String::with_capacity(unit.len() + 64);
    // Braces opened, each marked when it is a namespace's (whose body is still program scope).
    let mut scopes: Vec<bool> = Vec::new();
    let mut namespace_next = false;
    let mut at_start = true;
    for (i, t) in toks.iter().enumerate() {
        let mut text = t.text.as_str();
        match (t.kind, text) {
            (Kind::Space | Kind::Comment | Kind::Preproc | Kind::Str, _) => {}
            (Kind::Punct, "{") => {
                scopes.push(namespace_next);
                namespace_next = false;
                at_start = true;
            }
            (Kind::Punct, "}") => {
                scopes.pop();
                at_start = true;
            }
            (Kind::Punct, ";") => {
                at_start = true;
                namespace_next = false;
            }
            (Kind::Ident, w) => {
                if scopes.iter().all(|ns| *ns) && at_start && w == "constant" {
                    let next = toks[i + 1..]
                        .iter()
                        .find(|n| !matches!(n.kind, Kind::Space | Kind::Comment));
                    if next.is_some_and(|n| {
                        n.kind == Kind::Ident && !matches!(n.text.as_str(), "const" | "constexpr")
                    }) {
                        text = "static const";
                    }
                }
                namespace_next |= at_start && matches!(w, "namespace" | "extern");
                at_start = namespace_next && at_start;
            }
            _ => at_start = false,
        }
        out.push_str(text);
    }
    out
}

/// `T name [[function_constant(N)]];`, set when the pipeline is made, has no initializer; written
/// `constexpr` (MLX's `STEEL_CONST`) or `const`, C++ refuses it. The attribute becomes an initializer
/// that converts to any type (`ks_function_constant` in the shim).
fn function_constants_defined(unit: &str) -> String {
    static ATTR: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = ATTR.get_or_init(|| {
        regex::Regex::new(r"\[\[\s*function_constant\s*\([^()\]\n]*\)\s*\]\](\s*;)")
            .expect("a valid pattern")
    });
    re.replace_all(unit, "= ks_function_constant()$1")
        .into_owned()
}

/// `template [[host_name("k")]] kernel ...`, an explicit instantiation with the name Metal gives the
/// kernel (also inside macros): standard C++ has no attribute there, so it is blanked (lines kept).
fn instantiation_names_blanked(unit: &str) -> String {
    let mut out = String::with_capacity(unit.len());
    let mut rest = unit;
    while let Some(at) = rest.find("template") {
        let word_start = at == 0 || {
            let c = rest.as_bytes()[at - 1];
            !(c.is_ascii_alphanumeric() || c == b'_')
        };
        out.push_str(&rest[..at + "template".len()]);
        rest = &rest[at + "template".len()..];
        if !word_start {
            continue;
        }
        // Every attribute list that follows (`template [[host_name("k")]] [[kernel]] ...`).
        loop {
            // Whitespace, and the backslash-newlines that continue a macro's line.
            let gap = rest.len()
                - rest
                    .trim_start_matches(|c: char| c.is_whitespace() || c == '\\')
                    .len();
            // An attribute list ends within 4 KB (a stray `template [[` in a comment blanks no further).
            let Some(end) = rest[gap..]
                .starts_with("[[")
                .then(|| {
                    rest.as_bytes()[gap..]
                        .windows(2)
                        .take(4096)
                        .position(|w| w == b"]]")
                })
                .flatten()
            else {
                break;
            };
            let attr = &rest[..gap + end + 2];
            // Newlines stay, and so do the backslashes that continue a macro's line.
            out.extend(
                attr.chars()
                    .map(|c| if c == '\n' || c == '\\' { c } else { ' ' }),
            );
            rest = &rest[gap + end + 2..];
        }
    }
    out.push_str(rest);
    out
}

/// A member function qualified by the address space of its object (`T() threadgroup : v(0) {}`,
/// `operator float() const device`): Metal overloads on it; the shim erases address spaces, so the word is
/// blanked and a resulting duplicate is dropped like any overload that differs only in address spaces.
fn member_spaces_blanked(unit: &str) -> String {
    static QUALIFIER: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = QUALIFIER.get_or_init(|| {
        regex::Regex::new(
            r"\)(\s*(?:const\s+)?)(device|threadgroup|constant|thread)\b(\s*(?:\{|:|;|=|->|const\b|noexcept\b))",
        )
        .expect("a valid pattern")
    });
    re.replace_all(unit, |c: &regex::Captures| {
        format!(")${{1}}{}{}", " ".repeat(c[2].len()), &c[3]).replace("${1}", &c[1])
    })
    .into_owned()
}

/// `const constant T*` (or `constant const`): the shim makes `constant` mean `const`, and C++ refuses
/// `const` twice in a row, so the written `const` is blanked.
fn const_beside_constant_blanked(unit: &str) -> String {
    static PAIR: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = PAIR.get_or_init(|| {
        regex::Regex::new(r"\bconst(\s+)constant\b|\bconstant(\s+)const\b")
            .expect("a valid pattern")
    });
    re.replace_all(unit, |c: &regex::Captures| {
        if let Some(gap) = c.get(1) {
            format!("     {}constant", gap.as_str())
        } else {
            format!("constant{}     ", &c[2])
        }
    })
    .into_owned()
}

#[cfg(test)]
mod dialect_tests {
    use super::shim_dialect;

    #[test]
    fn program_scope_constants_and_threadgroup_indices_survive_the_shim() {
        let src = "#include <metal_stdlib>\nconstant uint TILE = 64; // constant uint x\nconstant constexpr int K = 2;\nnamespace m {\nconstant float table[2] = {1, 2};\n}\nkernel void k(constant float* p [[buffer(0)]], threadgroup float* t [[threadgroup(0)]]) {\n  constant float* q = p;\n}\n";
        let out = shim_dialect(src);
        assert_eq!(out.lines().count(), src.lines().count());
        assert!(
            out.contains("static const uint TILE = 64; // constant uint x"),
            "{out}"
        );
        assert!(out.contains("constant constexpr int K = 2;"), "{out}");
        assert!(out.contains("static const float table[2]"), "{out}");
        let twice = shim_dialect("void f(const constant float* a, constant const float* b);\n");
        assert_eq!(
            twice,
            "void f(      constant float* a, constant       float* b);\n"
        );
        assert!(
            out.contains("kernel void k(constant float* p [[buffer(0)]]"),
            "{out}"
        );
        assert!(out.contains("[[threadgroup_index(0)]]"), "{out}");
        let inst = shim_dialect("template [[host_name(\"k_f\")]] kernel k_t k<float>;\n");
        assert_eq!(inst.len(), 51, "lines and width kept");
        assert_eq!(
            inst.split_whitespace().collect::<Vec<_>>(),
            ["template", "kernel", "k_t", "k<float>;"]
        );
        let in_macro =
            shim_dialect("#define GEN(n) \\\n  template [[host_name(n)]] kernel k_t k<float>;\n");
        assert!(!in_macro.contains("host_name"), "{in_macro}");
        let next_line = shim_dialect(
            "#define K(n, f) \\\n  template [[host_name(#n)]] \\\n  [[kernel]] void f<float>(float x); \\\n",
        );
        assert!(!next_line.contains("[[kernel]]"), "{next_line}");
        assert_eq!(next_line.matches("\\\n").count(), 3, "{next_line}");
        let split = shim_dialect(
            "#define K(n, f) \\\n  template [[host_name( \\\n n)]] [[kernel]] decltype(f) f;\n",
        );
        assert_eq!(split.matches("\\\n").count(), 2, "{split}");
        let two =
            shim_dialect("template [[host_name(\"k\")]] [[kernel]] decltype(k<float>) k<float>;");
        assert_eq!(
            two.trim_start_matches("template").trim_start(),
            "decltype(k<float>) k<float>;"
        );
        let member = shim_dialect(
            "  T() threadgroup : v(0) {}\n  operator float() const device;\n  void f(device float* p) { g(p) ; }\n",
        );
        assert_eq!(
            member,
            "  T()             : v(0) {}\n  operator float() const       ;\n  void f(device float* p) { g(p) ; }\n"
        );
        let fc = shim_dialect("constant bool HAS_MASK [[function_constant(0)]];\n");
        assert_eq!(fc, "static const bool HAS_MASK = ks_function_constant();\n");
        let steel = shim_dialect("STEEL_CONST int N_ [[ function_constant(3) ]] ;\n");
        assert_eq!(steel, "STEEL_CONST int N_ = ks_function_constant() ;\n");
        assert!(out.contains("  constant float* q = p;"), "{out}");
    }
}

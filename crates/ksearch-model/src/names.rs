//! The one rule for the file names a candidate gives its kernel sources and headers.
//!
//! Those names come from plan.toml files and LLM replies, become files in a build folder, and reach a
//! compiler's command line (`cc ... matmul.c`). A name there must not be read as anything but a file:
//! gcc reads `@file` as a file of further options, and `-include`, `-o` and the like are options. So
//! the rule allows only a small, plain alphabet and refuses a leading `-` or `.` (options, hidden
//! files, `.` and `..`); with no `/` or `\` in the alphabet, a name cannot leave its folder.

/// The most bytes a file name may have.
pub const MAX_FILE_NAME: usize = 128;

/// What a file name may be, in words, for error messages.
pub const FILE_NAME_RULE: &str = "a file name is 1 to 128 characters, each an ASCII letter, a digit, `_`, `.` or `-`, and does not start with `-` or `.`";

/// Ok when `name` is a plain file name (see [`FILE_NAME_RULE`]); otherwise a message saying what is
/// wrong with it and what is allowed.
pub fn check_file_name(name: &str) -> Result<(), String> {
    match problem(name) {
        None => Ok(()),
        Some(p) => Err(format!(
            "{} is not a plain file name: {p}; {FILE_NAME_RULE}",
            shown(name)
        )),
    }
}

/// Whether `name` is a plain file name (see [`FILE_NAME_RULE`]).
pub fn is_file_name(name: &str) -> bool {
    problem(name).is_none()
}

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

/// What is wrong with `name`, if anything.
fn problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("it is empty".into());
    }
    if name.len() > MAX_FILE_NAME {
        return Some(format!("it is {} bytes long", name.len()));
    }
    if let Some(c) = name.chars().find(|c| !allowed(*c)) {
        return Some(format!("it contains {}", describe(c)));
    }
    if name.starts_with('-') {
        return Some("it starts with `-`, so a compiler would take it as an option".into());
    }
    if name.starts_with('.') {
        return Some("it starts with `.` (a hidden file, or the folder `.` or `..`)".into());
    }
    None
}

fn describe(c: char) -> String {
    match c {
        '@' => "`@` (a compiler reads `@name` as a file of options)".into(),
        '/' | '\\' => format!("the path separator `{c}` (a name must not leave its folder)"),
        c if c.is_whitespace() => format!("whitespace ({})", c.escape_unicode()),
        c if c.is_control() => format!("a control character ({})", c.escape_unicode()),
        c if !c.is_ascii() => format!("the non-ASCII character `{c}`"),
        c => format!("`{c}`"),
    }
}

/// The name as messages show it: quoted, escaped, and cut short when long.
fn shown(name: &str) -> String {
    let head: String = name.chars().take(40).collect();
    let more = if head.len() < name.len() { "…" } else { "" };
    format!("`{}{more}`", head.escape_debug())
}

/// Ok when every file `text` (C, C++, CUDA or Metal source) asks its preprocessor to read is a header
/// found through the compiler's own include paths: `#include <name>` or `#include "name"` with a relative
/// name that does not climb out (`..`). GPU kernels are compiled inside the worker (NVRTC, the Metal
/// compiler), where no jail applies: an absolute include, or a computed one (`#include MACRO`), could copy
/// any file the worker can read into a compiler message, the store and a prompt. `#embed` (which reads a
/// file as data) is refused outright, `__has_include` (which tests for a file) follows the same rule.
pub fn check_includes(text: &str) -> Result<(), String> {
    // Compilers differ on trigraphs (read in strict C++14 modes, not in GNU or C++17 ones) and on a backslash
    // followed by blanks (gcc and clang splice there): the text is read each way, and every reading must
    // pass. A comment ending in `??/` hides the next line in one reading and shows it in the other.
    let mut readings: Vec<String> = Vec::new();
    for trigraphs in [false, true] {
        for blank_splices in [false, true] {
            // Most sources read the same every way: each distinct reading is checked once.
            let r = splice_lines(text, trigraphs, blank_splices);
            if !readings.contains(&r) {
                directives_allowed(&r)?;
                readings.push(r);
            }
        }
    }
    Ok(())
}

/// The files `text` includes by a quoted name that is a candidate file name (`#include "paged.cuh"`): on the
/// cuda target, a candidate's own headers, read with its kernel files.
pub fn local_includes(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in crate::cpplex::compact(text).lines() {
        let Some(rest) = line.trim_start().strip_prefix('#') else {
            continue;
        };
        let Some(operand) = rest.trim_start().strip_prefix("include") else {
            continue;
        };
        let operand = operand.trim();
        if let Some(name) = operand
            .strip_prefix('"')
            .and_then(|o| o.strip_suffix('"'))
            .filter(|n| is_file_name(n))
            && !out.iter().any(|o| o == name)
        {
            out.push(name.to_string());
        }
    }
    out
}

/// `roots` (name, text) and the files they include by name (`local_includes`), transitively: a cuda
/// candidate's own files. `read` gives an included name's text, or None where the candidate has no such file
/// (not followed: a system header).
pub fn include_closure<E>(
    roots: impl IntoIterator<Item = (String, String)>,
    mut read: impl FnMut(&str) -> Result<Option<String>, E>,
) -> Result<std::collections::BTreeMap<String, String>, E> {
    let mut files: std::collections::BTreeMap<String, String> = roots.into_iter().collect();
    let mut queue: Vec<String> = files.keys().cloned().collect();
    while let Some(name) = queue.pop() {
        for inc in local_includes(&files[&name]) {
            if files.contains_key(&inc) {
                continue;
            }
            if let Some(text) = read(&inc)? {
                files.insert(inc.clone(), text);
                queue.push(inc);
            }
        }
    }
    Ok(files)
}

/// The include rule on text whose lines are already spliced.
fn directives_allowed(spliced: &str) -> Result<(), String> {
    // Comments go after splicing, as in a compiler.
    let joined = crate::cpplex::compact(spliced);
    for (n, line) in joined.lines().enumerate() {
        let t = line.trim_start();
        let rest = if let Some(r) = t.strip_prefix('#') {
            r
        } else if let Some(r) = t.strip_prefix("%:") {
            r
        } else {
            continue;
        };
        let rest = rest.trim_start();
        let word: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let operand = rest[word.len()..].trim();
        match word.as_str() {
            "include" | "include_next" | "import" => include_operand(operand)
                .map_err(|p| format!("`#{word} {operand}` (logical line {}): {p}", n + 1))?,
            "embed" => {
                return Err(format!(
                    "`#embed` (logical line {}) reads a file into the program: not allowed in a kernel",
                    n + 1
                ));
            }
            _ => {}
        }
    }
    let mut at = 0;
    while let Some(p) = joined[at..].find("__has_include") {
        let start = at + p;
        let after = joined[start..]
            .trim_start_matches("__has_include_next")
            .trim_start_matches("__has_include");
        let after = after.trim_start();
        if let Some(inner) = after.strip_prefix('(') {
            let operand: String = inner.chars().take_while(|c| *c != ')').collect();
            include_operand(operand.trim())
                .map_err(|e| format!("`__has_include({})`: {e}", operand.trim()))?;
        }
        at = start + "__has_include".len();
    }
    Ok(())
}

/// `text` with its physical lines spliced as a C preprocessor would: CR LF and a lone CR end a line (gcc,
/// clang and NVRTC all take a lone CR as a line end, and LLM replies keep CRLF; otherwise `#inc\` CR LF
/// `lude "/x"` is one directive to the compiler and two harmless lines to a check that splits on LF alone);
/// with `trigraphs`, `??/` is a backslash; with `blank_splices`, a backslash followed by blanks before the
/// line end splices too.
fn splice_lines(text: &str, trigraphs: bool, blank_splices: bool) -> String {
    let mut lf = text.replace("\r\n", "\n").replace('\r', "\n");
    if trigraphs {
        lf = lf.replace("??/", "\\");
    }
    let mut out = String::with_capacity(lf.len());
    let mut rest = lf.as_str();
    while let Some(p) = rest.find('\\') {
        out.push_str(&rest[..p]);
        let after = &rest[p + 1..];
        let blanks = if blank_splices {
            after.len() - after.trim_start_matches([' ', '\t', '\x0b', '\x0c']).len()
        } else {
            0
        };
        if after[blanks..].starts_with('\n') {
            rest = &after[blanks + 1..];
        } else {
            out.push('\\');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn include_operand(operand: &str) -> Result<(), String> {
    let name = if let Some(r) = operand.strip_prefix('<') {
        r.split('>').next().unwrap_or("")
    } else if let Some(r) = operand.strip_prefix('"') {
        r.split('"').next().unwrap_or("")
    } else {
        return Err(
            "a computed include (a macro as the file name) is not allowed: name the header as <name> or \"name\""
                .into(),
        );
    };
    if name.is_empty() {
        return Err("an empty file name".into());
    }
    if name.starts_with('/') || name.starts_with('\\') || name.contains(':') {
        return Err(
            "an absolute path: a kernel may include headers of the compiler's include paths only"
                .into(),
        );
    }
    if name.contains('\\') || name.split('/').any(|c| c == "..") {
        return Err("a path that climbs out of the include paths (`..` or `\\`)".into());
    }
    if name.chars().any(|c| c.is_control()) {
        return Err("a control character in the file name".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_accepted() {
        for name in [
            "matmul.c",
            "attn_decode-2.cuh",
            "K1.h",
            "a",
            "x.tar.gz",
            "_k.metal",
        ] {
            assert_eq!(check_file_name(name), Ok(()), "{name}");
            assert!(is_file_name(name), "{name}");
        }
        let longest = "a".repeat(MAX_FILE_NAME);
        assert!(is_file_name(&longest));
    }

    #[test]
    fn options_paths_and_odd_characters_are_refused() {
        let too_long = "a".repeat(MAX_FILE_NAME + 1);
        for (name, why) in [
            ("@opts.h", "`@`"),
            ("a@b.c", "`@`"),
            ("-include", "starts with `-`"),
            ("-o", "starts with `-`"),
            ("a/b.c", "path separator `/`"),
            ("a\\b.c", "path separator `\\`"),
            ("../x.c", "path separator `/`"),
            ("..", "starts with `.`"),
            (".", "starts with `.`"),
            (".hidden", "starts with `.`"),
            ("x y.c", "whitespace"),
            ("x\ny.c", "whitespace"),
            ("x\u{0}.c", "control character"),
            ("é.c", "non-ASCII character `é`"),
            ("k+1.c", "`+`"),
            ("", "empty"),
            (too_long.as_str(), "129 bytes"),
        ] {
            assert!(!is_file_name(name), "{name:?}");
            let e = check_file_name(name).unwrap_err();
            assert!(e.contains(why), "{name:?}: {e}");
            assert!(e.contains(FILE_NAME_RULE), "{name:?}: {e}");
        }
    }

    #[test]
    fn messages_show_the_name_escaped_and_short() {
        let e = check_file_name("a\nb").unwrap_err();
        assert!(e.starts_with("`a\\nb` is not a plain file name"), "{e}");
        let e = check_file_name(&format!("@{}", "x".repeat(300))).unwrap_err();
        assert!(e.starts_with(&format!("`@{}…`", "x".repeat(39))), "{e}");
    }

    #[test]
    fn includes_stay_in_the_compilers_include_paths() {
        for ok in [
            "#include <cuda_fp16.h>\n",
            "#include <metal_stdlib>\nusing namespace metal;\n",
            "  #  include \"mlx/backend/metal/kernels/utils.h\"\n",
            "#if __has_include(<mma.h>)\n#include <mma.h>\n#endif\n",
            "// #include \"/etc/passwd\" in a comment is nothing\n",
            "const char* s = \"#include </etc/passwd>\";\n",
            "#include <cuda_fp16.h>\r\n#define X(a) \\\r\n  (a)\r\n",
        ] {
            assert!(check_includes(ok).is_ok(), "{ok}: {:?}", check_includes(ok));
        }
        for bad in [
            "#include \"/root/.config/ksearch/config.toml\"\n",
            "#include </etc/shadow>\n",
            "#include \"../../secret.h\"\n",
            "#include <cuda/../../../etc/passwd>\n",
            "#define F \"/etc/passwd\"\n#include F\n",
            "%:include \"/etc/passwd\"\n",
            "#include_next \"/etc/passwd\"\n",
            "#embed \"data.bin\"\n",
            "#if __has_include(\"/root/.ssh/id_rsa\")\n#endif\n",
            "#inc\\\nlude \"/etc/passwd\"\n",
            // Line ends a compiler reads and a split on LF alone would not.
            "#inc\\\r\nlude \"/etc/passwd\"\r\n",
            "#define A 1\r#include \"/etc/passwd\"\n",
            "#inc\\\rlude \"/etc/passwd\"\n",
            "#inc\\  \t\nlude \"/etc/passwd\"\n",
            "#inc??/\nlude \"/etc/passwd\"\n",
            "/\\\n* a comment that is one to the compiler *\\\n/ #include \"/etc/passwd\"\n",
            // A trigraph the compiler does not read: the comment ends at the line end.
            "// note ??/\n#include \"/etc/passwd\"\n",
            "// note \\ \n#include \"/etc/passwd\"\n",
        ] {
            assert!(check_includes(bad).is_err(), "{bad} was accepted");
        }
    }
}

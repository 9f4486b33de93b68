//! Fuzzing the reply parsers (`src/reply.rs`): they read whatever an LLM sends, so no input may make
//! them panic, and what they return must hold up: a JSON object re-serialises, a block body is a piece
//! of the reply, a parsed candidate validates, and render -> parse gives back the same candidate.
//!
//! Inputs: strings from a grammar biased toward the characters that matter ({ } " \ ` ~ newlines,
//! JSON/TOML/C fragments), structured replies (headings, fences, plan/C/soup bodies, some unclosed),
//! and byte-level mutations of realistic replies. About 110,000 cases, sized for a debug build.

use ksearch::candidate::{Candidate, Plan};
use ksearch::names::{FILE_NAME_RULE, is_file_name};
use ksearch::reply::{
    ReplyError, candidate_from_reply, code_blocks, first_json_object, json_objects,
    render_candidate,
};
use ksearch::search::world_model::tree::{Solution, Status, WorldModel};
use ksearch::search::world_model::{ops, wire};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::TestRunner;
use serde_json::Value;
use std::cell::Cell;
use std::sync::OnceLock;

/// `KSEARCH_FUZZ_SCALE=10 cargo test --release --test testsuite reply_fuzz::` runs ten times the cases.
fn config(cases: u32) -> ProptestConfig {
    let scale: u32 = std::env::var("KSEARCH_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    ProptestConfig {
        cases: cases.saturating_mul(scale),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

const MATMUL_PLAN: &str = r#"
name = "naive"
target = "cpu"
description = "i-j-k loops"
constraints = ["BM * BN <= 4096"]

[[kernel]]
name = "matmul"
source = "matmul.c"

[[launch]]
kernel = "matmul"
inputs = ["A", "B"]
outputs = ["C"]
scalars = ["M", "N", "K"]

[tunable.BM]
values = [8, 16, 32, 64]
default = 16

[tunable.BN]
values = [8, 16, 32, 64]
default = 16
"#;

const MATMUL_C: &str = "#include <stdint.h>\n\
void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {\n\
    for (int64_t i = 0; i < M; ++i)\n\
        for (int64_t j = 0; j < N; ++j) {\n\
            float s = 0.0f; /* \"acc\" { */\n\
            for (int64_t k = 0; k < K; ++k) s += A[i * K + k] * B[k * N + j];\n\
            C[i * N + j] = s;\n\
        }\n\
}\n";

const TWO_PLAN: &str = r#"
name = "two-pass"
target = "cpu"

[[kernel]]
name = "rowmax"
source = "rowmax.c"
header = "common.h"

[[kernel]]
name = "scale"
source = "scale.c"
header = "common.h"

[[buffer]]
name = "m"
shape = ["M"]
dtype = "float32"

[[launch]]
kernel = "rowmax"
inputs = ["x"]
outputs = ["m"]
scalars = ["M", "N"]

[[launch]]
kernel = "scale"
inputs = ["x", "m"]
outputs = ["y"]
scalars = ["M", "N"]

[tunable.ACC]
values = [1, 2, 4]
default = 1
"#;

fn matmul() -> &'static Candidate {
    static C: OnceLock<Candidate> = OnceLock::new();
    C.get_or_init(|| Candidate {
        plan: toml::from_str(MATMUL_PLAN).unwrap(),
        files: [("matmul.c".to_string(), MATMUL_C.to_string())].into(),
    })
}

fn two_kernels() -> &'static Candidate {
    static C: OnceLock<Candidate> = OnceLock::new();
    C.get_or_init(|| Candidate {
        plan: toml::from_str(TWO_PLAN).unwrap(),
        files: [
            ("common.h", "#define LANES 4\n"),
            (
                "rowmax.c",
                "void rowmax(const float* x, float* m, int64_t M, int64_t N) {}\n",
            ),
            (
                "scale.c",
                "void scale(const float* x, const float* m, float* y, int64_t M, int64_t N) {}\n",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    })
}

/// Realistic replies that the mutations start from.
fn seeds() -> &'static [String] {
    static S: OnceLock<Vec<String>> = OnceLock::new();
    S.get_or_init(|| {
        let p = matmul();
        let mut better = p.with_params(&[("BM".to_string(), 32)].into()).unwrap();
        better.files.insert(
            "matmul.c".into(),
            MATMUL_C.replace("float s = 0.0f;", "float s = 0.0f, t = 0.0f;"),
        );
        let full = format!(
            "The i-k-j order streams rows of B, so I switch to it and raise BM.\n\n{}\nThis should be ~3x faster.\n",
            render_candidate(&better)
        );
        let json_edit = "```json\n{\"ops\":[{\"op\":\"update_node\",\"node_id\":\"n1\",\"patch\":{\"overall_rating_0_to_10\":7}}]}\n```\n".to_string();
        let prose_json = "Looking at the results, n1 {the tiled idea} is promising.\n\
            {\"ops\": [{\"op\": \"add_node\", \"parent\": \"n1\", \"title\": \"use {braces} and \\\"quotes\\\"\", \"rating\": 6.5},\n\
             {\"op\": \"delete_node\", \"node_id\": \"n3\"}], \"note\": \"ünï 🚀\"}\nHope this helps."
            .to_string();
        let unnamed = format!(
            "Here is the kernel:\n\n~~~c\n{}~~~\n",
            MATMUL_C.replace("++i", "i++")
        );
        let mut two = two_kernels().clone();
        two.files.insert("scale.c".into(), "void scale(const float* x, const float* m, float* y, int64_t M, int64_t N) { /* ``` */ }\n".into());
        vec![
            full.clone(),
            json_edit,
            prose_json,
            unnamed,
            full.replace('\n', "\r\n"),
            render_candidate(&two),
        ]
    })
}

const TOKENS: &[&str] = &[
    "{",
    "}",
    "{",
    "}",
    "\"",
    "\"",
    "\\",
    "\\\"",
    "\\\\",
    "`",
    "``",
    "```",
    "````",
    "~~~",
    "~~~~",
    "\n",
    "\n",
    "\n",
    "\r\n",
    " ",
    "  ",
    "\t",
    ":",
    ",",
    "[",
    "]",
    "\"ops\"",
    "\"op\": ",
    "\"update_node\"",
    "\"node_id\": \"n1\"",
    "1",
    "-2.5e3",
    "true",
    "null",
    "{\"a\": 1}",
    "{\"s\": \"}\"}",
    "{\"e\": \"\\\"{\"}",
    "\n```c\n",
    "\n```c matmul.c\n",
    "\n```toml\n",
    "\n```toml plan.toml\n",
    "\n```cuda title=\"k.cu\"\n",
    "\n```json\n",
    "\n```\n",
    "\n~~~c\n",
    "\n````\n",
    "### matmul.c\n",
    "### plan.toml\n",
    "File: `plan.toml`\n",
    "**matmul.c**\n",
    "Here is the updated `matmul.c`:\n",
    "### common.h\n",
    "### scale.c\n",
    "void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {",
    "for (int i = 0; i < M; ++i) {",
    "C[i] = A[i];",
    "#define X 1",
    "/* \" */",
    "'\"'",
    "name = \"naive\"\n",
    "target = \"cpu\"\n",
    "[[kernel]]\n",
    "name = \"matmul\"\n",
    "source = \"matmul.c\"\n",
    "[[launch]]\n",
    "kernel = \"matmul\"\n",
    "outputs = [\"C\"]\n",
    "[tunable.BM]\n",
    "values = [8, 16, 32, 64]\n",
    "default = 32\n",
    "é",
    "🚀",
    "\u{0}",
    "\u{feff}",
    "Here is",
    "plan.toml",
    "matmul.c",
    "#",
    "*",
    "=",
    "'",
    "\"\"\"",
];

fn soup(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            12 => select(TOKENS).prop_map(str::to_string),
            1 => any::<char>().prop_map(|c| c.to_string()),
        ],
        0..max,
    )
    .prop_map(|v| v.concat())
}

/// One section of a structured reply: optional heading, fence, body, maybe no closing fence.
fn section() -> impl Strategy<Value = String> {
    let heading = prop_oneof![
        Just(""),
        Just("### matmul.c\n"),
        Just("### plan.toml\n"),
        Just("**matmul.c**\n"),
        Just("File: `plan.toml`\n"),
        Just("Some prose about matmul.c.\n\n"),
        Just("### common.h\n"),
        Just("### rowmax.c\n"),
    ];
    let fence = select(
        &[
            "```",
            "```c",
            "```toml",
            "````c",
            "~~~",
            "~~~toml",
            "```cpp matmul.c",
            "```toml plan.toml",
            "```json",
            "```python",
            "   ```c",
        ][..],
    );
    let body = prop_oneof![
        2 => (0..4usize).prop_map(|i| {
            let p = matmul().with_params(&[("BM".to_string(), [8, 16, 32, 64][i])].into()).unwrap();
            toml::to_string(&p.plan).unwrap()
        }),
        2 => soup(12).prop_map(|s| format!("{MATMUL_C}{s}\n")),
        1 => soup(30),
        1 => Just(TWO_PLAN.to_string()),
    ];
    (heading, fence, body, prop::bool::weighted(0.9)).prop_map(|(h, f, b, closed)| {
        let close = if closed {
            format!(
                "{}\n",
                f.trim()
                    .split(|c: char| c.is_alphanumeric() || c == ' ')
                    .next()
                    .unwrap_or("```")
            )
        } else {
            String::new()
        };
        format!("{h}{f}\n{b}{close}")
    })
}

fn structured() -> impl Strategy<Value = String> {
    (prop::collection::vec(section(), 1..4), soup(6))
        .prop_map(|(sections, prose)| format!("{prose}\n{}", sections.join("\n")))
}

#[derive(Debug, Clone)]
enum Mutation {
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Replace(usize, usize, Vec<u8>),
    Duplicate(usize, usize, usize),
    Truncate(usize),
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => select(TOKENS).prop_map(|t| t.as_bytes().to_vec()),
        1 => prop::collection::vec(any::<u8>(), 1..4),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), bytes()).prop_map(|(p, b)| Mutation::Insert(p, b)),
        3 => (any::<usize>(), 1..40usize).prop_map(|(p, n)| Mutation::Delete(p, n)),
        3 => (any::<usize>(), 1..8usize, bytes()).prop_map(|(p, n, b)| Mutation::Replace(p, n, b)),
        2 => (any::<usize>(), 1..60usize, any::<usize>()).prop_map(|(p, n, at)| Mutation::Duplicate(p, n, at)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn mutate(seed: &str, muts: &[Mutation]) -> String {
    let mut b = seed.as_bytes().to_vec();
    for m in muts {
        let len = b.len();
        let pos = |p: usize| p % (len + 1);
        match m {
            Mutation::Insert(p, x) => {
                let p = pos(*p);
                b.splice(p..p, x.iter().copied());
            }
            Mutation::Delete(p, n) => {
                let p = pos(*p);
                b.drain(p..(p + n).min(len));
            }
            Mutation::Replace(p, n, x) => {
                let p = pos(*p);
                b.splice(p..(p + n).min(len), x.iter().copied());
            }
            Mutation::Duplicate(p, n, at) => {
                let p = pos(*p);
                let span = b[p..(p + n).min(len)].to_vec();
                let at = pos(*at);
                b.splice(at..at, span);
            }
            Mutation::Truncate(p) => b.truncate(pos(*p)),
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

fn mutated() -> impl Strategy<Value = String> {
    (0..seeds().len(), prop::collection::vec(mutation(), 1..6))
        .prop_map(|(i, m)| mutate(&seeds()[i], &m))
}

/// How often the success paths were reached: a fuzzer that only ever sees errors tests little.
#[derive(Default, Debug)]
struct Hits {
    cases: Cell<usize>,
    json: Cell<usize>,
    blocks: Cell<usize>,
    candidates: Cell<usize>,
}

fn bump(c: &Cell<usize>) {
    c.set(c.get() + 1);
}

/// Every parser on one text, with the properties that can be checked on any input.
fn check_parsers(text: &str, hits: &Hits) -> Result<(), TestCaseError> {
    bump(&hits.cases);
    let first = first_json_object(text);
    match &first {
        Ok(v) => {
            bump(&hits.json);
            prop_assert!(v.is_object());
            let back: Value = serde_json::from_str(&serde_json::to_string(v).unwrap())
                .map_err(|e| TestCaseError::fail(format!("re-serialised object: {e}")))?;
            prop_assert!(back.is_object());
        }
        Err(e) => prop_assert!(!e.to_string().is_empty()),
    }
    if let Ok(v) = &first {
        check_world_model(v)?;
    }
    let all: Vec<Value> = json_objects(text).take(64).collect();
    prop_assert_eq!(first.as_ref().ok(), all.first());
    prop_assert!(all.iter().all(Value::is_object));

    let blocks = code_blocks(text);
    if !blocks.is_empty() {
        bump(&hits.blocks);
    }
    let lines = text.split('\n').count();
    for (i, b) in blocks.iter().enumerate() {
        prop_assert!(
            text.contains(&b.body),
            "body is not in the text: {:?}",
            b.body
        );
        prop_assert!(b.line >= 1 && b.line <= lines);
        prop_assert!(
            !b.truncated || i + 1 == blocks.len(),
            "only the last block can be cut off"
        );
        if i > 0 {
            prop_assert!(blocks[i - 1].line < b.line);
        }
    }
    for parent in [matmul(), two_kernels()] {
        match candidate_from_reply(text, parent) {
            Ok(r) => {
                bump(&hits.candidates);
                let c = &r.candidate;
                prop_assert!(c.validate().is_ok());
                prop_assert_ne!(c.hash(), parent.hash());
                let mut named: Vec<&String> = c
                    .plan
                    .kernel
                    .iter()
                    .flat_map(|k| std::iter::once(&k.source).chain(k.header.as_ref()))
                    .collect();
                named.sort();
                named.dedup();
                prop_assert!(
                    named.iter().all(|n| is_file_name(n)),
                    "a file name the rule refuses: {:?}",
                    named
                );
                prop_assert_eq!(named, c.files.keys().collect::<Vec<_>>());
            }
            Err(e) => {
                prop_assert!(!e.to_string().is_empty());
                if blocks.is_empty() {
                    prop_assert!(matches!(e, ReplyError::NoCodeBlock { .. }), "{e}");
                }
            }
        }
    }
    Ok(())
}

/// Runs `cases` inputs through every parser; returns how often each success path was reached.
fn fuzz(cases: u32, strategy: impl Strategy<Value = String>) -> Hits {
    let hits = Hits::default();
    let mut runner = TestRunner::new(config(cases));
    if let Err(e) = runner.run(&strategy, |text| check_parsers(&text, &hits)) {
        panic!("{e}");
    }
    eprintln!("{hits:?}");
    hits
}

#[test]
fn grammar_soup_never_panics() {
    let h = fuzz(40_000, soup(80));
    assert!(
        h.json.get() * 40 > h.cases.get() && h.blocks.get() * 40 > h.cases.get(),
        "{h:?}"
    );
}

#[test]
fn structured_replies_never_panic() {
    let h = fuzz(15_000, structured());
    assert!(h.candidates.get() * 15 > h.cases.get(), "{h:?}");
}

#[test]
fn mutated_replies_never_panic() {
    let h = fuzz(40_000, mutated());
    assert!(
        h.json.get() * 10 > h.cases.get() && h.candidates.get() * 10 > h.cases.get(),
        "{h:?}"
    );
}

/// JSON without floats (whose text round trip may be inexact), so equality is checkable.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        soup(6).prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(soup(3), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(config(10_000))]
    /// An object in prose without `{` is found exactly, pretty or compact, fenced or not.
    #[test]
    fn embedded_object_is_found(
        v in prop::collection::btree_map(soup(3), json_value(), 0..4),
        before in soup(20),
        after in soup(20),
        pretty in any::<bool>(),
        fenced in any::<bool>(),
    ) {
        let v = Value::Object(v.into_iter().collect());
        let before = before.replace('{', "(");
        let json = if pretty { serde_json::to_string_pretty(&v) } else { serde_json::to_string(&v) }.unwrap();
        let text = if fenced {
            format!("{before}\n```json\n{json}\n```\n{after}")
        } else {
            format!("{before}{json}{after}")
        };
        prop_assert_eq!(first_json_object(&text).unwrap(), v);
    }
}

/// Kernel text that ends with a newline (what a fenced block yields), with fences, CRLF and unicode.
fn kernel_text() -> impl Strategy<Value = String> {
    soup(60).prop_map(|s| {
        if s.ends_with('\n') {
            s
        } else {
            format!("{s}\n")
        }
    })
}

proptest! {
    #![proptest_config(config(4_000))]
    /// render -> parse gives back the edited candidate, byte for byte (same hash).
    #[test]
    fn render_parse_round_trips(
        which in any::<bool>(),
        texts in prop::collection::vec(kernel_text(), 3),
        edit in prop::collection::vec(any::<bool>(), 3),
        picks in prop::collection::vec(any::<prop::sample::Index>(), 2),
        description in soup(10),
        name in soup(4),
    ) {
        let parent = if which { matmul() } else { two_kernels() };
        let mut c = parent.clone();
        let names: Vec<String> = c.files.keys().cloned().collect();
        for ((f, t), e) in names.iter().zip(&texts).zip(&edit) {
            if *e {
                c.files.insert(f.clone(), t.clone());
            }
        }
        let tunables: Vec<(String, Vec<i64>)> =
            c.plan.tunable.iter().map(|(k, t)| (k.clone(), t.values.clone())).collect();
        for ((k, values), pick) in tunables.iter().zip(&picks) {
            c.plan.tunable.get_mut(k).unwrap().default = *pick.get(values);
        }
        c.plan.description = description;
        c.plan.name = name;
        prop_assume!(c.validate().is_ok());
        prop_assume!(c.hash() != parent.hash());
        // A file equal to the parent's but for trailing whitespace comes back as the parent's.
        let norm = |s: &str| s.replace("\r\n", "\n").trim_end().to_string();
        prop_assume!(names.iter().all(|f| c.files[f] == parent.files[f]
            || norm(&c.files[f]) != norm(&parent.files[f])));
        let text = render_candidate(&c);
        let r = candidate_from_reply(&text, parent)
            .map_err(|e| TestCaseError::fail(format!("{e}\n--- reply ---\n{text}")))?;
        prop_assert_eq!(r.candidate.hash(), c.hash(), "reply:\n{}", text);
        let reparsed: Plan = toml::from_str(&toml::to_string(&c.plan).unwrap()).unwrap();
        prop_assert_eq!(reparsed, c.plan);
        prop_assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    }
}

/// File names as an LLM might write them into plan.toml: plain ones, and ones a compiler would read as
/// options (`@file`, `-include`), paths, hidden files, whitespace, non-ASCII, and names near the length limit.
fn file_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[-@./\\\\a-zA-Z0-9_ +é]{0,8}",
        select(vec![
            "@opts.h", "-include", "-o", "..", ".hidden", "a@b.c", "k.c", "K1.h"
        ])
        .prop_map(str::to_string),
        (126usize..131).prop_map(|n| format!("{}.c", "k".repeat(n - 2))),
    ]
}

proptest! {
    #![proptest_config(config(3_000))]
    /// A plan naming a source or header the rule refuses is refused as `BadFileName`, with a message that
    /// says what is allowed; a name the rule allows is never refused for its name.
    #[test]
    fn plan_file_names_follow_the_rule(name in file_name(), header in any::<bool>()) {
        let parent = matmul();
        let mut c = parent.clone();
        if header {
            c.plan.kernel[0].header = Some(name.clone());
        } else {
            c.plan.kernel[0].source = name.clone();
        }
        let plan = toml::to_string(&c.plan).unwrap();
        let text = format!("### plan.toml\n```toml\n{plan}```\n### {name}\n```c\n{MATMUL_C}```\n");
        match candidate_from_reply(&text, parent) {
            Err(ReplyError::BadFileName { name: bad, reason, .. }) => {
                prop_assert!(!is_file_name(&name), "{name:?} is allowed but was refused: {reason}");
                prop_assert_eq!(&bad, &name);
                prop_assert!(reason.contains(FILE_NAME_RULE), "{}", reason);
            }
            other => prop_assert!(
                is_file_name(&name),
                "{:?} should be refused for its name, got {:?}",
                name,
                other.map(|r| r.candidate.files.into_keys().collect::<Vec<_>>())
            ),
        }
    }
}

#[test]
fn option_and_response_file_names_in_a_reply_are_refused() {
    for bad in ["@opts.h", "-include"] {
        let mut c = matmul().clone();
        c.plan.kernel[0].source = bad.to_string();
        let plan = toml::to_string(&c.plan).unwrap();
        let text = format!("### plan.toml\n```toml\n{plan}```\n### {bad}\n```c\n{MATMUL_C}```\n");
        let e = candidate_from_reply(&text, matmul()).unwrap_err();
        assert!(matches!(e, ReplyError::BadFileName { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("`{bad}` is not a plain file name"))
                && msg.contains(FILE_NAME_RULE),
            "{msg}"
        );
    }
}

/// A small solved tree the world-model edits are applied to.
fn base_tree() -> &'static WorldModel {
    static T: OnceLock<WorldModel> = OnceLock::new();
    T.get_or_init(|| {
        let mut wm = WorldModel::new("k");
        for (id, parent) in [("a", "root"), ("b", "root"), ("a1", "a")] {
            let op = wire::parse_ops(
                &serde_json::json!({"ops": [{"op": "insert_node", "parent_id": parent,
                "node": {"node_id": id, "action": {"title": id, "score_0_to_1": 0.7}}}]}),
            )
            .unwrap();
            ops::apply(&mut wm, &op, &ops::Requirements::default(), 0).unwrap();
        }
        let a = wm.nodes.get_mut("a").unwrap();
        a.solution = Some(Solution {
            candidate: "h".into(),
            cost_s: 1.0,
            round: 1,
        });
        a.status = Status::Solved;
        wm
    })
}

/// The world model's parsers and edit rules on any JSON: no panic, and a rejected edit changes nothing.
fn check_world_model(v: &Value) -> Result<(), TestCaseError> {
    if let Ok(init) = wire::parse_init(v) {
        prop_assert!(init.nodes.iter().any(|n| n.action.is_some()));
    }
    if let Ok(list) = wire::parse_ops(v) {
        let before = base_tree().clone();
        let mut wm = before.clone();
        let req = ops::Requirements {
            solved: Some("a".into()),
            promising_frontier: true,
            ..Default::default()
        };
        match ops::apply(&mut wm, &list, &req, 1) {
            Ok(_) => prop_assert!(wm.check().is_ok()),
            Err(errs) => {
                prop_assert!(!errs.is_empty() && errs.iter().all(|e| !e.is_empty()));
                prop_assert_eq!(wm, before);
            }
        }
        // K-Search's cumulative edits keep what applies: the tree stays well formed whatever the ops.
        let before = base_tree().clone();
        let mut cum = before.clone();
        let req = ops::Requirements {
            solved: Some("a".into()),
            follow_up_max_difficulty: Some(4),
            ..Default::default()
        };
        let _ = ops::apply_cumulative(&mut cum, &list, &req, 1, &mut 0);
        prop_assert!(cum.check().is_ok());
        prop_assert!(cum.nodes.len() <= before.nodes.len() + ops::MAX_NEW_NODES);
    }
    Ok(())
}

/// JSON in the world model's vocabulary: field names, op kinds and node ids the parsers look for.
fn wm_json() -> impl Strategy<Value = Value> {
    let key = prop::sample::select(vec![
        "ops",
        "op",
        "node_id",
        "parent_id",
        "patch",
        "node",
        "into",
        "action",
        "title",
        "description",
        "score_0_to_1",
        "difficulty_1_to_5",
        "overall_rating_0_to_10",
        "confidence_0_to_1",
        "notes",
        "decision",
        "choice",
        "decision_tree",
        "nodes",
        "kernel_summary",
        "open_questions",
        "expected_vs_baseline_factor",
        "impacts",
        "memory_bandwidth",
        "rating_0_to_10",
        "id",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-1e6f64..1e6).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(vec![
            "update_node",
            "insert_node",
            "split_node",
            "delete_node",
            "prune",
            "root",
            "a",
            "b",
            "a1",
            "n9",
            "",
            "0.7",
            "x"
        ])
        .prop_map(|s| Value::String(s.to_string())),
        soup(8).prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key.clone().prop_map(str::to_string), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(config(20_000))]
    /// World-model replies of any shape: parsed leniently or rejected with a message, never a panic.
    #[test]
    fn world_model_replies_never_panic(v in wm_json(), wrap in any::<bool>()) {
        let v = if wrap { serde_json::json!({"ops": [v]}) } else { v };
        check_world_model(&v)?;
    }
}

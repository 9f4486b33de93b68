//! The CUDA expert seeds (attention, gqa-paged-decode)' device code run on the CPU: tests/back_translate_cpu/cuda_cpu.h emulates the CUDA
//! names (each CUDA thread a fiber switched at barriers, blocks in turn), so index arithmetic, merges and the cross-block
//! protocol of a shipped kernel are checked here, not only on the H200: float32 and, with the tensor-core
//! primitives emulated by the driver, fp16 and bf16; thread-block clusters (the blocks of one run at once,
//! each with its own shared memory, which the others read).
use crate::common;
use crate::common::repo;
use ksearch::candidate::Candidate;
use std::path::Path;

/// Runs `driver` (a file of tests/cuda_seeds_cpu) with the sources of `dir` on its include path and asserts it
/// said `says` after `cases` lines of worst errors; returns its output for further checks.
fn agrees(driver: &str, dir: &Path, tmp: &Path, says: &str, cases: usize) -> String {
    let out =
        common::run_cuda_cpu_driver(&repo().join("tests/cuda_seeds_cpu").join(driver), dir, tmp);
    println!("{driver}:\n{out}");
    assert!(out.contains(says), "{driver}: {out}");
    assert_eq!(out.matches("worst error").count(), cases, "{driver}: {out}");
    out
}

/// The mlx-metal candidate in `metal` back-translated to mlx-cuda (the Metal prelude in its headers), written
/// into `out`.
fn back_translated(metal: &Path, out: &Path) {
    ksearch::back_translate::back_translate_dir(metal)
        .unwrap()
        .candidate
        .write_dir(out)
        .unwrap();
}

#[test]
fn attention_expert_decode_matches_softmax() {
    let seed = repo().join("tasks/attention/seeds/mlx-cuda/expert");
    // attention_decode.cpp instantiates the bodies with these template values, inputs and outputs; a plan
    // whose decode launches change needs the driver changed with it.
    let c = Candidate::load(&seed).unwrap();
    let decode: Vec<_> = c
        .plan
        .launch
        .iter()
        .filter(|l| {
            l.when
                .as_ref()
                .is_some_and(|w| w.0.src().starts_with("Tq == 1"))
        })
        .collect();
    let kernels: Vec<_> = decode
        .iter()
        .map(|l| {
            let when = l.when.as_ref().unwrap().0.src().to_string();
            (
                when,
                l.kernel.as_str(),
                l.template.clone(),
                l.outputs.clone(),
            )
        })
        .collect();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        kernels,
        [
            (
                "Tq == 1 and NC > 0".to_string(),
                "attn_decode",
                s(&[
                    "D", "NTD", "NC", "IL", "GH", "U", "UC", "PF", "Hq", "Hkv", "Tk"
                ]),
                s(&["o"])
            ),
            (
                "Tq == 1 and NC == 0 and LM == 1".to_string(),
                "attn_decode_last",
                s(&["D", "NTD", "CH", "GH", "U", "UC", "PF", "Hq", "Hkv", "Tk"]),
                s(&["o", "part"])
            ),
            (
                "Tq == 1 and NC == 0 and LM == 0".to_string(),
                "attn_decode_split",
                s(&["D", "NTD", "CH", "GH", "U", "UC", "PF", "Hq", "Hkv", "Tk"]),
                s(&["part"])
            ),
            (
                "Tq == 1 and NC == 0 and LM == 0".to_string(),
                "attn_decode_combine",
                s(&["D", "CH", "Tk"]),
                s(&["o"])
            ),
        ],
        "update tests/cuda_seeds_cpu/attention_decode.cpp"
    );
    let p = c.params();
    assert_eq!(
        [
            p["NTD"], p["NC"], p["IL"], p["LM"], p["CH"], p["GH"], p["U"], p["UC"], p["PF"]
        ],
        [64, 0, 1, 1, 512, 4, 4, 1, 1],
        "update the defaults case of tests/cuda_seeds_cpu/attention_decode.cpp"
    );
    // The driver launches with these grids, threadgroups (in threads, as MLX takes them) and clusters.
    let clusters: Vec<Option<Vec<&str>>> = decode
        .iter()
        .map(|l| {
            l.cluster
                .as_ref()
                .map(|c| c.iter().map(|e| e.0.src()).collect())
        })
        .collect();
    assert_eq!(
        clusters,
        [Some(vec!["NC", "1", "1"]), None, None, None],
        "update the launches in tests/cuda_seeds_cpu/attention_decode.cpp"
    );
    let dims: Vec<(Vec<&str>, Vec<&str>)> = decode
        .iter()
        .map(|l| {
            let grid = l.grid.as_ref().unwrap().iter().map(|e| e.0.src()).collect();
            let tg = l
                .threadgroup
                .as_ref()
                .unwrap()
                .iter()
                .map(|e| e.0.src())
                .collect();
            (grid, tg)
        })
        .collect();
    assert_eq!(
        dims,
        [
            (
                vec!["NTD * NC", "B * Hkv * ((Hq // Hkv + GH - 1) // GH)", "1"],
                vec!["NTD", "1", "1"]
            ),
            (
                vec![
                    "NTD * ((Tk + CH - 1) // CH)",
                    "B * Hkv * ((Hq // Hkv + GH - 1) // GH)",
                    "1"
                ],
                vec!["NTD", "1", "1"]
            ),
            (
                vec![
                    "NTD * ((Tk + CH - 1) // CH)",
                    "B * Hkv * ((Hq // Hkv + GH - 1) // GH)",
                    "1"
                ],
                vec!["NTD", "1", "1"]
            ),
            (vec!["256 * B * Hq", "1", "1"], vec!["256", "1", "1"]),
        ],
        "update the launches in tests/cuda_seeds_cpu/attention_decode.cpp"
    );
    let tmp = tempfile::tempdir().unwrap();
    let driver = "attention_decode.cpp";
    let out = agrees(
        driver,
        &seed,
        tmp.path(),
        "decode agrees with the reference",
        35,
    );
    assert_eq!(out.matches("(a cluster").count(), 11, "{out}");
    assert_eq!(out.matches("(one launch, signed)").count(), 10, "{out}");
    assert_eq!(out.matches(", PF").count(), 4, "{out}");
    // The one-launch merge needs no zeroed memory (MLX's init_value would fill every output with a kernel each).
    let last = decode
        .iter()
        .find(|l| l.kernel == "attn_decode_last")
        .unwrap();
    assert_eq!(last.init_value, None);
}

#[test]
fn attention_expert_float32_prefill_matches_softmax() {
    let seed = repo().join("tasks/attention/seeds/mlx-cuda/expert");
    // attention_prefill_f32.cpp calls the prefill body as prefill.cu does, with the plan's launch: a block of
    // 32 * NW threads per (b * Hq + h, query tile); a plan or body that changes them needs the driver changed.
    let c = Candidate::load(&seed).unwrap();
    assert_eq!(
        c.files["prefill.cu"].lines().last().map(str::trim),
        Some("ksattn::prefill<D, NW, WM, BK>(q, k, v, o, Hq, Hkv, Tq, Tk, CAUSAL, ks_smem);"),
        "update tests/cuda_seeds_cpu/attention_prefill_f32.cpp"
    );
    let prefill = c
        .plan
        .launch
        .iter()
        .find(|l| l.kernel == "attn_prefill")
        .unwrap();
    let srcs = |v: &Option<Vec<ksearch::expr::ExprField>>| -> Vec<String> {
        v.iter().flatten().map(|e| e.0.src().to_string()).collect()
    };
    assert_eq!(
        (srcs(&prefill.grid), srcs(&prefill.threadgroup)),
        (
            vec![
                "32 * NW * B * Hq".to_string(),
                "(Tq + 16 * WM * NW - 1) // (16 * WM * NW)".to_string(),
                "1".to_string()
            ],
            vec!["32 * NW".to_string(), "1".to_string(), "1".to_string()]
        ),
        "update the launch in tests/cuda_seeds_cpu/attention_prefill_f32.cpp"
    );
    let tmp = tempfile::tempdir().unwrap();
    let driver = "attention_prefill_f32.cpp";
    agrees(
        driver,
        &seed,
        tmp.path(),
        "prefill (float32) agrees with the reference",
        8,
    );
}

#[test]
fn paged_decode_expert_matches_attention_over_the_page_lists() {
    let task_dir = repo().join("tasks/gqa-paged-decode");
    let seed = task_dir.join("seeds/mlx-cuda/expert");
    let c = Candidate::load(&seed).unwrap();
    let task = ksearch::task::Task::load(&task_dir).unwrap();
    c.check_against(&task).unwrap();
    // paged_decode.cpp calls the bodies as split.cu and merge.cu do, with the plan's launches.
    assert_eq!(
        (c.files["split.cu"].trim(), c.files["merge.cu"].trim()),
        (
            "kspaged::split<T, D, Hq, Hkv, CH, NW, KT>(q, k_cache, v_cache, kv_indptr, kv_indices, part, B[0]);",
            "kspaged::merge<T, D, Hq, CH>(part, kv_indptr, o, lse, B[0]);"
        ),
        "update tests/cuda_seeds_cpu/paged_decode.cpp"
    );
    let srcs = |v: &Option<Vec<ksearch::expr::ExprField>>| -> Vec<String> {
        v.iter().flatten().map(|e| e.0.src().to_string()).collect()
    };
    let launches: Vec<(String, Vec<String>, Vec<String>)> = c
        .plan
        .launch
        .iter()
        .map(|l| (l.kernel.clone(), srcs(&l.grid), srcs(&l.threadgroup)))
        .collect();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        launches,
        [
            (
                "paged_decode_split".to_string(),
                s(&["32 * NW * ((N + CH - 1) // CH + B)", "Hkv", "1"]),
                s(&["32 * NW", "1", "1"])
            ),
            (
                "paged_decode_merge".to_string(),
                s(&["D * B * Hq", "1", "1"]),
                s(&["D", "1", "1"])
            ),
        ],
        "update the launches in tests/cuda_seeds_cpu/paged_decode.cpp"
    );
    let tmp = tempfile::tempdir().unwrap();
    let driver = "paged_decode.cpp";
    agrees(
        driver,
        &seed,
        tmp.path(),
        "paged decode agrees with the reference",
        8,
    );
}

/// The cuda target's gqa-paged-decode seeds: whole `__global__` functions, run on the CPU emulation as the
/// worker launches them (template values then T; the plan's grids). The expert shares paged.cuh with the
/// mlx-cuda expert (a test above runs that one): the two files must stay one text, and the two plans one
/// set of launches.
#[test]
fn paged_decode_cuda_seeds_match_attention_over_the_page_lists() {
    let task_dir = repo().join("tasks/gqa-paged-decode");
    let task = ksearch::task::Task::load(&task_dir).unwrap();
    let expert = task_dir.join("seeds/cuda/expert");
    let naive = task_dir.join("seeds/cuda/naive");
    let (c, twin) = (
        Candidate::load(&expert).unwrap(),
        Candidate::load(&task_dir.join("seeds/mlx-cuda/expert")).unwrap(),
    );
    c.check_against(&task).unwrap();
    assert_eq!(
        c.files["paged.cuh"], twin.files["paged.cuh"],
        "seeds/cuda/expert/paged.cuh and seeds/mlx-cuda/expert/paged.cuh must be the same file"
    );
    let launches = |c: &Candidate| -> Vec<String> {
        c.plan
            .launch
            .iter()
            .map(|l| {
                format!(
                    "{} {:?} {:?} {:?}",
                    l.kernel,
                    l.grid
                        .iter()
                        .flatten()
                        .map(|e| e.0.src())
                        .collect::<Vec<_>>(),
                    l.threadgroup
                        .iter()
                        .flatten()
                        .map(|e| e.0.src())
                        .collect::<Vec<_>>(),
                    l.template
                )
            })
            .collect()
    };
    assert_eq!(launches(&c), launches(&twin));
    let tmp = tempfile::tempdir().unwrap();
    for (driver, seed) in [
        ("paged_decode_cuda.cpp", &expert),
        ("paged_decode_cuda_naive.cpp", &naive),
    ] {
        Candidate::load(seed).unwrap().check_against(&task).unwrap();
        agrees(
            driver,
            seed,
            tmp.path(),
            "paged decode agrees with the reference",
            8,
        );
    }
}

/// The cuda target's naive MLA (decode, causal prefill) and trimul seeds, run as their plans launch them:
/// what a search on those tasks starts from is right before any GPU runs it.
#[test]
fn mla_and_trimul_naive_cuda_seeds_match_their_references() {
    let tmp = tempfile::tempdir().unwrap();
    for (task, driver, says, cases) in [
        (
            "mla-paged-decode",
            "mla_naive.cpp",
            "mla naive seeds agree",
            4,
        ),
        ("trimul", "trimul_naive.cpp", "trimul naive seed agrees", 2),
    ] {
        let task_dir = repo().join("tasks").join(task);
        let t = ksearch::task::Task::load(&task_dir).unwrap();
        Candidate::load(&task_dir.join("seeds/cuda/naive"))
            .unwrap()
            .check_against(&t)
            .unwrap();
        agrees(
            driver,
            &task_dir.join("seeds/cuda/naive"),
            tmp.path(),
            says,
            cases,
        );
    }
    let prefill = repo().join("tasks/mla-paged-prefill");
    Candidate::load(&prefill.join("seeds/cuda/naive"))
        .unwrap()
        .check_against(&ksearch::task::Task::load(&prefill).unwrap())
        .unwrap();
}

/// The cuda target's mla-paged-decode expert (tensor cores: its mma.sync and cp.async emulated with their
/// fragment layouts), its split and merge launches as the plan makes them.
#[test]
fn mla_decode_expert_cuda_seed_matches_attention_over_the_page_lists() {
    let task_dir = repo().join("tasks/mla-paged-decode");
    let task = ksearch::task::Task::load(&task_dir).unwrap();
    let seed = task_dir.join("seeds/cuda/expert");
    let c = Candidate::load(&seed).unwrap();
    c.check_against(&task).unwrap();
    // mla_decode_expert.cpp launches as the plan does: 128 threads per item, then Dckv per (sequence, head);
    // the plan's dynamic shared memory is what mla.cuh lays out (kSharedBytes).
    let grids: Vec<Vec<String>> = c
        .plan
        .launch
        .iter()
        .map(|l| {
            l.grid
                .iter()
                .chain(&l.threadgroup)
                .flatten()
                .map(|e| e.0.src().to_string())
                .chain(l.shared_memory.iter().map(|e| e.0.src().to_string()))
                .collect()
        })
        .collect();
    assert_eq!(
        grids,
        [
            vec![
                "128 * ((N + CH - 1) // CH + B)",
                "1",
                "1",
                "128",
                "1",
                "1",
                "60160"
            ],
            vec!["Dckv * B * H", "1", "1", "Dckv", "1", "1"],
        ],
        "update tests/cuda_seeds_cpu/mla_decode_expert.cpp"
    );
    assert!(
        c.files["mla.cuh"].contains("(H + 2 * KT) * RS * 2 + NW * H * KT * 4")
            && c.files["mla.cuh"].contains("RS = DQ + 8"),
        "the plan's shared_memory (60160) follows mla.cuh's layout: update both"
    );
    let tmp = tempfile::tempdir().unwrap();
    agrees(
        "mla_decode_expert.cpp",
        &seed,
        tmp.path(),
        "mla decode expert agrees",
        5,
    );
}

/// The cuda target's mla-paged-prefill expert: its tiles of query tokens for prefill steps, the decode expert's
/// split and merge for a step of one query per sequence (whose files it carries unchanged), on the CPU emulation.
#[test]
fn mla_prefill_expert_cuda_seed_matches_causal_attention() {
    let task_dir = repo().join("tasks/mla-paged-prefill");
    let task = ksearch::task::Task::load(&task_dir).unwrap();
    let seed = task_dir.join("seeds/cuda/expert");
    let c = Candidate::load(&seed).unwrap();
    c.check_against(&task).unwrap();
    let decode = Candidate::load(&repo().join("tasks/mla-paged-decode/seeds/cuda/expert")).unwrap();
    for f in ["mla.cuh", "split.cu", "merge.cu"] {
        assert_eq!(
            c.files[f], decode.files[f],
            "{f}: the prefill expert carries the decode expert's file unchanged"
        );
    }
    let whens: Vec<(String, String)> = c
        .plan
        .launch
        .iter()
        .map(|l| {
            (
                l.kernel.clone(),
                l.when
                    .as_ref()
                    .map(|w| w.0.src().to_string())
                    .unwrap_or_default(),
            )
        })
        .collect();
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        whens,
        [
            s("mla_prefill_tiles", "Q > B"),
            s("mla_decode_split", "Q == B"),
            s("mla_decode_merge", "Q == B")
        ],
        "update tests/cuda_seeds_cpu/mla_prefill_expert.cpp"
    );
    assert!(
        c.files["prefill.cuh"].contains("(QT * H + 2 * KT) * RS * 2 + PW * H * KT * 4")
            && c.plan.launch[0]
                .shared_memory
                .as_ref()
                .is_some_and(|e| e.0.src() == "120320"),
        "the plan's shared_memory (120320) follows prefill.cuh's layout: update both"
    );
    let tmp = tempfile::tempdir().unwrap();
    agrees(
        "mla_prefill_expert.cpp",
        &seed,
        tmp.path(),
        "mla prefill expert agrees",
        5,
    );
}

/// The cuda target's trimul expert (its three products on the tensor cores in fp16: mma.sync and cp.async
/// emulated), with its plan's launches and buffers.
#[test]
fn trimul_expert_cuda_seed_matches_the_update() {
    let task_dir = repo().join("tasks/trimul");
    let task = ksearch::task::Task::load(&task_dir).unwrap();
    let seed = task_dir.join("seeds/cuda/expert");
    let c = Candidate::load(&seed).unwrap();
    c.check_against(&task).unwrap();
    let launches: Vec<String> = c
        .plan
        .launch
        .iter()
        .map(|l| {
            let srcs = |v: &Option<Vec<ksearch::expr::ExprField>>| -> Vec<String> {
                v.iter().flatten().map(|e| e.0.src().to_string()).collect()
            };
            format!(
                "{} {:?} {:?}",
                l.kernel,
                srcs(&l.grid),
                srcs(&l.threadgroup)
            )
        })
        .collect();
    assert_eq!(
        launches,
        [
            r#"trimul_project ["256 * ((B * S * S + 127) // 128)", "1", "1"] ["256", "1", "1"]"#,
            r#"trimul_triangle ["256 * ((S + 127) // 128)", "(S + 127) // 128", "B * H"] ["256", "1", "1"]"#,
            r#"trimul_output ["256 * ((B * S * S + 127) // 128)", "1", "1"] ["256", "1", "1"]"#,
        ],
        "update tests/cuda_seeds_cpu/trimul_expert.cpp"
    );
    let tmp = tempfile::tempdir().unwrap();
    agrees(
        "trimul_expert.cpp",
        &seed,
        tmp.path(),
        "trimul expert agrees",
        2,
    );
}

/// A kernel found on NVIDIA carried to MLX computes the same: the naive mla-paged-decode cuda seed translated
/// to mlx-cuda (`ksearch translate FOLDER`), its body run as MLX wraps one (scalars as pointers, `using T`), on
/// the CPU emulation against the double reference.
#[test]
fn a_cuda_seed_translated_to_mlx_cuda_still_matches_its_reference() {
    let seed = repo().join("tasks/mla-paged-decode/seeds/cuda/naive");
    let t = ksearch::translate::translate_and_check(&seed, ksearch::target::Target::MlxCuda, &[])
        .unwrap();
    let c = t.candidate.expect("a translation");
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("mlx-cuda");
    c.write_dir(&out_dir).unwrap();
    assert!(out_dir.join("mla_decode_naive.cu").is_file());
    agrees(
        "mla_naive_mlx.cpp",
        &out_dir,
        tmp.path(),
        "mla naive seeds agree",
        4,
    );
}

/// A kernel found on NVIDIA starts a search on Apple silicon: the gqa-paged-decode cuda expert translated to
/// mlx-metal is a complete candidate (`check` finds nothing), and what that Metal means, back-translated to
/// CUDA over the Metal prelude, still matches attention over the page lists on the CPU emulation.
#[test]
fn the_gqa_cuda_expert_carried_to_metal_still_matches_its_reference() {
    use ksearch::target::Target;
    let task_dir = repo().join("tasks/gqa-paged-decode");
    let task = ksearch::task::Task::load(&task_dir).unwrap();
    let seed = task_dir.join("seeds/cuda/expert");
    let t = ksearch::translate::translate_and_check(&seed, Target::MlxMetal, &[]).unwrap();
    let errors: Vec<_> = t
        .diagnostics
        .iter()
        .filter(|d| d.severity == ksearch::translate::Severity::Error)
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    let metal = t.candidate.expect("a translation");
    metal.check_against(&task).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let metal_dir = tmp.path().join("mlx-metal");
    metal.write_dir(&metal_dir).unwrap();
    let cuda_dir = tmp.path().join("mlx-cuda");
    back_translated(&metal_dir, &cuda_dir);
    // Both headers start with the same prelude: it once, then each kernel's part in its own namespace.
    let part = |header: &str, marker: &str| -> (String, String) {
        let text = std::fs::read_to_string(cuda_dir.join(header)).unwrap();
        let at = text
            .find(marker)
            .unwrap_or_else(|| panic!("{header}: no `{marker}`"));
        (text[..at].to_string(), text[at..].to_string())
    };
    let (prelude, split) = part(
        "split_header.cuh",
        "// ---- split_header.metal, back-translated ----",
    );
    let (prelude2, merge) = part(
        "merge_header.cuh",
        "// ---- merge_header.metal, back-translated ----",
    );
    assert_eq!(prelude, prelude2);
    std::fs::write(
        cuda_dir.join("round_trip.cuh"),
        format!(
            "{prelude}\nnamespace bt_split {{\n{split}\n}}\nnamespace bt_merge {{\n{merge}\n}}\n"
        ),
    )
    .unwrap();
    agrees(
        "paged_decode_metal.cpp",
        &cuda_dir,
        tmp.path(),
        "paged decode agrees with the reference",
        8,
    );
}

/// Paged attention for MLX, the Metal side: the gqa-paged-decode mlx-metal seeds (naive, expert), back-translated
/// to CUDA over the Metal prelude, match attention over the page lists on the CPU emulation (no Apple GPU here:
/// this is what their Metal means, with the simdgroup functions and threadgroup memory emulated).
#[test]
fn paged_decode_metal_seeds_match_attention_over_the_page_lists() {
    let task = ksearch::task::Task::load(&repo().join("tasks/gqa-paged-decode")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    for (seed, driver) in [
        ("naive", "paged_decode_metal_seed_naive.cpp"),
        ("expert", "paged_decode_metal_seed.cpp"),
    ] {
        let dir = repo()
            .join("tasks/gqa-paged-decode/seeds/mlx-metal")
            .join(seed);
        Candidate::load(&dir).unwrap().check_against(&task).unwrap();
        let out_dir = tmp.path().join(seed);
        back_translated(&dir, &out_dir);
        agrees(
            driver,
            &out_dir,
            tmp.path(),
            "paged decode agrees with the reference",
            8,
        );
    }
}

/// Inline PTX carried to Metal: a tensor-core GEMM written as hand-written CUDA is (cp.async with zero fill,
/// mma.sync m16n8k16 on f16, and on bf16 in a variant) translated to mlx-metal with the PTX emulated
/// (translate/ptx.metal: the product by simd shuffles, the copies synchronous), checked, and that Metal,
/// back-translated, run on the CPU emulation against a double product (edges included: M 37, N 21, K 40).
#[test]
fn inline_ptx_tensor_core_code_carried_to_metal_computes_the_product() {
    use ksearch::target::Target;
    let fixture = std::fs::read_to_string(repo().join("tests/translate/mma_gemm.cu")).unwrap();
    let bf16 = fixture
        .replace(".f32.f16.f16.f32", ".f32.bf16.bf16.f32")
        .replace("__half", "__nv_bfloat16")
        .replace("<cuda_fp16.h>", "<cuda_bf16.h>");
    let tmp = tempfile::tempdir().unwrap();
    for (what, src, driver) in [
        ("f16", fixture.as_str(), "mma_gemm_metal.cpp"),
        ("bf16", bf16.as_str(), "mma_gemm_metal_bf16.cpp"),
    ] {
        let t = ksearch::translate::translate(src, "mma_gemm", Target::MlxMetal);
        let errors: Vec<_> = t
            .diagnostics
            .iter()
            .filter(|d| d.severity == ksearch::translate::Severity::Error)
            .collect();
        assert!(errors.is_empty(), "{what}: {errors:?}");
        let metal = t.candidate.expect("a translation");
        let header = &metal.files["header.metal"];
        assert!(
            header.contains(&format!("ksearch_mma_m16n8k16<{}>", what == "bf16"))
                && header.contains("ksearch_cp_async(")
                && !header.contains("asm"),
            "{what}: {header}"
        );
        let metal_dir = tmp.path().join(format!("metal-{what}"));
        metal.write_dir(&metal_dir).unwrap();
        let findings = ksearch::check::check_candidate(&metal_dir, None).unwrap();
        let check_errors: Vec<_> = findings
            .iter()
            .filter(|f| f.severity == ksearch::check::Severity::Error)
            .collect();
        assert!(check_errors.is_empty(), "{what}: {check_errors:?}");
        let cuda_dir = tmp.path().join(format!("cuda-{what}"));
        back_translated(&metal_dir, &cuda_dir);
        agrees(
            driver,
            &cuda_dir,
            tmp.path(),
            "tensor-core gemm agrees with the reference",
            3,
        );
    }
}

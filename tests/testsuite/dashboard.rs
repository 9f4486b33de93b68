//! `ksearch serve` in a real browser: Debian's headless Chromium driven through chromedriver (the W3C
//! WebDriver protocol, spoken here over HTTP), against a store filled by real scripted-LLM searches. The
//! browser is installed by `scripts/chromium.sh`, which `scripts/test` runs and names in
//! KSEARCH_CHROMEDRIVER. Screenshots of each view are written to `target/tmp/dashboard/`.

use crate::common::*;
use crate::world_model::{InProcess, create_in_process, execute_in_process, llm_server, wm_args};
use ksearch::search::StrategyKind;
use ksearch::store::Store;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// chromedriver, or `None` outside `scripts/test`. Under CI its absence is a failure.
fn chromedriver() -> Option<PathBuf> {
    match std::env::var_os("KSEARCH_CHROMEDRIVER") {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "KSEARCH_CHROMEDRIVER is not set: CI must run the tests through scripts/test"
            );
            eprintln!("skipped: no chromedriver (run the tests through scripts/test)");
            None
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `ksearch serve` on `store` at a free port: the child and its base URL (read from its first line).
fn serve(store: &Path, extra: &[&str]) -> (Killed, String) {
    let mut child = ksearch(store)
        .args(["serve", "--port", "0"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .trim_end_matches('/')
        .to_string();
    (Killed(child), url)
}

/// A browser session: chromedriver (killed on drop) and one headless Chromium it drives.
struct Browser {
    http: reqwest::blocking::Client,
    driver: String,
    session: String,
    _child: Killed,
}

impl Browser {
    fn start(chromedriver: &Path) -> Browser {
        let port = free_port();
        let child = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let child = Killed(child);
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap();
        let driver = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(60);
        while http
            .get(format!("{driver}/status"))
            .send()
            .ok()
            .and_then(|r| r.json::<Value>().ok())
            .is_none_or(|v| v["value"]["ready"] != true)
        {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        // No sandbox: the tests may run as root. Every name resolves to nothing, so a page that asked
        // for anything beyond the loopback address the dashboard is on would fail to load it.
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1800", "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                "--no-first-run", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-default-apps", "--disable-extensions",
            ]},
        }}});
        let reply: Value = http
            .post(format!("{driver}/session"))
            .json(&caps)
            .send()
            .unwrap()
            .json()
            .unwrap();
        let session = reply["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {reply}"))
            .to_string();
        Browser {
            http,
            driver,
            session,
            _child: child,
        }
    }

    fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.driver, self.session);
        let mut req = self.http.request(method, url);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let reply: Value = req.send().unwrap().json().unwrap();
        assert!(
            reply["value"]["error"].is_null(),
            "WebDriver {path}: {reply}"
        );
        reply["value"].clone()
    }

    fn goto(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url})));
    }

    /// The value of `body` (a function body: `return …;`) run in the page.
    fn js(&self, body: &str) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": body, "args": []})),
        )
    }

    fn count(&self, selector: &str) -> usize {
        let v = self.js(&format!(
            "return document.querySelectorAll({}).length;",
            json!(selector)
        ));
        v.as_u64().unwrap() as usize
    }

    fn screenshot(&self, name: &str) {
        use base64::Engine;
        let png = self.call(reqwest::Method::GET, "/screenshot", None);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap();
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), bytes).unwrap();
    }

    /// Every address the page has loaded (itself and each resource), for the loopback check.
    fn requested(&self) -> Vec<String> {
        let v = self.js("return performance.getEntriesByType('navigation')
                .concat(performance.getEntriesByType('resource')).map(e => e.name);");
        v.as_array()
            .unwrap()
            .iter()
            .map(|u| u.as_str().unwrap().to_string())
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self
            .http
            .delete(format!("{}/session/{}", self.driver, self.session))
            .send();
    }
}

/// Waits for `cond` (polling), failing with `what` after `limit`.
fn wait_for(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn opts(strategy: StrategyKind, budget: usize, url: &str) -> InProcess {
    InProcess {
        strategy,
        budget,
        tune_budget: 0,
        parallel: 1,
        spec: "llamacpp:scripted".into(),
        base_url: Some(format!("{url}/v1")),
    }
}

#[test]
fn the_dashboard_shows_runs_live_in_a_real_browser_and_nothing_leaves_loopback() {
    let Some(driver) = chromedriver() else { return };
    // Two finished runs: a real world-model search (the binary, its Python worker, real evaluations on this
    // CPU, a scripted LLM) and an in-process evolve one; a third runs while the page is open.
    let dir = tempfile::tempdir().unwrap();
    let llm = llm_server(|_| None);
    let url = format!("{}/v1", llm.url());
    let out = run(dir.path(), &wm_args(&url, "4", &[]));
    let result_a = last_json(&out);
    assert_eq!(result_a["status"], "completed", "{}", stderr(&out));
    let run_a = result_a["run_id"].as_str().unwrap().to_string();
    let run_b = create_in_process(dir.path(), &opts(StrategyKind::Evolve, 3, &llm.url()));
    let (result_b, _) = execute_in_process(
        dir.path(),
        &run_b,
        &opts(StrategyKind::Evolve, 3, &llm.url()),
        None,
        || {},
    );
    assert!(result_b.is_some());
    let live_opts = opts(StrategyKind::WorldModel, 6, &llm.url());
    let run_c = create_in_process(dir.path(), &live_opts);
    let run_c_id = run_c.clone();

    let (_server, base) = serve(dir.path(), &[]);
    let browser = Browser::start(&driver);
    let mut seen = Vec::new();

    // The runs, each listed with its status.
    browser.goto(&format!("{base}/"));
    assert_eq!(
        browser.count("tr.run"),
        3,
        "{}",
        browser.js("return document.body.innerText;")
    );
    for id in [&run_a, &run_b, &run_c] {
        assert_eq!(
            browser.count(&format!("tr.run[data-run='{id}']")),
            1,
            "{id}"
        );
    }
    let status_a = browser.js(&format!(
        "return document.querySelector(\"tr.run[data-run='{run_a}'] .status\").textContent;"
    ));
    assert_eq!(status_a, "completed");
    // Its LLM calls, counted as the store holds them.
    let calls_a = Store::open_read(dir.path())
        .unwrap()
        .unwrap()
        .exchanges(&run_a)
        .unwrap()
        .len();
    let row_a = browser.js(&format!(
        "return document.querySelector(\"tr.run[data-run='{run_a}']\").textContent;"
    ));
    assert!(
        row_a
            .as_str()
            .unwrap()
            .contains(&format!("{calls_a} calls")),
        "{row_a}"
    );
    browser.screenshot("runs");
    seen.extend(browser.requested());

    // One run: the world-model tree has the stored number of nodes (and the root) drawn, and as many rows.
    let store = Store::open_read(dir.path()).unwrap().unwrap();
    let state = store.strategy_state(&run_a).unwrap().unwrap();
    let nodes = state["wm"]["nodes"].as_object().unwrap().len();
    browser.goto(&format!("{base}/run/{run_a}"));
    assert_eq!(browser.count("svg.tree g.node"), nodes + 1);
    assert_eq!(browser.count("tr.node-row"), nodes);
    let attempts = store.attempts(&run_a, None).unwrap();
    assert_eq!(browser.count("tr.attempt"), attempts.len());
    assert!(browser.count("svg.chart") >= 3);
    // Measured on this machine's CPU: the roofline of its measured peaks, with the best and numpy on it.
    assert_eq!(browser.count("svg.roofline"), 1);
    assert!(browser.count("svg.roofline circle") >= 2);
    browser.screenshot("run");
    browser.js("document.getElementById('tree').scrollIntoView(); return null;");
    browser.screenshot("tree");
    seen.extend(browser.requested());

    // A candidate beside its parent: the lines it added are shown as added, and only those.
    let best = result_a["best"]["candidate"].as_str().unwrap().to_string();
    let parent = attempts
        .iter()
        .find(|a| a.candidate == best)
        .and_then(|a| a.parent.clone())
        .expect("the best candidate has a parent");
    browser.goto(&format!("{base}/run/{run_a}/diff/{best}"));
    let added: Vec<String> = serde_json::from_value(browser.js(
        "return Array.from(document.querySelectorAll('pre.diff .ins')).map(e => e.textContent);",
    ))
    .unwrap();
    assert!(!added.is_empty(), "the diff shows the changed lines");
    let (new, old) = (
        store.candidate(&best).unwrap().unwrap(),
        store.candidate(&parent).unwrap().unwrap(),
    );
    let plan = |c: &ksearch::candidate::Candidate| toml::to_string_pretty(&c.plan).unwrap();
    let text = |c: &ksearch::candidate::Candidate| {
        let mut t = plan(c);
        for f in c.files.values() {
            t.push_str(f);
        }
        t
    };
    let (new_text, old_text) = (text(&new), text(&old));
    for line in &added {
        let l = line.strip_prefix("+ ").unwrap();
        assert!(
            new_text.lines().any(|x| x == l),
            "{l:?} is not in the candidate"
        );
    }
    // ...and they are the lines a line diff of each file inserts (not "lines new to the file": when the
    // clock keeps the loop-order candidate best, its change moves lines and adds none).
    let mut files = std::collections::BTreeMap::new();
    files.insert("plan.toml".to_string(), (plan(&old), plan(&new)));
    for name in new.files.keys().chain(old.files.keys()) {
        let get =
            |c: &ksearch::candidate::Candidate| c.files.get(name).cloned().unwrap_or_default();
        files.insert(name.clone(), (get(&old), get(&new)));
    }
    let inserted: Vec<String> = files
        .values()
        .flat_map(|(o, n)| {
            similar::TextDiff::from_lines(o, n)
                .iter_all_changes()
                .filter(|c| c.tag() == similar::ChangeTag::Insert)
                .map(|c| format!("+ {}", c.value().trim_end_matches('\n')))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(added, inserted, "the diff's added lines");
    assert_ne!(
        new_text, old_text,
        "the best candidate is its parent's copy"
    );
    browser.screenshot("diff");
    seen.extend(browser.requested());

    // Two runs side by side, per workload.
    browser.goto(&format!("{base}/compare?a={run_a}&b={run_b}"));
    let workloads = result_a["best"]["workloads"].as_array().unwrap().len();
    assert_eq!(browser.count("tr.workload"), workloads);
    browser.screenshot("compare");
    seen.extend(browser.requested());

    // A live run: its evaluation count grows on the open page, without a reload.
    browser.goto(&format!("{base}/run/{run_c}"));
    let count = || -> i64 {
        browser
            .js("return document.getElementById('evaluations').textContent;")
            .as_str()
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    assert_eq!(count(), 0);
    browser.js("window.__still_this_page = 42; return null;");
    // Its evaluations take 300 ms each, and once two are stored the next waits until the test has seen what
    // it looks for while the run is still going.
    let dir_path = dir.path().to_path_buf();
    let release = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gate = release.clone();
    let (gate_dir, gate_run) = (dir_path.clone(), run_c.clone());
    let live = std::thread::spawn(move || {
        execute_in_process(&dir_path, &run_c, &live_opts, None, move || {
            std::thread::sleep(Duration::from_millis(300));
            let stored = Store::open_read(&gate_dir)
                .unwrap()
                .unwrap()
                .attempts(&gate_run, None)
                .unwrap()
                .iter()
                .filter(|a| a.finished)
                .count();
            // Bounded, so that a failed assertion does not leave the run waiting for ever.
            let deadline = Instant::now() + Duration::from_secs(180);
            while stored >= 2
                && !gate.load(std::sync::atomic::Ordering::SeqCst)
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    });
    wait_for(
        Duration::from_secs(120),
        "the open page shows the run's evaluations growing",
        || count() >= 2,
    );
    assert_eq!(
        browser.js("return window.__still_this_page;"),
        42,
        "the page was not reloaded"
    );
    // What its slots are doing now, as a running run's progress writes it beside the store.
    let mut now = ksearch::progress::LiveFile::new(dir.path(), &run_c_id);
    now.update(
        "cores 0",
        &ksearch::progress::Phase::Compiling {
            candidate: "0123456789abcdef".into(),
        },
    );
    wait_for(
        Duration::from_secs(30),
        "the page shows the run's slots",
        || {
            browser
                .js("const r = document.querySelector('#now tr.slot'); return r ? r.textContent : '';")
                .as_str()
                .is_some_and(|t| t.contains("cores 0") && t.contains("0123456789ab"))
        },
    );
    browser.screenshot("live");
    release.store(true, std::sync::atomic::Ordering::SeqCst);
    let (result_c, _) = live.join().unwrap();
    drop(now);
    let evaluations = result_c.unwrap().evaluations as i64;
    wait_for(
        Duration::from_secs(30),
        "the page shows the finished run",
        || count() == evaluations,
    );
    seen.extend(browser.requested());
    drop(llm);

    // Nothing left loopback: every page and resource came from the dashboard.
    assert!(seen.len() >= 10, "{seen:?}");
    for url in &seen {
        assert!(
            url.starts_with(&format!("{base}/")),
            "{url} is not the dashboard's"
        );
    }
}

#[test]
fn the_dashboard_binds_loopback_answers_reads_only_and_refuses_other_hosts() {
    let store = tempfile::tempdir().unwrap();
    // Another address needs --expose; with it, a warning.
    let refused = run(store.path(), &["serve", "--bind", "0.0.0.0", "--port", "0"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("--expose"),
        "{}",
        stderr(&refused)
    );
    let mut exposed = ksearch(store.path())
        .args(["serve", "--bind", "0.0.0.0", "--port", "0", "--expose"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut warning = String::new();
    BufReader::new(exposed.stderr.take().unwrap())
        .read_line(&mut warning)
        .unwrap();
    let _exposed = Killed(exposed);
    assert!(
        warning.contains("warning") && warning.contains("not loopback"),
        "{warning}"
    );

    // An empty folder is served (runs appear as they start); the default is loopback.
    let (_server, base) = serve(store.path(), &[]);
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    let http = reqwest::blocking::Client::new();
    let page = http.get(format!("{base}/")).send().unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(page.text().unwrap().contains("No runs yet"));
    // Read-only: no other method is answered.
    let post = http.post(format!("{base}/")).send().unwrap();
    assert_eq!(post.status(), 405);
    // A request naming another host (DNS rebinding) is refused.
    let rebound = http
        .get(format!("{base}/"))
        .header("Host", "attacker.example")
        .send()
        .unwrap();
    assert_eq!(rebound.status(), 403);
    let missing = http.get(format!("{base}/run/nothing")).send().unwrap();
    assert_eq!(missing.status(), 404);
    // Nothing was written: the dashboard never creates a store.
    assert!(!store.path().join("ksearch.db").exists());
}

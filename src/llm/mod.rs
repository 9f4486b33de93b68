//! LLM providers behind one synchronous interface. `Llm::from_spec("openai:gpt-5.2", &cfg)` picks a
//! wire format (OpenAI Chat Completions or Responses, Anthropic Messages, Gemini generateContent, a
//! command line on stdin/stdout) and wraps it in what every call needs: a budget checked before the
//! call, retries with backoff, token and cost metering, and an `Exchange` handed to the recorder for
//! every call, failed ones included, so a run can be audited and replayed (`Llm::replay`).
//!
//! API keys come from the environment or the config file and live only inside the provider; they are
//! never put in an `Exchange`, a log line or an error, and any stored text that happens to contain the
//! key has it replaced by `[redacted]`.

mod anthropic;
mod budget;
mod command;
mod config;
mod gemini;
mod http;
mod openai;
mod prices;
mod replay;
mod retry;

pub use budget::{Budget, Meter};
pub use config::LlmEnv;
pub use prices::Price;

/// The user's config folder (`$XDG_CONFIG_HOME/ksearch`, else `~/.config/ksearch`).
pub fn user_config_dir() -> Option<std::path::PathBuf> {
    config::config_dir(&LlmEnv::Process)
}

use config::Secret;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

impl Message {
    pub fn system(content: impl Into<String>) -> Message {
        Message {
            role: Role::System,
            content: content.into(),
        }
    }
    pub fn user(content: impl Into<String>) -> Message {
        Message {
            role: Role::User,
            content: content.into(),
        }
    }
    pub fn assistant(content: impl Into<String>) -> Message {
        Message {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

/// One completion request. `purpose` labels it in the exchange log ("wm-init", "action", ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub purpose: String,
    pub messages: Vec<Message>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f32>,
}

impl Request {
    pub fn new(purpose: impl Into<String>, messages: Vec<Message>) -> Request {
        Request {
            purpose: purpose.into(),
            messages,
            max_tokens: None,
            temperature: None,
        }
    }
}

/// Tokens of one call. `output_tokens` counts everything billed as output, reasoning included;
/// `reasoning_tokens` says how much of it was reasoning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Response {
    pub text: String,
    pub usage: Option<Usage>,
    /// None when the model has no price or the server reported no usage.
    pub cost_usd: Option<f64>,
    pub provider: String,
    pub model: String,
    /// Wall time of the whole call, retries and waits included.
    pub latency_s: f64,
    pub attempts: u32,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    #[error("no reply within {after_s:.1} s")]
    Timeout { after_s: f64 },
    #[error("rate limited (HTTP 429{}): {body_excerpt}", retry_note(.retry_after_s))]
    RateLimited {
        retry_after_s: Option<f64>,
        body_excerpt: String,
    },
    #[error("HTTP {status}: {body_excerpt}")]
    Http { status: u16, body_excerpt: String },
    /// A reply that is truncated, not JSON, or carries no text.
    #[error("unusable reply: {0}")]
    BadBody(String),
    #[error("transport error: {0}")]
    Transport(String),
    /// A budget cap is reached; no request was sent.
    #[error("LLM budget exhausted: {0}")]
    Budget(String),
    #[error("LLM configuration: {0}")]
    Config(String),
    #[error("replay: {0}")]
    Replay(String),
    #[error("command failed: {0}")]
    Command(String),
}

fn retry_note(s: &Option<f64>) -> String {
    s.map(|s| format!(", retry after {s} s"))
        .unwrap_or_default()
}

impl LlmError {
    /// The stable name of the variant, as stored in `Outcome::Err::kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            LlmError::Timeout { .. } => "timeout",
            LlmError::RateLimited { .. } => "rate_limited",
            LlmError::Http { .. } => "http",
            LlmError::BadBody(_) => "bad_body",
            LlmError::Transport(_) => "transport",
            LlmError::Budget(_) => "budget",
            LlmError::Config(_) => "config",
            LlmError::Replay(_) => "replay",
            LlmError::Command(_) => "command",
        }
    }

    /// Rebuilds an error from its recorded kind and message (the inverse of `kind` and `Display`),
    /// so a replayed failure is the same failure.
    pub fn from_recorded(kind: &str, message: &str) -> LlmError {
        let after = |prefix: &str| message.strip_prefix(prefix).unwrap_or(message).to_string();
        match kind {
            "timeout" => LlmError::Timeout {
                after_s: message
                    .strip_prefix("no reply within ")
                    .and_then(|s| s.strip_suffix(" s"))
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0.0),
            },
            "rate_limited" => {
                let rest = after("rate limited (HTTP 429");
                let (note, body) = rest.split_once("): ").unwrap_or(("", &rest));
                LlmError::RateLimited {
                    retry_after_s: note
                        .strip_prefix(", retry after ")
                        .and_then(|s| s.strip_suffix(" s"))
                        .and_then(|s| s.parse().ok()),
                    body_excerpt: body.to_string(),
                }
            }
            "http" => {
                let rest = after("HTTP ");
                let (status, body) = rest.split_once(": ").unwrap_or(("0", &rest));
                LlmError::Http {
                    status: status.parse().unwrap_or(0),
                    body_excerpt: body.to_string(),
                }
            }
            "bad_body" => LlmError::BadBody(after("unusable reply: ")),
            "transport" => LlmError::Transport(after("transport error: ")),
            "budget" => LlmError::Budget(after("LLM budget exhausted: ")),
            "config" => LlmError::Config(after("LLM configuration: ")),
            "command" => LlmError::Command(after("command failed: ")),
            _ => LlmError::Replay(after("replay: ")),
        }
    }

    fn redacted(self, secret: Option<&Secret>) -> LlmError {
        let r = |s: String| config::redact(&s, secret);
        match self {
            LlmError::RateLimited {
                retry_after_s,
                body_excerpt,
            } => LlmError::RateLimited {
                retry_after_s,
                body_excerpt: r(body_excerpt),
            },
            LlmError::Http {
                status,
                body_excerpt,
            } => LlmError::Http {
                status,
                body_excerpt: r(body_excerpt),
            },
            LlmError::BadBody(s) => LlmError::BadBody(r(s)),
            LlmError::Transport(s) => LlmError::Transport(r(s)),
            LlmError::Command(s) => LlmError::Command(r(s)),
            other => other,
        }
    }
}

/// How a call ended, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Outcome {
    Ok {
        text: String,
        usage: Option<Usage>,
        cost_usd: Option<f64>,
        latency_s: f64,
        attempts: u32,
    },
    Err {
        kind: String,
        message: String,
        attempts: u32,
    },
}

/// One call as recorded: what was asked, of whom, and how it ended. Holds no key and no header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    pub seq: u64,
    pub purpose: String,
    pub provider: String,
    pub model: String,
    /// blake3 of the JSON of the messages; replay checks it.
    pub prompt_hash: String,
    pub request: Request,
    pub outcome: Outcome,
    /// Unix time the call started.
    pub started_at: f64,
    /// The lane that made the call, when it ran beside others (`docs/parallel.md`); replay serves each lane
    /// its own exchanges, whatever order they arrived in.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub lane: String,
}

pub fn prompt_hash(messages: &[Message]) -> String {
    let json = serde_json::to_string(messages).expect("messages serialise");
    blake3::hash(json.as_bytes()).to_hex().to_string()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// Per request (each retry gets its own).
    pub timeout_s: f64,
    pub max_retries: u32,
    /// Overrides the provider's environment variable, config file entry and default.
    pub base_url: Option<String>,
    /// "low" / "medium" / "high" (provider-specific mapping); the Responses API defaults to "medium".
    pub reasoning_effort: Option<String>,
    /// Used when a request sets none.
    pub temperature: Option<f32>,
    pub budget: Budget,
    /// Else `$KSEARCH_CONFIG`, else `~/.config/ksearch/config.toml`.
    pub config_file: Option<PathBuf>,
    /// First retry delay in seconds; it doubles per retry (capped at 60 s), with jitter.
    pub backoff_s: f64,
    /// Where keys, base URLs and the config file's location are read: the process's environment unless
    /// the caller gives its own variables (not stored with a run).
    #[serde(skip)]
    pub env: LlmEnv,
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            timeout_s: 300.0,
            max_retries: 3,
            base_url: None,
            reasoning_effort: None,
            temperature: None,
            budget: Budget::default(),
            config_file: None,
            backoff_s: 1.0,
            env: LlmEnv::Process,
        }
    }
}

/// What one wire format returns for one request.
pub(crate) struct Reply {
    pub text: String,
    pub usage: Option<Usage>,
}

/// A failed request, with the server's Retry-After if it sent one.
pub(crate) struct Failure {
    pub error: LlmError,
    pub retry_after: Option<Duration>,
}

impl From<LlmError> for Failure {
    fn from(error: LlmError) -> Self {
        Failure {
            error,
            retry_after: None,
        }
    }
}

/// One wire format: a single request, no retries, no bookkeeping.
pub(crate) trait Backend: Send {
    fn call(&mut self, req: &Request, timeout: Duration) -> Result<Reply, Failure>;
}

enum Engine {
    Live(Box<dyn Backend>),
    Replay(replay::Replay),
}

pub type Recorder = Box<dyn FnMut(&Exchange) + Send>;

pub struct Llm {
    provider: String,
    model: String,
    endpoint: Option<String>,
    engine: Engine,
    cfg: LlmConfig,
    price: Option<Price>,
    secret: Option<Secret>,
    meter: Meter,
    recorder: Option<Recorder>,
    seq: u64,
    cost_cap_warned: bool,
    /// `PROVIDER:MODEL` as given, so a lane can open a client of its own.
    spec: String,
    /// This client's lane; empty for the run's own.
    lane: String,
    /// A lane's meter as the lane began (what the run had spent): what the lane adds is the difference.
    lane_base: Option<Meter>,
    /// A lane's exchanges, handed to the run's recorder when the lane is merged back.
    lane_exchanges: Vec<Exchange>,
}

impl std::fmt::Debug for Llm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Llm({})", self.describe())
    }
}

const PROVIDERS: &str = "openai, openai-responses, openai-chat, anthropic, gemini, openrouter, \
                         llamacpp, ollama, lmstudio, vllm, mlx-lm, command, replay";

impl Llm {
    /// Builds a client from `PROVIDER:MODEL` (`command:CMDLINE`, `replay:CASSETTE.jsonl` too).
    pub fn from_spec(spec: &str, cfg: &LlmConfig) -> Result<Llm, LlmError> {
        let (provider, model) = spec.split_once(':').ok_or_else(|| {
            LlmError::Config(format!(
                "`{spec}` is not PROVIDER:MODEL (e.g. openai:gpt-5.2); providers: {PROVIDERS}"
            ))
        })?;
        if model.trim().is_empty() {
            return Err(LlmError::Config(format!(
                "`{spec}` names no model; use PROVIDER:MODEL"
            )));
        }
        if !(cfg.timeout_s.is_finite() && cfg.timeout_s > 0.0) {
            return Err(LlmError::Config(format!(
                "the per-call timeout must be a positive number of seconds, not {}",
                cfg.timeout_s
            )));
        }
        if provider == "replay" {
            return Ok(Llm::replay(Llm::load_cassette(Path::new(model))?, model));
        }
        let file = config::load(cfg)?;
        let table = prices::load(&file, &cfg.env)?;
        let (backend, endpoint, secret): (Box<dyn Backend>, Option<String>, Option<Secret>) =
            match provider {
                "command" => (Box::new(command::Command::new(model)), None, None),
                _ => {
                    let p = config::provider(provider).ok_or_else(|| {
                        LlmError::Config(format!(
                            "unknown provider `{provider}` in `{spec}`; known: {PROVIDERS}"
                        ))
                    })?;
                    let ep = config::endpoint(&p, cfg, &file)?;
                    let client = http::client(&ep.base_url)?;
                    let base = ep.base_url.clone();
                    let secret = ep.key.clone();
                    let b: Box<dyn Backend> = match provider {
                        "anthropic" => Box::new(anthropic::Anthropic::new(client, ep, model, cfg)),
                        "gemini" => Box::new(gemini::Gemini::new(client, ep, model, cfg)),
                        _ => Box::new(openai::OpenAi::new(client, ep, provider, model, cfg)),
                    };
                    (b, Some(base), secret)
                }
            };
        let price = prices::lookup(&table, provider, model);
        Ok(Llm {
            provider: provider.to_string(),
            model: model.to_string(),
            endpoint,
            engine: Engine::Live(backend),
            cfg: cfg.clone(),
            price,
            secret,
            meter: Meter::new(),
            recorder: None,
            seq: 0,
            cost_cap_warned: false,
            spec: spec.to_string(),
            lane: String::new(),
            lane_base: None,
            lane_exchanges: Vec::new(),
        })
    }

    /// Serves the recorded outcomes in order; each request must have the recorded prompt.
    pub fn replay(exchanges: Vec<Exchange>, label: &str) -> Llm {
        Llm {
            provider: "replay".into(),
            model: label.to_string(),
            endpoint: None,
            engine: Engine::Replay(replay::Replay::new(exchanges, label)),
            cfg: LlmConfig::default(),
            price: None,
            secret: None,
            meter: Meter::new(),
            recorder: None,
            seq: 0,
            cost_cap_warned: false,
            spec: String::new(),
            lane: String::new(),
            lane_base: None,
            lane_exchanges: Vec::new(),
        }
    }

    /// A client for the lane `name` of a batch (`docs/parallel.md`): its own connection (or, replaying,
    /// the recording's exchanges of that lane), the run's meter as it stands so the caps count what the
    /// run spent, and its exchanges kept until [`Llm::merge_lanes`] hands them to the run's recorder. The
    /// caps are checked per lane against the run's spending before the batch and the lane's own, so a
    /// batch of K lanes may pass a cap by the calls the other K - 1 lanes made meanwhile (each lane's
    /// question and its repair prompts: at most `tries` calls a lane).
    pub fn lane(&self, name: &str) -> Result<Llm, LlmError> {
        let engine = match &self.engine {
            Engine::Replay(r) => Engine::Replay(r.lane(name)),
            Engine::Live(_) => Llm::from_spec(&self.spec, &self.cfg)?.engine,
        };
        Ok(Llm {
            provider: self.provider.clone(),
            model: self.model.clone(),
            endpoint: self.endpoint.clone(),
            engine,
            cfg: self.cfg.clone(),
            price: self.price,
            secret: self.secret.clone(),
            meter: self.meter.clone(),
            recorder: None,
            seq: self.seq,
            cost_cap_warned: true,
            spec: self.spec.clone(),
            lane: name.to_string(),
            lane_base: Some(self.meter.clone()),
            lane_exchanges: Vec::new(),
        })
    }

    /// Folds finished lanes back, in the order given (the lanes' order, never their finishing order):
    /// their spending into the meter, their exchanges to the recorder, numbered on from this client's.
    pub fn merge_lanes(&mut self, lanes: Vec<Llm>) {
        for lane in lanes {
            if let Some(base) = &lane.lane_base {
                self.meter.add_lane(&lane.meter, base);
            }
            if let (Engine::Replay(mine), Engine::Replay(theirs)) = (&mut self.engine, &lane.engine)
            {
                mine.merge_lane(&lane.lane, theirs);
            }
            for mut ex in lane.lane_exchanges {
                self.seq += 1;
                ex.seq = self.seq;
                if let Some(rec) = self.recorder.as_mut() {
                    rec(&ex);
                }
            }
        }
    }

    /// Reads a cassette: one JSON `Exchange` per line (blank lines skipped).
    pub fn load_cassette(path: &Path) -> Result<Vec<Exchange>, LlmError> {
        replay::load(path)
    }

    /// A cassette given as text (a recording built into the binary); `source` names it in errors.
    pub fn parse_cassette(text: &str, source: &str) -> Result<Vec<Exchange>, LlmError> {
        replay::parse(text, source)
    }

    /// Called with every exchange, failed and refused ones included.
    pub fn set_recorder(&mut self, f: Recorder) {
        self.recorder = Some(f);
    }

    pub fn meter(&self) -> &Meter {
        &self.meter
    }

    pub fn provider(&self) -> &str {
        &self.provider
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    /// `openai:gpt-5.2 via https://api.openai.com/v1`; never the key.
    pub fn describe(&self) -> String {
        match (&self.engine, &self.endpoint) {
            (Engine::Replay(r), _) => r.describe(),
            (Engine::Live(_), Some(base)) => format!("{}:{} via {base}", self.provider, self.model),
            (Engine::Live(_), None) => format!("{}:{}", self.provider, self.model),
        }
    }

    /// One completion: checks the budget (a refusal sends nothing), retries transient failures,
    /// meters tokens and cost, and records the exchange whatever the outcome.
    pub fn complete(&mut self, req: Request) -> Result<Response, LlmError> {
        self.seq += 1;
        let started_at = crate::clock::now();
        let hash = prompt_hash(&req.messages);
        if let Engine::Replay(r) = &mut self.engine {
            let ex = r.next(&req, &hash)?;
            return self.finish_replay(ex, req, started_at);
        }
        if let Err(e) = self.check_budget() {
            self.record(&req, &hash, started_at, Outcome::err(&e, 0));
            return Err(e);
        }
        let t0 = Instant::now();
        let (result, attempts) = self.call_with_retries(&req);
        // The call's slot has nothing in flight until its next call.
        crate::progress::report_in(
            &crate::progress::llm_slot(&self.lane),
            crate::progress::Phase::Idle,
        );
        let latency_s = t0.elapsed().as_secs_f64();
        self.meter.calls += 1;
        self.meter.requests += u64::from(attempts);
        self.meter.llm_s += latency_s;
        match result {
            Ok(reply) => {
                let text = config::redact(&reply.text, self.secret.as_ref());
                let cost_usd = match (&self.price, &reply.usage) {
                    (Some(p), Some(u)) => Some(p.cost(u)),
                    _ => None,
                };
                self.meter.add(reply.usage.as_ref(), cost_usd);
                tracing::info!(
                    target: "llm",
                    "{}:{} {} call {}: {:.1} s, {} attempt(s), tokens in/out {}/{}, cost {}",
                    self.provider,
                    self.model,
                    req.purpose,
                    self.seq,
                    latency_s,
                    attempts,
                    reply.usage.map_or(0, |u| u.input_tokens),
                    reply.usage.map_or(0, |u| u.output_tokens),
                    cost_usd.map_or("unknown".into(), |c| format!("${c:.4}")),
                );
                let outcome = Outcome::Ok {
                    text: text.clone(),
                    usage: reply.usage,
                    cost_usd,
                    latency_s,
                    attempts,
                };
                self.record(&req, &hash, started_at, outcome);
                Ok(Response {
                    text,
                    usage: reply.usage,
                    cost_usd,
                    provider: self.provider.clone(),
                    model: self.model.clone(),
                    latency_s,
                    attempts,
                })
            }
            Err(e) => {
                self.meter.failures += 1;
                self.record(&req, &hash, started_at, Outcome::err(&e, attempts));
                Err(e)
            }
        }
    }

    fn check_budget(&mut self) -> Result<(), LlmError> {
        let b = &self.cfg.budget;
        if let Some(cap) = b.max_cost_usd
            && self.price.is_none()
            && !self.cost_cap_warned
        {
            self.cost_cap_warned = true;
            tracing::warn!(
                "the LLM cost cap (${cap}) cannot be enforced: {}:{} has no price (add it to \
                 ~/.config/ksearch/prices.toml)",
                self.provider,
                self.model
            );
        }
        b.check(&self.meter).map_err(LlmError::Budget)
    }

    /// Sends the request until it succeeds, fails for good, or retries run out (count or wall
    /// budget). Returns the outcome and the number of requests sent.
    fn call_with_retries(&mut self, req: &Request) -> (Result<Reply, LlmError>, u32) {
        let Engine::Live(backend) = &mut self.engine else {
            unreachable!("replay is served before")
        };
        let mut attempts = 0;
        let mut bad_bodies = 0;
        loop {
            attempts += 1;
            let mut timeout = Duration::from_secs_f64(self.cfg.timeout_s);
            if let Some(left) = self.cfg.budget.wall_left(&self.meter) {
                timeout = timeout.min(left.max(Duration::from_millis(1)));
            }
            crate::progress::report(crate::progress::Phase::Llm {
                purpose: req.purpose.to_string(),
                attempt: attempts,
                lane: self.lane.clone(),
            });
            let f = match backend.call(req, timeout) {
                Ok(reply) => return (Ok(reply), attempts),
                Err(f) => f,
            };
            let e = f.error.redacted(self.secret.as_ref());
            let again = attempts <= self.cfg.max_retries && retry::retryable(&e, bad_bodies);
            if matches!(e, LlmError::BadBody(_)) {
                bad_bodies += 1;
            }
            let wait = f
                .retry_after
                .unwrap_or_else(|| retry::backoff(self.cfg.backoff_s, attempts));
            let what = format!(
                "{}:{} {} call {}, attempt {attempts}: {e}",
                self.provider, self.model, req.purpose, self.seq
            );
            if !again {
                tracing::warn!(target: "llm", "{what}; giving up");
                return (Err(e), attempts);
            }
            if wait > retry::MAX_WAIT {
                let wait_s = wait.as_secs_f64();
                tracing::warn!(target: "llm", "{what}; the server asks for {wait_s:.0} s, giving up");
                return (Err(e), attempts);
            }
            if let Some(left) = self.cfg.budget.wall_left(&self.meter)
                && wait >= left
            {
                tracing::warn!(target: "llm", "{what}; no wall budget left to retry");
                return (Err(e), attempts);
            }
            tracing::warn!(target: "llm", "{what}; retrying in {:.1} s", wait.as_secs_f64());
            crate::progress::report(crate::progress::Phase::LlmRetry {
                purpose: req.purpose.to_string(),
                attempt: attempts + 1,
                wait_s: wait.as_secs_f64(),
                lane: self.lane.clone(),
            });
            std::thread::sleep(wait);
        }
    }

    /// Serves a recorded exchange and records it again, as this run's own.
    fn finish_replay(
        &mut self,
        mut ex: Exchange,
        req: Request,
        started_at: f64,
    ) -> Result<Response, LlmError> {
        self.meter.calls += 1;
        let result = match &ex.outcome {
            Outcome::Ok {
                text,
                usage,
                cost_usd,
                latency_s,
                attempts,
            } => {
                self.meter.requests += u64::from(*attempts);
                self.meter.llm_s += latency_s;
                self.meter.add(usage.as_ref(), *cost_usd);
                Ok(Response {
                    text: text.clone(),
                    usage: *usage,
                    cost_usd: *cost_usd,
                    provider: ex.provider.clone(),
                    model: ex.model.clone(),
                    latency_s: *latency_s,
                    attempts: *attempts,
                })
            }
            Outcome::Err {
                kind,
                message,
                attempts,
            } => {
                self.meter.requests += u64::from(*attempts);
                self.meter.failures += 1;
                Err(LlmError::from_recorded(kind, message))
            }
        };
        ex.seq = self.seq;
        ex.purpose = req.purpose.clone();
        ex.request = req;
        ex.started_at = started_at;
        ex.lane = self.lane.clone();
        self.keep(ex);
        result
    }

    fn record(&mut self, req: &Request, hash: &str, started_at: f64, outcome: Outcome) {
        let ex = Exchange {
            seq: self.seq,
            purpose: req.purpose.clone(),
            provider: self.provider.clone(),
            model: self.model.clone(),
            prompt_hash: hash.to_string(),
            request: req.clone(),
            outcome,
            started_at,
            lane: self.lane.clone(),
        };
        self.keep(ex);
    }

    /// A lane keeps its exchanges for the merge; the run's own client hands them to its recorder.
    fn keep(&mut self, ex: Exchange) {
        if self.lane_base.is_some() {
            self.lane_exchanges.push(ex);
        } else if let Some(rec) = self.recorder.as_mut() {
            rec(&ex);
        }
    }
}

impl Outcome {
    fn err(e: &LlmError, attempts: u32) -> Outcome {
        Outcome::Err {
            kind: e.kind().to_string(),
            message: e.to_string(),
            attempts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_llm_can_move_to_another_thread() {
        fn send<T: Send>() {}
        send::<Llm>();
    }

    fn request(purpose: &str) -> Request {
        Request {
            purpose: purpose.into(),
            messages: vec![Message::user("q")],
            max_tokens: None,
            temperature: None,
        }
    }

    fn recorded(lane: &str, text: &str) -> Exchange {
        Exchange {
            seq: 0,
            purpose: "evolve".into(),
            provider: "p".into(),
            model: "m".into(),
            prompt_hash: String::new(),
            request: request("evolve"),
            outcome: Outcome::Ok {
                text: text.into(),
                usage: Some(Usage {
                    input_tokens: 10,
                    output_tokens: 5,
                    ..Default::default()
                }),
                cost_usd: None,
                latency_s: 1.0,
                attempts: 1,
            },
            started_at: 0.0,
            lane: lane.into(),
        }
    }

    /// Lanes replay their own exchanges in their order; merged back, their spending adds up and their
    /// exchanges reach the recorder in lane order, numbered on, whatever order the lanes finished in.
    #[test]
    fn lanes_replay_their_own_exchanges_and_merge_back_in_lane_order() {
        let tape = vec![
            recorded("", "own 1"),
            recorded("b", "b 1"),
            recorded("a", "a 1"),
            recorded("b", "b 2"),
        ];
        let mut llm = Llm::replay(tape, "tape");
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = seen.clone();
        llm.set_recorder(Box::new(move |ex: &Exchange| {
            sink.lock().unwrap().push((ex.seq, ex.lane.clone()))
        }));
        assert_eq!(llm.complete(request("evolve")).unwrap().text, "own 1");
        let (mut a, mut b) = (llm.lane("a").unwrap(), llm.lane("b").unwrap());
        assert_eq!(b.complete(request("evolve")).unwrap().text, "b 1");
        assert_eq!(b.complete(request("evolve")).unwrap().text, "b 2");
        assert_eq!(a.complete(request("evolve")).unwrap().text, "a 1");
        assert!(
            a.complete(request("evolve")).is_err(),
            "lane a holds one exchange"
        );
        // A lane's exchanges wait for the merge.
        assert_eq!(seen.lock().unwrap().len(), 1);
        llm.merge_lanes(vec![a, b]);
        let got = seen.lock().unwrap().clone();
        // (The call past lane a's recording was refused before it was made: nothing to record.)
        let want: Vec<(u64, String)> = [(1, ""), (2, "a"), (3, "b"), (4, "b")]
            .iter()
            .map(|(n, l)| (*n, l.to_string()))
            .collect();
        assert_eq!(got, want);
        assert_eq!(llm.meter().calls, 4);
        assert_eq!(llm.meter().input_tokens, 40);
        // A lane asked again under a name it had goes on where it stopped.
        assert!(llm.lane("b").unwrap().complete(request("evolve")).is_err());
    }

    #[test]
    fn errors_survive_recording() {
        let all = [
            LlmError::Timeout { after_s: 2.5 },
            LlmError::RateLimited {
                retry_after_s: Some(1.0),
                body_excerpt: "slow down: now".into(),
            },
            LlmError::RateLimited {
                retry_after_s: None,
                body_excerpt: "x".into(),
            },
            LlmError::Http {
                status: 503,
                body_excerpt: "busy: try later".into(),
            },
            LlmError::BadBody("not JSON".into()),
            LlmError::Transport("refused".into()),
            LlmError::Budget("2 calls".into()),
            LlmError::Config("no key".into()),
            LlmError::Replay("ran out".into()),
            LlmError::Command("exit 3".into()),
        ];
        for e in all {
            assert_eq!(LlmError::from_recorded(e.kind(), &e.to_string()), e);
        }
    }
}

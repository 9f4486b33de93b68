//! Budget caps and the meter they are checked against. Caps are checked before each call, so a call
//! that starts under the cap may end over it; none starts once a cap is reached.

use super::Usage;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Budget {
    /// Logical calls (`complete`), not HTTP requests: retries are not counted.
    pub max_calls: Option<u64>,
    /// Input plus output tokens.
    pub max_tokens: Option<u64>,
    /// Only calls with a known price count; see `Meter::unpriced_calls`.
    pub max_cost_usd: Option<f64>,
    /// Since the `Llm` was made.
    pub max_wall_s: Option<f64>,
}

impl Budget {
    /// Why no further call may start, if a cap is reached.
    pub(crate) fn check(&self, m: &Meter) -> Result<(), String> {
        if let Some(cap) = self.max_calls
            && m.calls >= cap
        {
            return Err(format!("{} calls made; the cap is {cap}", m.calls));
        }
        if let Some(cap) = self.max_tokens
            && m.tokens() >= cap
        {
            return Err(format!("{} tokens used; the cap is {cap}", m.tokens()));
        }
        if let Some(cap) = self.max_cost_usd
            && m.cost_usd >= cap
        {
            return Err(format!("${:.4} spent; the cap is ${cap}", m.cost_usd));
        }
        if let Some(cap) = self.max_wall_s
            && m.wall_s() >= cap
        {
            return Err(format!("{:.1} s elapsed; the cap is {cap} s", m.wall_s()));
        }
        Ok(())
    }

    /// Wall time left before the cap, if there is one.
    pub(crate) fn wall_left(&self, m: &Meter) -> Option<Duration> {
        self.max_wall_s
            .map(|cap| Duration::from_secs_f64((cap - m.wall_s()).max(0.0)))
    }
}

/// What the calls so far have used. Serialises with `wall_s` (time since the `Llm` was made).
#[derive(Debug, Clone)]
pub struct Meter {
    started: Instant,
    pub calls: u64,
    /// HTTP requests or command runs, retries included.
    pub requests: u64,
    pub failures: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
    /// Sum over the calls whose cost is known.
    pub cost_usd: f64,
    /// Successful calls whose cost is unknown (no price for the model, or no usage reported).
    pub unpriced_calls: u64,
    /// Time spent inside calls.
    pub llm_s: f64,
}

impl Meter {
    pub(crate) fn new() -> Meter {
        Meter {
            started: Instant::now(),
            calls: 0,
            requests: 0,
            failures: 0,
            input_tokens: 0,
            output_tokens: 0,
            reasoning_tokens: 0,
            cost_usd: 0.0,
            unpriced_calls: 0,
            llm_s: 0.0,
        }
    }

    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    pub fn wall_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Adds what a lane spent: its meter less the meter it started from.
    pub(crate) fn add_lane(&mut self, lane: &Meter, base: &Meter) {
        self.calls += lane.calls - base.calls;
        self.requests += lane.requests - base.requests;
        self.failures += lane.failures - base.failures;
        self.input_tokens += lane.input_tokens - base.input_tokens;
        self.output_tokens += lane.output_tokens - base.output_tokens;
        self.reasoning_tokens += lane.reasoning_tokens - base.reasoning_tokens;
        self.cost_usd += lane.cost_usd - base.cost_usd;
        self.unpriced_calls += lane.unpriced_calls - base.unpriced_calls;
        self.llm_s += lane.llm_s - base.llm_s;
    }

    pub(crate) fn add(&mut self, usage: Option<&Usage>, cost_usd: Option<f64>) {
        if let Some(u) = usage {
            self.input_tokens += u.input_tokens;
            self.output_tokens += u.output_tokens;
            self.reasoning_tokens += u.reasoning_tokens;
        }
        match cost_usd {
            Some(c) => self.cost_usd += c,
            None => self.unpriced_calls += 1,
        }
    }
}

impl Serialize for Meter {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct View {
            calls: u64,
            requests: u64,
            failures: u64,
            input_tokens: u64,
            output_tokens: u64,
            reasoning_tokens: u64,
            cost_usd: f64,
            unpriced_calls: u64,
            llm_s: f64,
            wall_s: f64,
        }
        View {
            calls: self.calls,
            requests: self.requests,
            failures: self.failures,
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            reasoning_tokens: self.reasoning_tokens,
            cost_usd: self.cost_usd,
            unpriced_calls: self.unpriced_calls,
            llm_s: self.llm_s,
            wall_s: self.wall_s(),
        }
        .serialize(s)
    }
}

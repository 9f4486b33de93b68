//! Replaying recorded exchanges: the same outcomes, in the same order, for calls of the same purpose.
//! Prompts may differ in their measurements (every replay re-times the candidates, so "1.21 ms" becomes
//! "1.19 ms"); that is counted as drift, not an error. A call of another purpose than the recording's
//! next one means the search took another path: that is an error, said at the first difference,
//! instead of feeding answers to questions that were never asked.

use super::{Exchange, LlmError, Request};
use std::path::Path;

pub(crate) struct Replay {
    label: String,
    exchanges: Vec<Exchange>,
    /// The exchanges lanes made, for [`Replay::lane`].
    lanes: Vec<Exchange>,
    /// Exchanges of each lane already served by earlier lanes of that name (a lane whose batch ended
    /// early is asked again under the same name: it goes on where it stopped).
    served: std::collections::BTreeMap<String, usize>,
    next: usize,
    /// Calls whose prompt differed from the recorded one (same purpose, other measurements).
    pub drifted: usize,
}

impl Replay {
    /// The run's own exchanges (those no lane made), served in order.
    pub fn new(exchanges: Vec<Exchange>, label: &str) -> Replay {
        let (own, lanes) = exchanges.into_iter().partition(|e| e.lane.is_empty());
        Replay {
            label: label.to_string(),
            exchanges: own,
            lanes,
            served: Default::default(),
            next: 0,
            drifted: 0,
        }
    }

    /// The exchanges of lane `name` not served yet, in the order that lane made them.
    pub fn lane(&self, name: &str) -> Replay {
        let skip = self.served.get(name).copied().unwrap_or(0);
        Replay {
            label: format!("{} (lane {name})", self.label),
            exchanges: (self
                .lanes
                .iter()
                .filter(|e| e.lane == name)
                .skip(skip)
                .cloned())
            .collect(),
            lanes: Vec::new(),
            served: Default::default(),
            next: 0,
            drifted: 0,
        }
    }

    /// Folds a finished lane back: what it served is not served again, and its drift counts.
    pub fn merge_lane(&mut self, name: &str, lane: &Replay) {
        *self.served.entry(name.to_string()).or_default() += lane.next;
        self.drifted += lane.drifted;
    }

    pub fn describe(&self) -> String {
        format!(
            "replay:{} ({} recorded exchanges)",
            self.label,
            self.exchanges.len()
        )
    }

    /// The recorded exchange for the next call, if it was recorded for the same purpose.
    pub fn next(&mut self, req: &Request, hash: &str) -> Result<Exchange, LlmError> {
        let n = self.next + 1;
        let Some(ex) = self.exchanges.get(self.next) else {
            return Err(LlmError::Replay(format!(
                "{} holds {} exchanges; call {n} ({}) was not recorded",
                self.label,
                self.exchanges.len(),
                req.purpose
            )));
        };
        if ex.purpose != req.purpose {
            return Err(LlmError::Replay(format!(
                "call {n} is a `{}` call but the recording in {} has a `{}` call there (prompt hash {}; now {}): \
                 the search took another path than the recorded one",
                req.purpose,
                self.label,
                ex.purpose,
                short(&ex.prompt_hash),
                short(hash),
            )));
        }
        if ex.prompt_hash != hash {
            self.drifted += 1;
            tracing::debug!(
                "replay call {n} ({}): prompt differs from the recording",
                req.purpose
            );
        }
        self.next += 1;
        Ok(ex.clone())
    }
}

fn short(h: &str) -> &str {
    &h[..h.len().min(12)]
}

pub(crate) fn load(path: &Path) -> Result<Vec<Exchange>, LlmError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| LlmError::Replay(format!("cannot read {}: {e}", path.display())))?;
    parse(&text, &path.display().to_string())
}

/// A cassette's JSON lines; `source` names it in errors.
pub(crate) fn parse(text: &str, source: &str) -> Result<Vec<Exchange>, LlmError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| LlmError::Replay(format!("{source}:{}: not an exchange: {e}", i + 1)))
        })
        .collect()
}

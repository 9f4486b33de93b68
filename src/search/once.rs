//! The `once` baseline: one generation from the seed (with the usual reply repair), then the hybrid
//! search tunes whatever tunables the reply exposes with the rest of the budget.

use super::agent::{self, Agent};
use super::{Next, Observation, Proposal, Strategy};
use serde_json::{Value, json};

pub struct Once {
    agent: Agent,
    tries: u32,
    asked: bool,
}

impl Once {
    pub fn new(agent: Agent, tries: u32) -> Self {
        Once {
            agent,
            tries,
            asked: false,
        }
    }
}

impl Strategy for Once {
    fn name(&self) -> &'static str {
        "once"
    }

    fn propose(&mut self, history: &[Observation], budget: &super::Budget) -> Next {
        self.agent.budget = budget.describe();
        if self.asked || history.len() > 1 {
            return Next::Done("the single generation is done".into());
        }
        self.asked = true;
        let seed = &history[0];
        let mut ctx = self.agent.ctx(json!({"parent_code": agent::code(&seed.candidate), "parent_perf": agent::perf(seed, None)}));
        if let (Some(o), Value::Object(h)) =
            (ctx.as_object_mut(), agent::source_hint(&seed.candidate))
        {
            o.extend(h);
        }
        let prompt = match crate::prompts::render("once.j2", ctx) {
            Ok(p) => p,
            Err(e) => return Next::Stopped(e),
        };
        match self
            .agent
            .candidate("once", prompt, &seed.candidate, self.tries)
        {
            Ok(Ok((c, _))) => Next::Propose(Proposal {
                candidate: c,
                parent: Some(seed.hash.clone()),
                origin: "once".into(),
                compare_with: None,
            }),
            Ok(Err(e)) => Next::Stopped(format!("the generation was unusable: {e}")),
            Err(stop) => stop.next(),
        }
    }

    fn state(&self) -> Value {
        json!({"strategy": "once", "asked": self.asked, "llm": serde_json::to_value(self.agent.llm.meter()).unwrap_or(Value::Null)})
    }

    fn restore(&mut self, state: &Value) -> Result<(), String> {
        self.asked = state["asked"].as_bool().unwrap_or(false);
        Ok(())
    }
}

//! World-model cycles as lanes (`--parallel K`, `docs/parallel.md`): up to K cycles on distinct open actions
//! are in flight at once, and each batch asks every one of them for its next round (ACTION, DEBUG or
//! IMPROVE) at the same time, one lane each (`cycle N round M`). Everything else stays serial and in lane
//! order: the evaluations are folded into the cycles that asked for them, finished cycles end with their
//! tree update (each edit sees the evidence finished before it), new cycles start on actions no cycle in
//! flight holds, and the lanes' replies are applied in lane order whatever order they arrived in.

use super::tree::WorldModel;
use super::{Cycle, Observation, Stop, WorldModelStrategy};
use crate::search::agent::Ask;
use crate::search::{Budget, Next, Pending, Proposal};

/// The tree as selection sees it while cycles are in flight: their actions (and what hangs under them)
/// are not open to another cycle.
pub(super) fn without_cycles_in_flight(wm: &WorldModel, lanes: &[Cycle]) -> WorldModel {
    let busy = |id: &str| lanes.iter().any(|c| c.node == id);
    let under_busy = |id: &str| {
        let mut at = Some(id.to_string());
        while let Some(i) = at {
            if busy(&i) {
                return true;
            }
            at = wm.get(&i).and_then(|n| n.parent.clone());
        }
        false
    };
    let mut masked = wm.clone();
    for n in masked.nodes.values_mut() {
        if under_busy(&n.id) {
            n.action = None;
        }
    }
    masked
}

impl WorldModelStrategy {
    /// The lane whose cycle asked for `obs` (or for the candidate it is a tuned variant of).
    pub(super) fn lane_of(&self, obs: &Observation) -> Option<usize> {
        let base = obs
            .origin
            .strip_prefix(crate::search::TUNE_ORIGIN)
            .map(str::trim);
        self.st.lanes.iter().position(|c| {
            c.proposed.contains(&obs.hash)
                || base.is_some_and(|b| c.proposed.iter().any(|p| p == b))
        })
    }

    /// Runs `f` with lane `i`'s cycle as the current one; a cycle `f` ends leaves the lanes.
    pub(super) fn in_lane<R>(&mut self, i: usize, f: impl FnOnce(&mut Self) -> R) -> R {
        let cycle = self.st.lanes.remove(i);
        let outer = self.st.cycle.replace(cycle);
        let r = f(self);
        if let Some(c) = std::mem::replace(&mut self.st.cycle, outer) {
            self.st.lanes.insert(i, c);
        }
        r
    }

    /// The next batch: up to `k` rounds, one per cycle in flight that is not waiting for an evaluation of
    /// `in_flight` (proposed, being evaluated: `propose_ahead`), asked at once. Empty when every cycle
    /// waits and no other can start.
    pub(super) fn batch(
        &mut self,
        history: &[Observation],
        budget: &Budget,
        k: usize,
        in_flight: &[String],
    ) -> Result<Vec<Next>, Stop> {
        // Proposals of a batch a kill left unevaluated: proposed again, with no LLM call.
        let pending =
            Pending::outstanding_besides(&mut self.st.batch, history, in_flight).map_err(Stop)?;
        if !pending.is_empty() {
            return Ok(pending);
        }
        if let Some(p) = self.st.pending.take()
            && !history.iter().any(|o| o.hash == p.hash)
            && !in_flight.contains(&p.hash)
        {
            // A single proposal of a run that had one cycle in flight, killed before its evaluation.
            let next = Next::Propose(p.proposal(self.compare_with()).map_err(Stop)?);
            self.st.pending = Some(p);
            return Ok(vec![next]);
        }
        let unmeasured_before = self.st.unmeasured_rounds;
        if let Some(c) = self.st.cycle.take() {
            // A run that had one cycle in flight (resumed with lanes): it becomes the first lane.
            self.st.lanes.insert(0, c);
        }
        self.catch_up(history);
        if self.st.wm.is_none() {
            self.init(history)?;
        }
        // Bounded as `step` is: every pass proposes, ends a cycle, or fails rounds.
        for _ in 0..(4 * self.cfg.window as usize + 16) {
            let spent = budget.used + (self.st.unmeasured_rounds - unmeasured_before);
            if spent >= budget.total {
                return Ok(vec![Next::BudgetSpent]);
            }
            if let Some(hash) = self.end_finished_cycles(history, in_flight)? {
                return Ok(vec![Next::HeldOut(hash)]);
            }
            let waiting = self.waiting(in_flight).len();
            while self.st.lanes.len() < k + waiting {
                // One edit asks for actions for every cycle still to start, not one edit per cycle.
                let starting = k + waiting - self.st.lanes.len();
                if !self.start_cycle(history, starting)? {
                    break;
                }
                let c = self.st.cycle.take().expect("a cycle just started");
                self.st.lanes.push(c);
            }
            if self.st.lanes.is_empty() {
                return Ok(vec![Next::Done(
                    "the world model has no open action left".into(),
                )]);
            }
            self.drop_orphaned_cycles();
            let waiting = self.waiting(in_flight);
            let ready: Vec<usize> = (0..self.st.lanes.len())
                .filter(|i| !waiting.contains(i))
                .collect();
            if ready.is_empty() {
                if waiting.is_empty() {
                    continue;
                }
                // Every cycle waits for an evaluation in flight: nothing to ask before it is in.
                return Ok(Vec::new());
            }
            let n = k.min(ready.len()).min(budget.total - spent);
            let proposals = self.rounds(history, &ready[..n], in_flight)?;
            if !proposals.is_empty() {
                // After the proposals still in flight, kept by `outstanding_besides`.
                self.st.batch.extend(proposals.iter().map(Pending::of));
                return Ok(proposals.into_iter().map(Next::Propose).collect());
            }
        }
        Err(Stop(
            "no usable candidate after many rounds; see the run's log".into(),
        ))
    }

    /// Cycles whose node a tree edit of another cycle removed or turned into a decision (the LLM saw it
    /// as an open leaf): they end here, with nothing attached, rather than ask for a round of an action
    /// that no longer exists.
    pub(super) fn drop_orphaned_cycles(&mut self) {
        let mut i = 0;
        while i < self.st.lanes.len() {
            let node = self.st.lanes[i].node.clone();
            if self.wm().get(&node).is_some_and(|n| n.action.is_some()) {
                i += 1;
                continue;
            }
            let gone = self.st.lanes.remove(i);
            self.st.round += 1;
            self.log(format!(
                "cycle {}: `{node}` ended: a tree edit removed its action",
                gone.round
            ));
        }
    }

    /// Ends the cycles whose window is spent, in lane order, each with its tree update; the hash of a
    /// cycle's best whose held-out results the update should show and that is not scored yet, if any.
    fn end_finished_cycles(
        &mut self,
        history: &[Observation],
        in_flight: &[String],
    ) -> Result<Option<String>, Stop> {
        let mut i = 0;
        while i < self.st.lanes.len() {
            // A cycle waiting for an evaluation is not over before its evidence is in.
            if self.waiting(in_flight).contains(&i) {
                i += 1;
                continue;
            }
            let ended = self.in_lane(i, |s| -> Result<Option<Option<String>>, Stop> {
                if !s.cycle_done() {
                    return Ok(None);
                }
                if let Some(hash) = s.held_out_wanted(history) {
                    return Ok(Some(Some(hash)));
                }
                s.end_cycle(history)?;
                Ok(Some(None))
            })?;
            match ended {
                None => i += 1,
                Some(Some(hash)) => return Ok(Some(hash)),
                Some(None) => {} // the cycle left the lanes: the next one is at `i` now
            }
        }
        Ok(None)
    }

    /// The lanes (by index) whose cycle waits for the evaluation of a candidate it proposed, in flight.
    fn waiting(&self, in_flight: &[String]) -> Vec<usize> {
        (0..self.st.lanes.len())
            .filter(|&i| {
                self.st.lanes[i]
                    .proposed
                    .iter()
                    .any(|h| in_flight.contains(h))
            })
            .collect()
    }

    /// The next round of these lanes' cycles: prompts built in lane order, the LLM asked in lanes at once
    /// (the run's own client when there is one), the replies applied in lane order.
    fn rounds(
        &mut self,
        history: &[Observation],
        lanes: &[usize],
        in_flight: &[String],
    ) -> Result<Vec<Proposal>, Stop> {
        let mut asks = Vec::new();
        for &i in lanes {
            let ask = self.in_lane(i, |s| -> Result<_, Stop> {
                let c = s.st.cycle.as_ref().expect("a lane's cycle");
                // Unique in the run: cycles are numbered as they start.
                let lane = format!("cycle {} round {}", c.round, c.attempts + 1);
                let r = s.round_prompt(history)?;
                Ok(Ask {
                    lane,
                    purpose: r.purpose,
                    prompt: r.prompt,
                    base: r.base,
                })
            })?;
            asks.push(ask);
        }
        let replies = self.agent.candidates_at_once(&asks, self.cfg.tries)?;
        let mut proposals = Vec::new();
        let mut stop = None;
        for (&i, (ask, reply)) in lanes.iter().zip(asks.iter().zip(replies)) {
            let reply = match reply {
                Ok(reply) => reply,
                Err(s) => {
                    stop.get_or_insert(s);
                    continue;
                }
            };
            // Two lanes may write the same candidate (or one in flight): the second is a repeat, as of a
            // measured one.
            let repeat = reply.as_ref().is_ok_and(|(c, _)| {
                proposals
                    .iter()
                    .any(|q: &Proposal| q.candidate.hash() == c.hash())
                    || in_flight.contains(&c.hash())
            });
            let taken = self.in_lane(i, |s| {
                if repeat {
                    s.fail_round(
                        ask.purpose,
                        String::new(),
                        "the reply is identical to another lane's candidate of this batch".into(),
                    );
                    return None;
                }
                let cyc = s.st.cycle.clone().expect("a lane's cycle");
                s.take_reply(history, &cyc, ask.purpose, reply)
            });
            proposals.extend(taken);
        }
        match stop {
            Some(s) if proposals.is_empty() => Err(s),
            _ => Ok(proposals),
        }
    }
}
